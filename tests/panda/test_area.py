"""Choosing the area by name and by file (issue 26): the geocoder offline, OSM PBF files, uploads.

The library (panda.network: geocode_bbox, network_from_file on .osm.pbf, network_from_upload, load_upload); the
dashboard's place-name and file sources are tested in tests/app/test_area_sources.py. Nothing here needs a
connection: the geocoder is tested against this machine's missing internet, a closed loopback
port and a small Nominatim stand-in on 127.0.0.1.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import time
from pathlib import Path

import pytest
from apptest_support import release_resources  # noqa: F401 (stops the app's workers at the end of the file)
from area_support import FOOTWAYS, KOTKA_PBF, KOTKA_XML, NO_ROADS, ROADS, _grid, _NominatimStub, _osm_xml, _place

from panda import network as pn
from panda.errors import DataUnavailableError, OfflineError
from panda.network import uploads as pn_uploads


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
