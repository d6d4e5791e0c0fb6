"""The layout fits the screen, checked in a real Chromium (without a browser: tests/app/test_screen_fit.py).

* 1280x720 with the sidebar open: the Lesson's *Geo-ind.* value is whole ("✗ 21 %" for LP on cells, not
  "✗ 21 …").
* A phone (390x844, touch): the Lesson map's element is as tall as its canvas (no 140 px blank under it),
  and plotly's mode bar does not cover the *k reports* chart's legend, even after a tap on the chart; the
  *Curve* chart's legend starts below its axis title, and no two legend entries overlap.
"""

from __future__ import annotations

import pytest
from browser_support import ARTIFACTS, _wait_idle, _wait_map_drawn, browser, server  # noqa: F401 (fixtures)

from app.figures import style

pytestmark = pytest.mark.browser

PHONE = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True}
#: Elements inside a metric's value whose text is wider than the element (cut off with "…").
_CUT_METRICS_JS = """() => [...document.querySelectorAll('[data-testid="stMetric"]')].flatMap(m => {
    const v = m.querySelector('[data-testid="stMetricValue"]');
    const cut = [v, ...v.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1);
    return cut ? [m.innerText.replace(/\\n+/g, ' ')] : [];
})"""


#: The curve chart's lowest x-axis title and its legend entries' boxes (page pixels).
_CURVE_LEGEND_JS = """() => {
    const chart = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
        .find(c => c.innerText.includes('ε (1/km)'));
    const titles = [...chart.querySelectorAll('.g-xtitle, .g-x2title')].map(t => t.getBoundingClientRect());
    const entries = [...chart.querySelectorAll('.legend .traces')].map(t => {
        const r = t.getBoundingClientRect();
        return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
    });
    return {titleBottom: Math.max(...titles.map(r => r.bottom)), entries};
}"""


def _overlapping(entries: list[dict]) -> list[tuple[str, str]]:
    """Pairs of legend entries whose boxes overlap by more than a pixel."""
    pairs = []
    for i, a in enumerate(entries):
        for b in entries[i + 1 :]:
            dx = min(a["right"], b["right"]) - max(a["left"], b["left"])
            dy = min(a["bottom"], b["bottom"]) - max(a["top"], b["top"])
            if dx > 1 and dy > 1:
                pairs.append((a["text"], b["text"]))
    return pairs


def test_the_geoind_value_is_whole_at_1280(server, browser):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    try:
        page.goto(f"{server}/?mech=lp-ca", wait_until="domcontentloaded")
        page.get_by_text("Error at A", exact=True).wait_for(timeout=180_000)
        _wait_idle(page, timeout_s=180)
        value = page.locator('[data-testid="stMetric"]').filter(has=page.get_by_text("Geo-ind.", exact=True))
        text = value.locator('[data-testid="stMetricValue"]').inner_text()
        assert text.startswith("✗") and text.endswith("%"), text
        page.screenshot(path=str(ARTIFACTS / "walk-geoind-1280.png"))
        assert page.evaluate(_CUT_METRICS_JS) == []
    finally:
        context.close()


def test_the_phone_lesson_map_and_charts(server, browser):  # noqa: F811
    context = browser.new_context(**PHONE)
    page = context.new_page()
    try:
        page.goto(server, wait_until="domcontentloaded")
        page.get_by_text("Error at A", exact=True).wait_for(timeout=180_000)
        _wait_map_drawn(page)
        _wait_idle(page, timeout_s=180)
        element, canvas = page.evaluate(
            """() => { const e = document.querySelector('.st-key-lesson_map');
                       return [e.getBoundingClientRect().height,
                               e.querySelector('canvas').getBoundingClientRect().height]; }"""
        )
        assert canvas == pytest.approx(style.PHONE_MAP_HEIGHT_PX, abs=2)
        assert element == pytest.approx(canvas, abs=2), f"blank under the map: element {element} px, canvas {canvas} px"

        page.get_by_role("tab", name="k reports").click()
        chart = page.locator(".js-plotly-plot").first
        chart.wait_for(timeout=180_000)
        _wait_idle(page, timeout_s=180)
        chart.scroll_into_view_if_needed()
        box = chart.bounding_box()
        page.touchscreen.tap(box["x"] + box["width"] / 2, box["y"] + box["height"] - 60)
        page.wait_for_timeout(800)
        page.screenshot(path=str(ARTIFACTS / "walk-phone-kreports.png"))
        # Plotly fades its mode bar in (opacity) on hover, which a tap gives on a touch screen.
        shown = page.evaluate(
            """() => [...document.querySelectorAll('.modebar')].filter(
                         bar => bar.getClientRects().length > 0 && parseFloat(getComputedStyle(bar).opacity) > 0
                     ).length"""
        )
        assert shown == 0, "plotly's mode bar covers the chart on a phone"

        page.get_by_role("tab", name="Curve").click()
        curve = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="ε (1/km)").first
        curve.wait_for(timeout=300_000)
        _wait_idle(page, timeout_s=300)
        page.wait_for_timeout(800)  # the web font in place: plotly measures its legend's text again
        curve.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "walk-phone-curve.png"))
        found = page.evaluate(_CURVE_LEGEND_JS)
        assert len(found["entries"]) >= 5, found
        top = min(e["top"] for e in found["entries"])
        title = found["titleBottom"]
        assert top >= title, f"the legend ({top:.0f} px) touches the axis title ({title:.0f} px)"
        assert _overlapping(found["entries"]) == [], _overlapping(found["entries"])
        assert page.locator('[data-testid="stException"]').count() == 0
    finally:
        context.close()
