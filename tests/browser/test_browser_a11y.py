"""Accessibility in a real Chromium: axe-core on every page, and the Lesson by keyboard alone.

axe-core 4.12 (bundled in the axe-playwright-python wheel: no download) runs on the Lesson, PAnDA,
Learn, Compare and Audit pages at 1280x720 and on the Lesson at 390x844; no "serious" or "critical"
violation may remain. None is excluded: the two Streamlit defaults axe flagged (captions at 3.9:1
contrast, the selected segmented-control option at 4.47:1) are fixed from app/figures/style.py. The moderate
and minor findings (heading order, the file uploader's role) are printed, not asserted.

Keyboard: Tab reaches the mechanism, the ε slider, both places, the map's mode and the tabs; the
arrow keys operate them (ε moves by a step, the mechanism changes, the tabs switch).
"""

from __future__ import annotations

import pytest
from browser_support import _wait_idle, browser, server  # noqa: F401 (fixtures: server, browser)

pytestmark = pytest.mark.browser
axe_sync = pytest.importorskip(
    "axe_playwright_python.sync_playwright", reason="axe-playwright-python is not installed (requirements-dev.txt)"
)

#: Page name -> (URL path, a selector that shows the page has rendered its main content).
PAGES = {
    "Lesson": ("", '[data-testid="stMetric"]'),
    "PAnDA": ("explore", '[data-testid="stMetric"]'),
    "Learn": ("learn", '[data-testid="stPlotlyChart"] >> nth=1'),
    "Compare": ("compare", '[data-testid="stTable"]'),
    "Audit": ("audit", '[data-testid="stDataFrame"]'),
    "Guided lesson": ("guided", '[data-testid="stAlert"]'),
    "Plan": ("plan", '[data-testid="stDeckGlJsonChart"]'),
    "Play (join)": ("play", '[data-testid="stTextInput"]'),
}
BLOCKING = ("serious", "critical")


def _open(page, server_url: str, path: str, ready: str) -> None:  # noqa: F811
    page.goto(f"{server_url}/{path}", wait_until="domcontentloaded")
    page.locator(ready).first.wait_for(timeout=180_000)
    _wait_idle(page, timeout_s=180)
    page.wait_for_timeout(800)  # plotly and deck.gl finish drawing


def _report(violations: list[dict]) -> str:
    lines = []
    for v in violations:
        lines.append(f"{v['id']} ({v['impact']}): {v['help']}")
        for node in v["nodes"][:5]:
            lines.append(f"    {', '.join(map(str, node['target']))}: {(node.get('failureSummary') or '')[:300]}")
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("name", "viewport"),
    [(name, (1280, 720)) for name in PAGES] + [("Lesson", (390, 844)), ("Play (join)", (390, 844))],
    ids=[f"{name}-1280x720" for name in PAGES] + ["Lesson-390x844", "Play (join)-390x844"],
)
def test_no_serious_axe_violations(server, browser, name, viewport):  # noqa: F811
    path, ready = PAGES[name]
    phone = viewport[0] < 640
    context = browser.new_context(
        viewport={"width": viewport[0], "height": viewport[1]}, has_touch=phone, is_mobile=phone
    )
    page = context.new_page()
    try:
        _open(page, server, path, ready)
        results = axe_sync.Axe().run(page)
        violations = results.response["violations"]
        rules = {v["id"] for v in results.response.get("passes", [])} | {v["id"] for v in violations}
        assert "color-contrast" in rules or violations, "axe ran no check"  # it did run on a real page
        others = [v for v in violations if v["impact"] not in BLOCKING]
        if others:
            print(f"\n[axe {name} {viewport[0]}x{viewport[1]}] not blocking:\n{_report(others)}")
        blocking = [v for v in violations if v["impact"] in BLOCKING]
        assert not blocking, f"{name}: axe found serious/critical violations:\n{_report(blocking)}"
        assert page.locator('[data-testid="stException"]').count() == 0
    finally:
        context.close()


_FOCUS_JS = """() => {
    const e = document.activeElement;
    if (!e || e.closest('[data-testid="stSidebar"]')) return null;
    const k = e.closest('[class*="st-key-"]');
    const key = k ? [...k.classList].find(c => c.startsWith('st-key-')).slice(7) : '';
    return [key, e.tagName.toLowerCase(), e.getAttribute('role') || '', e.getAttribute('type') || ''];
}"""


def test_the_lesson_works_by_keyboard(server, browser):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    try:
        _open(page, server, *PAGES["Lesson"])
        # 1. Tab reaches every main control (after the skip link and the sidebar).
        reached: dict[str, set[tuple[str, str, str]]] = {}
        for _ in range(160):
            page.keyboard.press("Tab")
            focus = page.evaluate(_FOCUS_JS)
            if focus and focus[0]:
                reached.setdefault(focus[0], set()).add(tuple(focus[1:]))
            if "lesson_tab" in reached:
                break
        for key in ("lesson_mech", "lesson_a", "lesson_b"):
            assert ("input", "combobox", "text") in reached.get(key, set()), f"{key}: {reached}"
        assert ("input", "", "range") in reached.get("lesson_epsilon_per_km", set()), reached
        assert any(role == "radio" for _, role, _ in reached.get("lesson_mode", set())), reached
        assert ("div", "tab", "") in reached.get("lesson_tab", set()), reached

        # 2. The epsilon slider by keyboard: focus it, ArrowRight moves it one step of its scale (5 -> 6 per km),
        # and a screen reader hears the value, not the step's number.
        slider = page.locator('.st-key-lesson_epsilon_per_km input[type="range"]')
        assert slider.get_attribute("aria-valuetext") == "5"
        slider.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => window.location.search.includes('eps=6')", timeout=60_000)
        _wait_idle(page, timeout_s=120)
        assert slider.get_attribute("aria-valuetext") == "6"
        assert page.get_by_text("ε = 6/km means", exact=False).count() == 1

        # 3. The mechanism by keyboard: open the list with ArrowDown, move, Enter.
        mech = page.locator(".st-key-lesson_mech input")
        before = mech.input_value()
        mech.focus()
        page.keyboard.press("ArrowDown")
        page.get_by_role("option").first.wait_for(timeout=10_000)
        page.keyboard.press("ArrowDown")
        page.keyboard.press("Enter")
        page.wait_for_function(
            "(before) => document.querySelector('.st-key-lesson_mech input').value !== before", arg=before
        )
        _wait_idle(page, timeout_s=180)
        assert mech.input_value() not in ("", before)

        # 4. The tabs by keyboard: ArrowLeft from the first tab goes round to the last and opens it.
        tabs = page.locator('.st-key-lesson_tab [role="tab"]')
        n = tabs.count()
        assert n >= 2 and tabs.first.get_attribute("aria-selected") == "true"
        tabs.first.focus()
        page.keyboard.press("ArrowLeft")
        page.wait_for_function(
            """() => { const t = [...document.querySelectorAll('.st-key-lesson_tab [role="tab"]')];
                       return t[t.length - 1].getAttribute('aria-selected') === 'true'; }""",
            timeout=30_000,
        )
        _wait_idle(page, timeout_s=120)
        assert tabs.first.get_attribute("aria-selected") == "false"
        # Not asserted: that the keyboard focus stays on the tab after the page reruns for it. On a loaded
        # machine Streamlit's rerun drops it to the page body in about 1 run of 4 (measured with and without
        # this change's Two places SVG); idle it stays. Known weakness, reported in the issue note.
        assert page.locator('[data-testid="stException"]').count() == 0
    finally:
        context.close()
