"""A downloaded box's results: kept under its network's content, found by the prepare command, and the box kept on
the page of the session that opened it.

* The result store keys a box's (or an upload's) results with a fingerprint of its network: the same box string
  downloaded again with other OpenStreetMap data (the download cache is bounded; each server of a class downloads
  its own copy) never gets the other network's mechanisms.
* A link's box is rounded to the download grid in one place (``app.model.params.bbox_source``): the prepare command and
  the dashboard key a box link's view alike, so prepared results are found.
* A box this session has opened stays on the page when its cache file goes (another download evicted it).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("streamlit")

import streamlit as st  # noqa: E402
from apptest_support import clear_caches, make_app, release_resources, run_ok  # noqa: E402, F401

import panda  # noqa: E402
from app import state  # noqa: E402
from app.model import instances
from app.server import prepare
from app.server import result_store as rs  # noqa: E402
from app.server.db import store  # noqa: E402
from panda import network as pn  # noqa: E402
from panda.network import folders as pn_folders  # noqa: E402

#: The West Oakland box as a link may give it: off the download grid (it rounds to -122.31,37.8,-122.28,37.82).
LINK_BOX = "-122.310012,37.800031,-122.279987,37.819968"
SNAPPED = "bbox:-122.31,37.8,-122.28,37.82"
VIEW = {"K": "30", "N": "8", "M": "15", "seed": "2", "eps": "3"}
LINK = "http://127.0.0.1:8501/learn?bbox=" + LINK_BOX + "&" + "&".join(f"{k}={v}" for k, v in VIEW.items())
LEARN = "app_pages/learn.py"
PANEL = "not downloaded on this server yet"


@pytest.fixture
def db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setenv(store.ENV_URL, url)
    monkeypatch.delenv(rs.ENV_SWITCH, raising=False)
    yield url
    store.dispose(url)


@pytest.fixture
def kotka():
    return panda.load_city("kotka")


@pytest.fixture
def newer(kotka):
    """Another network for the same box: the same nodes, other road lengths (newer OpenStreetMap data)."""
    return dataclasses.replace(kotka, edge_length_m=kotka.edge_length_m * 1.25, _cache={})


@pytest.fixture
def jobs(monkeypatch):
    """The dashboard's worker jobs, run here (no cluster); the list of the jobs asked for."""
    asked: list[str] = []

    def run_job(job, *args, **kwargs):
        asked.append(job.__name__.removesuffix("_job"))
        return job(*args, lambda *_: None)

    monkeypatch.setattr(state, "_run_job", run_job)
    return asked


@pytest.fixture
def download(monkeypatch):
    """What a box's download gives (``panda.network_from_bbox``, behind app.state.bbox_network): set ``["net"]``."""
    served: dict = {}
    monkeypatch.setattr(panda, "network_from_bbox", lambda *box, **kwargs: served["net"])
    return served


def _new_server() -> None:
    """Nothing in memory (a restarted server, or another server of the class): only the store is shared."""
    st.cache_data.clear()
    state.bbox_network.clear()


def test_the_fingerprint_follows_the_networks_content(kotka, newer):
    key = (SNAPPED, 30, 8, 15, 2, "road", 1, "uniform")
    a, b = rs.store_key(key, kotka), rs.store_key(key, newer)
    assert a != b and a[1:] == b[1:] == key[1:]
    assert a[0].startswith(SNAPPED + "#") and b[0].startswith(SNAPPED + "#")
    copy = dataclasses.replace(kotka, edge_u=kotka.edge_u.astype(np.int32), _cache={})  # as another reader may
    assert rs.store_key(key, copy) == a  # the same content read again: the same key
    moved = dataclasses.replace(kotka, lon=kotka.lon + 1e-7, _cache={})
    assert rs.store_key(key, moved) != a
    # An embedded city's key is its own (the network is a file of the repository); the network is not asked for.
    city = ("city:kotka", *key[1:])
    assert rs.store_key(city, lambda: pytest.fail("no network needed")) == city
    # A box's key without its fingerprint is refused: a forgotten store_key cannot match another network's results.
    for bare in (key, ("file:0123456789abcdef", *key[1:])):
        with pytest.raises(ValueError, match="fingerprint"):
            rs.mechanism_key_inputs(bare, "em", 3.0, ())
        with pytest.raises(ValueError, match="fingerprint"):
            rs.curve_key_inputs(bare, "em", (1.0,), (), 0)


def test_a_box_downloaded_again_with_other_data_never_gets_the_old_networks_mechanism(db, kotka, newer, jobs, download):
    key = (SNAPPED, 30, 8, 15, 2, "road", 1, "uniform")
    download["net"] = kotka
    first = state.baseline(key, "laplace", 3.0, ())
    assert jobs == ["instance", "baseline"] and not first.details.get("kept")  # the view's tables, then its mechanism

    _new_server()
    download["net"] = newer  # the box downloaded again: newer OpenStreetMap data under the same box string
    second = state.baseline(key, "laplace", 3.0, ())
    assert jobs == ["instance", "baseline"] * 2, "the old network's instance or mechanism served for the new network"
    assert not second.details.get("kept")
    assert second.loss_m == pytest.approx(1.25 * first.loss_m, rel=0.05)  # built on the longer roads
    numbers = state.mechanism_numbers(key, "laplace", 3.0, ())
    assert numbers["loss_m"] == second.loss_m

    _new_server()
    download["net"] = kotka  # the first data again (another server's copy): its kept mechanism, no job
    third = state.baseline(key, "laplace", 3.0, ())
    assert len(jobs) == 5 and third.details["kept"]  # not even the view's tables: the key needs the network only
    np.testing.assert_array_equal(third.matrix, first.matrix)


def test_a_prepared_box_link_is_found_by_the_dashboard_on_its_network_only(db, kotka, newer, jobs, download):
    params = prepare.parse_link(LINK)
    assert params.source == SNAPPED  # the link's box on the download grid, as the dashboard opens it
    (task,) = [t for t in prepare.tasks_for(params) if t.kind == "mechanism" and t.name == "laplace"]
    assert task.instance_key[0] == SNAPPED

    outcome = prepare.run_task(task, params, lambda key: instances.build_instance(kotka, *key[1:]))
    assert outcome.startswith("solved"), outcome
    assert prepare.is_done(task, params, lambda source: kotka)
    assert not prepare.is_done(task, params, lambda source: newer)  # another download of the box: not prepared

    download["net"] = kotka
    mech = state.baseline(task.instance_key, "laplace", 3.0, prepare._options("laplace"))
    assert jobs == [] and mech.details["prepared"]  # the dashboard's view of the link: prepared, at once

    _new_server()
    download["net"] = newer
    mech = state.baseline(task.instance_key, "laplace", 3.0, prepare._options("laplace"))
    assert jobs == ["instance", "baseline"] and not mech.details.get("prepared")


@pytest.fixture
def box_in_cache(tmp_path, monkeypatch, kotka):
    """The link's box in a download cache of the test's own (holding the Kotka network)."""
    monkeypatch.setattr(pn_folders, "CACHE_DIR", tmp_path / "cache")
    path = pn.bbox_cache_file(*(float(v) for v in LINK_BOX.split(",")))
    pn._save_network_npz(kotka, path)
    return path


def _panel_shown(at) -> bool:
    return any(PANEL in m.value for m in at.main.markdown)


def test_the_dashboard_keys_a_box_link_as_the_prepare_command_does(box_in_cache):
    at = run_ok(make_app(LEARN, bbox=LINK_BOX, **VIEW))
    assert at.session_state["active_source"] == SNAPPED
    page = at.session_state["params"].instance_key
    tasks = prepare.tasks_for(prepare.parse_link(LINK))
    assert {t.instance_key for t in tasks} == {page}


def test_a_box_the_session_opened_stays_when_its_cache_file_is_evicted(box_in_cache):
    at = run_ok(make_app(LEARN, bbox=LINK_BOX, **VIEW))
    assert at.session_state["active_source"] == SNAPPED and not _panel_shown(at)
    box_in_cache.unlink()  # another person's download evicted it from the disk cache; this server still holds it
    at.number_input(key="w_seed").set_value(3)
    run_ok(at)
    assert at.session_state["active_source"] == SNAPPED
    assert at.session_state["params"].seed == 3
    assert not _panel_shown(at) and not at.session_state.get("link_notice")
    run_ok(at)  # and any later run
    assert at.session_state["active_source"] == SNAPPED and not _panel_shown(at)
