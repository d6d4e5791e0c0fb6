"""A stand-in for the Overpass API on 127.0.0.1, serving a shipped OSM extract.

osmnx 2.x talks to ``settings.overpass_url`` in two ways (osmnx/_overpass.py):

- ``GET {url}/status``: the rate-limit check (when ``settings.overpass_rate_limit``); osmnx reads
  the first word of the fifth line: a number means free slots, no pause.
- ``POST {url}/interpreter`` with the form field ``data``: an Overpass QL query
  ``[out:json]...;(way[...](poly:'lat lon lat lon ...');>;);out;`` whose answer is Overpass JSON
  ``{"elements": [{"type": "node", "id", "lat", "lon", "tags"}, {"type": "way", "id", "nodes", "tags"}]}``.

The stub answers the query with every way of the extract that has a node inside the polygon's
bounding box, plus all nodes of those ways (what ``>;`` recurses to); the extract is already
filtered to one network type, so the way filter is not applied. It stops itself after
``max_lifetime_s`` seconds, so a test that forgets it cannot hang the run.
"""

from __future__ import annotations

import bz2
import gzip
import json
import re
import threading
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

STATUS_TEXT = (
    "Connected as: 2130706433\n"
    "Current time: 2025-01-01T00:00:00Z\n"
    "Announced endpoint: none\n"
    "Rate limit: 2\n"
    "2 slots available now.\n"
    "Currently running queries (pid, space limit, time limit, start time):\n"
)

_POLY = re.compile(r"poly:'([^']*)'")


def overpass_elements_from_osm(path: str | Path) -> list[dict]:
    """Parse an OSM XML file (``.osm``, ``.osm.bz2``, ``.osm.gz``) into Overpass JSON elements."""
    path = Path(path)
    opener = {".bz2": bz2.open, ".gz": gzip.open}.get(path.suffix, open)
    with opener(path, "rb") as fh:
        root = ET.parse(fh).getroot()
    elements: list[dict] = []
    for item in root:
        tags = {t.get("k"): t.get("v") for t in item.findall("tag")}
        if item.tag == "node":
            node = {
                "type": "node",
                "id": int(item.get("id")),
                "lat": float(item.get("lat")),
                "lon": float(item.get("lon")),
            }
            if tags:
                node["tags"] = tags
            elements.append(node)
        elif item.tag == "way":
            refs = [int(nd.get("ref")) for nd in item.findall("nd")]
            elements.append({"type": "way", "id": int(item.get("id")), "nodes": refs, "tags": tags})
    return elements


def select_elements(elements: list[dict], query: str) -> list[dict]:
    """Ways with a node inside the bounding box of the query's ``poly:`` filter, and their nodes."""
    match = _POLY.search(query)
    if match is None:
        return []
    numbers = [float(x) for x in match.group(1).split()]
    lats, lons = numbers[0::2], numbers[1::2]
    south, north, west, east = min(lats), max(lats), min(lons), max(lons)
    nodes = {e["id"]: e for e in elements if e["type"] == "node"}
    inside = {i for i, e in nodes.items() if south <= e["lat"] <= north and west <= e["lon"] <= east}
    ways = [e for e in elements if e["type"] == "way" and any(r in inside for r in e["nodes"])]
    wanted = {r for w in ways for r in w["nodes"] if r in nodes}
    return [nodes[i] for i in sorted(wanted)] + ways


def _client_pid(client_port: int, server_port: int) -> int | None:
    """The process holding the local TCP connection from ``client_port`` to ``server_port`` (psutil)."""
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.raddr and conn.laddr.port == client_port and conn.raddr.port == server_port:
            return conn.pid
    return None


class OverpassStub:
    """A threaded HTTP server on 127.0.0.1 answering osmnx's Overpass requests from an OSM file.

    Attributes
    ----------
    url
        The base URL to put into ``osmnx.settings.overpass_url`` (``http://127.0.0.1:PORT/api``).
    requests
        ``(method, path)`` of every request received, in order.
    mode
        ``"ok"`` (default) or ``"error"`` (the interpreter answers HTTP 500 with a text body).
    delay_s
        Seconds the interpreter waits before it answers (default 0: a slow server, for time limits).
    client_pids
        With ``track_clients=True``: the process id of the client of every request (found with psutil
        from the connection's port on this machine; None when it could not be found), in order.
    """

    def __init__(self, osm_file: str | Path, *, max_lifetime_s: float = 60.0, track_clients: bool = False) -> None:
        self.elements = overpass_elements_from_osm(osm_file)
        self.requests: list[tuple[str, str]] = []
        self.client_pids: list[int | None] = []
        self.track_clients = track_clients
        self.mode = "ok"
        self.delay_s = 0.0
        self._lock = threading.Lock()
        self._stopped = False
        self._stopping = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # seconds a client may take to send its request

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                pass

            def _track(self) -> None:
                if stub.track_clients:
                    stub.client_pids.append(_client_pid(self.client_address[1], self.server.server_address[1]))

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                self._track()
                parts = urlsplit(self.path)
                stub.requests.append(("GET", parts.path))
                if parts.path.endswith("/status"):
                    self._send(200, STATUS_TEXT.encode(), "text/plain")
                elif parts.path.endswith("/interpreter"):
                    self._answer(parse_qs(parts.query).get("data", [""])[0])
                else:
                    self._send(404, b"not found", "text/plain")

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                self._track()
                parts = urlsplit(self.path)
                stub.requests.append(("POST", parts.path))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                if parts.path.endswith("/interpreter"):
                    self._answer(parse_qs(body).get("data", [""])[0])
                else:
                    self._send(404, b"not found", "text/plain")

            def _answer(self, query: str) -> None:
                if stub.delay_s > 0:
                    stub._stopping.wait(stub.delay_s)  # a stop ends the wait
                if stub.mode == "error":
                    self._send(500, b"stub: internal server error", "text/plain")
                    return
                payload = {
                    "version": 0.6,
                    "generator": "panda tests Overpass stub",
                    "osm3s": {"copyright": "(c) OpenStreetMap contributors, ODbL 1.0"},
                    "elements": select_elements(stub.elements, query),
                }
                self._send(200, json.dumps(payload).encode(), "application/json")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        host, port = self._server.server_address[:2]
        self.url = f"http://{host}:{port}/api"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="overpass-stub", daemon=True
        )
        self._thread.start()
        self._timer = threading.Timer(max_lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()

    @property
    def n_queries(self) -> int:
        """Number of interpreter (query) requests received."""
        return sum(path.endswith("/interpreter") for _, path in self.requests)

    def stop(self) -> None:
        """Stop serving and free the port (idempotent)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._stopping.set()
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> OverpassStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
