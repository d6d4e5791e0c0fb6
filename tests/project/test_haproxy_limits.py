"""deploy/haproxy.cfg's limits per client address, with Debian's haproxy in front of a small HTTP server.

The template is used as it is, with only its ports changed (the proxy's loopback port, one server line). The
server answers the health check and echoes the X-Forwarded-For header it received.
"""

from __future__ import annotations

import http.client
import re
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from server_support import ROOT, free_port

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TEMPLATE = ROOT / "deploy" / "haproxy.cfg"
pytestmark = pytest.mark.skipif(not shutil.which(HAPROXY), reason="haproxy is not installed (.ci/run installs it)")


class _Echo(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"ok" if self.path == "/_stcore/health" else str(self.headers.get("X-Forwarded-For")).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


def _config(port: int, server_port: int) -> str:
    out, servers = [], 0
    for line in TEMPLATE.read_text().splitlines():
        code = line.split("#", 1)[0]
        if re.match(r"\s*bind\s", code):
            line = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", line)
        elif re.match(r"\s*server\s", code):
            if servers:
                continue
            line = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{server_port}", line)
            servers += 1
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture
def proxy(tmp_path):
    backend = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    port = free_port()
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(_config(port, backend.server_address[1]))
    proc = subprocess.Popen([HAPROXY, "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while _status(port, "/_stcore/health") != 200:
            assert proc.poll() is None and time.monotonic() < deadline, "haproxy did not start"
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        backend.shutdown()


def _get(port: int, path: str = "/", headers: dict | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    except OSError:
        return 0, ""
    finally:
        conn.close()


def _status(port: int, path: str) -> int:
    return _get(port, path)[0]


def test_the_servers_see_the_clients_address_never_one_it_wrote(proxy):
    status, seen = _get(proxy, headers={"X-Forwarded-For": "198.51.100.9"})
    assert (status, seen) == (200, "127.0.0.1")


def test_one_address_with_too_many_connections_is_refused_until_it_closes_them(proxy):
    held = [socket.create_connection(("127.0.0.1", proxy), timeout=5) for _ in range(30)]
    try:
        time.sleep(0.3)
        assert _status(proxy, "/") == 429  # its 31st connection
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10
    while _status(proxy, "/") != 200:  # the proxy sees them closed
        assert time.monotonic() < deadline, "still refused after the connections were closed"
        time.sleep(0.2)


def test_one_address_with_too_many_requests_is_refused(proxy):
    conn = http.client.HTTPConnection("127.0.0.1", proxy, timeout=10)
    statuses = []
    for _ in range(320):
        conn.request("GET", "/")
        resp = conn.getresponse()
        resp.read()
        statuses.append(resp.status)
        if resp.status != 200:
            break
    conn.close()
    assert statuses[-1] == 429 and 250 <= statuses.count(200) <= 301, (statuses.count(200), statuses[-1])
