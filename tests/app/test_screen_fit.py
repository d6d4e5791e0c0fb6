"""Texts and elements that fit the screen (1280x720 and a 390x844 phone); the same checked in a real Chromium:
tests/browser/test_browser_screen_fit.py.

* The Lesson's *Geo-ind.* value fits a third of the right column at 1280x720 ("✗ 21 %").
* The PAnDA page's budget chart title is not cut at 1280; phones hide plotly's mode bar and the Lesson's
  map leaves no blank under it.
"""

from __future__ import annotations

import re

import pytest
from apptest_support import clear_caches, release_resources  # noqa: F401

from app.figures import charts, style
from app.model import lesson_numbers


# ---------------------------------------------------------------------------------------------
# The Lesson's Geo-ind. value
@pytest.mark.parametrize(
    ("rate", "text"), [(0.2137, "✗ 21 %"), (1.0, "✗ 100 %"), (0.004, "✗ 0.4 %"), (0.0002, "✗ <0.1 %")]
)
def test_the_geoind_verdict_is_short(rate, text):
    assert lesson_numbers.geoind_verdict(rate) == text and len(text) <= 8


# ---------------------------------------------------------------------------------------------
# Chart titles and phones
def test_the_budget_chart_title_fits_the_column():
    share = {"median": 0.5, "q1": 0.4, "q3": 0.6, "n": 10}
    fig = charts.budget_split({"phase1": share, "margin": share, "phase2": share})
    lines = [re.sub(r"<[^>]+>", "", part) for part in fig.layout.title.text.split("<br>")]
    assert max(len(line) for line in lines) <= 40, lines


def test_the_phone_css_hides_the_mode_bar_and_shrinks_the_map_element():
    css = style.css(presenting=False)
    phone = css[css.index("@media (max-width") :]
    assert ".modebar-container { display: none !important; }" in phone
    assert "stElementContainer" in phone and f"height: {style.PHONE_MAP_HEIGHT_PX}px !important" in phone
    assert ":has(:has" not in css.replace(" ", ""), "':has' does not nest"
