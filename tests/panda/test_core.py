"""PAnDA core: exact accounting, surrogates, margins, LP, Phase II, reproducibility, validation.

Three levels: exact (brute force over all anchor sets / candidate pairs), property (hypothesis),
statistical (sampled frequencies against exact probabilities).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import panda
from panda.accounting import phase1_cost, phase1_cost_sparse
from panda.anchors import SelectionModel, sample_anchor_sets, selection_probabilities
from panda.config import PandaConfig, preset
from panda.lp import solve_mdp_lp
from panda.margins import _segment_order, margin_for_records, surrogate_probabilities
from panda.phase2 import pair_log_ratio, sample_outputs

DECAYS = ["exponential", "power", "logistic"]


@pytest.fixture(scope="module")
def tiny(kotka):
    """10 records of Kotka: small enough to enumerate all 2^10 anchor sets."""
    return panda.make_instance(kotka, n_records=10, n_outputs=5, n_users=4, seed=3)


@pytest.fixture(scope="module")
def small(kotka):
    return panda.make_instance(kotka, n_records=60, n_outputs=20, n_users=8, seed=5)


def _brute_force_eps_bar(w: np.ndarray, d: np.ndarray, a: int, b: int) -> float:
    """max over all anchor sets of |log Pr[A | a] - log Pr[A | b]| / d[a, b] (eq. 11-14)."""
    k = w.shape[0]
    best = 0.0
    for bits in itertools.product([0, 1], repeat=k):
        sel = np.array(bits, dtype=bool)
        la = np.log(w[a, sel]).sum() + np.log1p(-w[a, ~sel]).sum()
        lb = np.log(w[b, sel]).sum() + np.log1p(-w[b, ~sel]).sum()
        best = max(best, abs(la - lb))
    return best / d[a, b]


# ------------------------------------------------------------------ exact: Phase-I cost


@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("form", ["paper", "artifact"])
def test_phase1_cost_equals_brute_force_enumeration(tiny, decay, form):
    cfg = preset(form, decay=decay, gamma_km=0.6, lambda_per_km=2.0)
    d = tiny.d_km
    w = selection_probabilities(d, cfg, gamma_km=0.6)
    pairs = np.array([(0, 1), (2, 7), (9, 4), (5, 3)])
    fast = phase1_cost(w, d, pairs)
    for (a, b), got in zip(pairs, fast, strict=True):
        assert got == pytest.approx(_brute_force_eps_bar(w, d, a, b), rel=1e-10)


@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("name", ["paper", "artifact"])
def test_sparse_phase1_cost_equals_dense(small, decay, name):
    cfg = preset(name, decay=decay)
    model = SelectionModel.build(small, cfg)
    d = small.d_km
    w = selection_probabilities(d, cfg, gamma_km=model.gamma_km)
    a, b = np.triu_indices(small.n_records, k=1)
    dense = phase1_cost(w, d, np.column_stack([a, b]))
    sparse = phase1_cost_sparse(model, a, b)
    np.testing.assert_allclose(sparse, dense, rtol=1e-9, atol=1e-9)
    assert np.all(dense >= 0)
    # symmetric
    np.testing.assert_allclose(phase1_cost_sparse(model, b, a), sparse, rtol=1e-12)


def test_phase1_cost_is_large_when_alpha_is_close_to_one(small):
    """The (1-w) terms explode as alpha -> 1 (Proposition 5): the cost must grow."""
    costs = []
    for alpha in (0.5, 0.9, 0.99, 0.999):
        model = SelectionModel.build(small, preset("paper", alpha=alpha, gamma_km=0.5))
        costs.append(np.median(phase1_cost_sparse(model, np.array([0, 1, 2]), np.array([3, 4, 5]))))
    assert costs == sorted(costs)
    assert costs[-1] > 3 * costs[0]


def test_selection_probabilities_table1_and_far_rule():
    d = np.array([0.0, 0.5, 1.0, 2.0])
    cfg = PandaConfig(alpha=0.9, lambda_per_km=2.0)
    w = selection_probabilities(d, cfg, gamma_km=1.5)
    np.testing.assert_allclose(w[:3], 0.9 * np.exp(-2.0 * d[:3]))
    assert w[3] == pytest.approx(0.9 * np.exp(-2.0 * 1.5))  # the paper's h(gamma) beyond gamma
    p = selection_probabilities(d, cfg.replace(decay="power"), gamma_km=1.5)
    np.testing.assert_allclose(p[1:3], 0.9 / (1 + d[1:3] ** 2.0))
    lg = selection_probabilities(d, cfg.replace(decay="logistic"), gamma_km=1.5)
    np.testing.assert_allclose(lg[:3], 1.8 / (1 + np.exp(2.0 * d[:3])))
    fl = selection_probabilities(d, cfg.replace(far_rule="floor", far_floor=1e-4), gamma_km=1.5)
    assert fl[3] == pytest.approx(1e-4)
    assert np.all((w > 0) & (w < 1))


# ------------------------------------------------------------------ exact and statistical: surrogates


def _brute_v(w_row: np.ndarray, d_row: np.ndarray, gamma: float) -> dict[int, float]:
    order = np.lexsort((np.arange(d_row.size), d_row))
    out, none_before = {}, 1.0
    for s in order:
        if d_row[s] >= gamma:
            break
        out[int(s)] = w_row[s] * none_before
        none_before *= 1 - w_row[s]
    return out


def test_surrogate_probabilities_match_formula_and_simulation(small):
    cfg = preset("paper", gamma_km=0.5, lambda_per_km=1.0, alpha=0.6)
    model = SelectionModel.build(small, cfg)
    r = int(small.users[0])
    idx, v = surrogate_probabilities(model, r)
    w = selection_probabilities(small.d_km[r], cfg, gamma_km=0.5)
    expected = _brute_v(w, small.d_km[r], 0.5)
    assert dict(zip(idx.tolist(), v.tolist(), strict=True)) == pytest.approx(expected, rel=1e-12)
    # Simulation of nearest-anchor selection (independent Bernoulli draws, eq. 11).
    rng = np.random.default_rng(11)
    n = 20_000
    draws = rng.random((n, small.n_records)) < w[None, :]
    dist = np.where(draws, small.d_km[r][None, :], np.inf)
    nearest = np.argmin(dist, axis=1)
    for s, p in zip(idx, v, strict=True):
        freq = np.mean(nearest[draws.any(axis=1)] == s) * draws.any(axis=1).mean()
        se = np.sqrt(p * (1 - p) / n)
        assert abs(freq - p) < 5 * se + 1e-9


def test_anchor_sets_are_bernoulli_draws_and_empty_sets_are_counted(small):
    cfg = preset("artifact")
    model = SelectionModel.build(small, cfg)
    rng = np.random.default_rng(0)
    sizes = np.array([s.size for s in sample_anchor_sets(model, np.repeat(small.users[:1], 4000), rng=rng)])
    w = model.rows_w(small.users[:1])[0]
    assert sizes.mean() == pytest.approx(w.sum(), rel=0.05)
    p_empty = np.prod(1 - w)
    assert np.mean(sizes == 0) == pytest.approx(p_empty, abs=5 * np.sqrt(p_empty * (1 - p_empty) / 4000) + 1e-3)


# ------------------------------------------------------------------ exact: margins


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 70), min_size=1, max_size=30),
    st.integers(0, 2**31 - 1),
)
def test_segment_order_equals_a_stable_lexsort(counts, seed):
    """The bucketed per-segment sort orders exactly like np.lexsort((value, seg)), ties, inf and NaN included."""
    rng = np.random.default_rng(seed)
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    value = rng.choice([-np.inf, -1.0, 0.0, 0.5, 2.0, np.inf, np.nan], size=total)
    normal = rng.random(total) < 0.5
    value[normal] = rng.normal(size=int(normal.sum()))
    seg = np.repeat(np.arange(counts.size), counts)
    seg_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    np.testing.assert_array_equal(_segment_order(value, counts, seg_start), np.lexsort((value, seg)))


def _brute_xi(model: SelectionModel, d: np.ndarray, eps_bar: np.ndarray, p: int, q: int, t: float) -> float:
    eps, g = model.config.epsilon_per_km, model.gamma_km
    w = selection_probabilities(d, model.config, gamma_km=g)
    vp, vq = _brute_v(w[p], d[p], g), _brute_v(w[q], d[q], g)
    e_pq = (eps - eps_bar[p, q]) * d[p, q] if p != q else 0.0
    cands = []
    for s, a in vp.items():
        for s2, b in vq.items():
            e = (eps - eps_bar[s, s2]) * d[s, s2] if s != s2 else 0.0
            cands.append((e - e_pq, a * b))
    cands.sort()
    total = 0.0
    for delta, weight in cands:
        total += weight
        if total >= t:
            return delta
    return np.inf


def test_margin_search_matches_brute_force(small):
    cfg = preset("paper", gamma_km=0.6, lambda_per_km=1.0, alpha=0.9, delta=0.3)
    model = SelectionModel.build(small, cfg)
    d = small.d_km
    a, b = np.triu_indices(small.n_records, k=1)
    eb = np.zeros_like(d)
    eb[a, b] = eb[b, a] = phase1_cost_sparse(model, a, b)
    rng = np.random.default_rng(2)
    p = rng.integers(0, small.n_records, 40)
    q = rng.integers(0, small.n_records, 40)
    targets = rng.choice([0.2, 0.5, 0.7, 0.9, 0.99], 40)
    xi, reached = margin_for_records(model, p, q, targets)
    for k in range(40):
        want = _brute_xi(model, d, eb, int(p[k]), int(q[k]), float(targets[k]))
        assert reached[k] == np.isfinite(want)
        if np.isfinite(want):
            assert xi[k] == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_success_function_is_monotone_so_margin_grows_with_target(small):
    cfg = preset("paper", gamma_km=0.6, lambda_per_km=1.0, alpha=0.9)
    model = SelectionModel.build(small, cfg)
    p, q = np.full(6, 3), np.full(6, 17)
    xi, _ = margin_for_records(model, p, q, np.array([0.05, 0.1, 0.3, 0.5, 0.7, 0.8]))
    finite = xi[np.isfinite(xi)]
    assert np.all(np.diff(finite) >= 0)


def test_unreachable_target_is_reported_not_capped(small):
    cfg = preset("paper", delta=1e-7)  # a user can end with no near anchor: 1 - 1e-7 is out of reach
    model = SelectionModel.build(small, cfg)
    xi, reached = margin_for_records(model, np.array([1]), np.array([2]), np.array([1 - 1e-7]))
    assert not reached[0] and np.isinf(xi[0])
    fb = SelectionModel.build(small, cfg.replace(margin_fallback="second_largest"))
    xi2, reached2 = margin_for_records(
        fb, np.array([1]), np.array([2]), np.array([1 - 1e-7]), fallback="second_largest"
    )
    assert not reached2[0] and np.isfinite(xi2[0])


# ------------------------------------------------------------------ property: the LP


@st.composite
def metric_lp(draw):
    n = draw(st.integers(3, 7))
    m = draw(st.integers(2, 6))
    pts = np.array(draw(st.lists(st.tuples(st.floats(0, 3), st.floats(0, 3)), min_size=n, max_size=n)))
    cost = np.array(draw(st.lists(st.floats(0, 1000), min_size=n * m, max_size=n * m))).reshape(n, m)
    eps = draw(st.floats(0.2, 5))
    slack = draw(st.floats(0, 2))
    return pts, cost, eps, slack


@settings(max_examples=25, deadline=None)
@given(metric_lp())
def test_lp_solution_is_row_stochastic_and_meets_every_constraint(case):
    pts, cost, eps, slack = case
    n = pts.shape[0]
    d = np.sqrt(((pts[:, None, :] - pts[None, :, :]) ** 2).sum(-1))
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    b_panda = np.maximum(eps * d[i, j] - slack * d[i, j], 0.0)  # a tighter exponent, like PAnDA's
    for eta in (0.0, 1e-6):
        tight = solve_mdp_lp(cost, i, j, b_panda, eta=eta, time_limit_s=30)
        relaxed = solve_mdp_lp(cost, i, j, eps * d[i, j], eta=eta, time_limit_s=30)
        assert tight.success and relaxed.success
        for res, b in ((tight, b_panda), (relaxed, eps * d[i, j])):
            z = res.z
            np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=1e-9)
            assert np.all(z >= 0)
            assert np.all(z[i] <= np.exp(b)[:, None] * z[j] * (1 + 1e-9) + 1e-9)
        # HiGHS optimality tolerance (1e-7) scales with the costs; the exact repair moves ~1e-7 mass.
        assert relaxed.objective <= tight.objective * (1 + 1e-7) + 1e-7 * max(1.0, float(cost.sum()))


def test_floor_reduction_keeps_the_guarantee_and_the_optimum(small):
    EPS = 15.0  # Kotka is ~2.5 km across: a larger eps makes far pairs implied by the floor
    d = small.d_km
    k = small.n_records
    i, j = np.nonzero(~np.eye(k, dtype=bool))
    cost = small.prior[:, None] * small.cost_m
    full = solve_mdp_lp(cost, i, j, EPS * d[i, j], eta=0.0, reduce=False, time_limit_s=120)
    fast = solve_mdp_lp(cost, i, j, EPS * d[i, j], eta=1e-6, reduce=True, time_limit_s=120)
    assert full.success and fast.success
    assert fast.n_pairs_implied > 0
    # Audit every ordered pair with the true exponent: no excess.
    ratio = pair_log_ratio(fast.z[i], fast.z[j])
    assert np.all(ratio <= EPS * d[i, j] * (1 + 1e-7) + 1e-7)
    bound = 1e-6 * small.n_outputs * small.cost_m.max()
    assert full.objective <= fast.objective <= full.objective + bound + 1e-6


def test_lp_time_limit_is_reported_as_data(small):
    d = small.d_km
    i, j = np.nonzero(~np.eye(small.n_records, dtype=bool))
    res = solve_mdp_lp(small.cost_m, i, j, 5.0 * d[i, j], eta=0.0, reduce=False, time_limit_s=0.01)
    assert not res.success and res.z is None and np.isnan(res.objective)
    assert "time" in res.lp.status.lower()


# ------------------------------------------------------------------ statistical: Phase II


def test_phase2_output_frequencies_match_the_surrogate_row():
    rng = np.random.default_rng(4)
    z = rng.dirichlet(np.ones(6), size=3)
    n = 30_000
    out = sample_outputs(z, np.full(n, 1), rng=rng)
    freq = np.bincount(out, minlength=6) / n
    se = np.sqrt(z[1] * (1 - z[1]) / n)
    assert np.all(np.abs(freq - z[1]) < 5 * se)
    assert np.all(sample_outputs(z, np.array([-1, 0]), rng=rng)[:1] == -1)


# ------------------------------------------------------------------ the pipeline


def test_run_panda_end_to_end_and_reproducible(small):
    cfg = preset("artifact", constraint_radius_km=None)
    r1 = panda.run_panda(small, cfg, seed=7)
    r2 = panda.run_panda(small, cfg, seed=7)
    assert r1.lp_status == "Optimal"
    np.testing.assert_array_equal(r1.anchor_union, r2.anchor_union)
    np.testing.assert_array_equal(r1.outputs, r2.outputs)
    np.testing.assert_allclose(r1.z, r2.z)
    z = r1.z
    np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=1e-9)
    # The LP meets every constraint it was given (clipped exponents).
    b = np.maximum(r1.pair_exponent, 0.0)
    ratio = pair_log_ratio(z[r1.pair_i], z[r1.pair_j])
    assert np.all(ratio <= b * (1 + 1e-7) + 1e-7)
    # Over-budget pairs get identical rows.
    over = r1.pair_over_budget
    assert np.all(ratio[over] <= 1e-7)
    assert r1.relaxed_objective_m <= r1.lp_objective_m * (1 + 1e-7) + 1e-7
    assert r1.approximation_ratio >= 1 - 1e-7
    s = r1.summary()
    assert s["n_anchor_union"] == r1.anchor_union.size
    assert set(s["timings_s"]) >= {"selection_model", "anchors", "phase1_cost", "margins", "anpo_lp", "phase2"}
    r3 = panda.run_panda(small, cfg, seed=8)
    assert not np.array_equal(r1.outputs, r3.outputs) or not np.array_equal(r1.anchor_union, r3.anchor_union)


def test_run_panda_with_a_reachable_target_gives_finite_margins(small):
    cfg = preset(
        "paper",
        delta=0.5,
        alpha=0.9,
        lambda_per_km=1.0,
        gamma_km=0.8,
        far_rule="floor",
        far_floor=0.01,
        neighbourhood_size=3,
        bayes_adjustment=False,
    )
    r = panda.run_panda(small, cfg, seed=1)
    assert np.isfinite(r.pair_xi).any()
    assert r.budget_split["n_finite"] == int(np.isfinite(r.pair_xi).sum())


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("field", "value", "exc"),
    [
        ("epsilon_per_km", 0.0, ValueError),
        ("epsilon_per_km", -1.0, ValueError),
        ("epsilon_per_km", "5", TypeError),
        ("delta", 1.0, ValueError),
        ("delta", -0.1, ValueError),
        ("alpha", 1.0, ValueError),
        ("alpha", 0.0, ValueError),
        ("lambda_per_km", 0.0, ValueError),
        ("decay", "gaussian", ValueError),
        ("gamma_km", -1.0, ValueError),
        ("far_rule", "nope", ValueError),
        ("far_floor", 0.99, ValueError),
        ("neighbourhood_size", 0, ValueError),
        ("neighbourhood_size", 2.5, TypeError),
        ("constraint_radius_km", 0.0, ValueError),
        ("lp_floor", 0.5, ValueError),
        ("lp_time_limit_s", 0.0, ValueError),
        ("lp_solver", "cplex", ValueError),
        ("margin_fallback", "cap", ValueError),
    ],
)
def test_bad_config_values_raise_with_the_parameter_name(field, value, exc):
    with pytest.raises(exc, match=field):
        PandaConfig(**{field: value})


def test_presets():
    art = preset("artifact")
    assert art.constraint_radius_km == 0.8 and art.far_rule == "artifact" and art.gamma_divisor is None
    assert preset("artifact", constraint_radius_km=None).constraint_radius_km is None
    assert preset("paper") == PandaConfig()
    with pytest.raises(ValueError, match="preset"):
        preset("best")
    with pytest.raises(TypeError, match="epsilon"):
        preset("paper", epsilon=3)


def test_recommended_preset_is_the_recorded_sweep_winner():
    """The preset must be what experiments/recommend_sweep.py found (recorded in experiments/results)."""
    import csv
    from pathlib import Path

    rows = list(csv.DictReader((Path(__file__).parents[2] / "experiments/results/recommend_fine.csv").open()))
    ok = {}
    for r in rows:
        key = (float(r["alpha"]), float(r["lambda_per_km"]), r["far"], float(r["gamma_km"]), float(r["delta"]))
        fine = (
            not r.get("error")
            and r["mean_user_p_violation"] != ""
            and float(r["mean_user_p_violation"]) <= float(r["delta"])
            and float(r["mean_record_p_violation"]) <= float(r["delta"])
        )
        ok.setdefault(key, []).append((fine, float(r["loss_users_m"])))
    qualifying = {k: np.mean([loss for _, loss in v]) for k, v in ok.items() if all(f for f, _ in v)}
    best = min(qualifying, key=qualifying.get)
    rec = preset("recommended")
    assert (rec.alpha, rec.lambda_per_km, rec.far_rule, rec.gamma_km, rec.delta) == (
        best[0],
        best[1],
        best[2],
        best[3],
        best[4],
    )
    assert rec.bayes_adjustment is False


def test_lp_too_large_is_reported_not_built(small):
    d = small.d_km
    i, j = np.nonzero(~np.eye(small.n_records, dtype=bool))
    res = solve_mdp_lp(small.cost_m, i, j, 5.0 * d[i, j], eta=0.0, reduce=False, max_rows=1000)
    assert not res.success and res.z is None
    assert res.lp.status.startswith("Too large")
