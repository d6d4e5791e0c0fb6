"""Names that come from outside are shown as text, never as Markdown (issue 38): an uploaded file's name and the
geocoder's name of a place (anyone can edit OpenStreetMap's names), and the exception texts quoting them."""

from __future__ import annotations

import re

import pytest
from apptest_support import release_resources  # noqa: F401 (stops the app's workers at the end of the file)
from area_support import KOTKA_PBF, _NominatimStub, _place
from markdown_it import MarkdownIt

from app.model.messages import ZERO_WIDTH_SPACE
from app.widgets import area_picker
from panda.network import folders as pn_folders

EXPLORE = "app_pages/explore.py"
HOSTILE_NAMES = [
    "[click](http://evil.example/x)",
    "**x**](javascript:alert(1))",
    "![pixel](https://evil.example/p.png)",
    "<a href=https://evil.example>x</a>",
    "see www.evil.example _now_",
]


def _rendered(markdown: str) -> str:
    """HTML as a CommonMark renderer makes it (Streamlit's adds bare-address links: checked apart)."""
    return MarkdownIt("commonmark").render(markdown)


def _no_markup(markdown: str) -> None:
    html = _rendered(markdown)
    assert "<a " not in html and "<img" not in html and "<em>" not in html, html
    # Bare addresses, which Streamlit's renderer links, are broken by a zero-width space.
    assert not re.search(r"(?i)://|www\.", markdown), markdown


def _reads(name: str, markdown: str) -> bool:
    """Whether a person reads ``name`` (its start) in what ``markdown`` renders to."""
    html = _rendered(markdown)
    text = html.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace(ZERO_WIDTH_SPACE, "")
    return name[:5] in text


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_an_upload_failure_shows_the_file_name_as_text(name):
    label = f"{name}.osm"
    message, _ = area_picker.upload_failure(ValueError(f"The file {label!r} is empty: upload an extract."))
    assert message.startswith("**This file gives no road network.**")
    _no_markup(message)
    assert _reads(name, message)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_place_failure_shows_the_place_name_as_text(name):
    message, _ = area_picker.place_failure(ValueError(f"The place {name!r} covers about 9,000 km², more than 5,000."))
    _no_markup(message)


@pytest.fixture
def app_env(tmp_path, monkeypatch):
    import apptest_support as support

    from app import state

    monkeypatch.setattr(pn_folders, "CACHE_DIR", tmp_path / "cache")
    state.upload_network.clear()
    yield support
    state.upload_network.clear()


def test_an_uploaded_file_s_name_is_shown_as_text(app_env):
    at = app_env.run_ok(app_env.make_app(EXPLORE))
    at.radio(key="w_source_kind").set_value("OSM file (upload)")
    app_env.run_ok(at)
    name = "[click](evil.example) www.evil.example"  # a file's name has no "/": the link is a relative one
    at.get("file_uploader")[0].set_value((f"{name}.osm.pbf", KOTKA_PBF.read_bytes(), "application/octet-stream"))
    app_env.run_ok(at)
    assert not at.sidebar.error, [e.value for e in at.sidebar.error]
    shown = [s.value for s in at.sidebar.success]
    assert len(shown) == 1 and "224 nodes" in shown[0], shown
    _no_markup(shown[0])
    assert _reads(name, shown[0])
    side = at.sidebar
    everything = [m.value for m in (*side.markdown, *side.caption, *side.success, *side.warning, *side.info)]
    assert not [v for v in everything if "evil" in v and "<a " in _rendered(v)]
    page = [m.value for m in (*at.main.markdown, *at.main.caption)]  # the page's header names the network too
    assert [v for v in page if "evil" in v] and not [v for v in page if "evil" in v and "<a " in _rendered(v)]


def test_a_place_s_name_from_the_geocoder_is_shown_as_text(app_env, osmnx_settings):
    name = "**x**](javascript:alert(1)) [click](http://evil.example/x)"
    stub = _NominatimStub({"Evil": [_place(name, 37.80, 37.82, -122.31, -122.28)]})
    osmnx_settings.nominatim_url = stub.url
    try:
        at = app_env.run_ok(app_env.make_app(EXPLORE))
        at.radio(key="w_source_kind").set_value("Place name (live download)")
        app_env.run_ok(at)
        at.text_input(key="w_place").set_value("Evil")
        at.button(key="w_place_find").click()
        app_env.run_ok(at)
    finally:
        stub.stop()
    assert not at.sidebar.error, [e.value for e in at.sidebar.error]
    found = [m.value for m in at.sidebar.markdown if "km²" in m.value and "evil" in m.value]
    assert len(found) == 1, [m.value for m in at.sidebar.markdown]
    _no_markup(found[0])
    assert _reads(name, found[0])
    assert "<strong>" in _rendered(found[0])  # the page's own emphasis stays
