"""A link's box that is not downloaded here (issue 29): the page shows it with a download button while the map
shows the embedded city, and the page's URL keeps naming the link's box meanwhile, so that a reload (F5) shows
the same panel again instead of silently becoming a link to the embedded city.
"""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from apptest_support import clear_caches, make_app, release_resources, run_ok  # noqa: E402, F401

from panda.network import folders as pn_folders  # noqa: E402

pytestmark = pytest.mark.slow

EXPLORE = "app_pages/explore.py"
#: The West Oakland fixture's box as a link writes it (conftest.OAKLAND_BBOX); not in the test's empty cache.
OAKLAND_LINK = "-122.31,37.8,-122.28,37.82"
PANEL = "not downloaded on this server yet"


@pytest.fixture(autouse=True)
def empty_download_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(pn_folders, "CACHE_DIR", tmp_path / "cache")


def _query(at) -> dict[str, str]:
    """The page's URL query as the browser would reload it (the last value of each key)."""
    return {k: (v[-1] if isinstance(v, list) else v) for k, v in at.query_params.items()}


def _panel_shown(at) -> bool:
    return any(PANEL in m.value for m in at.main.markdown)


def test_the_url_keeps_the_links_box_while_it_waits_and_a_reload_shows_it_again():
    at = run_ok(make_app(EXPLORE, bbox=OAKLAND_LINK))
    assert at.session_state["active_source"] == "city:neubrandenburg"  # the map shows the embedded city
    assert _panel_shown(at)
    query = _query(at)
    assert query.get("bbox") == OAKLAND_LINK and "city" not in query, query
    run_ok(at)  # another run of the same page (any widget): still the box
    assert _query(at) == query

    # F5: a new session on the URL the page left.
    reloaded = run_ok(make_app(EXPLORE, **query))
    assert reloaded.session_state["active_source"] == "city:neubrandenburg"
    assert _panel_shown(reloaded) and reloaded.button(key="w_pending_download")
    assert _query(reloaded) == query

    # Choosing another network ends the wait: the URL names what the map shows.
    reloaded.selectbox(key="w_city").set_value("kotka")
    run_ok(reloaded)
    assert not _panel_shown(reloaded)
    after = _query(reloaded)
    assert after.get("city") == "kotka" and "bbox" not in after, after


def test_a_failed_download_keeps_the_box_in_the_url(osmnx_settings, closed_port_url):
    osmnx_settings.overpass_url = closed_port_url
    at = run_ok(make_app(EXPLORE, bbox=OAKLAND_LINK))
    at.button(key="w_pending_download").click()
    run_ok(at)
    assert any("No connection to the OpenStreetMap server" in e.value for e in at.main.error)
    assert at.session_state["active_source"] == "city:neubrandenburg"
    query = _query(at)
    assert query.get("bbox") == OAKLAND_LINK and "city" not in query, query
