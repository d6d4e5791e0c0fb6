"""The guided lesson played in a real Chromium as a lecturer at a projector (issue 39 item 1): presenter view at
1280x720, from the first scene to the last with Next and the clicker's Page Down, and back with Page Up.

Each scene: its heading and progress line, its question for the room, no traceback, no console error beyond
Streamlit's two base-path probes. The sentences of the map scenes are the library's numbers for the default
view (planar Laplace at 5/km, the road loss); the last scene's violation rate is the library's PAnDA run.
Screenshots: test-artifacts/guided-<n>.png.
"""

from __future__ import annotations

import numpy as np
import pytest
from browser_support import ARTIFACTS, _wait_idle, _wait_map_drawn, browser, server  # noqa: F401 (fixtures)

import panda
from app.model import lesson_numbers, lesson_scenes
from app.model.lesson_scenes import SCENES
from app.model.panda_numbers import fmt_pct
from app.model.params import Params, to_config
from panda.audit import adversary_error_m
from panda.instance import loss_label
from panda.mechanisms import BASELINES
from panda.repeated import posterior_after

pytestmark = pytest.mark.browser
EPS = 5.0


@pytest.fixture(scope="module")
def default_view():
    """The app's default view with the guided lesson's loss, and planar Laplace's matrix at 5/km on it."""
    inst = panda.make_instance(
        panda.load_city(panda.DEFAULT_CITY), n_records=500, n_outputs=100, n_users=20, seed=0, loss="road"
    )
    return inst, BASELINES["laplace"](inst, EPS).matrix


def _plain(markdown: str) -> str:
    """A sentence as the browser shows it (no markdown emphasis)."""
    return markdown.replace("**", "")


def _expected(inst, matrix: np.ndarray, key: str) -> str | None:
    a = lesson_numbers.default_place(inst)
    b = lesson_numbers.second_place(inst, a)
    d_m = inst.d_km * 1000.0
    if key == "promise":
        worst = float(np.nanmax(np.abs(np.log(matrix[a]) - np.log(matrix[b]))))
        return lesson_scenes.promise_sentence(EPS, d_m[a, b], worst)
    if key == "cost":
        return lesson_scenes.cost_sentence("Planar Laplace", EPS, float(matrix[a] @ inst.cost_m[a]), loss_label("road"))
    if key == "attacker":
        row = matrix[a]
        j = int(np.random.default_rng([0, a, 30, 0]).choice(row.size, p=row / row.sum()))
        guess = int(np.argmin(posterior_after(inst.prior, matrix, [j]) @ d_m))
        average = adversary_error_m(matrix, inst.prior, d_m)
        return lesson_scenes.attacker_sentence(d_m[a, int(inst.outputs[j])], d_m[a, guess], average)
    return None


def test_a_lecturer_plays_the_guided_lesson_from_first_to_last_scene(server, browser, default_view):  # noqa: F811
    inst, matrix = default_view
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and "status of 404" not in m.text and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server + "/guided?present=1")
    for i, scene in enumerate(SCENES):
        page.get_by_text(lesson_scenes.progress_line(i)).first.wait_for(timeout=120_000)
        _wait_idle(page, 180)
        if i < 3:
            _wait_map_drawn(page)
        body = page.inner_text("body")
        assert f"{i + 1}. {scene.title}" in body
        assert scene.question in body
        assert "Traceback" not in body and page.locator('[data-testid="stException"]').count() == 0, body[:2000]
        expected = _expected(inst, matrix, scene.key)
        if expected is not None:
            assert _plain(expected) in body, (scene.key, _plain(expected), body[:2000])
        if scene.key == "panda":
            result = panda.run_panda(inst, to_config(Params(page_loss="road")), seed=0)
            assert fmt_pct(result.user_pair_violation_rate) in body  # the library's count, as the metric shows it
        page.screenshot(path=str(ARTIFACTS / f"guided-{i + 1}.png"))
        if i < len(SCENES) - 1:  # the Next button, and a presenter's clicker (Page Down), in turn
            if i % 2:
                page.keyboard.press("PageDown")
            else:
                page.get_by_role("button", name="Next").click()
    assert "scene=panda" in page.url
    page.keyboard.press("PageUp")
    page.get_by_text(lesson_scenes.progress_line(len(SCENES) - 2)).first.wait_for(timeout=60_000)
    assert errors == [], errors
    page.close()
