"""solve_optimal(warm=...): a solve at a neighbouring eps as the start (issue 28, item 4).

The warm run must be certified exactly like a cold one (an audited matrix, a bound below the exact
optimum), reach the same gap with a loss within it of the cold run's, and actually use the start
(fewer PDHG steps, read from the rounds). The clock is frozen as in tests/panda/test_optimal_pinned.py:
every certificate budget passes, so the steps depend on the start only, not on the machine's load.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from panda import make_instance
from panda.audit import audit_mechanism
from panda.lp import solve_mdp_lp
from panda.mechanisms import mdp_pairs
from panda.mechanisms._common import output_distances_km
from panda.mechanisms.em import em_matrix
from panda.mechanisms.lp_full import spanner_seed_rows
from panda.optimal import OptimalResult, solve_optimal

GAP = 0.005
ETA = 1e-6


@pytest.fixture(scope="module")
def inst(kotka):
    """45 records, 30 outputs on Kotka (every pair constrained at these eps: the dense, PDHG case)."""
    return make_instance(kotka, n_records=45, n_outputs=30, n_users=10, seed=1)


@pytest.fixture
def frozen(monkeypatch):
    monkeypatch.setattr(time, "perf_counter", lambda: 1000.0)


def _optimum(inst, eps: float) -> float:
    cost = inst.prior[:, None] * inst.cost_m
    pi, pj, b, _ = mdp_pairs(inst.d_km, eps, eta=ETA)
    res = solve_mdp_lp(cost, pi, pj, b, eta=ETA, solver="simplex", time_limit_s=120)
    assert res.success
    return float(res.lp.objective)


def _pdhg(inst, eps: float, warm: OptimalResult | None = None, **kwargs) -> OptimalResult:
    """The solve build_lp(start="spanner") runs, to GAP, optionally warm."""
    cost = inst.prior[:, None] * inst.cost_m
    kwargs.setdefault("max_rounds", 200)
    return solve_optimal(
        cost, inst.d_km, eps, eta=ETA, gap=GAP, time_limit_s=600.0, method="pdhg", batch=1.0,
        seed_rows=spanner_seed_rows(inst, eps, ETA), start_matrix=em_matrix(output_distances_km(inst), eps),
        round_steps=256, warm=warm, **kwargs,
    )  # fmt: skip


def _steps(res: OptimalResult) -> int:
    return sum(int(e["iterations"]) for e in res.rounds)


@pytest.mark.parametrize(("eps_from", "eps_to"), [(5.0, 3.5), (3.5, 5.0)])
def test_warm_start_is_certified_and_takes_fewer_steps(inst, frozen, eps_from, eps_to):
    previous = _pdhg(inst, eps_from)
    assert previous.solved and previous.info["epsilon_per_km"] == eps_from and "pdhg_state" in previous.info
    cold = _pdhg(inst, eps_to)
    warm = _pdhg(inst, eps_to, warm=previous)
    optimum = _optimum(inst, eps_to)
    for res in (cold, warm):
        assert res.solved and res.gap <= GAP
        # The certificate: an exactly audited matrix at eps_to, a bound below the exact optimum.
        assert audit_mechanism(res.matrix, inst.d_km, eps_to).passed
        assert res.lower_bound <= optimum * (1 + 1e-9) <= res.upper_bound * (1 + 1e-9)
        assert res.upper_bound == pytest.approx(float((inst.prior[:, None] * inst.cost_m * res.matrix).sum()))
    # The same certified gap, so the two losses are within it of each other.
    assert abs(warm.upper_bound - cold.upper_bound) <= GAP * max(warm.upper_bound, cold.upper_bound)
    # The start was used: its facts are recorded, and it took fewer PDHG steps than cold.
    facts = warm.info["warm"]
    assert facts["epsilon_from"] == eps_from and facts["rows_carried"] > 0
    assert facts["start_lower"] <= optimum * (1 + 1e-9)  # the carried multipliers' bound is valid too
    assert facts["start_upper"] >= warm.upper_bound  # the repaired earlier matrix: the first upper bound
    assert cold.info["warm"] is None
    assert _steps(warm) < _steps(cold), (_steps(warm), _steps(cold))


def test_warm_start_from_a_looser_eps_repairs_the_matrix_exactly(inst, frozen):
    """The earlier matrix breaks the tighter eps: the run's first upper bound is its exact repair."""
    previous = _pdhg(inst, 5.0)
    assert not audit_mechanism(previous.matrix, inst.d_km, 2.0).passed
    warm = _pdhg(inst, 2.0, warm=previous, max_rounds=1)
    assert warm.info["warm"]["repair_kind"] != "none"
    assert audit_mechanism(warm.matrix, inst.d_km, 2.0).passed
    # ... and from a tighter eps the earlier matrix is feasible as it is: the repair only rounds it.
    tight = _pdhg(inst, 2.0)
    loose = _pdhg(inst, 5.0, warm=tight, max_rounds=1)
    assert loose.info["warm"]["start_upper"] <= tight.upper_bound * (1 + 1e-9)


def test_warm_start_on_dual_simplex_keeps_the_certificate(inst):
    cost = inst.prior[:, None] * inst.cost_m
    previous = solve_optimal(cost, inst.d_km, 5.0, gap=GAP, seed_sources=inst.outputs, time_limit_s=120)
    cold = solve_optimal(cost, inst.d_km, 3.5, gap=GAP, seed_sources=inst.outputs, time_limit_s=120)
    warm = solve_optimal(cost, inst.d_km, 3.5, gap=GAP, seed_sources=inst.outputs, time_limit_s=120, warm=previous)
    optimum = _optimum(inst, 3.5)
    for res in (cold, warm):
        assert res.solved and audit_mechanism(res.matrix, inst.d_km, 3.5).passed
        assert res.lower_bound <= optimum * (1 + 1e-9) <= res.upper_bound * (1 + 1e-9)
    assert abs(warm.upper_bound - cold.upper_bound) <= GAP * max(warm.upper_bound, cold.upper_bound)
    assert warm.info["warm"]["rows_carried"] > 0
    assert len(warm.rounds) <= len(cold.rounds)


def test_bad_warm_is_refused(inst):
    cost = inst.prior[:, None] * inst.cost_m
    with pytest.raises(ValueError, match="'warm' parameter of solve_optimal"):
        solve_optimal(cost, inst.d_km, 5.0, warm="previous")
    other = make_instance(inst.network, n_records=20, n_outputs=10, n_users=5, seed=2)
    small = solve_optimal(other.prior[:, None] * other.cost_m, other.d_km, 5.0, time_limit_s=30, max_rounds=2)
    with pytest.raises(ValueError, match="'warm' parameter of solve_optimal must hold a"):
        solve_optimal(cost, inst.d_km, 5.0, warm=small)
    empty = OptimalResult(None, np.inf, -np.inf, -np.inf, np.inf, False, "time limit")
    with pytest.raises(ValueError, match="'warm' parameter"):
        solve_optimal(cost, inst.d_km, 5.0, warm=empty)


def test_solve_ladder_starts_each_eps_from_the_nearest_solved_one(inst, frozen):
    from panda.optimal import solve_ladder

    cost = inst.prior[:, None] * inst.cost_m

    def options(eps: float) -> dict:
        return {
            "seed_rows": spanner_seed_rows(inst, eps, ETA),
            "start_matrix": em_matrix(output_distances_km(inst), eps),
        }

    common = {"eta": ETA, "gap": GAP, "time_limit_s": 600.0, "method": "pdhg", "batch": 1.0, "round_steps": 256}
    out = solve_ladder(cost, inst.d_km, [5.0, 2.0, 3.5], options=options, **common)
    assert list(out) == [5.0, 2.0, 3.5]
    assert out[5.0].info["warm"] is None  # the first is cold
    assert out[2.0].info["warm"]["epsilon_from"] == 5.0
    assert out[3.5].info["warm"]["epsilon_from"] == 5.0  # nearer than 2 in log eps
    for eps, res in out.items():
        assert res.solved and audit_mechanism(res.matrix, inst.d_km, eps).passed
        assert res.lower_bound <= _optimum(inst, eps) * (1 + 1e-9)
