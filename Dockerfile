# The base image by digest: the linux/amd64 image of python:3.11-slim-bookworm (Python 3.11.16, Debian 12, built
# 2026-08-25), as docker-library/repo-info records it (repos/python/remote/3.11-slim-bookworm.md). A tag moves; this
# digest always names the same image. To refresh it (with registry access):
#   docker buildx imagetools inspect python:3.11-slim-bookworm
# and put the digest of its linux/amd64 manifest here (or the index digest it prints first, for every platform).
FROM python:3.11-slim-bookworm@sha256:2fc9207f64226cb05ac317cee0bab6fa55a9ea311ce5a086baddd4b4a83c2d3c

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 NUMBA_CACHE_DIR=/app/data/cache/numba
WORKDIR /app
# Chromium + a font: kaleido draws the Lesson's chart and map downloads (PNG/SVG) in it (app/export.py).
RUN apt-get update && apt-get install -y --no-install-recommends chromium fonts-dejavu-core \
    && rm -rf /var/lib/apt/lists/*
# Exactly the locked packages, each checked against its sha256 (requirements.lock: pip-compile --generate-hashes
# from requirements.txt; --no-deps: nothing beyond the lock is resolved or fetched).
COPY requirements.lock .
RUN pip install --require-hashes --no-deps -r requirements.lock
COPY . .
# The class database and result store (app/game/store.py): a folder the server may write (mount a volume there
# to keep rounds and prepared views across containers), or PANDA_DB_URL for a PostgreSQL.
ENV PANDA_DB_URL=sqlite:////app/data/db/class.db
RUN useradd --create-home --uid 1000 panda && mkdir -p /app/data/cache /app/data/db \
    && chown -R panda /app/data/cache /app/data/db
# Rounds and prepared views outlive the container in a volume (docker run -v panda-db:/app/data/db ...).
VOLUME ["/app/data/db"]
USER panda
# Compile the optimal LP's PDHG steps and repair loops into numba's cache now: the first solve then loads them.
RUN python -c "from panda import _min_plus, _pdhg_blocks; _pdhg_blocks.warm_up(); _min_plus.warm_up()"

# Plain HTTP on the container's own interface; publish it on the host's loopback only (-p 127.0.0.1:8501:8501)
# or serve TLS: mount a certificate and key and set STREAMLIT_SERVER_SSL_CERT_FILE / STREAMLIT_SERVER_SSL_KEY_FILE
# (README, "Run it in a container").
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD python -c "import os, ssl, urllib.request; tls = bool(os.environ.get('STREAMLIT_SERVER_SSL_CERT_FILE')); \
urllib.request.urlopen(('https' if tls else 'http') + '://127.0.0.1:8501/_stcore/health', timeout=4, \
context=ssl._create_unverified_context() if tls else None)"
CMD ["streamlit", "run", "app", "--server.address=0.0.0.0", "--server.port=8501", "--server.headless=true", "--browser.gatherUsageStats=false"]
