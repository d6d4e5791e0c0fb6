"""Small OSM files and a Nominatim stand-in for the tests of choosing the area (tests/panda/test_area.py, the
library; tests/app/test_area_sources.py, the dashboard's place-name and file sources).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from conftest import ROOT, TESTS_DIR

#: The raw Kotka/Karhula extract (pyrosm's test.osm.pbf, ODbL: see data/README.md), all ways.
KOTKA_PBF = TESTS_DIR / "data" / "kotka_karhula.osm.pbf"
#: The embedded city made from the same raw file with osmnx's drive filter (OSM XML).
KOTKA_XML = ROOT / "data" / "kotka_karhula_drive.osm.bz2"


def _osm_xml(ways: list[tuple[int, list[int], dict[str, str]]], nodes: dict[int, tuple[float, float]]) -> bytes:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<osm version="0.6" generator="test">']
    for nid, (lon, lat) in nodes.items():
        lines.append(f'  <node id="{nid}" lat="{lat}" lon="{lon}" version="1"/>')
    for wid, refs, tags in ways:
        lines.append(f'  <way id="{wid}" version="1">')
        lines += [f'    <nd ref="{r}"/>' for r in refs]
        lines += [f'    <tag k="{k}" v="{v}"/>' for k, v in tags.items()]
        lines.append("  </way>")
    lines.append("</osm>")
    return ("\n".join(lines) + "\n").encode()


def _grid(n: int, tags: dict[str, str], *, step_deg: float = 0.001) -> bytes:
    """An n x n grid of two-way streets (every node reachable from every other)."""
    nodes = {1 + i * n + j: (10.0 + j * step_deg, 50.0 + i * step_deg) for i in range(n) for j in range(n)}
    ways = [(1000 + i, [1 + i * n + j for j in range(n)], tags) for i in range(n)]
    ways += [(2000 + j, [1 + i * n + j for i in range(n)], tags) for j in range(n)]
    return _osm_xml(ways, nodes)


ROADS = _grid(4, {"highway": "residential"})
NO_ROADS = _grid(4, {"building": "yes"})
FOOTWAYS = _grid(4, {"highway": "footway"})


class _NominatimStub:
    """A Nominatim stand-in on 127.0.0.1: ``/search?q=...`` answers from ``places`` (name -> results)."""

    def __init__(self, places: dict[str, list[dict]]) -> None:
        self.queries: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                query = parse_qs(urlsplit(self.path).query)
                q = query.get("q", [""])[0]
                stub.queries.append(q)
                limit = int(query.get("limit", ["50"])[0])
                body = json.dumps(places.get(q, [])[:limit]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _place(name: str, south: float, north: float, west: float, east: float, geom: str = "Polygon") -> dict:
    ring = [[west, south], [east, south], [east, north], [west, north], [west, south]]
    geojson = (
        {"type": "Polygon", "coordinates": [ring]}
        if geom == "Polygon"
        else {"type": "Point", "coordinates": [west, south]}
    )
    return {
        "place_id": 1,
        "osm_type": "relation",
        "osm_id": 1,
        "lat": str((south + north) / 2),
        "lon": str((west + east) / 2),
        "display_name": name,
        "class": "boundary",
        "type": "administrative",
        "importance": 0.6,
        "boundingbox": [str(south), str(north), str(west), str(east)],
        "geojson": geojson,
    }


# --------------------------------------------------------------------------------------------
# Hostile OSM files (issue 38): tiny on disk, huge once read; written with pyosmium's writer
# --------------------------------------------------------------------------------------------


def long_way_pbf(path, n_refs: int, tags: dict[str, str] | None = None):
    """A PBF file of one node and one road way of ``n_refs`` node references (ids 1, 2, ...: a few kB on disk)."""
    import osmium
    from osmium.osm.mutable import Node, Way

    writer = osmium.SimpleWriter(str(path))
    try:
        writer.add_node(Node(id=1, location=(10.0, 50.0)))
        writer.add_way(Way(id=1, nodes=range(1, n_refs + 1), tags=tags or {"highway": "residential"}))
    finally:
        writer.close()
    return path


def many_nodes_pbf(path, n_nodes: int):
    """A PBF file of ``n_nodes`` untagged nodes and one short road between the first two."""
    import osmium
    from osmium.osm.mutable import Node, Way

    writer = osmium.SimpleWriter(str(path))
    try:
        for i in range(1, n_nodes + 1):
            writer.add_node(Node(id=i, location=(10.0 + (i % 1000) * 1e-5, 50.0 + (i // 1000) * 1e-5)))
        writer.add_way(Way(id=1, nodes=[1, 2], tags={"highway": "residential"}))
    finally:
        writer.close()
    return path


def many_ways_pbf(path, n_ways: int):
    """A PBF file of two nodes and ``n_ways`` buildings between them (none of them a road)."""
    import osmium
    from osmium.osm.mutable import Node, Way

    writer = osmium.SimpleWriter(str(path))
    try:
        writer.add_node(Node(id=1, location=(10.0, 50.0)))
        writer.add_node(Node(id=2, location=(10.001, 50.0)))
        for i in range(1, n_ways + 1):
            writer.add_way(Way(id=i, nodes=[1, 2], tags={"building": "yes"}))
    finally:
        writer.close()
    return path
