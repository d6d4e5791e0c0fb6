"""panda.plan against brute force on small instances: the exact optimum by scipy's linprog over a grid, every
baseline's loss at every grid point, and the monotonicity claims the planner's searches rest on."""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog

import panda
from panda.audit import adversary_error_m, audit_mechanism
from panda.cli import build_parser, cmd_plan, main
from panda.mechanisms import BASELINES
from panda.plan import epsilon_grid, monotonicity, plan

GRID = tuple(float(e) for e in np.geomspace(0.5, 40.0, 31))
#: Pair coefficients above this are left out of the brute-force LP (see _optimum_m).
BIG = 1e8


@pytest.fixture(scope="module")
def tiny(kotka):
    return panda.make_instance(kotka, n_records=14, n_outputs=6, n_users=4, seed=5, loss="straight")


def _optimum_m(inst, eps):
    """The optimum over every eps-mDP mechanism with the instance's outputs (no floor): HiGHS via linprog.

    Pair rows with ``exp(eps d) > BIG`` are left out (HiGHS refuses or mis-solves such coefficients): the LP is
    then a relaxation, and mixing its solution with the uniform mechanism at weight ``M / BIG`` satisfies them all
    (``z <= 1 <= exp(eps d) / BIG``), so the value lies at most :func:`_slack_m` below the exact optimum.
    """
    k, m = inst.cost_m.shape
    rows, cols, vals = [], [], []
    r = 0
    for x in range(k):
        for x2 in range(k):
            if x == x2:
                continue
            a = np.exp(eps * inst.d_km[x, x2])
            if a > BIG:
                continue
            for y in range(m):  # z[x, y] - a z[x2, y] <= 0
                rows += [r, r]
                cols += [x * m + y, x2 * m + y]
                vals += [1.0, -a]
                r += 1
    a_ub = sp.csr_matrix((vals, (rows, cols)), shape=(r, k * m))
    a_eq = sp.kron(sp.eye(k), np.ones((1, m))).tocsr()
    c = (inst.prior[:, None] * inst.cost_m).ravel()
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(r), A_eq=a_eq, b_eq=np.ones(k), bounds=(0, 1), method="highs")
    assert res.status == 0
    return float(res.fun)


def _slack_m(inst):
    """How far below the exact optimum :func:`_optimum_m` may lie, metres."""
    return inst.n_outputs / BIG * float(inst.cost_m.max())


@pytest.fixture(scope="module")
def optimum(tiny):
    return np.array([_optimum_m(tiny, e) for e in GRID])


def _target_between(values, i):
    """A target strictly between the values at grid points i and i + 1 (they must differ clearly)."""
    assert values[i] - values[i + 1] > 1e-3 * values[i]
    return 0.5 * (values[i] + values[i + 1])


def test_lp_bracket_holds_the_true_threshold_on_the_grid(tiny, optimum):
    # The monotonicity the certified bisection rests on, checked on the exact optima.
    assert np.all(np.diff(optimum) <= _slack_m(tiny) + 1e-7 * optimum[0])
    for i in (4, 15, 24):
        target = _target_between(optimum, i)
        for warm in (True, False):
            lp = plan(tiny, target, methods=["lp"], epsilons_per_km=GRID, warm=warm).of("lp")
            truth = int(np.flatnonzero(optimum <= target)[0])  # the smallest grid eps any mechanism meets it at
            assert lp.outcome == "met"
            assert lp.epsilon_per_km == GRID[truth] and lp.epsilon_low_per_km == GRID[truth - 1]
            # The certificate: a bound above the target at eps_low, never above the true optimum there.
            slack = _slack_m(tiny) + 1e-7 * optimum[0]  # the brute force's relaxation, and HiGHS's tolerances
            assert target < lp.lower_bound_at_low_m <= optimum[truth - 1] + slack
            assert lp.loss_m <= target and lp.loss_m >= optimum[truth] - slack


def test_lp_bracket_on_the_default_grid(tiny):
    target = 0.5 * (_optimum_m(tiny, 2.0) + _optimum_m(tiny, 2.5))
    lp = plan(tiny, target, methods=["lp"]).of("lp")
    lo, hi = lp.epsilon_low_per_km, lp.epsilon_per_km
    assert 1.0 < hi / lo <= 1.05 * (1 + 1e-12)
    assert _optimum_m(tiny, lo) > target >= _optimum_m(tiny, hi) - 1e-7 * target


@pytest.mark.parametrize("method", ["em", "laplace", "em-br"])
@pytest.mark.parametrize("loss", ["straight", "task"])
def test_baselines_answer_the_smallest_grid_point_that_meets(kotka, method, loss):
    inst = panda.make_instance(kotka, n_records=30, n_outputs=10, n_users=4, seed=2, loss=loss)
    losses = np.array([BASELINES[method](inst, e).loss_m for e in GRID])
    for i in (6, 18):
        target = float(losses[i]) * (1 + 1e-9)
        got = plan(inst, target, methods=[method], epsilons_per_km=GRID).of(method)
        truth = int(np.flatnonzero(losses <= target)[0])
        assert got.epsilon_per_km == GRID[truth] and got.loss_m == pytest.approx(losses[truth], rel=1e-12)
        if truth > 0:
            assert got.epsilon_low_per_km == GRID[truth - 1] and losses[truth - 1] > target


def _bisection(met):
    """What a binary search would answer on a grid where ``met`` says which points meet the target."""
    lo, hi = -1, len(met)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if met[mid] else (mid, hi)
    return hi


def test_a_non_monotone_loss_is_scanned_not_bisected(kotka):
    """Losses EM does not lower monotonically: the scan finds the first eps meeting the target, bisection would not."""
    inst = panda.make_instance(kotka, n_records=30, n_outputs=10, n_users=4, seed=2, loss="straight")
    d_m = inst.d_km[:, inst.outputs] * 1000.0
    med = float(np.median(d_m))
    shapes = {  # dear at middle distances: EM's loss falls then rises; dear only there: it rises then falls
        "dip": np.abs(d_m - 0.5 * med) + 0.1 * d_m,
        "bump": np.maximum(0.0, med - np.abs(d_m - 0.5 * med)),
    }
    fooled = 0
    for cost in shapes.values():
        weird = dataclasses.replace(inst, cost_m=cost, _cache={})
        ok, why = monotonicity("em", weird)
        assert not ok and "not" in why
        losses = np.array([BASELINES["em"](weird, e).loss_m for e in GRID])
        assert (np.diff(losses) > 0).any() and (np.diff(losses) < 0).any()
        for target in [*np.quantile(losses, [0.2, 0.5, 0.8]), losses[3]]:
            got = plan(weird, float(target), methods=["em"], epsilons_per_km=GRID).of("em")
            met = losses <= target
            assert got.epsilon_per_km == GRID[int(np.flatnonzero(met)[0])] and "scan" in got.search
            fooled += _bisection(met) != int(np.flatnonzero(met)[0])
    assert fooled  # at least one target where a bisection would have answered wrongly


@pytest.mark.parametrize(("loss", "metric"), [("straight", "haversine"), ("road", "road")])
def test_em_is_monotone_where_the_loss_is_the_distance(kotka, loss, metric):
    inst = panda.make_instance(kotka, n_records=30, n_outputs=10, n_users=4, seed=4, loss=loss, metric=metric)
    ok, _ = monotonicity("em", inst)
    assert ok
    fine = np.geomspace(0.1, 100.0, 200)
    losses = np.array([BASELINES["em"](inst, e).loss_m for e in fine])
    assert np.all(np.diff(losses) <= 1e-9 * losses[:-1])


def test_task_loss_breaks_em_and_laplace_monotonicity(kotka):
    inst = panda.make_instance(kotka, n_records=40, n_outputs=12, n_users=5, seed=0, loss="task")
    grid = np.geomspace(0.2, 100, 60)
    for method in ("em", "laplace"):
        assert not monotonicity(method, inst)[0]
        losses = np.array([BASELINES[method](inst, e).loss_m for e in grid])
        assert (np.diff(losses) > 1e-6 * losses[:-1]).any(), method


def test_outcomes_at_the_ends_of_the_range(tiny, optimum):
    floor_m = float((tiny.prior * tiny.cost_m.min(axis=1)).sum())  # no mechanism over these outputs does better
    out = plan(tiny, 0.5 * floor_m, methods=["em", "lp"], epsilons_per_km=GRID)
    assert out.of("em").outcome == "not met in range" and np.isnan(out.of("em").epsilon_per_km)
    lp = out.of("lp")
    assert lp.outcome == "impossible in range" and lp.evaluations[-1].lower_bound_m > 0.5 * floor_m
    easy = plan(tiny, 2 * optimum[0], methods=["em", "laplace", "lp"], epsilons_per_km=GRID)
    for m in easy.mechanisms:
        assert m.outcome == "met at the smallest eps" and m.epsilon_per_km == GRID[0]


def test_reports_a_day_and_the_attacker_floor(tiny, optimum):
    target = _target_between(optimum, 15)
    out = plan(tiny, target, methods=["em", "lp"], reports_per_day=288, attacker_floor_m=0.0)
    for m in out.mechanisms:
        assert m.epsilon_day_per_km == pytest.approx(288 * m.epsilon_per_km, rel=1e-12)
        assert m.day.ks == (1, 288) and m.day.epsilon_per_km == m.epsilon_per_km
        mat = BASELINES["em"](tiny, m.epsilon_per_km).matrix if m.method == "em" else None
        if mat is not None:
            assert m.adversary_error_m == pytest.approx(adversary_error_m(mat, tiny.prior, tiny.d_km * 1000.0))
        assert m.risk.mean_error_m == pytest.approx(m.adversary_error_m, rel=1e-12)
        assert m.meets_attacker_floor is True
    em = out.of("em")
    high = plan(tiny, target, methods=["em"], attacker_floor_m=em.adversary_error_m * 1.01).of("em")
    assert high.meets_attacker_floor is False and high.epsilon_per_km == em.epsilon_per_km


def test_each_place_s_report_error_and_the_reachable_floor(tiny, optimum):
    """place_loss_m is each row's expected cost of the planned matrix (its prior mean the plan's loss);
    reachable_m is the prior mean of each place's cheapest output, and no plan's loss lies below it."""
    out = plan(tiny, _target_between(optimum, 15), methods=["em", "laplace", "lp"], epsilons_per_km=GRID)
    reachable = sum(tiny.prior[x] * min(tiny.cost_m[x]) for x in range(tiny.n_records))
    assert out.reachable_m == pytest.approx(reachable, rel=1e-12)
    for m in out.mechanisms:
        assert m.place_loss_m.shape == (tiny.n_records,)
        assert float(tiny.prior @ m.place_loss_m) == pytest.approx(m.loss_m, rel=1e-9)
        assert m.loss_m >= out.reachable_m - 1e-9
        if m.method != "lp":  # rebuilt from scratch: the same deterministic matrix
            mat = BASELINES[m.method](tiny, m.epsilon_per_km).matrix
            rows = [sum(mat[x, y] * tiny.cost_m[x, y] for y in range(mat.shape[1])) for x in range(mat.shape[0])]
            np.testing.assert_allclose(m.place_loss_m, rows, rtol=1e-9)
            exact = audit_mechanism(mat, tiny.d_km, m.epsilon_per_km)
            assert m.audit_passed == exact.passed and m.audit_violation_rate == exact.violation_rate
        assert m.audit_passed is True  # the three are eps-mDP by construction (the LP's matrix repaired exactly)
    assert "place_loss_m" not in out.of("em").summary()
    json.dumps(out.summary())  # plain data, no arrays
    unmet = plan(tiny, 0.5 * out.reachable_m, methods=["em"], epsilons_per_km=GRID).of("em")
    assert unmet.place_loss_m is None and unmet.risk is None and unmet.audit_passed is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target_loss_m": -1.0}, "target_loss_m"),
        ({"target_loss_m": float("nan")}, "target_loss_m"),
        ({"reports_per_day": 0}, "reports_per_day"),
        ({"reports_per_day": True}, "reports_per_day"),
        ({"reports_per_day": 2.0}, "reports_per_day"),
        ({"methods": ["panda-e"]}, "not monotone"),
        ({"methods": ["nope"]}, "methods"),
        ({"methods": []}, "methods"),
        ({"epsilon_range_per_km": (5.0, 1.0)}, "low < high"),
        ({"tolerance": 1.0}, "tolerance"),
        ({"epsilons_per_km": []}, "epsilons_per_km"),
        ({"epsilons_per_km": [0.0, 1.0]}, "epsilons_per_km"),
        ({"lp_gaps": [0.0, 0.1]}, "lp_gaps"),
        ({"attacker_floor_m": -5.0}, "attacker_floor_m"),
    ],
)
def test_bad_input_is_a_clear_value_error(tiny, kwargs, match):
    args = {"target_loss_m": 300.0} | kwargs
    target = args.pop("target_loss_m")
    with pytest.raises(ValueError, match=match):
        plan(tiny, target, **args)


def test_grid_neighbours_within_the_tolerance():
    for lo, hi, tol in ((0.1, 100.0, 1.05), (1.0, 1.04, 1.05), (0.5, 50.0, 1.5)):
        g = np.array(epsilon_grid(lo, hi, tol))
        assert g[0] == pytest.approx(lo) and g[-1] == pytest.approx(hi)
        assert np.all(g[1:] / g[:-1] <= tol * (1 + 1e-12))
        if len(g) > 2:  # no more points than needed: one fewer would put neighbours further apart than tol
            assert (hi / lo) ** (1 / (len(g) - 2)) > tol


def test_cli_plan_prints_and_writes_the_plan(tmp_path, tiny, optimum):
    target = _target_between(optimum, 15)
    path = tmp_path / "plan.json"
    argv = ["plan", "--city", "kotka", "--records", "14", "--outputs", "6", "--users", "4", "--seed", "5"]
    argv += ["--loss", "straight", "--target", repr(float(target)), "--methods", "em,lp", "--reports-per-day", "24"]
    buf = io.StringIO()
    assert cmd_plan(build_parser().parse_args([*argv, "--json", str(path)]), out=buf) == 0
    text = buf.getvalue()
    assert "certified bracket" in text and "after 24 reports" in text
    data = json.loads(path.read_text())
    direct = plan(tiny, target, methods=["em", "lp"], reports_per_day=24)
    for row, m in zip(data["plan"]["mechanisms"], direct.mechanisms, strict=True):
        assert row["method"] == m.method and row["epsilon_per_km"] == m.epsilon_per_km
        assert row["epsilon_day_per_km"] == pytest.approx(24 * m.epsilon_per_km)


def test_cli_plan_bad_target_exits_2(capsys):
    argv = ["plan", "--city", "kotka", "--records", "14", "--outputs", "6", "--users", "4", "--target", "-3"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "target_loss_m" in err and "Traceback" not in err
