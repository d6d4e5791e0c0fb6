"""Road networks: embedded cities, files, live download (against a local Overpass stand-in), CLI.

Everything here runs offline: the live-download path talks to ``tests/support/overpass_stub.py`` on
127.0.0.1, and the "offline" tests point osmnx at addresses that cannot answer.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from conftest import OAKLAND_BBOX, OAKLAND_FILE, ROOT
from scipy.sparse.csgraph import connected_components

from panda import cli
from panda import network as pn
from panda.errors import DataUnavailableError, DownloadError, OfflineError, PandaWarning
from panda.network import cities as pn_cities
from panda.network import download as pn_download

ROME_BBOX = (12.2354, 41.6566, 12.8081, 42.0979)


def _assert_strongly_connected(net: pn.RoadNetwork) -> None:
    n_components, _ = connected_components(net.adjacency, directed=True, connection="strong")
    assert n_components == 1


def _assert_valid_network(net: pn.RoadNetwork) -> None:
    assert net.n_nodes > 1 and net.n_edges > 0
    for arr in (net.osm_id, net.lon, net.lat, net.street_count):
        assert arr.shape == (net.n_nodes,)
    for arr in (net.edge_u, net.edge_v, net.edge_length_m):
        assert arr.shape == (net.n_edges,)
    assert net.edge_u.min() >= 0 and net.edge_u.max() < net.n_nodes
    assert net.edge_v.min() >= 0 and net.edge_v.max() < net.n_nodes
    assert np.all(np.isfinite(net.edge_length_m)) and np.all(net.edge_length_m >= 0)
    assert np.all(np.abs(net.lon) <= 180) and np.all(np.abs(net.lat) <= 90)
    assert len(np.unique(net.osm_id)) == net.n_nodes
    assert net.attribution == pn.OSM_ATTRIBUTION
    _assert_strongly_connected(net)


def _same_network(a: pn.RoadNetwork, b: pn.RoadNetwork) -> None:
    assert (a.n_nodes, a.n_edges) == (b.n_nodes, b.n_edges)
    np.testing.assert_array_equal(np.sort(a.osm_id), np.sort(b.osm_id))
    assert a.edge_length_m.sum() == pytest.approx(b.edge_length_m.sum(), rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Embedded cities
# ---------------------------------------------------------------------------------------------

# Sizes of the shipped extracts after the strongly connected reduction (data/README.md).
EMBEDDED_SIZES = {
    "neubrandenburg": (1328, 3115),
    "liechtenstein": (1623, 3936),
    "helsinki": (2508, 6779),
    "kotka": (224, 476),
}


def test_embedded_cities_are_listed():
    assert list(pn.CITIES) == list(EMBEDDED_SIZES)
    assert pn.list_cities()[: len(pn.CITIES)] == list(pn.CITIES)
    assert pn.DEFAULT_CITY in pn.CITIES
    for filename, description in pn.CITIES.values():
        assert (pn.DATA_DIR / filename).is_file()
        assert description


@pytest.mark.parametrize("name", list(EMBEDDED_SIZES))
def test_load_embedded_city(name):
    net = pn.load_city(name)
    _assert_valid_network(net)
    assert (net.n_nodes, net.n_edges) == EMBEDDED_SIZES[name]
    assert net.name == name
    summary = net.summary()
    assert summary["n_nodes"] == net.n_nodes and summary["n_edges"] == net.n_edges
    w, s, e, n = summary["bbox"]
    assert w < e and s < n
    assert np.all((net.lon >= w) & (net.lon <= e) & (net.lat >= s) & (net.lat <= n))
    json.dumps(summary)  # plain data


def test_load_city_is_cached_and_case_insensitive(kotka):
    assert pn.load_city("kotka") is kotka
    assert pn.load_city("  Kotka ") is kotka


def test_load_city_default_is_neubrandenburg():
    assert pn.load_city().name == pn.DEFAULT_CITY


@pytest.mark.parametrize("name", ["paris", "", "kotka_karhula_drive"])
def test_load_city_unknown_name(name):
    with pytest.raises(ValueError, match="must be one of") as info:
        pn.load_city(name)
    assert "network_from_bbox" in str(info.value)  # names the way forward


def test_load_city_rejects_non_str():
    with pytest.raises(TypeError, match="must be a str"):
        pn.load_city(3)


def test_adjacency_keeps_shortest_parallel_edge_and_drops_self_loops():
    u = np.array([0, 0, 1, 1, 2])
    v = np.array([1, 1, 0, 1, 0])
    length = np.array([5.0, 3.0, 4.0, 1.0, 2.0])
    adj = pn._adjacency(u, v, length, 3).toarray()
    assert adj[0, 1] == 3.0 and adj[1, 0] == 4.0 and adj[2, 0] == 2.0
    assert adj[1, 1] == 0.0


# ---------------------------------------------------------------------------------------------
# The paper's Rome network (present in this workspace, never shipped)
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def fresh_rome_cache():
    pn._load_rome.cache_clear()
    yield
    pn._load_rome.cache_clear()


@pytest.mark.skipif(pn._rome_dir() is None, reason="the paper's Rome network (../shared/data/rome-paper) is absent")
def test_rome_paper_loads(fresh_rome_cache):
    net = pn.load_city("rome-paper")
    _assert_valid_network(net)
    assert 40_000 < net.n_nodes <= 43_160
    w, s, e, n = net.bbox.as_tuple()
    assert ROME_BBOX[0] <= w < e <= ROME_BBOX[2] and ROME_BBOX[1] <= s < n <= ROME_BBOX[3]
    assert "rome-paper" in pn.list_cities()


def test_rome_paper_unavailable(monkeypatch, tmp_path, fresh_rome_cache):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr(pn_cities, "_ROME_DEFAULT_DIR", tmp_path / "absent")
    monkeypatch.setenv("PANDA_ROME_PAPER_DIR", str(empty))
    assert "rome-paper" not in pn.list_cities()
    with pytest.raises(DataUnavailableError, match="PANDA_ROME_PAPER_DIR") as info:
        pn.load_city("rome-paper")
    message = str(info.value)
    assert all(city in message for city in pn.CITIES)
    assert "network_from_bbox(12.2354, 41.6566, 12.8081, 42.0979)" in message
    assert isinstance(info.value, FileNotFoundError)


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def test_oakland_fixture_from_file(oakland):
    _assert_valid_network(oakland)
    assert (oakland.n_nodes, oakland.n_edges) == (22, 51)
    assert oakland.name == "west_oakland_drive"
    assert oakland.source == str(OAKLAND_FILE)


def test_file_name_override():
    assert pn.network_from_file(OAKLAND_FILE, name="wo").name == "wo"


def test_graphml_round_trip(tmp_path, oakland):
    import osmnx as ox

    path = tmp_path / "oakland.graphml"
    ox.save_graphml(ox.graph_from_xml(OAKLAND_FILE, retain_all=True), path)
    _same_network(pn.network_from_file(path), oakland)


def test_projected_graphml_is_converted_back_to_lonlat(tmp_path, oakland):
    import osmnx as ox

    path = tmp_path / "projected.graphml"
    ox.save_graphml(ox.project_graph(ox.graph_from_xml(OAKLAND_FILE, retain_all=True)), path)
    net = pn.network_from_file(path)
    _same_network(net, oakland)
    order_a, order_b = np.argsort(net.osm_id), np.argsort(oakland.osm_id)
    np.testing.assert_allclose(net.lon[order_a], oakland.lon[order_b], atol=1e-7)
    np.testing.assert_allclose(net.lat[order_a], oakland.lat[order_b], atol=1e-7)


def test_plain_networkx_graphml(tmp_path):
    graph = nx.MultiDiGraph()
    graph.add_node(1, x=10.0, y=50.0)
    graph.add_node(2, x=10.001, y=50.0)
    graph.add_node(3, x=10.001, y=50.001)
    for a, b in [(1, 2), (2, 3), (3, 1)]:
        graph.add_edge(a, b, length=100.0)
    path = tmp_path / "triangle.graphml"
    nx.write_graphml(graph, path)
    net = pn.network_from_file(path)
    assert (net.n_nodes, net.n_edges) == (3, 3)
    _assert_strongly_connected(net)


def test_network_from_undirected_graph_has_both_directions():
    graph = nx.Graph()
    graph.add_node("a", x=0.0, y=0.0)
    graph.add_node("b", x=0.001, y=0.0)
    graph.add_edge("a", "b", length=111.0)
    net = pn.network_from_graph(graph, name="line")
    assert (net.n_nodes, net.n_edges) == (2, 2)
    net.summary()  # all nodes on one latitude: the bbox is widened, not rejected


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


NOT_ROAD_NETWORKS = {
    "notes.txt": ("hello world\n", "not a supported road network file"),
    "text.osm": ("hello world\n", "could not be read as OpenStreetMap XML"),
    "zero.osm": ("", "could not be read as OpenStreetMap XML"),
    "empty.osm": ('<?xml version="1.0"?>\n<osm version="0.6"></osm>\n', "holds no OpenStreetMap nodes or ways"),
    "nodes_only.osm": (
        '<?xml version="1.0"?>\n<osm version="0.6"><node id="1" lat="1" lon="1"/>'
        '<node id="2" lat="1.001" lon="1"/></osm>\n',
        "no edges",
    ),
    "city.osm.pbf": ("not really pbf", "could not be read as OSM PBF"),
    "text.graphml": ("hello world\n", "could not be read as GraphML"),
    "nocoords.graphml": (
        '<?xml version="1.0"?><graphml xmlns="http://graphml.graphdrawing.org/xmlns">'
        '<graph edgedefault="directed"><node id="a"/><node id="b"/><edge source="a" target="b"/>'
        '<edge source="b" target="a"/></graph></graphml>',
        "lack the coordinate attribute",
    ),
}


@pytest.mark.parametrize("filename", list(NOT_ROAD_NETWORKS))
def test_file_that_is_not_a_road_network(tmp_path, filename):
    text, expected = NOT_ROAD_NETWORKS[filename]
    path = _write(tmp_path / filename, text)
    with pytest.raises(ValueError, match=expected) as info:
        pn.network_from_file(path)
    assert filename in str(info.value)


def test_file_missing_or_directory(tmp_path):
    with pytest.raises(ValueError, match="must name an existing file"):
        pn.network_from_file(tmp_path / "absent.osm")
    with pytest.raises(ValueError, match="must name an existing file"):
        pn.network_from_file(tmp_path)
    with pytest.raises(TypeError, match="must be a str or path"):
        pn.network_from_file(42)


def test_graph_without_lengths_or_with_metre_coordinates():
    graph = nx.MultiDiGraph()
    graph.add_node(1, x=0.0, y=0.0)
    graph.add_node(2, x=0.001, y=0.0)
    graph.add_edge(1, 2)
    with pytest.raises(ValueError, match="'length'"):
        pn.network_from_graph(graph, name="g")
    graph = nx.MultiDiGraph()
    graph.add_node(1, x=500_000.0, y=5_000_000.0)  # metres, but no crs says so
    graph.add_node(2, x=500_100.0, y=5_000_000.0)
    graph.add_edge(1, 2, length=100.0)
    graph.add_edge(2, 1, length=100.0)
    with pytest.raises(ValueError, match="lon/lat degrees"):
        pn.network_from_graph(graph, name="g")


# ---------------------------------------------------------------------------------------------
# Bounding boxes and great-circle distances
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("box", "expected"),
    [
        ((10.0, 50.0, 9.0, 51.0), "west \\(10.0\\) must be smaller than east"),
        ((10.0, 51.0, 11.0, 50.0), "south \\(51.0\\) must be smaller than north"),
        ((10.0, 50.0, 10.0, 51.0), "inverted or empty"),
        ((10.0, 50.0, 11.0, 50.0), "inverted or empty"),
        ((float("nan"), 50.0, 11.0, 51.0), "finite"),
        ((-190.0, 50.0, 11.0, 51.0), "Longitudes"),
        ((10.0, -95.0, 11.0, 51.0), "Latitudes"),
    ],
)
def test_bounding_box_rejects(box, expected):
    with pytest.raises(ValueError, match=expected):
        pn.BoundingBox(*box)


def test_bounding_box_area_by_hand():
    # A 1 x 1 degree cell at the equator: R^2 * dlon[rad] * (sin(1 deg) - sin(0)).
    r = 6371.0088
    expected = r * r * math.radians(1.0) * math.sin(math.radians(1.0))
    assert pn.BoundingBox(0.0, 0.0, 1.0, 1.0).area_km2 == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(12_364, abs=2)  # ~111.2 km x ~111.2 km
    assert pn.BoundingBox(*ROME_BBOX).area_km2 == pytest.approx(2327, abs=2)
    assert pn.BoundingBox(*ROME_BBOX).area_km2 < pn.MAX_BBOX_AREA_KM2


def test_haversine_by_hand():
    # Written out: a = sin^2(dlat/2) + cos(lat1) cos(lat2) sin^2(dlon/2); d = 2 R asin(sqrt(a)).
    r = 6371.0088
    lon1, lat1, lon2, lat2 = 13.4050, 52.5200, 2.3522, 48.8566  # Berlin -> Paris
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    by_hand = 2 * r * math.asin(math.sqrt(a))
    assert float(pn.haversine_km(lon1, lat1, lon2, lat2)) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(878, abs=2)


def test_haversine_known_distances():
    r = 6371.0088
    # Paris -> London, the textbook example: about 343.5 km.
    assert float(pn.haversine_km(2.3522, 48.8566, -0.1278, 51.5074)) == pytest.approx(343.5, abs=0.5)
    # One degree along a meridian is R * pi / 180; a quarter of the equator is R * pi / 2.
    assert float(pn.haversine_km(7.0, 45.0, 7.0, 46.0)) == pytest.approx(r * math.pi / 180, rel=1e-12)
    assert float(pn.haversine_km(0.0, 0.0, 90.0, 0.0)) == pytest.approx(r * math.pi / 2, rel=1e-12)
    # Antipodes: half the circumference (the clip keeps asin's argument in range).
    assert float(pn.haversine_km(0.0, 0.0, 180.0, 0.0)) == pytest.approx(r * math.pi, rel=1e-12)


def test_haversine_broadcasts_and_is_a_metric(kotka):
    lon, lat = kotka.lon[:40], kotka.lat[:40]
    d = pn.haversine_km(lon[:, None], lat[:, None], lon[None, :], lat[None, :])
    assert d.shape == (40, 40)
    np.testing.assert_allclose(d, d.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(d), 0.0, atol=1e-12)
    assert np.all(d[:, None, :] <= d[:, :, None] + d[None, :, :] + 1e-9)  # d(i,k) <= d(i,j) + d(j,k)


# ---------------------------------------------------------------------------------------------
# Live download: argument checks, offline failure, the stand-in Overpass server, the cache
# ---------------------------------------------------------------------------------------------


def test_bbox_inverted_or_empty(tmp_path):
    with pytest.raises(ValueError, match="west, south, east, north"):
        pn.network_from_bbox(10.0, 51.0, 11.0, 50.0, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="inverted or empty"):
        pn.network_from_bbox(10.0, 50.0, 10.0, 51.0, cache_dir=tmp_path)


def test_bbox_too_large(tmp_path):
    with pytest.raises(ValueError, match=r"at most 5,000 km\^2.*choose a smaller area"):
        pn.network_from_bbox(10.0, 45.0, 11.0, 46.0, cache_dir=tmp_path)  # about 8,700 km^2
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"network_type": "car"}, "'network_type' parameter"),
        ({"network_type": None}, "'network_type' parameter"),
        ({"timeout_s": 0}, "'timeout_s' parameter"),
        ({"timeout_s": float("inf")}, "'timeout_s' parameter"),
        ({"timeout_s": True}, "'timeout_s' parameter"),
    ],
)
def test_bbox_bad_options(tmp_path, kwargs, expected):
    with pytest.raises(ValueError, match=expected):
        pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=tmp_path, **kwargs)


def _assert_offline_error(info, elapsed_s: float) -> None:
    assert elapsed_s < 10.0
    message = str(info.value)
    assert "Cannot reach the Overpass server" in message
    assert all(city in message for city in pn.list_cities())
    assert isinstance(info.value, DownloadError) and isinstance(info.value, ConnectionError)


def test_offline_fails_fast_connection_refused(osmnx_settings, closed_port_url, tmp_path):
    osmnx_settings.overpass_url = closed_port_url
    start = time.monotonic()
    with pytest.raises(OfflineError) as info:
        pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=tmp_path)
    _assert_offline_error(info, time.monotonic() - start)
    assert not (tmp_path / "networks").exists()


def test_offline_fails_fast_unknown_host(osmnx_settings, tmp_path):
    osmnx_settings.overpass_url = "https://overpass.invalid/api"  # RFC 2606: never resolves
    start = time.monotonic()
    with pytest.raises(OfflineError, match="cannot look up 'overpass.invalid'") as info:
        pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=tmp_path)
    _assert_offline_error(info, time.monotonic() - start)


def test_offline_fails_fast_when_name_lookup_hangs(osmnx_settings, monkeypatch, tmp_path):
    release = threading.Event()

    def hanging_getaddrinfo(*args, **kwargs):
        release.wait(30)
        raise socket.gaierror("released")

    osmnx_settings.overpass_url = "https://overpass.example/api"
    monkeypatch.setattr(socket, "getaddrinfo", hanging_getaddrinfo)
    start = time.monotonic()
    try:
        with pytest.raises(OfflineError, match="took more than") as info:
            pn._probe_overpass(osmnx_settings.overpass_url, timeout_s=0.5)
    finally:
        release.set()
    # The lookup is held for 30 s: the probe gave up at its own 0.5 s timeout. Generous for a slow machine.
    assert time.monotonic() - start < 10.0
    assert "Cannot reach" in str(info.value)


def test_offline_fails_fast_when_connect_hangs(monkeypatch):
    connect_timeouts: list[float] = []

    class BlackHoleSocket:
        """A socket whose connect never completes: it waits out its timeout."""

        def __init__(self, *args):
            self.timeout = None

        def settimeout(self, timeout):
            self.timeout = timeout

        def connect(self, address):
            connect_timeouts.append(self.timeout)
            time.sleep(self.timeout)
            raise TimeoutError("timed out")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    fake = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.1", 443))] * 3
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: fake)
    monkeypatch.setattr(socket, "socket", BlackHoleSocket)
    with pytest.raises(OfflineError, match="within 0.3 s"):
        pn._probe_overpass("https://overpass.example/api", timeout_s=0.3)
    # One shared deadline for all three addresses, not 0.3 s each: the connects' timeouts add up to 0.3 s.
    assert connect_timeouts and all(t > 0 for t in connect_timeouts)
    assert sum(connect_timeouts) <= 0.3


def test_live_download_through_stub_then_offline_from_cache(
    overpass_stub, osmnx_settings, oakland, tmp_path, monkeypatch
):
    """THE end-to-end test of the live path, with no internet: osmnx -> HTTP -> stand-in server."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)  # osmnx's default cache is ./cache: it must not appear here
    cache_dir = tmp_path / "cache"
    getaddrinfo = socket.getaddrinfo

    net = pn.network_from_bbox(*OAKLAND_BBOX, network_type="drive", cache_dir=cache_dir)

    # The network came through osmnx's Overpass requests to the stand-in...
    assert ("GET", "/api/status") in overpass_stub.requests
    assert overpass_stub.n_queries == 1
    _assert_valid_network(net)
    _same_network(net, oakland)  # same roads as reading the extract directly
    assert net.name == "bbox -122.3100,37.8000,-122.2800,37.8200 drive"
    assert overpass_stub.url in net.source
    # ...with the settings network_from_bbox promises, and no leftovers.
    assert osmnx_settings.doh_url_template is None
    assert osmnx_settings.use_cache is True
    assert Path(osmnx_settings.cache_folder).is_absolute()
    assert Path(osmnx_settings.cache_folder) == cache_dir / "osmnx"
    assert osmnx_settings.requests_timeout == pn.DEFAULT_TIMEOUT_S
    assert socket.getaddrinfo is getaddrinfo  # osmnx's address pinning was undone
    assert not (workdir / "cache").exists()
    cached = list((cache_dir / "networks").iterdir())
    assert [p.name for p in cached] == ["bbox_-122.310000_37.800000_-122.280000_37.820000_drive.npz"]
    assert list((cache_dir / "osmnx").glob("*.json"))  # osmnx's HTTP cache too

    # Server gone, any connection attempt an error: the second call reads the cache.
    overpass_stub.stop()

    def no_probe(url, timeout_s=0.0):
        raise AssertionError("a cached network must not need the Overpass server")

    monkeypatch.setattr(pn_download, "_probe_overpass", no_probe)
    start = time.monotonic()
    again = pn.network_from_bbox(*OAKLAND_BBOX, network_type="drive", cache_dir=cache_dir)
    # Reading a 22-node file: no network wait (a connection attempt would have failed above). Generous bound.
    assert time.monotonic() - start < 10.0
    assert overpass_stub.n_queries == 1
    for field in ("osm_id", "lon", "lat", "street_count", "edge_u", "edge_v", "edge_length_m"):
        np.testing.assert_array_equal(getattr(again, field), getattr(net, field))
    assert again.name == net.name and again.attribution == net.attribution
    assert "cached" in again.source
    _assert_strongly_connected(again)


def test_stub_box_without_roads_is_value_error(overpass_stub, tmp_path):
    with pytest.raises(ValueError, match="holds no 'drive' roads") as info:
        pn.network_from_bbox(-122.0, 37.0, -121.99, 37.01, cache_dir=tmp_path)
    assert "larger box" in str(info.value)
    assert overpass_stub.n_queries == 1
    assert not (tmp_path / "networks").exists()


def test_stub_server_error_is_download_error(overpass_stub, tmp_path):
    overpass_stub.mode = "error"
    with pytest.raises(DownloadError, match="500") as info:
        pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=tmp_path)
    assert not isinstance(info.value, OfflineError)
    assert not (tmp_path / "networks").exists()


def test_unreadable_cache_file_is_downloaded_again(overpass_stub, tmp_path):
    target = tmp_path / "networks" / pn._cache_name(pn.BoundingBox(*OAKLAND_BBOX), "drive")
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not an npz file")
    with pytest.warns(PandaWarning, match="unreadable cached network"):
        net = pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=tmp_path)
    assert overpass_stub.n_queries == 1
    assert net.n_nodes == 22
    assert pn._load_network_npz(target).n_nodes == 22


def test_unwritable_cache_keeps_the_downloaded_network(overpass_stub, tmp_path):
    (tmp_path / "networks").write_text("a file where the cache folder should be")
    with pytest.warns(PandaWarning, match="Could not cache the downloaded network"):
        net = pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=tmp_path)
    assert net.n_nodes == 22


def test_rome_box_is_accepted_and_served_from_cache(kotka, tmp_path, monkeypatch):
    """The paper's box is within MAX_BBOX_AREA_KM2; a cached file answers with no connection."""
    target = tmp_path / "networks" / pn._cache_name(pn.BoundingBox(*ROME_BBOX), "drive")
    pn._save_network_npz(kotka, target)
    monkeypatch.setattr(pn_download, "_probe_overpass", lambda *a, **k: pytest.fail("probe called"))
    net = pn.network_from_bbox(*ROME_BBOX, cache_dir=tmp_path)
    np.testing.assert_array_equal(net.edge_length_m, kotka.edge_length_m)
    assert not list(target.parent.glob(".*.tmp"))


#: What the canary below found and changed, for the test after it (pytest runs a file's tests in order).
_CANARY: dict = {}


def test_osmnx_settings_fixture_canary(osmnx_settings):
    """A canary for the fixture itself: it hands over the live settings, and the test may change them as a
    download does (a setting replaced, a list setting edited in place, a new one, ``socket.getaddrinfo``
    pinned); the next test checks that the fixture's teardown undid each change."""
    import osmnx as ox

    assert osmnx_settings is ox.settings
    _CANARY.update(
        overpass_url=osmnx_settings.overpass_url,
        useful_tags_way=list(osmnx_settings.useful_tags_way),
        getaddrinfo=socket.getaddrinfo,
    )
    osmnx_settings.overpass_url = "http://127.0.0.1:1/api"
    osmnx_settings.useful_tags_way.append("canary")
    osmnx_settings.panda_canary = True
    socket.getaddrinfo = lambda *args, **kwargs: []
    assert ox.settings.overpass_url == "http://127.0.0.1:1/api" and ox.settings.useful_tags_way[-1] == "canary"


def test_osmnx_settings_were_restored():
    import osmnx as ox

    if not _CANARY:
        pytest.skip("the canary test did not run before this one: nothing to check")
    assert ox.settings.overpass_url == _CANARY["overpass_url"] != "http://127.0.0.1:1/api"
    assert ox.settings.useful_tags_way == _CANARY["useful_tags_way"]
    assert not hasattr(ox.settings, "panda_canary")
    assert socket.getaddrinfo is _CANARY["getaddrinfo"]


# ---------------------------------------------------------------------------------------------
# Command line: python -m panda network
# ---------------------------------------------------------------------------------------------


def test_cli_network_city_json(capsys, kotka):
    assert cli.main(["network", "--city", "kotka", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["name"] == "kotka"
    assert (out["n_nodes"], out["n_edges"]) == (kotka.n_nodes, kotka.n_edges)
    assert out["bbox"] == list(kotka.bbox.as_tuple())
    assert out["attribution"] == pn.OSM_ATTRIBUTION


def test_cli_network_text(capsys):
    assert cli.main(["network", "--city", "kotka"]) == 0
    out = capsys.readouterr().out
    assert "kotka" in out and "nodes:" in out and "224" in out and "OpenStreetMap contributors" in out


def test_cli_network_file_and_list(capsys):
    assert cli.main(["network", "--file", str(OAKLAND_FILE), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_nodes"] == 22
    assert cli.main(["network", "--list", "--json"]) == 0
    names = [c["name"] for c in json.loads(capsys.readouterr().out)]
    assert names[: len(pn.CITIES)] == list(pn.CITIES)


@pytest.mark.parametrize(
    ("argv", "code", "expected"),
    [
        (["network", "--city", "paris"], 2, "must be one of"),
        (["network", "--bbox", "10", "51", "11", "50"], 2, "west, south, east, north"),
        (["network", "--bbox", "10", "45", "11", "46"], 2, "km^2"),
        (["network", "--file", "absent.osm"], 2, "existing file"),
        (["network", "--bbox", "1", "2", "3"], 2, "expected 4 arguments"),
        (["network", "--network-type", "car"], 2, "invalid choice"),
        ([], 2, "required"),
    ],
)
def test_cli_bad_usage(capsys, argv, code, expected):
    assert cli.main(argv) == code
    err = capsys.readouterr().err
    assert expected in err
    assert "Traceback" not in err


def test_cli_bbox_offline(capsys, osmnx_settings, closed_port_url, tmp_path):
    start = time.monotonic()
    argv = [
        "network",
        "--bbox",
        *map(str, OAKLAND_BBOX),
        "--cache-dir",
        str(tmp_path),
        "--overpass-url",
        closed_port_url,
    ]
    assert cli.main(argv) == 1
    assert time.monotonic() - start < 10.0
    err = capsys.readouterr().err
    assert err.startswith("panda network: error: Cannot reach the Overpass server")
    assert "--city" in err and "Traceback" not in err


def test_cli_bbox_through_stub(capsys, overpass_stub, tmp_path):
    argv = ["network", "--bbox", *map(str, OAKLAND_BBOX), "--cache-dir", str(tmp_path), "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n_nodes"], out["n_edges"]) == (22, 51)
    assert overpass_stub.n_queries == 1


def _run_module(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "panda", *args], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )


def test_python_dash_m_panda(closed_port_url, tmp_path):
    done = _run_module("network", "--city", "kotka", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_nodes"] == 224

    start = time.monotonic()
    done = _run_module(
        "network", "--bbox", *map(str, OAKLAND_BBOX), "--cache-dir", str(tmp_path), "--overpass-url", closed_port_url
    )
    assert time.monotonic() - start < 15.0  # includes interpreter start-up and imports
    assert done.returncode == 1
    assert "Cannot reach the Overpass server" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
