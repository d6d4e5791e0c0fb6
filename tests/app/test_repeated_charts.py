"""app.figures.repeated_charts: the error-against-k figure's data and the budget sentence's numbers."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.figures.repeated_charts import budget_sentence, repeated_figure  # noqa: E402
from panda.repeated import attacker_error_vs_k  # noqa: E402

LINE_M = 1000.0 * np.abs(np.subtract.outer([0.0, 1.0, 2.0], [0.0, 1.0, 2.0]))
PRIOR = np.array([0.2, 0.3, 0.5])
SHARP = np.array([[0.5, 0.5], [0.2, 0.8], [0.9, 0.1]])
BLUNT = np.array([[0.45, 0.55], [0.4, 0.6], [0.55, 0.45]])


@pytest.fixture(scope="module")
def two_results():
    ks = [1, 2, 5, 10, 20]
    return (
        attacker_error_vs_k(SHARP, PRIOR, LINE_M, ks, n_sequences=400, epsilon_per_km=5.0, rng=0),
        attacker_error_vs_k(BLUNT, PRIOR, LINE_M, ks, n_sequences=400, epsilon_per_km=5.0, rng=0),
    )


def test_figure_draws_each_mechanism_and_its_defence(two_results):
    fig = repeated_figure(two_results, labels=["Sharp", "Blunt"], height=420)
    assert [t.name for t in fig.data] == [
        "Sharp",
        "Sharp, re-sent",
        "Blunt",
        "Blunt, re-sent",
        "dashed: the first report re-sent",
    ]
    # The legend: one entry per mechanism and one key for the dashed lines (issue 39 item 9), not two each.
    assert [t.name for t in fig.data if t.showlegend is not False] == [
        "Sharp",
        "Blunt",
        "dashed: the first report re-sent",
    ]
    for i, res in enumerate(two_results):
        est, defence = fig.data[2 * i], fig.data[2 * i + 1]
        assert list(est.x) == list(res.ks)
        assert list(est.y) == list(res.error_m)
        assert est.mode == "lines+markers"
        # Two standard errors by default (about a 95 % interval).
        assert est.error_y.visible and list(est.error_y.array) == [2 * s for s in res.stderr_m]
        assert est.error_y.array[0] == 0.0 and all(s > 0 for s in est.error_y.array[1:])
        assert list(defence.x) == list(res.ks)
        assert list(defence.y) == [res.error_m[0]] * len(res.ks)  # flat at the exact one-report error
        assert defence.line.dash == "dash"
        assert defence.line.color == est.line.color
    assert fig.data[0].line.color != fig.data[2].line.color
    assert fig.layout.height == 420


def test_figure_axes_have_units_and_start_at_zero(two_results):
    fig = repeated_figure(two_results, labels=["Sharp", "Blunt"])
    assert fig.layout.yaxis.title.text == "attacker's expected error (m)"
    assert "(k)" in fig.layout.xaxis.title.text
    low, high = fig.layout.yaxis.range
    assert low == 0.0
    tops = [e + 2 * s for r in two_results for e, s in zip(r.error_m, r.stderr_m, strict=True)]
    assert high >= max(tops)
    assert fig.layout.xaxis.range[1] == pytest.approx(20.5)


def test_figure_hover_says_which_points_are_exact(two_results):
    fig = repeated_figure(two_results[:1], labels=["Sharp"])
    how = list(fig.data[0].customdata)
    assert how[0] == "exact"
    assert how[1] == f"estimate ± {2 * two_results[0].stderr_m[1]:,.1f} m, 2 standard errors"
    one = repeated_figure(two_results[:1], labels=["Sharp"], n_stderr=1)
    assert list(one.data[0].error_y.array) == list(two_results[0].stderr_m)
    assert one.data[0].customdata[1] == f"estimate ± {two_results[0].stderr_m[1]:,.1f} m, 1 standard error"


def test_figure_takes_the_mechanisms_colours(two_results):
    from app.figures.palette import MECHANISM_COLORS, OKABE_ITO

    colors = [MECHANISM_COLORS["em"], MECHANISM_COLORS["laplace"]]
    fig = repeated_figure(two_results, labels=["EM", "Laplace"], colors=colors)
    # Each mechanism's line and its re-sent line share the mechanism's colour.
    assert [t.line.color for t in fig.data[:-1]] == [colors[0], colors[0], colors[1], colors[1]]  # (last: the key)
    plain = repeated_figure(two_results, labels=["EM", "Laplace"])
    assert {t.line.color for t in plain.data[:-1]} <= set(OKABE_ITO.values())  # colour-blind-safe by default
    with pytest.raises(ValueError, match="one colour per result"):
        repeated_figure(two_results, labels=["EM", "Laplace"], colors=colors[:1])


def test_figure_rejects_mismatched_labels(two_results):
    with pytest.raises(ValueError, match="one label per result"):
        repeated_figure(two_results, labels=["only one"])
    with pytest.raises(ValueError, match="at least one result"):
        repeated_figure([], labels=[])
    with pytest.raises(ValueError, match="'n_stderr' parameter of repeated_figure"):
        repeated_figure(two_results, labels=["a", "b"], n_stderr=-1)


def test_budget_sentence_spells_out_k_times_epsilon():
    text = budget_sentence(10, 5.0)
    # 10 x 5/km = 50/km; at 200 m: e^(50 * 0.2) = e^10 = 22,026; one report e^1 = 2.7.
    assert "10 reports at ε = 5/km cost 10 × 5 = **50/km**" in text
    assert f"e^10 = **×{math.exp(10):,.0f}**" in text
    assert "200 m away" in text
    assert "one report: e^1 = ×2.7" in text
    assert "keeps the cost at 5/km" in text


def test_budget_sentence_one_report_and_huge_budgets():
    assert budget_sentence(1, 5) == (
        "1 report at ε = 5/km costs **5/km**: it may be up to e^1 = **×2.7** likelier from one place than "
        "from another 200 m away."
    )
    huge = budget_sentence(20, 1000.0)
    # e^4000 overflows a float: said as a power of ten, 4000 / ln 10 = 1,737.
    assert "20 × 1,000 = **20,000/km**" in huge
    assert "e^4,000 = **×10^1,737**" in huge
    assert "e^0.28 = **×1.32**" in budget_sentence(2, 0.7)  # 2 x 0.7 x 0.2 = 0.28 nats, e^0.28 = 1.323


@pytest.mark.parametrize(
    ("k", "eps"), [(0, 5.0), (21, 5.0), (2.0, 5.0), (True, 5.0), (2, 0.0), (2, -1.0), (2, math.inf)]
)
def test_budget_sentence_rejects_bad_input(k, eps):
    with pytest.raises(ValueError, match="parameter of budget_sentence must be"):
        budget_sentence(k, eps)
