"""The Lesson's sentences about its numbers.

* *k reports* at k = 1 says something that is not circular.
* PAnDA-e and PAnDA-l on the Lesson's default view: one sentence with the computed agreement of the decays.
"""

from __future__ import annotations

import numpy as np
import pytest
from apptest_support import clear_caches, make_app, release_resources, run_ok  # noqa: F401

import panda
from app.figures import repeated_charts
from app.model import lesson_numbers
from app.model.params import Params, to_config
from panda.anchors import far_value, resolve_gamma_km, selection_probabilities


# ---------------------------------------------------------------------------------------------
# k reports: one report is not compared with itself
def _reports():
    from panda.repeated import RepeatedReports

    return RepeatedReports(
        ks=(1, 2, 3),
        error_m=np.array([720.0, 500.0, 400.0]),
        stderr_m=np.array([0.0, 12.0, 10.0]),
        exact=np.array([True, False, False]),
        defence_error_m=np.array([720.0, 720.0, 720.0]),
        single_report_error_m=720.0,
        prior_only_error_m=2000.0,
        n_sequences=600,
        epsilon_per_km=4.0,
        elapsed_s=0.1,
    )


def test_one_report_is_not_compared_with_itself():
    shown = _reports()
    one = repeated_charts.error_sentence("Exponential (EM)", shown, 1, 4.0)
    assert "after one report" in one and "720 m" in one and "Move k" in one
    assert "against" not in one and "not 4/km" not in one
    three = repeated_charts.error_sentence("Exponential (EM)", shown, 3, 4.0)
    assert "after 3 independent reports" in three and "against 720 m after one" in three and "not 12/km" in three


# ---------------------------------------------------------------------------------------------
# PAnDA-e and PAnDA-l
def test_the_decays_agreement_is_computed():
    inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=500, n_users=20, n_outputs=100, seed=0)
    configs = [to_config(Params(decay=d)) for d in ("exponential", "logistic")]
    agreement = lesson_numbers.decay_agreement(*configs, inst)
    gamma = resolve_gamma_km(configs[0], inst)
    assert agreement is not None and agreement.gamma_km == pytest.approx(gamma)
    d = np.linspace(0, gamma, 10_001)[:-1]
    we, wl = (selection_probabilities(d, c, gamma_km=gamma) for c in configs)
    assert agreement.max_rel_near == pytest.approx(np.max(np.abs(we - wl) / np.maximum(we, wl)), rel=1e-3)
    assert agreement.far == (far_value(configs[0], gamma), far_value(configs[1], gamma))
    sentence = lesson_numbers.same_decay_sentence(agreement, inst.n_records)
    assert sentence.startswith("**PAnDA-e and PAnDA-l agree here.**")
    assert "K = 500" in sentence and "121 m" in sentence and "0.029 %" in sentence and "9.5·10⁻⁵" in sentence
    # The paper's forms differ by about 5 % below gamma: no sentence.
    paper = [to_config(Params(decay=d, preset="paper")) for d in ("exponential", "logistic")]
    assert lesson_numbers.same_decay_sentence(lesson_numbers.decay_agreement(*paper, inst), inst.n_records) == ""


@pytest.mark.slow
def test_the_lesson_says_when_the_decays_agree():
    at = make_app()
    at.session_state["lesson_mech"] = "panda-l"
    run_ok(at)
    said = [c.value for c in at.caption if "agree here" in c.value]
    assert len(said) == 1 and "K = 200" in said[0]
    at = make_app()
    at.session_state["lesson_mech"] = "em"
    run_ok(at)
    assert not [c.value for c in at.caption if "agree here" in c.value]
