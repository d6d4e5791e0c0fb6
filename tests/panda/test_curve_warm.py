"""The optimal LP's curve solved warm (``tradeoff_curve(warm_lp=True)``): certified like the cold curve, fewer steps.

Every warm point must be certified exactly as a cold one (the exact audit over every pair passes, the gap
against every mechanism at most the target plus the floor's cost), its loss within the gap of the cold
curve's, and the warm curve must take fewer PDHG steps in all. The clock is frozen as in
tests/panda/test_optimal_pinned.py (every certificate budget passes), so the steps depend on the start only, not
on the machine's load.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import panda.mechanisms.lp_full as lp_full
from panda import make_instance
from panda.audit import audit_mechanism
from panda.compare import build_warm
from panda.config import PandaConfig
from panda.mechanisms import build_lp
from panda.mechanisms.lp_full import build_lp_warm
from panda.optimal import OptimalResult
from panda.tradeoff import DEFAULT_EPSILONS, _order, tradeoff_curve

GAP = 0.005  # build_lp's default: the curve's points stop at it (the floored LP's gap)
EPS = (3.5, 5.0, 10.0)


@pytest.fixture(scope="module")
def inst(kotka):
    """45 records, 30 outputs on Kotka (every pair constrained at these eps: the dense, PDHG case)."""
    return make_instance(kotka, n_records=45, n_outputs=30, n_users=10, seed=1)


@pytest.fixture
def frozen(monkeypatch):
    monkeypatch.setattr(time, "perf_counter", lambda: 1000.0)


@pytest.fixture
def recorded(monkeypatch):
    """Every certified build of a curve: (eps, mechanism, solver result), in the order built."""
    seen: list[tuple[float, object, OptimalResult]] = []
    real = lp_full._build_certified

    def record(*args, **kwargs):
        mech, res = real(*args, **kwargs)
        seen.append((mech.epsilon_per_km, mech, res))
        return mech, res

    monkeypatch.setattr(lp_full, "_build_certified", record)
    return seen


def _steps(res: OptimalResult) -> int:
    return sum(int(r.get("iterations", 0)) for r in res.rounds)


def test_warm_curve_is_certified_close_to_cold_and_takes_fewer_steps(inst, frozen, recorded):
    cold = tradeoff_curve(inst, ("lp",), EPS, lp_time_limit_s=600.0, warm_lp=False)
    cold_builds = list(recorded)
    recorded.clear()
    warm = tradeoff_curve(inst, ("lp",), EPS, lp_time_limit_s=600.0, warm_lp=True)
    warm_builds = list(recorded)
    # The cold curve is solved from the ends inwards, as before; the warm one from the middle outwards,
    # each point from its solved neighbour (the first cold).
    assert [e for e, _, _ in cold_builds] == [10.0, 3.5, 5.0]
    assert [e for e, _, _ in warm_builds] == [5.0, 3.5, 10.0]
    assert [(m.details.get("warm") or {}).get("epsilon_from") for _, m, _ in warm_builds] == [None, 5.0, 5.0]
    assert all("warm" not in m.details for _, m, _ in cold_builds)
    assert [r["epsilon_per_km"] for r in warm] == [r["epsilon_per_km"] for r in cold] == list(EPS)
    by_eps = {e: m for e, m, _ in warm_builds}
    for rc, rw in zip(cold, warm, strict=True):
        eps = rw["epsilon_per_km"]
        mech = by_eps[eps]
        for row in (rc, rw):
            assert row["outcome"] == "solved" and row["audit_passed"] is True, row["status"]
        # The certificate: the matrix audited exactly over every pair at this eps, the gap at the target
        # (the floored LP's; against every mechanism, the floor's cost on top).
        assert mech.details["audit_passed"] and audit_mechanism(mech.matrix, inst.d_km, eps).passed
        assert mech.details["gap_floored_lp"] <= GAP
        slack = mech.details["cost_bound_m"]
        assert mech.details["lower_bound_m"] <= rw["loss_m"] <= mech.details["lower_bound_m"] / (1 - GAP) + slack
        # Within the gap of the cold curve's loss (both are within it of the same optimum).
        assert abs(rw["loss_m"] - rc["loss_m"]) <= GAP * max(rw["loss_m"], rc["loss_m"]) + slack, eps
    steps_cold = sum(_steps(res) for _, _, res in cold_builds)
    steps_warm = sum(_steps(res) for _, _, res in warm_builds)
    assert 0 < steps_warm < steps_cold, (steps_warm, steps_cold)


def test_the_warm_state_is_returned_never_kept_in_details(inst, frozen):
    mech, state = build_lp_warm(inst, 10.0, time_limit_s=600.0)
    assert isinstance(state, OptimalResult) and state.matrix is not None
    assert not any(isinstance(v, OptimalResult) for v in mech.details.values())
    assert "warm" not in mech.details and "pdhg_state" not in mech.details
    # build_lp itself (a cold solve): the same mechanism as build_lp_warm's.
    plain = build_lp(inst, 10.0, time_limit_s=600.0)
    np.testing.assert_array_equal(plain.matrix, mech.matrix)
    assert plain.details.keys() == mech.details.keys()
    # compare's builder, warm: the start's facts in details, the new state returned; no state for other methods.
    warm_mech, warm_state = build_warm("lp", inst, PandaConfig(epsilon_per_km=5.0), 0, 600.0, warm=state)
    assert warm_mech.details["warm"]["epsilon_from"] == 10.0 and warm_mech.details["warm"]["rows_carried"] > 0
    assert isinstance(warm_state, OptimalResult) and warm_state.info["warm"]["epsilon_from"] == 10.0
    assert warm_mech.details["audit_passed"]
    assert build_warm("em", inst, PandaConfig(epsilon_per_km=5.0), 0, 600.0)[1] is None


def test_warm_needs_the_certified_method(inst):
    with pytest.raises(ValueError, match="'warm' parameter of build_lp"):
        build_lp(inst, 5.0, method="exact", warm=object())  # type: ignore[arg-type]


def test_order_other_methods_unchanged():
    grid = (0.5, 1.0, 5.0, 50.0)
    assert _order("lp", grid) == [50.0, 0.5, 5.0, 1.0]
    assert _order("lp", grid, warm_lp=True) == [5.0, 1.0, 50.0, 0.5]
    assert _order("lp", DEFAULT_EPSILONS, warm_lp=True) == [5.0, 3.5, 10.0, 2.0, 20.0, 1.0, 50.0, 0.5]
    for method in ("em", "panda-e", "lp-ca"):
        assert _order(method, grid, warm_lp=True) == _order(method, grid)
