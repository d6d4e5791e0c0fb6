FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 NUMBA_CACHE_DIR=/app/data/cache/numba
WORKDIR /app
# Chromium + a font: kaleido draws the Lesson's chart and map downloads (PNG/SVG) in it (app/export.py).
RUN apt-get update && apt-get install -y --no-install-recommends chromium fonts-dejavu-core \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.txt .
RUN pip install -r requirements.txt
COPY . .
# The class database and result store (app/game/store.py): a folder the server may write (mount a volume there
# to keep rounds and prepared views across containers), or PANDA_DB_URL for a PostgreSQL.
ENV PANDA_DB_URL=sqlite:////app/data/db/class.db
RUN useradd --create-home --uid 1000 panda && mkdir -p /app/data/cache /app/data/db \
    && chown -R panda /app/data/cache /app/data/db
USER panda
# Compile the optimal LP's PDHG steps into numba's cache now: the first solve then loads them (0.4 s).
RUN python -c "from panda._pdhg_blocks import warm_up; warm_up()"

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"
CMD ["streamlit", "run", "app", "--server.address=0.0.0.0", "--server.port=8501", "--server.headless=true", "--browser.gatherUsageStats=false"]
