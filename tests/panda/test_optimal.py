"""The certified optimal eps-mDP LP (panda.optimal, build_lp's default method) on small Kotka instances.

Every promise of the certificate is checked against an independent exact solve: the lower bound
never exceeds the optimum, the returned matrix passes the exact audit and costs at most the
stated gap above the bound, and an unsolved run says so with both bounds.
"""

from __future__ import annotations

import numpy as np
import pytest

from panda import make_instance, optimal
from panda.audit import audit_mechanism
from panda.lp import solve_mdp_lp
from panda.mechanisms import build_lp, mdp_pairs
from panda.optimal import dual_bound, exact_repair, solve_optimal

EPS = 5.0


@pytest.fixture(scope="module")
def inst(kotka):
    """45 records, 30 outputs: Kotka is ~2 km across, so every pair is constrained at 5/km."""
    return make_instance(kotka, n_records=45, n_outputs=30, n_users=10, seed=1)


@pytest.fixture(scope="module")
def exact_optimum(inst):
    """The floored LP with every pair row at once (HiGHS dual simplex): the reference optimum."""
    cost = inst.prior[:, None] * inst.cost_m
    pi, pj, b, _ = mdp_pairs(inst.d_km, EPS, eta=1e-6)
    res = solve_mdp_lp(cost, pi, pj, b, eta=1e-6, solver="simplex", time_limit_s=120)
    assert res.success, res.lp.message
    return res.lp.objective


@pytest.fixture(scope="module")
def certified(inst):
    return build_lp(inst, EPS, gap=0.005, time_limit_s=120)


def test_certified_result_brackets_the_exact_optimum(inst, certified, exact_optimum):
    det = certified.details
    assert certified.solved and certified.status == "solved"
    # "solved": the floored LP (the one exact_optimum solves) reached the gap target.
    assert det["method"] == "certified" and det["gap_floored_lp"] <= 0.005
    floored, upper = det["lower_bound_floored_lp_m"], det["upper_bound_m"]
    assert floored <= exact_optimum * (1 + 1e-6)  # a proven bound never exceeds the optimum
    assert upper >= exact_optimum * (1 - 1e-6)  # nothing feasible beats it (HiGHS tolerances aside)
    assert upper - exact_optimum <= 0.005 * upper + 1e-6  # within the stated gap
    assert certified.loss_m == pytest.approx(upper, rel=1e-12)
    # The bound on every mechanism: below the floored one, by less than the floor's cost bound.
    lower = det["lower_bound_m"]
    assert det["lower_bound_no_floor_m"] <= lower <= floored
    assert lower >= floored - det["cost_bound_m"]
    assert det["gap"] == pytest.approx((upper - lower) / upper, rel=1e-12) and det["gap"] >= det["gap_floored_lp"]


def test_certified_matrix_passes_the_exact_audit(inst, certified):
    p = certified.matrix
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (p >= 1e-6 * (1 - 1e-9)).all()  # the floor survives the repair
    audit = audit_mechanism(p, inst.d_km, EPS)
    assert audit.passed and certified.details["audit_passed"]
    assert audit.n_pairs_checked == inst.n_records * (inst.n_records - 1) // 2


def test_gap_zero_reaches_the_exact_optimum(inst, exact_optimum):
    res = build_lp(inst, EPS, gap=0.0, time_limit_s=120)
    assert res.solved
    assert res.details["stop_reason"] in ("no violated row", "gap reached")
    assert res.loss_m == pytest.approx(exact_optimum, rel=1e-6)
    det = res.details
    assert det["lower_bound_floored_lp_m"] == pytest.approx(exact_optimum, rel=1e-6)
    # Every mechanism (no floor) may go below the floored optimum, by at most the floor's cost.
    assert exact_optimum - det["cost_bound_m"] <= det["lower_bound_m"] <= exact_optimum * (1 + 1e-6)


def test_every_round_bound_is_valid(inst, exact_optimum):
    """The bound of every round (early, loose relaxations too) stays below the optimum."""
    cost = inst.prior[:, None] * inst.cost_m
    res = solve_optimal(cost, inst.d_km, EPS, gap=0.0, time_limit_s=120, seed_sources=inst.outputs)
    lowers = [r["lower"] for r in res.rounds if "lower" in r]
    assert len(lowers) >= 3
    assert max(lowers) <= exact_optimum * (1 + 1e-6)
    assert lowers[0] < 0.9 * exact_optimum  # the first relaxation is loose: the test has teeth


def test_tiny_time_limit_is_an_honest_unsolved_status(inst, exact_optimum):
    res = build_lp(inst, EPS, time_limit_s=0.01)
    assert not res.solved and res.status.startswith("unsolved")
    det = res.details
    if res.matrix is not None:  # one round finished: both bounds, the gap, an audited matrix
        assert "gap" in res.status and "bound" in res.status
        assert det["lower_bound_m"] <= exact_optimum * (1 + 1e-6) <= det["upper_bound_m"] * (1 + 2e-6)
        assert audit_mechanism(res.matrix, inst.d_km, EPS).passed
    else:  # nothing finished: no mechanism, and the status says why
        assert "time limit" in res.status


def test_exact_repair_always_returns_a_feasible_matrix(inst):
    """Random matrices (far from feasible) come out exactly eps-mDP and row-stochastic."""
    rng = np.random.default_rng(0)
    exponent = EPS * inst.d_km
    for _ in range(3):
        z = rng.random((inst.n_records, inst.n_outputs)) ** 4
        out, info = exact_repair(z, exponent, eta=1e-6, cost=inst.cost_m)
        assert info["max_log_excess_before"] > 0.1
        np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        assert audit_mechanism(out, inst.d_km, EPS).passed


def test_exact_repair_from_sources_is_feasible(inst):
    """The sources candidate (envelope of masked entries, settled, drained) is exactly feasible too."""
    rng = np.random.default_rng(2)
    exponent = EPS * inst.d_km
    for share in (0.05, 0.3):
        z = rng.random((inst.n_records, inst.n_outputs)) ** 4
        mask = rng.random(z.shape) < share
        out, info = exact_repair(z, exponent, eta=1e-6, cost=inst.cost_m, sources=mask)
        assert "objective" in info["sources"]
        np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        assert (out >= 1e-6 * (1 - 1e-9)).all()
        assert audit_mechanism(out, inst.d_km, EPS).passed
    with pytest.raises(ValueError, match="'sources' parameter of exact_repair"):
        exact_repair(z, exponent, eta=1e-6, sources=mask[:, :-1])


def test_exact_repair_drains_the_costliest_entries_first(inst, monkeypatch):
    """With a cost, a row's excess leaves its costliest movable entries first: never dearer than pro rata."""
    rng = np.random.default_rng(3)
    exponent = EPS * inst.d_km
    cost = inst.prior[:, None] * inst.cost_m
    for _ in range(3):
        z = rng.random((inst.n_records, inst.n_outputs)) ** 4
        mask = rng.random(z.shape) < 0.1
        runs = {}
        for by_cost in (False, True):
            monkeypatch.setattr(optimal, "REPAIR_BY_COST", by_cost)
            out, info = exact_repair(z, exponent, eta=1e-6, cost=cost, sources=mask)
            assert audit_mechanism(out, inst.d_km, EPS).passed
            runs[by_cost] = info
        for kind in ("up", "sources"):
            assert runs[True][kind]["objective"] <= runs[False][kind]["objective"] * (1 + 1e-12)
        assert min(runs[True][k]["objective"] for k in ("up", "sources")) < min(
            runs[False][k]["objective"] for k in ("up", "sources")
        )


@pytest.mark.parametrize("eps", [EPS, 40.0])
def test_near_pairs_give_the_same_repair_and_separation(kotka, eps, monkeypatch):
    """Restricting the repair and the separation to pairs within the floor radius changes nothing.

    At 40/km many Kotka pairs lie beyond the floor radius (the case the restriction is for); at
    5/km none does. Compared against the dense computation on random and floor-heavy matrices.
    """
    from panda.optimal import _Near, _uniform_mix_weight, separate_right

    inst = make_instance(kotka, n_records=60, n_outputs=25, n_users=10, seed=3)
    eta = 1e-6
    exponent = eps * inst.d_km
    near = _Near.build(exponent, np.log(2.0 / eta), inst.n_outputs, budget=2_000)  # several chunks
    assert len(near.chunks) > 1
    far = exponent >= np.log(1 / eta)
    assert far.any() == (eps > EPS)
    a_full = np.where(far, np.inf, np.exp(exponent))
    np.fill_diagonal(a_full, np.inf)
    rng = np.random.default_rng(4)
    for power in (4, 40):  # power 40: most entries near the floor
        z = np.maximum(rng.random((inst.n_records, inst.n_outputs)) ** power, eta)
        z /= z.sum(axis=1, keepdims=True)
        mask = rng.random(z.shape) < 0.1
        dense, dense_info = exact_repair(z, exponent, eta=eta, cost=inst.cost_m, sources=mask)
        with monkeypatch.context() as patch:  # the near lists serve every step: no dense min-plus
            patch.setattr("panda.optimal._min_plus", lambda *a, **k: pytest.fail("dense min-plus"))
            fast, fast_info = exact_repair(z, exponent, eta=eta, cost=inst.cost_m, sources=mask, near=near)
        np.testing.assert_allclose(fast, dense, rtol=1e-12, atol=0)
        assert fast_info["kind"] == dense_info["kind"]
        assert audit_mechanism(fast, inst.d_km, eps).passed
        zf = np.maximum(z, eta)
        theta = _uniform_mix_weight(zf, exponent)
        assert _uniform_mix_weight(zf, exponent, near=near) == pytest.approx(theta, rel=1e-12)
        got = separate_right(zf, a_full, near=near)
        want = separate_right(zf, a_full)
        assert got[0].size > 0
        for g, w in zip(got, want, strict=True):  # in the same order, too
            np.testing.assert_allclose(g, w, rtol=1e-12)


def test_first_round_upper_bound_comes_from_the_sources(inst):
    """After one loose relaxation the sources' envelope is far cheaper than repairing every entry.

    Measured: Kotka 414 m against 559 m here; Neubrandenburg K = 500 after 30 s, 332 m against
    1,802 m (docs/benchmarks.md).
    """
    cost = inst.prior[:, None] * inst.cost_m
    res = solve_optimal(cost, inst.d_km, EPS, gap=0.0, max_rounds=1)
    rep = res.info["repair"]
    assert rep["kind"] == "sources"
    assert rep["sources"]["objective"] < 0.8 * rep["up"]["objective"]
    assert res.upper_bound == pytest.approx(rep["sources"]["objective"], rel=1e-12)
    assert audit_mechanism(res.matrix, inst.d_km, EPS).passed


def test_spanner_start_certifies_the_optimum_by_pdhg(inst, exact_optimum):
    """start="spanner": the spanner's rows, restarted PDHG rounds, the same certificate."""
    from panda.mechanisms.lp_full import SPANNER_START_REACH, spanner_seed_rows

    s, x, y = spanner_seed_rows(inst, EPS, 1e-6)
    radius = np.log(1e6) / EPS
    assert s.size > 0 and (s != x).all()
    assert (inst.d_km[s, x] < radius).all() and (inst.cost_m[s, y] <= SPANNER_START_REACH * radius * 1000).all()
    res = build_lp(inst, EPS, gap=0.005, time_limit_s=120, start="spanner")
    det = res.details
    assert res.solved and det["start"] == "spanner" and det["solver"].startswith("restarted PDHG")
    assert det["lower_bound_m"] <= exact_optimum * (1 + 1e-6) <= det["upper_bound_m"] * (1 + 1e-6)
    assert det["upper_bound_m"] - det["lower_bound_floored_lp_m"] <= 0.005 * det["upper_bound_m"]
    assert audit_mechanism(res.matrix, inst.d_km, EPS).passed
    with pytest.raises(ValueError, match="'start' parameter of build_lp"):
        build_lp(inst, EPS, start="nearest")


def test_spanner_start_out_of_time_still_returns_an_audited_mechanism(inst, exact_optimum):
    """A budget of 1 ms: one short PDHG round, its point repaired exactly, both bounds stated; its pair multipliers
    are PDHG's own (past the deadline and its grace, no small LP starts), with time every output gets its LP's."""
    res = build_lp(inst, EPS, time_limit_s=1e-3, start="spanner")
    det = res.details
    assert res.matrix is not None and not res.solved and res.status.startswith("unsolved")
    assert [r.get("multiplier_outputs") for r in det["row_generation"]["rounds"]] == [0]
    timed = build_lp(inst, EPS, time_limit_s=60, start="spanner").details["row_generation"]["rounds"]
    assert {r["multiplier_outputs"] for r in timed if "multiplier_outputs" in r} == {inst.n_outputs}
    assert det["lower_bound_m"] <= exact_optimum * (1 + 1e-6) <= det["upper_bound_m"] * (1 + 2e-6)
    # Never below the mechanism without privacy (PDHG's first dual points can be far below 0).
    no_privacy = (inst.prior[:, None] * inst.cost_m).min(axis=1).sum()
    assert det["lower_bound_m"] >= no_privacy * (1 - 1e-9) > 0
    assert audit_mechanism(res.matrix, inst.d_km, EPS).passed


def test_pdhg_rounds_grow_with_the_records_up_to_the_cap(inst, monkeypatch):
    """A round's default steps: 2 K in multiples of 64, at least PDHG_ROUND_STEPS and at most PDHG_ROUND_STEPS_MAX
    (measured; see the docstring); without the cap, 2 K at every size (the rule before it)."""
    sizes = (60, 500, 600, 640, 641, 1000, 5000, 10_000)
    assert (optimal.PDHG_ROUND_STEPS, optimal.PDHG_ROUND_STEPS_MAX) == (1024, 1280)
    assert [optimal.pdhg_round_steps(k) for k in sizes] == [1024, 1024, 1216, 1280, 1280, 1280, 1280, 1280]
    monkeypatch.setattr(optimal, "PDHG_ROUND_STEPS_MAX", None)
    assert [optimal.pdhg_round_steps(k) for k in sizes] == [1024, 1024, 1216, 1280, 1344, 2048, 10_048, 20_032]
    monkeypatch.undo()
    cost = inst.prior[:, None] * inst.cost_m
    res = solve_optimal(cost, inst.d_km, EPS, method="pdhg", gap=0.0, time_limit_s=60.0, max_rounds=1)
    assert res.rounds[0]["iterations"] == optimal.pdhg_round_steps(cost.shape[0]) == optimal.PDHG_ROUND_STEPS


def test_pdhg_rounds_bound_the_exact_optimum_every_round(inst, exact_optimum):
    """solve_optimal(method="pdhg"): every round's bounds are proven; bad PDHG parameters are refused."""
    from panda.mechanisms._common import output_distances_km
    from panda.mechanisms.em import em_matrix
    from panda.mechanisms.lp_full import spanner_seed_rows

    cost = inst.prior[:, None] * inst.cost_m
    # Rounds end by steps, so 8 rounds give the same bounds however busy the machine (a 6 s limit
    # left a single round on a loaded one).
    res = solve_optimal(
        cost, inst.d_km, EPS, method="pdhg", gap=0.0, time_limit_s=120.0, round_steps=1024, batch=1.0,
        seed_rows=spanner_seed_rows(inst, EPS, 1e-6), start_matrix=em_matrix(output_distances_km(inst), EPS),
        max_rounds=8,
    )  # fmt: skip
    assert res.reason == "max rounds" and len(res.rounds) == 8
    for entry in res.rounds:
        assert entry["status"] == "pdhg" and entry["iterations"] >= 64
        assert entry["lower"] <= exact_optimum * (1 + 1e-6) <= entry["upper"] * (1 + 1e-6)
    assert sum(e.get("rows_added", 0) for e in res.rounds) > 0  # violated rows were added
    # The first round has no certified matrix yet (gap inf); from the first finite gap on, the best
    # bounds so far never get worse, and later rounds improve on it.
    finite = [e["gap"] for e in res.rounds if np.isfinite(e["gap"])]
    assert len(finite) >= 2 and all(b <= a for a, b in zip(finite, finite[1:], strict=False))
    assert res.gap <= finite[-1] and res.gap < finite[0]
    assert res.gap < 0.03  # 9.8 % after the first certified round, 1.7 % after the eighth
    assert audit_mechanism(res.matrix, inst.d_km, EPS).passed
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="'round_steps' parameter of solve_optimal"):
            solve_optimal(cost, inst.d_km, EPS, method="pdhg", round_steps=bad)
    with pytest.raises(ValueError, match="'start_matrix' parameter of solve_optimal"):
        solve_optimal(cost, inst.d_km, EPS, method="pdhg", start_matrix=np.ones((2, 2)))


def test_pdhg_rounds_do_not_depend_on_the_clock(inst, monkeypatch):
    """Rounds end by steps: two runs stopped by max_rounds take the same steps, rows and bounds.

    The certificates between rounds are budgeted by time (a share of the rounds' seconds), so which
    rounds get one can differ between runs (CI once certified a different round: bounds 166.46
    against 166.39 m). With that budget at zero only the last round is certified, by steps too.
    """
    monkeypatch.setattr(optimal, "CERTIFICATE_SHARE", -1.0)
    cost = inst.prior[:, None] * inst.cost_m
    runs = [
        solve_optimal(cost, inst.d_km, EPS, method="pdhg", gap=0.0, time_limit_s=120, round_steps=256, max_rounds=4)
        for _ in range(2)
    ]
    assert all(r.reason == "max rounds" and len(r.rounds) == 4 for r in runs)
    first, second = ([(e["iterations"], e["rows"], e.get("rows_added")) for e in r.rounds] for r in runs)
    assert first == second and all(it == 256 for it, _, _ in first)
    assert runs[0].lower_bound == runs[1].lower_bound and runs[0].upper_bound == runs[1].upper_bound
    assert np.array_equal(runs[0].matrix, runs[1].matrix)


def test_pdhg_rounds_drop_slack_rows_and_keep_the_certificate(inst, exact_optimum, monkeypatch):
    """Rows with multiplier 0 and a large slack leave PDHG's LP: fewer rows, the same proven bounds."""
    from panda.mechanisms.lp_full import spanner_seed_rows

    monkeypatch.setattr(optimal, "CERTIFICATE_SHARE", -1.0)  # clock-free: only the last round certified
    cost = inst.prior[:, None] * inst.cost_m
    seed_rows = spanner_seed_rows(inst, EPS, 1e-6)
    default = optimal.PDHG_DROP_SLACK

    def run(drop: float | None) -> object:
        monkeypatch.setattr(optimal, "PDHG_DROP_SLACK", drop)
        return solve_optimal(
            cost, inst.d_km, EPS, method="pdhg", gap=0.0, time_limit_s=120, round_steps=256, max_rounds=6,
            seed_rows=seed_rows, batch=1.0,
        )  # fmt: skip

    kept, dropped = run(None), run(default)
    assert all("rows_dropped" not in e for e in kept.rounds)
    assert sum(e["rows_dropped"] for e in dropped.rounds[:-1]) > 0  # the last round separates nothing
    assert dropped.rounds[-1]["rows"] < kept.rounds[-1]["rows"]
    for res in (kept, dropped):
        assert res.reason == "max rounds" and len(res.rounds) == 6
        assert res.lower_bound <= exact_optimum * (1 + 1e-6) <= res.upper_bound * (1 + 1e-6)
        assert audit_mechanism(res.matrix, inst.d_km, EPS).passed


def test_pdhg_certifies_the_rounds_best_row_sum_multipliers(inst, monkeypatch):
    """The pair multipliers of a round are computed for the u whose own PDHG bound was the best.

    Along a round u's value rises and falls again, so the end point is not always the best one
    (docs/benchmarks.md, eighth pass). Every check's dual point and the u given to
    best_pair_multipliers are recorded; each certificate's u must be the best checked one of its round.
    """
    monkeypatch.setattr(optimal, "CERTIFICATE_SHARE", 100.0)  # certify every round
    monkeypatch.setattr(optimal, "_BOUND_EVERY_STEPS", 64)  # 16 checks a round
    cost = inst.prior[:, None] * inst.cost_m
    k = cost.shape[0]
    checks, certified = [], []
    real_pdhg, real_pairs = optimal.pdhg, optimal.best_pair_multipliers

    def recording_pdhg(*args, **kwargs):
        on_check, rows = kwargs["on_check"], kwargs["on_check"].__defaults__[0]
        checks.append([])

        def check(x, y):
            checks[-1].append((dual_bound(cost, y[:k], y[k:], *rows, eta=1e-6)[0], y[:k].copy()))
            return on_check(x, y)

        return real_pdhg(*args, **{**kwargs, "on_check": check})

    def recording_pairs(cost_, u, *args, **kwargs):
        certified.append((len(checks) - 1, np.array(u)))
        return real_pairs(cost_, u, *args, **kwargs)

    monkeypatch.setattr(optimal, "pdhg", recording_pdhg)
    monkeypatch.setattr(optimal, "best_pair_multipliers", recording_pairs)
    solve_optimal(cost, inst.d_km, EPS, method="pdhg", gap=0.0, time_limit_s=120, round_steps=1024, max_rounds=4)
    assert len(certified) == 3  # rounds 2-4 (the first round is never certified)
    peaks = []
    for round_index, u in certified:
        own = [value for value, _ in checks[round_index]]
        assert len(own) == 16
        best = max(range(len(own)), key=lambda i: (own[i], i))
        np.testing.assert_array_equal(u, checks[round_index][best][1])
        peaks.append(best)
    assert min(peaks) < 15  # a round whose end point was not its best (all three, when written)


def test_dual_bound_is_weak_duality(inst, exact_optimum):
    """Any multipliers give a bound below the optimum; u = 0 gives eta * sum of positive costs."""
    cost = inst.prior[:, None] * inst.cost_m
    k, m = cost.shape
    none = np.zeros(0, dtype=np.int64)
    lb, lb0 = dual_bound(cost, np.zeros(k), np.zeros(0), none, none, none, np.zeros(0), eta=1e-6)
    assert lb == pytest.approx(1e-6 * cost.sum()) and lb0 == 0.0
    rng = np.random.default_rng(1)
    for _ in range(5):
        u = rng.normal(cost.sum(axis=1) / m, 1.0)
        assert dual_bound(cost, u, np.zeros(0), none, none, none, np.zeros(0), eta=1e-6)[0] <= exact_optimum


def test_seed_rows_warm_start_keeps_the_certificate(inst, exact_optimum):
    """The binding rows of one solve, given as seed_rows, bring the next to the optimum at once."""
    cost = inst.prior[:, None] * inst.cost_m
    first = solve_optimal(cost, inst.d_km, EPS, gap=0.0, time_limit_s=120, seed_sources=inst.outputs)
    s, x, y, lam = first.info["last_pair_rows"]
    assert (lam >= 0).all() and s.size == x.size == y.size == lam.size
    keep = lam > 1e-12
    # Duplicates, s == x and out-of-LP rows are dropped; the first LP holds the rest.
    rows = (np.r_[s[keep], s[keep], 0], np.r_[x[keep], x[keep], 0], np.r_[y[keep], y[keep], 0])
    again = solve_optimal(cost, inst.d_km, EPS, gap=0.0, time_limit_s=120, seed_rows=rows)
    assert again.rounds[0]["rows"] == inst.n_records + int(keep.sum())
    assert len(again.rounds) < len(first.rounds)
    assert again.solved and again.upper_bound == pytest.approx(exact_optimum, rel=1e-6)
    assert again.lower_bound <= exact_optimum * (1 + 1e-6)
    assert audit_mechanism(again.matrix, inst.d_km, EPS).passed
    with pytest.raises(ValueError, match="'seed_rows' parameter of solve_optimal"):
        solve_optimal(cost, inst.d_km, EPS, seed_rows=(s, x))
    with pytest.raises(ValueError, match="'seed_rows' parameter of solve_optimal"):
        solve_optimal(cost, inst.d_km, EPS, seed_rows=(s, x + inst.n_records, y))


def test_drop_share_deletes_slack_rows_and_keeps_the_certificate(inst, exact_optimum):
    """Deleting slack rows keeps the LP small; the run still ends at the optimum, bounds proven."""
    cost = inst.prior[:, None] * inst.cost_m
    res = solve_optimal(cost, inst.d_km, EPS, gap=0.0, time_limit_s=120, seed_sources=inst.outputs, drop_share=0.3)
    assert sum(r.get("rows_dropped", 0) for r in res.rounds) > 0  # the option did something
    assert res.solved and res.upper_bound == pytest.approx(exact_optimum, rel=1e-6)
    assert max(r["lower"] for r in res.rounds if "lower" in r) <= exact_optimum * (1 + 1e-6)
    assert audit_mechanism(res.matrix, inst.d_km, EPS).passed
    with pytest.raises(ValueError, match="'drop_share' parameter of solve_optimal"):
        solve_optimal(cost, inst.d_km, EPS, drop_share=1.0)


def test_a_simplex_breakdown_falls_back_to_interior_point(inst, exact_optimum, monkeypatch):
    """When simplex fails twice in a round (Rome K = 5000: 'Not Set'), that round runs by interior point.

    The breakdown is real HiGHS: every simplex model gets an iteration limit of 1, so it stops without
    an optimum; the run must still end at the optimum, its rows solved by interior point with crossover.
    """
    import panda.optimal as optimal

    real = optimal.build_highs

    def broken_simplex(*args, **kwargs):
        h = real(*args, **kwargs)
        if kwargs.get("solver") == "simplex":
            h.setOptionValue("simplex_iteration_limit", 1)
        return h

    monkeypatch.setattr(optimal, "build_highs", broken_simplex)
    cost = inst.prior[:, None] * inst.cost_m
    res = solve_optimal(cost, inst.d_km, EPS, gap=0.0, time_limit_s=120, seed_sources=inst.outputs)
    assert any(r.get("interior_point_next") for r in res.rounds)
    assert res.solved and res.upper_bound == pytest.approx(exact_optimum, rel=1e-6)
    assert max(r["lower"] for r in res.rounds if "lower" in r) <= exact_optimum * (1 + 1e-6)
    assert audit_mechanism(res.matrix, inst.d_km, EPS).passed


def test_bad_parameters_are_refused(inst):
    with pytest.raises(ValueError, match="'gap' parameter of build_lp"):
        build_lp(inst, EPS, gap=1.5)
    with pytest.raises(ValueError, match="'method' parameter of build_lp"):
        build_lp(inst, EPS, method="magic")
    with pytest.raises(ValueError, match="use method='exact'"):
        build_lp(inst, EPS, method="certified", spanner_dilation=1.5)
    cost = inst.prior[:, None] * inst.cost_m
    with pytest.raises(ValueError, match="'d_km' parameter of solve_optimal"):
        solve_optimal(cost, inst.d_km[:3], EPS)


def test_agrees_with_libqif(kotka):
    """libqif's optimal mechanism (no floor) lies between our two bounds (skipped without qif)."""
    qif = pytest.importorskip("qif")
    d_privacy = qif.mechanism.d_privacy
    small = make_instance(kotka, n_records=20, n_outputs=12, n_users=5, seed=2)
    res = build_lp(small, EPS, gap=0.0, time_limit_s=60)
    cost = small.cost_m  # qif minimises sum_x pi_x sum_y P[x, y] loss(x, y)
    d = small.d_km
    q = np.asarray(
        d_privacy.min_loss_given_d(small.prior, small.n_outputs, lambda i, j: EPS * d[i, j], lambda x, y: cost[x, y])
    )
    qif_loss = float(np.einsum("x,xy,xy->", small.prior, cost, q))
    det = res.details
    # The floor only moves the optimum up, by at most cost_bound_m; the stated bound holds without it
    # (tests/panda/test_bound_libqif.py checks it on more instances).
    assert det["lower_bound_no_floor_m"] <= det["lower_bound_m"] <= qif_loss * (1 + 1e-5)
    assert qif_loss <= det["upper_bound_m"] * (1 + 1e-6)
    assert det["upper_bound_m"] - qif_loss <= det["cost_bound_m"] + 1e-6


def test_best_pair_multipliers_maximise_the_bound_for_fixed_row_sum_multipliers(inst, exact_optimum):
    """For fixed u, the per-output LP duals beat any other multipliers and stay a valid bound."""
    from panda.mechanisms.lp_full import spanner_seed_rows
    from panda.optimal import best_pair_multipliers

    cost = inst.prior[:, None] * inst.cost_m
    s, x, y = spanner_seed_rows(inst, EPS, 1e-6)
    a = np.exp(EPS * inst.d_km[s, x])
    u = cost.min(axis=1) + 0.5 * (cost.mean(axis=1) - cost.min(axis=1))
    lam, solved = best_pair_multipliers(cost, u, s, x, y, a, eta=1e-6)
    assert solved == np.unique(y).size  # every output with rows got its LP's multipliers
    assert lam.shape == s.shape and (lam >= 0).all() and (lam > 0).any()
    best, _ = dual_bound(cost, u, lam, s, x, y, a, eta=1e-6)
    assert best <= exact_optimum * (1 + 1e-9)
    rng = np.random.default_rng(0)
    for scale in (0.0, 1e-3, 1e-2, 1e-1):
        other, _ = dual_bound(
            cost, u, rng.exponential(scale, s.size) if scale else np.zeros(s.size), s, x, y, a, eta=1e-6
        )
        assert other <= best + 1e-9 * abs(best)
    assert best > dual_bound(cost, u, np.zeros(s.size), s, x, y, a, eta=1e-6)[0]


def test_best_pair_multipliers_after_the_deadline_keep_the_fallback(inst, exact_optimum):
    """Past its deadline no output's LP starts: every row keeps the fallback's multiplier (clipped at 0)."""
    import time

    from panda.mechanisms.lp_full import spanner_seed_rows
    from panda.optimal import best_pair_multipliers

    cost = inst.prior[:, None] * inst.cost_m
    s, x, y = spanner_seed_rows(inst, EPS, 1e-6)
    a = np.exp(EPS * inst.d_km[s, x])
    u = cost.min(axis=1) + 0.5 * (cost.mean(axis=1) - cost.min(axis=1))
    fallback = np.random.default_rng(1).normal(0.0, 1e-3, s.size)
    lam, solved = best_pair_multipliers(cost, u, s, x, y, a, eta=1e-6, deadline=time.perf_counter() - 1.0,
                                        fallback=fallback)  # fmt: skip
    assert solved == 0
    np.testing.assert_array_equal(lam, np.clip(fallback, 0.0, None))
    late, _ = dual_bound(cost, u, lam, s, x, y, a, eta=1e-6)
    best, _ = dual_bound(cost, u, best_pair_multipliers(cost, u, s, x, y, a, eta=1e-6)[0], s, x, y, a, eta=1e-6)
    assert late < best <= exact_optimum * (1 + 1e-9)  # valid, and weaker than the LPs' multipliers


def test_auto_start_picks_pdhg_on_dense_instances(kotka):
    """start="auto": the measured rule (docs/benchmarks.md), and the start a run used is reported."""
    from panda.mechanisms.lp_full import auto_start, mean_floor_neighbours

    assert auto_start(206, 0.005) == "spanner" and auto_start(490, 0.005) == "spanner"  # K = 500 at 5/km, 2/km
    assert auto_start(79, 0.005) == "spanner" and auto_start(84, 0.005) == "spanner"  # K = 200, K = 500 at 10/km
    assert auto_start(70, 0.005) == "spanner" and auto_start(187, 0.005) == "spanner"  # Rome K = 2000, 5000
    assert auto_start(19, 0.005) == "outputs"  # Rome K = 500: sparse, dual simplex is faster
    assert auto_start(30, 0.005) == "spanner" and auto_start(35, 0.005) == "spanner"  # 20/km, Rome K = 1000
    assert auto_start(499, 0.0) == "outputs"  # an exact optimum: dual simplex, however dense
    small = make_instance(kotka, n_records=45, n_outputs=30, n_users=10, seed=1)
    assert mean_floor_neighbours(small.d_km, EPS, 1e-6) == pytest.approx(44.0)  # Kotka: all within 2.76 km
    res = build_lp(small, EPS, time_limit_s=60)
    assert res.details["start"] == "spanner" and res.details["mean_floor_neighbours"] == pytest.approx(44.0)
    assert res.status == "solved" and res.details["audit_passed"]
    sparse = build_lp(small, 50.0, time_limit_s=60)  # 50/km: the floor radius is 0.28 km
    assert sparse.details["mean_floor_neighbours"] < 40 and sparse.details["start"] == "outputs"
    exact = build_lp(small, EPS, gap=0.0, time_limit_s=60)  # an exact optimum: dual simplex's vertex
    assert exact.details["start"] == "outputs" and exact.status == "solved"
