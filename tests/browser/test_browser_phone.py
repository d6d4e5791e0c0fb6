"""The Lesson on a phone (390x844, touch) in a real Chromium: the title is visible below Streamlit's
header, the mechanism and ε come before the map, and tapping a place on the map picks place A.

Saves the phone's screen to /tmp/shots/phone_lesson.png (and test-artifacts/phone-lesson*.png).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_support import ARTIFACTS, _wait_idle, _wait_map_drawn, browser, server  # noqa: F401 (fixtures)
from test_browser_lesson import _place_px, _selected, _visible_place, default_instance  # noqa: F401

from app.figures import style

pytestmark = pytest.mark.browser

PHONE = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True, "device_scale_factor": 2}
SHOTS = Path("/tmp/shots")
TITLE = "Geo-indistinguishability on the roads of"


def _scroll_to_top(page) -> None:
    page.evaluate(
        """() => { window.scrollTo(0, 0);
                   document.querySelectorAll('[data-testid="stMain"], [data-testid="stAppViewContainer"]')
                     .forEach(e => { e.scrollTop = 0; }); }"""
    )


def _phone_canvas(page):
    canvas = page.locator('[data-testid="stDeckGlJsonChart"] canvas').first
    canvas.scroll_into_view_if_needed()
    for _ in range(80):  # the canvas gets its real size once the chart has laid out
        box = canvas.bounding_box()
        if box and box["height"] > 0.9 * style.PHONE_MAP_HEIGHT_PX:
            return box
        page.wait_for_timeout(100)
    raise AssertionError(f"the map canvas never got its size: {canvas.bounding_box()}")


def test_the_lesson_on_a_phone(server, browser, default_instance):  # noqa: F811
    inst = default_instance
    context = browser.new_context(**PHONE)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    try:
        page.goto(server, wait_until="domcontentloaded")
        page.get_by_text("Error at A", exact=True).wait_for(timeout=120_000)
        _wait_map_drawn(page)
        _wait_idle(page, timeout_s=120)
        _scroll_to_top(page)  # taking the canvas's picture scrolled it into view
        page.wait_for_timeout(500)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "phone_lesson.png"))
        page.screenshot(path=str(ARTIFACTS / "phone-lesson.png"))

        # The title: inside the screen, below the header, and the element a finger would hit there.
        title = page.get_by_text(TITLE, exact=False).first
        t_box = title.bounding_box()
        header = page.locator('[data-testid="stHeader"]').bounding_box()
        assert t_box is not None and header is not None
        assert t_box["x"] >= 0 and t_box["x"] + t_box["width"] <= 390, t_box
        assert t_box["y"] >= header["y"] + header["height"] - 0.5, f"the title hides under the header: {t_box} {header}"
        assert t_box["y"] + t_box["height"] <= 844, t_box
        on_top = page.evaluate(
            """([x, y]) => document.elementFromPoint(x, y).closest('h1,h2,h3,h4') !== null""",
            [t_box["x"] + 20, t_box["y"] + t_box["height"] / 2],
        )
        assert on_top, "something covers the title"

        # The controls come before the map: mechanism, epsilon, the places and the numbers.
        map_box = page.locator('[data-testid="stDeckGlJsonChart"]').bounding_box()
        mech = page.locator(".st-key-lesson_mech").bounding_box()
        eps = page.locator(".st-key-lesson_epsilon_per_km").bounding_box()
        place_a = page.locator(".st-key-lesson_a").bounding_box()
        metric = page.locator('[data-testid="stMetric"]').filter(has=page.get_by_text("Error at A", exact=True))
        boxes = {"mechanism": mech, "ε slider": eps, "place A": place_a, "Error at A": metric.bounding_box()}
        for name, box in boxes.items():
            assert box is not None and box["y"] + box["height"] <= map_box["y"], f"{name} is not above the map"
        assert mech["y"] + mech["height"] <= 844 and eps["y"] + eps["height"] <= 844, "the controls are below the fold"
        assert map_box["height"] == pytest.approx(style.PHONE_MAP_HEIGHT_PX, abs=2)
        assert map_box["width"] > 330  # the full width of the phone, less the page's padding
        # Nothing is wider than the phone (no sideways scrolling).
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390

        # Tap a place on the map: it becomes place A.
        box = _phone_canvas(page)
        a0 = int(_selected(page, "Place A").split(" ·")[0].split()[-1])
        target = _visible_place(box, inst, a0)
        page.touchscreen.tap(*_place_px(box, inst, target))
        page.wait_for_function(
            """(want) => [...document.querySelectorAll('[data-testid="stSelectbox"] input')]
                 .some(i => i.value === want || i.value.startsWith(want + " ·"))""",
            arg=f"Place {target}",
            timeout=60_000,
        )
        _wait_idle(page)
        assert _selected(page, "Place A").split(" ·")[0] == f"Place {target}"
        _wait_map_drawn(page)
        page.wait_for_timeout(500)
        page.screenshot(path=str(ARTIFACTS / "phone-lesson-tapped.png"))
        page.screenshot(path=str(SHOTS / "phone_lesson_tapped.png"))

        assert page.locator('[data-testid="stException"]').count() == 0
        body = page.locator("body").inner_text()
        for word in ("Traceback", "Exception", "Error:"):
            assert word not in body, f"{word!r} on the phone's page"
        assert not errors, errors
    finally:
        context.close()
