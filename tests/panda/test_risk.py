"""panda.risk against brute force: loops over the matrix, the prior and the attacker's guesses."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import panda
from panda.audit import adversary_error_m
from panda.class_round import expected_bayes_error_m
from panda.mechanisms import build_em, build_lp
from panda.repeated import posterior_after
from panda.risk import attacker_guesses, day_risk, risk_report


@pytest.fixture(scope="module")
def small(kotka):
    return panda.make_instance(kotka, n_records=25, n_outputs=8, n_users=5, seed=3, loss="straight")


@pytest.fixture(scope="module")
def matrices(small):
    return {"em": build_em(small, 2.0).matrix, "lp": build_lp(small, 2.0).matrix}


def _brute_guess(p, prior, d, y):
    best, best_g = math.inf, -1
    for g in range(d.shape[1]):
        s = sum(prior[x] * p[x, y] * d[x, g] for x in range(p.shape[0]))
        if s < best:  # strict: the lowest index wins a tie, as documented
            best, best_g = s, g
    return best_g


@pytest.mark.parametrize("name", ["em", "lp"])
def test_risk_numbers_match_a_loop(small, matrices, name):
    p, prior, d = matrices[name], small.prior, small.d_km * 1000.0
    k, m = p.shape
    guesses = [_brute_guess(p, prior, d, y) for y in range(m)]
    radii = (100.0, 250.0, 500.0, 1200.0)
    rep = risk_report(p, prior, d, radii_m=radii)
    assert list(rep.guesses) == guesses
    for r, chance in zip(radii, rep.chance_within, strict=True):
        brute = sum(prior[x] * p[x, y] for x in range(k) for y in range(m) if d[x, guesses[y]] <= r)
        assert chance == pytest.approx(brute, abs=1e-12)
    place = [sum(p[x, y] * d[x, guesses[y]] for y in range(m)) for x in range(k)]
    np.testing.assert_allclose(rep.place_error_m, place, rtol=1e-12)
    # The project's own per-place attacker (the class round's, one report) and its mean (the audit's).
    rng = np.random.default_rng(0)
    for x in range(k):
        assert rep.place_error_m[x] == pytest.approx(expected_bayes_error_m(prior, p, x, 1, d, rng=rng), rel=1e-9)
    assert rep.mean_error_m == pytest.approx(float(np.dot(prior, place)), rel=1e-12)
    assert rep.mean_error_m == pytest.approx(adversary_error_m(p, prior, d), rel=1e-12)


def _brute_worst(errors, weights, share):
    order = sorted(range(len(errors)), key=lambda i: errors[i])
    total = sum(weights)
    taken, acc, last = 0.0, 0.0, None
    for i in order:
        w = weights[i] / total
        part = min(w, share - taken)
        if part <= 0:
            break
        acc += part * errors[i]
        taken += part
        last = i
    return acc / taken, errors[last]


@pytest.mark.parametrize("weights", ["prior", "places"])
@pytest.mark.parametrize("share", [0.1, 0.37, 1.0])
def test_worst_off_share_matches_a_loop(kotka, weights, share):
    inst = panda.make_instance(kotka, n_records=30, n_outputs=10, n_users=5, seed=1, prior="street_count")
    p = build_em(inst, 3.0).matrix
    rep = risk_report(p, inst.prior, inst.d_km * 1000.0, worst_share=share, weights=weights)
    w = list(inst.prior) if weights == "prior" else [1.0] * inst.n_records
    mean, threshold = _brute_worst(list(rep.place_error_m), w, share)
    assert rep.worst_share_error_m == pytest.approx(mean, rel=1e-12)
    assert rep.worst_share_threshold_m == threshold
    if share == 1.0:
        assert rep.worst_share_error_m == pytest.approx(np.average(rep.place_error_m, weights=w), rel=1e-12)


def test_guesses_are_the_audit_attackers(small, matrices):
    # adversary_error_m's believing attacker with the true prior makes the guesses attacker_guesses returns.
    p, prior, d = matrices["em"], small.prior, small.d_km * 1000.0
    g = attacker_guesses(p, prior, d)
    err = float(sum(prior[x] * p[x, y] * d[x, g[y]] for x in range(p.shape[0]) for y in range(p.shape[1])))
    assert err == pytest.approx(adversary_error_m(p, prior, d, attacker_prior=prior), rel=1e-12)


def _exact_after(p, prior, d, k):
    """The Bayes error after k reports by enumerating every sequence (M^k of them)."""
    total = 0.0
    for seq in itertools.product(range(p.shape[1]), repeat=k):
        joint = prior * np.prod(p[:, list(seq)], axis=1)
        total += float((joint @ d).min())
    return total


def test_day_risk_sampled_agrees_with_enumeration(kotka):
    inst = panda.make_instance(kotka, n_records=12, n_outputs=4, n_users=3, seed=2, loss="straight")
    p, prior, d = build_em(inst, 1.5).matrix, inst.prior, inst.d_km * 1000.0
    out = day_risk(p, prior, d, 3, epsilon_per_km=1.5, n_sequences=6000, rng=7)
    assert out.ks == (1, 3) and out.exact == (True, False)
    assert out.error_m[0] == pytest.approx(adversary_error_m(p, prior, d), rel=1e-12)
    assert abs(out.error_m[1] - _exact_after(p, prior, d, 3)) < 4 * out.stderr_m[1]
    assert out.independent_budget_per_km == pytest.approx((1.5, 4.5))
    assert out.defence_error_m == (out.error_m[0], out.error_m[0])


def test_day_risk_beyond_twenty_reports(small, matrices):
    """k = 288 (every 5 minutes) goes past panda.repeated's cap of 20: checked against an independent sample."""
    p, prior, d = matrices["em"], small.prior, small.d_km * 1000.0
    k = 288
    out = day_risk(p, prior, d, k, epsilon_per_km=2.0, n_sequences=600, rng=1)
    assert out.ks == (1, k) and out.stderr_m[1] > 0
    assert out.independent_budget_per_km == pytest.approx((2.0, 2.0 * k))
    assert out.defence_budget_per_km == pytest.approx((2.0, 2.0))
    assert out.defence_error_m[1] == pytest.approx(adversary_error_m(p, prior, d), rel=1e-12)
    rng = np.random.default_rng(99)
    errors = []
    for _ in range(150):
        x = rng.choice(prior.size, p=prior)
        post = posterior_after(prior, p, rng.choice(p.shape[1], size=k, p=p[x]))
        errors.append(float((post @ d).min()))
    se = float(np.std(errors, ddof=1) / math.sqrt(len(errors)))
    assert abs(out.error_m[1] - float(np.mean(errors))) < 4 * math.hypot(se, out.stderr_m[1])
    assert out.error_m[1] < out.error_m[0]  # 288 reports tell the attacker more than one


def test_bad_arguments(small, matrices):
    p, prior, d = matrices["em"], small.prior, small.d_km * 1000.0
    with pytest.raises(ValueError, match="radii_m"):
        risk_report(p, prior, d, radii_m=[-1.0])
    with pytest.raises(ValueError, match="worst_share"):
        risk_report(p, prior, d, worst_share=0.0)
    with pytest.raises(ValueError, match="weights"):
        risk_report(p, prior, d, weights="people")
    with pytest.raises(ValueError, match="matrix"):
        risk_report(p[:, :, None], prior, d)
    with pytest.raises(ValueError, match="reports_per_day"):
        day_risk(p, prior, d, 0)
    with pytest.raises(ValueError, match="reports_per_day"):
        day_risk(p, prior, d, 2.5)
