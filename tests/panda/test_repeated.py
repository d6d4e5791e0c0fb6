"""panda.repeated: the posterior after k reports (exact) and the attacker's error against k."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import panda
from panda.audit import adversary_error_m
from panda.mechanisms import build_em
from panda.repeated import MAX_REPORTS, RepeatedReports, attacker_error_vs_k, posterior_after

#: Three places on a line, 0, 1 and 2 km; two outputs.
LINE_M = 1000.0 * np.abs(np.subtract.outer([0.0, 1.0, 2.0], [0.0, 1.0, 2.0]))
TINY = np.array([[0.5, 0.5], [0.2, 0.8], [0.9, 0.1]])
TINY_PRIOR = np.array([0.2, 0.3, 0.5])
ALL_KS = tuple(range(1, MAX_REPORTS + 1))


@pytest.fixture(scope="module")
def em_small(kotka):
    inst = panda.make_instance(kotka, n_records=60, n_outputs=20, seed=0)
    return inst, build_em(inst, 5.0).matrix, np.asarray(inst.d_km, dtype=float) * 1000.0


def _random_case(k: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gen = np.random.default_rng(seed)
    matrix = gen.random((k, m)) + 0.01
    matrix /= matrix.sum(axis=1, keepdims=True)
    prior = gen.random(k) + 0.1
    prior /= prior.sum()
    pts = gen.random((k, 2))
    dist = 1000.0 * np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    return matrix, prior, dist


def _exact_error(matrix: np.ndarray, prior: np.ndarray, dist: np.ndarray, k: int) -> float:
    """The attacker's error after k reports by brute force over all M^k sequences."""
    total = 0.0
    for ys in itertools.product(range(matrix.shape[1]), repeat=k):
        joint = prior * np.prod(matrix[:, list(ys)], axis=1)  # Pr[x, y_1..y_k]
        total += float((joint @ dist).min())
    return total


# --- posterior_after ---


def test_posterior_after_matches_a_hand_computation():
    # Reports 0, 1, 1: prior * P[x, 0] * P[x, 1]^2 = 0.2*0.5*0.25, 0.3*0.2*0.64, 0.5*0.9*0.01.
    joint = np.array([0.2 * 0.5 * 0.5 * 0.5, 0.3 * 0.2 * 0.8 * 0.8, 0.5 * 0.9 * 0.1 * 0.1])
    expected = joint / joint.sum()
    np.testing.assert_allclose(posterior_after(TINY_PRIOR, TINY, [0, 1, 1]), expected, rtol=1e-12)
    # The order of the reports does not matter.
    np.testing.assert_allclose(posterior_after(TINY_PRIOR, TINY, [1, 0, 1]), expected, rtol=1e-12)
    np.testing.assert_allclose(expected, [0.025 / 0.0679, 0.0384 / 0.0679, 0.0045 / 0.0679], rtol=1e-12)


def test_posterior_after_no_reports_is_the_prior():
    np.testing.assert_allclose(posterior_after(TINY_PRIOR, TINY, []), TINY_PRIOR, rtol=1e-15)


def test_posterior_after_twenty_tiny_reports_does_not_underflow():
    # Each report has probability 1e-20 from place 0 and 2e-20 from place 1: the products (1e-400)
    # underflow in linear space; the posterior odds are exactly 2^20 : 1.
    matrix = np.array([[1e-20, 1.0 - 2e-20, 1e-20], [2e-20, 1.0 - 3e-20, 1e-20]])
    prior = np.array([0.5, 0.5])
    assert np.prod(np.full(20, 1e-20)) == 0.0  # what a linear-space product would give
    post = posterior_after(prior, matrix, [0] * 20)
    np.testing.assert_allclose(post, [1 / (1 + 2**20), 2**20 / (1 + 2**20)], rtol=1e-9)


def test_posterior_after_an_impossible_sequence_says_so():
    matrix = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="cannot all come from one place"):
        posterior_after(np.array([0.5, 0.5]), matrix, [0, 1])
    # Possible from place 1 only, but the prior rules place 1 out.
    with pytest.raises(ValueError, match="cannot all come from one place"):
        posterior_after(np.array([1.0, 0.0]), matrix, [1])


@pytest.mark.parametrize(
    ("prior", "matrix", "reports", "match"),
    [
        (TINY_PRIOR, TINY, [2], r"'reports' parameter of posterior_after must hold output positions in \[0, 2\)"),
        (TINY_PRIOR, TINY, [[0, 1]], "'reports' parameter of posterior_after must be a 1-D list"),
        (TINY_PRIOR, TINY, [0.5], "'reports' parameter of posterior_after must be a 1-D list"),
        (TINY_PRIOR[:2], TINY, [0], r"'prior' parameter of posterior_after must be a \(3,\) array"),
        (TINY_PRIOR, -TINY, [0], "'matrix' parameter of posterior_after must hold finite probabilities >= 0"),
        (TINY_PRIOR, TINY * 2, [0], "'matrix' parameter of posterior_after must have rows that sum to 1"),
        (np.array([0.5, 0.6, -0.1]), TINY, [0], "'prior' parameter of posterior_after must hold finite"),
    ],
)
def test_posterior_after_rejects_bad_input(prior, matrix, reports, match):
    with pytest.raises(ValueError, match=match):
        posterior_after(prior, matrix, reports)


# --- attacker_error_vs_k: exact parts ---


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_report_is_exact_and_equals_adversary_error_m(seed):
    matrix, prior, dist = _random_case(12, 5, seed)
    res = attacker_error_vs_k(matrix, prior, dist, [1, 3], n_sequences=50, rng=seed)
    assert res.ks == (1, 3)
    assert res.exact == (True, False)
    assert res.stderr_m[0] == 0.0
    assert res.error_m[0] == pytest.approx(adversary_error_m(matrix, prior, dist), abs=1e-9)


def test_one_report_on_em_equals_adversary_error_m(em_small):
    inst, matrix, dist = em_small
    res = attacker_error_vs_k(matrix, inst.prior, dist, [1], rng=0)
    assert res.error_m == (pytest.approx(adversary_error_m(matrix, inst.prior, dist), abs=1e-9),)
    assert res.n_sequences == 0  # nothing was sampled


def test_a_mechanism_that_reveals_everything_leaves_no_error():
    prior = np.array([0.1, 0.2, 0.3, 0.4])
    dist = 1000.0 * np.abs(np.subtract.outer(np.arange(4.0), np.arange(4.0)))
    res = attacker_error_vs_k(np.eye(4), prior, dist, ALL_KS, n_sequences=200, rng=0)
    assert res.error_m == tuple(0.0 for _ in ALL_KS)
    assert res.stderr_m == tuple(0.0 for _ in ALL_KS)


def test_a_constant_mechanism_teaches_nothing_at_any_k():
    prior = np.array([0.1, 0.2, 0.3, 0.4])
    matrix = np.tile([0.25, 0.5, 0.25], (4, 1))  # every place reports alike
    dist = 1000.0 * np.abs(np.subtract.outer(np.arange(4.0), np.arange(4.0)))
    res = attacker_error_vs_k(matrix, prior, dist, ALL_KS, n_sequences=300, rng=0)
    # Best guess from the prior alone: place 2 (expected 0.1*2 + 0.2*1 + 0.4*1 = 0.8 km; place 1: 1.2 km,
    # place 3: 1.0 km).
    assert res.prior_only_error_m == pytest.approx(800.0, abs=1e-9)
    np.testing.assert_allclose(res.error_m, 800.0, rtol=0, atol=1e-9)
    np.testing.assert_allclose(res.stderr_m, 0.0, atol=1e-9)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_the_estimate_agrees_with_the_exact_sum_over_all_sequences(k):
    res = attacker_error_vs_k(TINY, TINY_PRIOR, LINE_M, [k], n_sequences=20_000, rng=k)
    exact = _exact_error(TINY, TINY_PRIOR, LINE_M, k)
    assert res.exact == (False,)
    assert 0 < res.stderr_m[0] < 5.0
    assert abs(res.error_m[0] - exact) < 4 * res.stderr_m[0]


def test_the_estimate_agrees_with_the_exact_sum_on_a_random_mechanism():
    matrix, prior, dist = _random_case(6, 3, 7)
    res = attacker_error_vs_k(matrix, prior, dist, [1, 2, 5], n_sequences=20_000, rng=1)
    for k, est, se in zip(res.ks[1:], res.error_m[1:], res.stderr_m[1:], strict=True):
        assert abs(est - _exact_error(matrix, prior, dist, k)) < 4 * se


# --- attacker_error_vs_k: behaviour on a real mechanism ---


def test_twenty_reports_leave_the_attacker_much_closer(em_small):
    inst, matrix, dist = em_small
    res = attacker_error_vs_k(matrix, inst.prior, dist, ALL_KS, rng=0)
    k1, k20 = res.error_m[0], res.error_m[-1]
    assert k1 - k20 > 3 * res.stderr_m[-1]
    assert res.prior_only_error_m > k1  # one report already helps
    assert k20 < 0.8 * k1


def test_the_defence_curve_is_flat_at_one_report(em_small):
    inst, matrix, dist = em_small
    res = attacker_error_vs_k(matrix, inst.prior, dist, [1, 5, 20], epsilon_per_km=5.0, rng=0)
    assert res.defence_error_m == (res.error_m[0],) * 3
    assert res.single_report_error_m == res.error_m[0]
    assert res.independent_budget_per_km == (5.0, 25.0, 100.0)
    assert res.defence_budget_per_km == (5.0, 5.0, 5.0)


def test_seeds_reproduce(em_small):
    inst, matrix, dist = em_small
    a = attacker_error_vs_k(matrix, inst.prior, dist, [1, 2, 10], n_sequences=200, rng=3)
    b = attacker_error_vs_k(matrix, inst.prior, dist, [1, 2, 10], n_sequences=200, rng=3)
    c = attacker_error_vs_k(matrix, inst.prior, dist, [1, 2, 10], n_sequences=200, rng=4)
    assert a.error_m == b.error_m and a.stderr_m == b.stderr_m
    assert a.error_m[1:] != c.error_m[1:]
    assert a.error_m[0] == c.error_m[0]  # exact


def test_ks_are_sorted_and_deduplicated_and_the_result_is_plain_data():
    res = attacker_error_vs_k(TINY, TINY_PRIOR, LINE_M, [5, 1, 5, 2], n_sequences=100, epsilon_per_km=2.0, rng=0)
    assert isinstance(res, RepeatedReports)
    assert res.ks == (1, 2, 5)
    data = json.loads(json.dumps(res.summary()))
    assert data["ks"] == [1, 2, 5]
    assert data["error_m"] == list(res.error_m)
    assert data["exact"] == [True, False, False]
    assert data["independent_budget_per_km"] == [2.0, 4.0, 10.0]
    assert data["defence_budget_per_km"] == [2.0, 2.0, 2.0]
    no_eps = attacker_error_vs_k(TINY, TINY_PRIOR, LINE_M, [1], rng=0)
    assert no_eps.independent_budget_per_km is None and no_eps.summary()["defence_budget_per_km"] is None
    with pytest.raises(AttributeError):
        res.ks = (1,)  # frozen


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"ks": [0, 1]},
            r"'ks' parameter of attacker_error_vs_k must be a non-empty list of whole numbers of reports from 1 to 20",
        ),
        ({"ks": [21]}, "'ks' parameter .* from 1 to 20. Got"),
        ({"ks": []}, "'ks' parameter .* non-empty"),
        ({"ks": [1.5]}, "'ks' parameter"),
        ({"ks": [True]}, "'ks' parameter"),
        ({"prior": TINY_PRIOR[:2]}, r"'prior' parameter of attacker_error_vs_k must be a \(3,\) array"),
        ({"prior": TINY_PRIOR * 2}, "'prior' parameter of attacker_error_vs_k must sum to 1"),
        ({"distance_m": LINE_M[:2]}, r"'distance_m' parameter of attacker_error_vs_k must be a \(3, G\) array"),
        ({"distance_m": -LINE_M}, "'distance_m' parameter .* >= 0"),
        (
            {"matrix": np.array([[1.2, -0.2], [0.2, 0.8], [0.9, 0.1]])},
            "'matrix' parameter .* finite probabilities >= 0",
        ),
        ({"matrix": TINY[:, :1]}, "'matrix' parameter .* rows that sum to 1"),
        ({"matrix": np.ones(3)}, r"'matrix' parameter .* 2-D \(K, M\) array"),
        ({"n_sequences": 1}, "'n_sequences' parameter .* from 2 to 1,000,000"),
        ({"epsilon_per_km": -1.0}, "'epsilon_per_km' parameter .* > 0 or None"),
    ],
)
def test_attacker_error_vs_k_rejects_bad_input(kwargs, match):
    args = {"matrix": TINY, "prior": TINY_PRIOR, "distance_m": LINE_M, "ks": [1, 2]} | kwargs
    with pytest.raises(ValueError, match=match):
        attacker_error_vs_k(
            args.pop("matrix"), args.pop("prior"), args.pop("distance_m"), args.pop("ks"), rng=0, **args
        )


def test_exported_from_panda():
    assert panda.attacker_error_vs_k is attacker_error_vs_k
    assert panda.posterior_after is posterior_after
    assert panda.RepeatedReports is RepeatedReports
