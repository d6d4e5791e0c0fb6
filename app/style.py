"""The dashboard's few style rules (pure: returns CSS text for ``st.html``)."""

from __future__ import annotations

__all__ = ["css"]

#: Less empty space above the page, so the map and its numbers fit a 1280x720 projector.
_BASE = """
.block-container { padding-top: 2.2rem; padding-bottom: 1rem; }
h4 { padding-top: 0.1rem; }
[data-testid="stMetricValue"] { font-size: 1.75rem; }
"""
#: Presenter view: larger type (streamlit sizes everything in rem), even less padding.
_PRESENT = """
html { font-size: 18px; }
.block-container { padding-top: 3.2rem; padding-left: 1.5rem; padding-right: 1.5rem; }
[data-testid="stMetricValue"] { font-size: 2rem; }
"""


def css(*, presenting: bool) -> str:
    """The ``<style>`` element of the page (larger type in the presenter view)."""
    return "<style>" + _BASE + (_PRESENT if presenting else "") + "</style>"
