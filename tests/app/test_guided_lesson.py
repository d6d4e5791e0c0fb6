"""The guided lesson (issue 39 item 1): scenes in order, the scene in the link, each sentence the library's numbers.

The sentences are checked against numbers computed here from the library (the instance, the mechanism's matrix,
the exact audit's attacker), not against the page's own helpers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from apptest_support import clear_caches, make_app, release_resources, run_ok  # noqa: F401 (autouse fixtures)

import panda
from app.model import lesson_numbers, lesson_scenes
from app.model.lesson_scenes import SCENES
from app.model.panda_numbers import fmt_m
from panda.audit import adversary_error_m
from panda.instance import loss_label
from panda.mechanisms import BASELINES
from panda.repeated import posterior_after

GUIDED = "app_pages/guided.py"


@pytest.fixture(scope="module")
def small_instance():
    """The view of apptest_support.SMALL with the guided lesson's loss (road distance)."""
    net = panda.load_city("neubrandenburg")
    return panda.make_instance(net, n_records=200, n_users=12, n_outputs=50, seed=0, loss="road")


def _texts(at) -> list[str]:
    return [m.value for m in at.markdown]


def _guided(**query: str):
    return make_app(GUIDED, **query)


def test_scenes_have_distinct_keys_and_a_question_each():
    keys = [s.key for s in SCENES]
    assert len(set(keys)) == len(keys) == 8
    assert all(s.question.endswith("?") or "?" in s.question for s in SCENES)
    assert [lesson_scenes.scene_index(k) for k in keys] == list(range(len(SCENES)))
    assert lesson_scenes.scene_index("no-such-scene") == 0
    assert lesson_scenes.scene_index(None) == 0
    assert lesson_scenes.progress_line(1) == f"Scene 2 of {len(SCENES)} · {SCENES[1].title}"


def test_the_attacker_sentence_compares_the_guess_with_the_report():
    assert "closer to A than the report" in lesson_scenes.attacker_sentence(400.0, 100.0, 700.0)
    assert "further from A than the report" in lesson_scenes.attacker_sentence(100.0, 400.0, 700.0)
    assert "as far from A as the report" in lesson_scenes.attacker_sentence(100.0, 100.0, 700.0)


def test_next_and_back_walk_every_scene_in_order_and_the_link_follows():
    at = run_ok(_guided())
    for i, scene in enumerate(SCENES):
        assert f"# {i + 1}. {scene.title}" in _texts(at), (i, _texts(at)[:3])
        in_link = at.query_params.get("scene")
        assert in_link in (None, [], "") if i == 0 else in_link in (scene.key, [scene.key]), (i, in_link)
        assert any(scene.question in info.value for info in at.info)
        nxt = next(b for b in at.button if b.label == "Next")
        assert nxt.disabled == (i == len(SCENES) - 1)
        if i < len(SCENES) - 1:
            nxt.click()
            run_ok(at)
    back = next(b for b in at.button if b.label == "Back")
    back.click()
    run_ok(at)
    assert f"# {len(SCENES) - 1}. {SCENES[-2].title}" in _texts(at)


def test_a_link_opens_its_scene_and_a_bad_one_the_first():
    at = run_ok(_guided(scene="attacker"))
    assert "# 3. The attacker" in _texts(at)
    at = run_ok(_guided(scene="<script>"))
    assert f"# 1. {SCENES[0].title}" in _texts(at)


def test_the_promise_is_the_library_s_ratio_for_a_and_b(small_instance):
    inst, eps = small_instance, 5.0
    at = run_ok(_guided(scene="promise"))
    a = lesson_numbers.default_place(inst)
    b = lesson_numbers.second_place(inst, a)
    matrix = BASELINES["laplace"](inst, eps).matrix
    worst = float(np.nanmax(np.abs(np.log(matrix[a]) - np.log(matrix[b]))))
    d_m = 1000 * float(inst.distances_km_pairs(np.array([a]), np.array([b]))[0])
    expected = lesson_scenes.promise_sentence(eps, d_m, worst)
    assert expected in _texts(at)
    assert f"**{fmt_m(1000 * math.log(2) / eps)}**" in expected  # the doubling distance, ln 2 / ε


@pytest.mark.parametrize("mech", ["laplace", "em"])
def test_the_cost_is_a_s_expected_road_distance_to_its_report(small_instance, mech):
    inst, eps = small_instance, 5.0
    at = _guided(scene="cost")
    at.session_state["guided_mech"] = mech
    run_ok(at)
    a = lesson_numbers.default_place(inst)
    row = BASELINES[mech](inst, eps).matrix[a]
    error_m = float(row @ inst.cost_m[a])
    label = lesson_numbers.MECHANISMS[mech][0]
    loss = loss_label("road")  # the library's name of the loss
    assert lesson_scenes.cost_sentence(label, eps, error_m, loss) in _texts(at), _texts(at)


def _attacker_sentence(inst, matrix: np.ndarray, a: int, draw: int) -> str:
    """The scene's sentence for its ``draw``-th report of A, from the library's posterior and attacker."""
    row = matrix[a]
    j = int(np.random.default_rng([0, a, 30, draw]).choice(row.size, p=row / row.sum()))
    belief = posterior_after(inst.prior, matrix, [j])
    d_m = inst.d_km * 1000.0
    guess = int(np.argmin(belief @ d_m))
    average = adversary_error_m(matrix, inst.prior, d_m)
    return lesson_scenes.attacker_sentence(d_m[a, int(inst.outputs[j])], d_m[a, guess], average)


def test_the_attacker_scene_is_the_exact_posterior_and_the_city_average(small_instance):
    inst, eps = small_instance, 5.0
    at = run_ok(_guided(scene="attacker"))
    a = lesson_numbers.default_place(inst)
    matrix = BASELINES["laplace"](inst, eps).matrix
    assert _attacker_sentence(inst, matrix, a, 0) in _texts(at), _texts(at)
    legend = next(c.value for c in at.caption if c.value.startswith("Orange: place A"))
    assert "places the attacker believes" in legend and "reports land" not in legend  # the map's own legend
    next(b for b in at.button if b.label == "Draw a report").click()
    run_ok(at)
    assert _attacker_sentence(inst, matrix, a, 1) in _texts(at), _texts(at)


def test_the_round_scene_asks_for_the_key_then_opens_a_round_on_the_scenes_view(db, small_instance):
    from conftest import LECTURER_KEY

    from app.game import rounds
    from app.server import lecturer

    at = _guided(scene="round")
    at.session_state["guided_mech"] = "em"
    run_ok(at)
    assert "Start a round" not in {b.label for b in at.button}  # a student who opens the scene: the form only
    at.text_input(key="lesson_round_lecturer_key").set_value(LECTURER_KEY).run()
    at.radio(key="lesson_round_secret").set_value("shared")
    next(b for b in at.button if b.label == "Start a round").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    code = at.query_params["code"]
    current = rounds.host_view(code, lecturer.round_token(code)).current
    assert current["mechanism"] == "em" and current["secret_mode"] == "shared"
    assert current["epsilon_per_km"] == 5.0
    assert current["shared_place"] == lesson_numbers.default_place(small_instance)  # the scenes' place A
