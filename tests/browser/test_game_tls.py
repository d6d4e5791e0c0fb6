"""The README's way to serve a class round: Streamlit over TLS with a certificate made by openssl.

The server answers https with that certificate (checked against it as the only trusted CA), refuses plain
http on the same port, and the lecturer's page in Chromium gives students an https join link.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from browser_support import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, ROOT, _free_port, _wait_idle, streamlit_cmd

from app.game import rounds
from app.model.params import Params
from app.server.db import store

pytestmark = pytest.mark.browser


def _wait_https(url: str, context: ssl.SSLContext, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2, context=context) as resp:
                if resp.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError("streamlit over TLS did not become healthy")


def test_a_class_round_served_over_tls(tmp_path):
    from playwright.sync_api import sync_playwright

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    db = f"sqlite:///{tmp_path / 'class.db'}"
    port = _free_port()
    cmd = [*streamlit_cmd(port), f"--server.sslCertFile={cert}", f"--server.sslKeyFile={key}"]
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "streamlit-tls.log", "wb")  # noqa: SIM115 (closed in the finally)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, store.ENV_URL: db})
    try:
        url = f"https://127.0.0.1:{port}"
        trusted = ssl.create_default_context(cafile=str(cert))
        _wait_https(url, trusted, proc)
        # Plain http on the same port is not served.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).read()
        # Another certificate is not this one: a client trusting only the system's CAs refuses it.
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=5, context=ssl.create_default_context())

        view = list(Params(n_records=200, n_users=12, n_outputs=50, page_loss="road").instance_key)
        code, host_key = rounds.open_game(view, rounds.RoundSpec("laplace", 5.0), url=db)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 720}).new_page()
                page.goto(f"{url}/host?code={code}&key={host_key}")
                _wait_idle(page, timeout_s=90)
                page.get_by_text("Join link:").wait_for(timeout=60_000)
                text = page.inner_text("body")
                assert f"Join link: {url}/play?code={code}" in text
                assert "Traceback" not in text
            finally:
                browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        store.dispose(db)


def _dockerfile_commands() -> tuple[list[str], str]:
    """The image's CMD (exec form) and its HEALTHCHECK's Python code, read from the Dockerfile."""
    import json
    import re

    text = (ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", "")
    (cmd,) = re.findall(r"^CMD (\[.*\])$", text, re.M)
    (health,) = re.findall(r'CMD python -c "(.*)"$', text, re.M)
    return json.loads(cmd), health


def test_the_images_tls_recipe_serves_https_and_its_health_check_follows(tmp_path):
    """README "Run it in a container": the image's own command with a certificate through Streamlit's
    environment variables (no flag changed) serves https only, and the image's health check passes over it."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    image_cmd, health = _dockerfile_commands()
    assert image_cmd[:3] == ["streamlit", "run", "app"] and "--server.port=8501" in image_cmd, image_cmd
    port = _free_port()
    # The image's command as it is, on a free loopback port instead of the container's 0.0.0.0:8501.
    cmd = [
        *streamlit_cmd(port)[:3],
        *[a.replace("0.0.0.0", "127.0.0.1").replace("8501", str(port)) for a in image_cmd[1:]],
        "--server.fileWatcherType=none",
    ]
    tls = {"STREAMLIT_SERVER_SSL_CERT_FILE": str(cert), "STREAMLIT_SERVER_SSL_KEY_FILE": str(key)}
    db = f"sqlite:///{tmp_path / 'class.db'}"
    env = {**os.environ, store.ENV_URL: db, **tls}
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "streamlit-image-tls.log", "wb")  # noqa: SIM115 (closed in the finally)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        url = f"https://127.0.0.1:{port}"
        _wait_https(url, ssl.create_default_context(cafile=str(cert)), proc)
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).read()
        check = health.replace("8501", str(port))
        import sys

        assert subprocess.run([sys.executable, "-c", check], env=env, timeout=30).returncode == 0
        # Without the certificate's variables the same check asks for plain http, which this server refuses.
        plain = {k: v for k, v in env.items() if k not in tls}
        assert subprocess.run([sys.executable, "-c", check], env=plain, timeout=30, capture_output=True).returncode
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        store.dispose(db)
