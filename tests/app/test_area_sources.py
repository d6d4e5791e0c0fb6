"""Choosing the area by name and by file in the dashboard (issue 26), under AppTest: the place-name and OSM file
sources, and a link's bounding box (the library: tests/panda/test_area.py). Nothing here needs a connection: the
geocoder is tested against a closed loopback port and a small Nominatim stand-in on 127.0.0.1.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import os
import re
import time

import pytest
from apptest_support import release_resources  # noqa: F401 (stops the app's workers at the end of the file)
from area_support import KOTKA_PBF, NO_ROADS, _NominatimStub, _place, long_way_pbf

from panda import network as pn
from panda.network import folders as pn_folders
from panda.network import uploads as pn_uploads

# --------------------------------------------------------------------------------------------
# 1. The dashboard: place name and OSM file sources (AppTest, offline)
# --------------------------------------------------------------------------------------------

EXPLORE = "app_pages/explore.py"
#: Code in a text a person reads (as in test_usability.py).
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


def test_uploads_are_read_on_a_worker_never_in_the_server(app_env, monkeypatch, tmp_path):
    """The server never parses an upload (issue 38): its own reader is poisoned here, the worker's is not."""

    def not_in_the_server(*args, **kwargs):
        raise AssertionError("the web server parsed an upload")

    monkeypatch.setattr(pn_uploads, "read_upload", not_in_the_server)
    at = _start(app_env)
    before = _nodes_caption(at)
    at.radio(key="w_source_kind").set_value("OSM file (upload)")
    app_env.run_ok(at)
    hostile = long_way_pbf(tmp_path / "one_long_way.osm.pbf", 2_000_000).read_bytes()  # a few kB on disk
    at.get("file_uploader")[0].set_value(("one_long_way.osm.pbf", hostile, "application/octet-stream"))
    app_env.run_ok(at)
    errors = [e.value for e in at.sidebar.error]
    assert len(errors) == 1 and "holds a way of more than 10,000 nodes" in errors[0], errors
    assert not CODE.search(errors[0]), errors[0]
    assert at.session_state["active_source"] == "city:neubrandenburg" and _nodes_caption(at) == before
    data = KOTKA_PBF.read_bytes()
    at.get("file_uploader")[0].set_value(("kotka_karhula.osm.pbf", data, "application/octet-stream"))
    app_env.run_ok(at)
    assert not at.sidebar.error, [e.value for e in at.sidebar.error]
    assert at.session_state["active_source"] == f"file:{hashlib.sha256(data).hexdigest()[:16]}"
    assert _nodes_caption(at).startswith("224 nodes")


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
    toasts = [t.value for t in at.warning]
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
# 2. A link's bounding box: shown with a button; only the click downloads (issue 29, item 3)
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
