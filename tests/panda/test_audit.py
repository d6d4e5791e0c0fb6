"""Exact mDP audit and the Bayes attacker: hand-built matrices that pass and fail, properties, brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from panda import audit
from panda.audit import adversary_error_m, audit_mechanism
from panda.mechanisms import em_matrix

# A line of three records at 0, 1 and 2 km.
LINE_D = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [2.0, 1.0, 0.0]])


@pytest.fixture
def line_em() -> np.ndarray:
    """EM at eps = 1/km on the line with outputs = records: eps-mDP by construction."""
    return em_matrix(LINE_D, 1.0)


def brute_force(matrix: np.ndarray, d: np.ndarray, eps: float, rtol: float = 1e-9) -> tuple[int, float]:
    """Violations and the smallest budget, by loops over pairs and outputs."""
    k, m = matrix.shape
    n_viol, eps_min = 0, 0.0
    for i, j in itertools.combinations(range(k), 2):
        worst = 0.0
        for y in range(m):
            a, b = matrix[i, y], matrix[j, y]
            if a == 0 and b == 0:
                continue
            if a == 0 or b == 0:
                worst = np.inf
                continue
            worst = max(worst, abs(np.log(a) - np.log(b)))
        if worst > eps * d[i, j] + np.log1p(rtol):
            n_viol += 1
        if d[i, j] > 0:
            eps_min = max(eps_min, worst / d[i, j])
        elif worst > np.log1p(rtol):
            eps_min = np.inf
    return n_viol, eps_min


def test_em_on_a_line_passes(line_em):
    result = audit_mechanism(line_em, LINE_D, 1.0)
    assert result.passed
    assert result.n_pairs_checked == 3
    assert result.violation_rate == 0.0
    assert 0 < result.epsilon_min_per_km <= 1.0
    assert result.worst[0].effective_epsilon_per_km == pytest.approx(result.epsilon_min_per_km)
    assert result.scope == "all 3 pairs"


def test_a_broken_entry_is_caught_with_its_pair(line_em):
    broken = line_em.copy()
    # Make record 0 far likelier than record 1 to report output 2: ratio e^3 at distance 1.
    broken[0] = [0.05, 0.05, 0.9]
    broken[1] = [0.4, 0.55, 0.05]
    result = audit_mechanism(broken, LINE_D, 1.0)
    assert not result.passed
    worst = result.worst[0]
    assert (worst.i, worst.j, worst.y) == (0, 1, 2)
    assert worst.log_ratio == pytest.approx(np.log(0.9 / 0.05))
    assert worst.allowed_log_ratio == pytest.approx(1.0)
    assert worst.violated
    assert result.n_violations == brute_force(broken, LINE_D, 1.0)[0]


def test_zeros_are_exact():
    # Output 0 is never reported (0/0 everywhere: fine); output 2 only by record 2: infinite ratio.
    matrix = np.array([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.5, 0.5]])
    result = audit_mechanism(matrix, LINE_D, 100.0)
    assert result.n_violations == 2  # pairs (0, 2) and (1, 2)
    assert result.epsilon_min_per_km == np.inf
    assert {(w.i, w.j) for w in result.worst if w.violated} == {(0, 2), (1, 2)}
    assert all(w.y == 2 for w in result.worst if w.violated)
    # Rows 0 and 1 agree, including their zeros: no evidence against the pair.
    ok = audit_mechanism(matrix, LINE_D, 100.0, pairs=[(0, 1)])
    assert ok.passed and ok.epsilon_min_per_km == 0.0


def test_pairs_at_distance_zero():
    d = np.array([[0.0, 0.0], [0.0, 0.0]])
    same = np.array([[0.3, 0.7], [0.3, 0.7]])
    assert audit_mechanism(same, d, 1.0).passed
    assert audit_mechanism(same, d, 1.0).epsilon_min_per_km == 0.0
    differ = np.array([[0.3, 0.7], [0.31, 0.69]])
    result = audit_mechanism(differ, d, 1.0)
    assert not result.passed
    assert result.epsilon_min_per_km == np.inf


@pytest.mark.parametrize(("over", "passes_default"), [(1e-12, True), (1e-6, False)])
def test_rtol_absorbs_rounding_only(over, passes_default):
    d = np.array([[0.0, 1.0], [1.0, 0.0]])
    top = 0.2 * np.e * (1 + over)  # record 0 reports output 0 e^1 (1 + over) times as often as record 1
    matrix = np.array([[top, 1 - top], [0.2, 0.8]])
    assert not audit_mechanism(matrix, d, 1.0, rtol=0.0).passed
    result = audit_mechanism(matrix, d, 1.0)
    assert result.passed is passes_default
    assert result.worst[0].y == 0
    assert result.worst[0].log_ratio - result.worst[0].allowed_log_ratio == pytest.approx(np.log1p(over), rel=1e-3)


def test_epsilon_min_is_the_smallest_passing_budget():
    rng = np.random.default_rng(4)
    matrix = rng.dirichlet(np.ones(5), size=6)
    pts = rng.uniform(0, 3, size=(6, 2))
    d = np.linalg.norm(pts[:, None] - pts[None], axis=2)
    eps_min = audit_mechanism(matrix, d, 1.0).epsilon_min_per_km
    assert audit_mechanism(matrix, d, eps_min).passed
    assert not audit_mechanism(matrix, d, eps_min * 0.999).passed


def test_given_pairs_are_deduplicated_and_unordered(line_em):
    result = audit_mechanism(line_em, LINE_D, 1.0, pairs=np.array([[0, 1], [1, 0], [2, 2], [1, 2]]))
    assert result.n_pairs_checked == 2
    assert result.scope == "2 given pairs"
    as_tuple = audit_mechanism(line_em, LINE_D, 1.0, pairs=(np.array([0, 1]), np.array([1, 2])))
    assert as_tuple.n_pairs_checked == 2


def test_sampled_pairs_are_reported_and_reproducible():
    rng = np.random.default_rng(0)
    k = 40
    matrix = rng.dirichlet(np.ones(4), size=k)
    pts = rng.uniform(0, 2, size=(k, 2))
    d = np.linalg.norm(pts[:, None] - pts[None], axis=2)
    a = audit_mechanism(matrix, d, 1.0, sample_pairs=100, rng=7)
    b = audit_mechanism(matrix, d, 1.0, sample_pairs=100, rng=7)
    assert a.n_sampled_pairs == 100 == a.n_pairs_checked
    assert a.n_violations == b.n_violations and a.epsilon_min_per_km == b.epsilon_min_per_km
    assert "100 sampled pairs (of 780)" in a.scope
    # Asking for more than all pairs checks all of them, once.
    full = audit_mechanism(matrix, d, 1.0)
    every = audit_mechanism(matrix, d, 1.0, sample_pairs=10_000, rng=1)
    assert every.n_pairs_checked == full.n_pairs_checked == 780
    assert every.n_violations == full.n_violations
    both = audit_mechanism(matrix, d, 1.0, pairs=[(0, 1)], sample_pairs=5, rng=1)
    assert both.n_pairs_checked == 6 and both.n_sampled_pairs == 5


def test_triangle_index_covers_every_pair_once():
    for k in (2, 3, 17, 1001):
        i, j = audit._triangle_index(np.arange(k * (k - 1) // 2), k)
        ei, ej = np.triu_indices(k, 1)
        assert (i == ei).all() and (j == ej).all()


@settings(max_examples=40, deadline=None)
@given(
    k=st.integers(2, 7),
    m=st.integers(1, 5),
    seed=st.integers(0, 10_000),
    zeros=st.booleans(),
    eps=st.floats(0.1, 5.0),
)
def test_chunked_audit_matches_brute_force(k, m, seed, zeros, eps):
    rng = np.random.default_rng(seed)
    matrix = rng.dirichlet(np.ones(m), size=k)
    if zeros and m > 1:
        matrix[rng.random((k, m)) < 0.2] = 0.0
        matrix[matrix.sum(axis=1) == 0, 0] = 1.0
        matrix /= matrix.sum(axis=1, keepdims=True)
    pts = rng.uniform(0, 2, size=(k, 2))
    d = np.linalg.norm(pts[:, None] - pts[None], axis=2)
    expected_viol, expected_eps = brute_force(matrix, d, eps)
    old = audit._CHUNK_ELEMENTS
    try:
        audit._CHUNK_ELEMENTS = 7  # force many tiny chunks
        result = audit_mechanism(matrix, d, eps)
    finally:
        audit._CHUNK_ELEMENTS = old
    assert result.n_violations == expected_viol
    assert result.n_pairs_checked == k * (k - 1) // 2
    if np.isfinite(expected_eps):
        assert result.epsilon_min_per_km == pytest.approx(expected_eps, rel=1e-12, abs=1e-15)
    else:
        assert result.epsilon_min_per_km == np.inf


@settings(max_examples=30, deadline=None)
@given(k=st.integers(2, 9), m=st.integers(1, 6), seed=st.integers(0, 10_000), eps=st.floats(0.05, 20.0))
def test_em_passes_on_random_metric_spaces(k, m, seed, eps):
    rng = np.random.default_rng(seed)
    pts = rng.uniform(0, 3, size=(k, 2))
    d = np.linalg.norm(pts[:, None] - pts[None], axis=2)
    outputs = rng.choice(k, size=min(m, k), replace=False)
    result = audit_mechanism(em_matrix(d[:, outputs], eps), d, eps)
    assert result.passed
    assert result.epsilon_min_per_km <= eps * (1 + 1e-9)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"matrix": np.ones(3)},
        {"matrix": -np.ones((3, 2))},
        {"d_km": np.zeros((2, 2))},
        {"rtol": -1.0},
        {"n_worst": -1},
        {"sample_pairs": 0},
        {"pairs": np.array([[0, 5]])},
        {"pairs": np.zeros((3, 3))},
    ],
)
def test_bad_arguments_raise(kwargs, line_em):
    args = {"matrix": line_em, "d_km": LINE_D, "epsilon_per_km": 1.0} | kwargs
    with pytest.raises(ValueError):
        audit_mechanism(**args)


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_epsilon_raises(eps, line_em):
    with pytest.raises(ValueError, match="epsilon_per_km"):
        audit_mechanism(line_em, LINE_D, eps)


def test_summary_is_plain_data(line_em):
    s = audit_mechanism(line_em, LINE_D, 1.0).summary()
    assert s["n_pairs_checked"] == 3 and isinstance(s["worst"], list) and "violated" in s["worst"][0]


# --- the Bayes-optimal attacker -------------------------------------------------------------------


def test_identity_mechanism_leaves_no_error():
    prior = np.array([0.2, 0.5, 0.3])
    assert adversary_error_m(np.eye(3), prior, LINE_D * 1000) == 0.0


def test_constant_mechanism_gives_the_prior_only_guess():
    prior = np.array([0.2, 0.5, 0.3])
    matrix = np.tile([0.1, 0.6, 0.3], (3, 1))
    # The output says nothing: the best guess minimises sum_x p_x D[x, g]; here the middle record.
    expected = min(prior @ (LINE_D * 1000)[:, g] for g in range(3))
    assert adversary_error_m(matrix, prior, LINE_D * 1000) == pytest.approx(expected)
    assert expected == pytest.approx(500.0)


@settings(max_examples=30, deadline=None)
@given(k=st.integers(1, 6), m=st.integers(1, 5), seed=st.integers(0, 10_000))
def test_adversary_error_matches_brute_force(k, m, seed):
    rng = np.random.default_rng(seed)
    matrix = rng.dirichlet(np.ones(m), size=k)
    prior = rng.dirichlet(np.ones(k))
    pts = rng.uniform(0, 2000, size=(k, 2))
    dist = np.linalg.norm(pts[:, None] - pts[None], axis=2)
    expected = 0.0
    for y in range(m):
        expected += min(sum(prior[x] * matrix[x, y] * dist[x, g] for x in range(k)) for g in range(k))
    assert adversary_error_m(matrix, prior, dist) == pytest.approx(expected, rel=1e-12, abs=1e-9)
    # More privacy (a constant mechanism) never helps the attacker.
    flat = np.tile(prior @ matrix, (k, 1))
    assert adversary_error_m(flat, prior, dist) >= adversary_error_m(matrix, prior, dist) - 1e-9


@settings(max_examples=30, deadline=None)
@given(k=st.integers(1, 6), m=st.integers(1, 5), seed=st.integers(0, 10_000))
def test_an_attacker_with_a_wrong_belief_errs_more_and_is_counted_by_brute_force(k, m, seed):
    rng = np.random.default_rng(seed)
    matrix = rng.dirichlet(np.ones(m), size=k)
    truth, belief = rng.dirichlet(np.ones(k)), rng.dirichlet(np.ones(k))
    pts = rng.uniform(0, 2000, size=(k, 2))
    dist = np.linalg.norm(pts[:, None] - pts[None], axis=2)
    expected = 0.0
    for y in range(m):
        g = min(range(k), key=lambda g: sum(belief[x] * matrix[x, y] * dist[x, g] for x in range(k)))
        expected += sum(truth[x] * matrix[x, y] * dist[x, g] for x in range(k))
    wrong = adversary_error_m(matrix, truth, dist, attacker_prior=belief)
    assert wrong == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert wrong >= adversary_error_m(matrix, truth, dist) - 1e-9  # knowing the truth never hurts
    assert adversary_error_m(matrix, truth, dist, attacker_prior=truth) == pytest.approx(
        adversary_error_m(matrix, truth, dist), rel=1e-12, abs=1e-12
    )


def test_adversary_error_rejects_bad_shapes():
    with pytest.raises(ValueError):
        adversary_error_m(np.eye(3), np.ones(2) / 2, LINE_D)


def test_mechanism_numbers_reuse_the_audit_made_with_the_optimal_lp_only_for_its_matrix(kotka, monkeypatch):
    """The certified LP is audited when built; its numbers are those of a fresh audit, and a changed matrix or
    another budget is audited again."""
    import dataclasses

    from panda import make_instance
    from panda.mechanisms import build_lp

    inst = make_instance(kotka, n_records=30, n_outputs=20, n_users=10, seed=2)
    mech = build_lp(inst, 5.0, method="certified", start="spanner", time_limit_s=60)
    fresh = audit.audit_numbers(audit_mechanism(mech.matrix, inst.d_km, 5.0), mech.matrix)
    assert mech.details["exact_audit"] == fresh
    calls = []
    real = audit.audit_mechanism
    monkeypatch.setattr(audit, "audit_mechanism", lambda *a, **k: calls.append(a) or real(*a, **k))
    numbers = audit.mechanism_numbers(inst, mech, 5.0)
    assert calls == [] and numbers["audited"] and numbers["passed"]
    assert {key: numbers[key] for key in ("passed", "violation_rate", "epsilon_min_per_km", "scope")} == {
        key: fresh[key] for key in ("passed", "violation_rate", "epsilon_min_per_km", "scope")
    }
    # Another budget: audited again (and the optimum at 5/km breaks 1/km on some pairs).
    strict = audit.mechanism_numbers(inst, mech, 1.0)
    assert len(calls) == 1 and not strict["passed"] and strict["violation_rate"] > 0
    # The same details with another matrix: the kept numbers are not of it.
    broken = mech.matrix.copy()
    broken[0] = broken[-1][::-1]
    other = dataclasses.replace(mech, matrix=broken)
    assert audit.kept_audit_numbers(other, 5.0) is None
    assert not audit.mechanism_numbers(inst, other, 5.0)["passed"] and len(calls) == 2
