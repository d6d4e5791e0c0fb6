"""Helpers and fixtures shared by the dashboard's AppTest files (tests/app: test_pages.py, test_lesson.py, ...).

A file uses the fixtures by importing them: ``from apptest_support import clear_caches, release_resources``.
"""

from __future__ import annotations

import pytest
import streamlit as st
from conftest import ROOT
from streamlit.testing.v1 import AppTest

APP = str(ROOT / "app" / "streamlit_app.py")
#: Small views (K = 200 through the link's query parameters) keep the files fast.
SMALL = {"K": "200", "N": "12", "M": "50"}


@pytest.fixture(scope="module", autouse=True)
def release_resources():
    """At the end of a file, drop every cached resource (this stops the dashboard's executor and workers)."""
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture(autouse=True)
def clear_caches():
    """Streamlit's caches are process-global: every test starts with empty data caches, instances and networks.

    The executor (a stateless cache_resource) is kept from test to test: starting it costs seconds.
    """
    from app import state

    st.cache_data.clear()
    state._instance_on.clear()
    state.city_network.clear()
    state.bbox_network.clear()
    yield
    st.cache_data.clear()


def make_app(page: str | None = None, **query: str) -> AppTest:
    """The app with the small view's link (plus ``query``), on ``page`` (``None``: the first screen, the Lesson)."""
    at = AppTest.from_file(APP, default_timeout=120)
    for key, value in {**SMALL, **query}.items():
        at.query_params[key] = value
    if page:
        at.switch_page(page)
    return at


def run_ok(at: AppTest) -> AppTest:
    """Run the app; fail on any exception box."""
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def metric(at: AppTest, label: str) -> str:
    """The value of the metric labelled ``label``."""
    for m in at.metric:
        if m.label == label:
            return m.value
    raise AssertionError(f"no metric {label!r} among {[m.label for m in at.metric]}")
