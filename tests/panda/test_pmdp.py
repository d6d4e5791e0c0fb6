"""The PmDP audit of PAnDA (exact over anchor draws) and the comparison entry point."""

from __future__ import annotations

import numpy as np
import pytest

import panda
from panda.accounting import phase1_cost_sparse
from panda.anchors import SelectionModel
from panda.compare import COLUMNS, compare
from panda.mechanisms.panda_mech import build_panda
from panda.phase2 import pair_log_ratio
from panda.pmdp import audit_panda, union_surrogate_probabilities


@pytest.fixture(scope="module")
def run(kotka):
    inst = panda.make_instance(kotka, n_records=60, n_outputs=20, n_users=8, seed=5)
    # A setting with a reachable target and some finite margins, so the audit has both outcomes.
    cfg = panda.preset(
        "paper",
        delta=0.3,
        alpha=0.8,
        lambda_per_km=1.5,
        gamma_km=0.6,
        far_rule="floor",
        far_floor=0.02,
        neighbourhood_size=3,
        bayes_adjustment=False,
        epsilon_per_km=8.0,
    )
    return inst, panda.run_panda(inst, cfg, seed=2)


def test_pmdp_audit_agrees_with_monte_carlo_anchor_draws(run):
    inst, res = run
    audit = audit_panda(res, inst, n_record_pairs=0)
    model = SelectionModel.build(inst, res.config, gamma_km=res.gamma_km)
    union = res.anchor_union
    in_union = np.zeros(inst.n_records, dtype=bool)
    in_union[union] = True
    row_of = {int(a): i for i, a in enumerate(union)}
    rng = np.random.default_rng(0)
    n_sim = 4000
    eps = res.config.epsilon_per_km
    checked = 0
    for k, (n, m) in enumerate(audit.user_pairs[:6]):
        xa, xb = res.user_records[n], res.user_records[m]
        d_ab = inst.distances_km_pairs(np.array([xa]), np.array([xb]))
        allowed = float((eps - phase1_cost_sparse(model, np.array([xa]), np.array([xb]), d_ab)[0]) * d_ab[0])
        w = model.rows_w(np.array([xa, xb]))
        d = inst.distances_km(np.array([xa, xb]))
        viol = unaud = 0
        for _ in range(n_sim):
            sur = []
            for r in range(2):
                drawn = (rng.random(inst.n_records) < w[r]) & in_union
                if not drawn.any():
                    sur.append(None)
                    continue
                idx = np.flatnonzero(drawn)
                sur.append(idx[np.lexsort((idx, d[r, idx]))[0]])
            if None in sur:
                unaud += 1
                continue
            lr = pair_log_ratio(res.z[row_of[sur[0]]], res.z[row_of[sur[1]]])
            viol += lr > allowed * (1 + 1e-9) + 1e-9
        p, u = audit.user_p_violation[k], audit.user_unaudited[k]
        assert viol / n_sim == pytest.approx(p, abs=5 * np.sqrt(max(p * (1 - p), 1e-4) / n_sim))
        assert unaud / n_sim == pytest.approx(u, abs=5 * np.sqrt(max(u * (1 - u), 1e-4) / n_sim))
        checked += 1
    assert checked == 6


def test_union_surrogate_probabilities_sum_to_at_most_one(run):
    inst, res = run
    model = SelectionModel.build(inst, res.config, gamma_km=res.gamma_km)
    v = union_surrogate_probabilities(model, np.arange(inst.n_records), res.anchor_union)
    assert np.all(v >= 0) and np.all(v.sum(axis=1) <= 1 + 1e-12)
    w = model.rows_w(np.arange(inst.n_records))[:, res.anchor_union]
    np.testing.assert_allclose(1 - v.sum(axis=1), np.prod(1 - w, axis=1), rtol=1e-9, atol=1e-12)


def test_panda_mechanism_matrix_is_row_stochastic(run):
    inst, res = run
    mech = build_panda(inst, 8.0, config=res.config, seed=2)
    assert mech.solved
    np.testing.assert_allclose(mech.matrix.sum(axis=1), 1.0, atol=1e-9)
    assert mech.loss_m > 0 and mech.name == "panda-e"


def test_panda_relaxed_bound_only_on_request_and_outside_the_build_time(run, monkeypatch):
    import time as _time

    import panda.pipeline as pipeline

    inst, res = run
    cfg = res.config.replace(solve_relaxed=True)  # the mechanism ignores the config's flag: the caller decides
    plain = build_panda(inst, 8.0, config=cfg, seed=2)
    assert "relaxed_lp" not in plain.details["panda"].timings_s
    real = pipeline.solve_mdp_lp

    def slow_relaxed(*args, **kwargs):  # a relaxed LP that takes at least 0.4 s, so leaving it out shows
        _time.sleep(0.4)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "solve_mdp_lp", slow_relaxed)
    with_bound = build_panda(inst, 8.0, config=cfg, seed=2, relaxed_bound=True)
    p = with_bound.details["panda"]
    assert p.relaxed_objective_m > 0 and p.approximation_ratio >= 1 - 1e-7
    np.testing.assert_allclose(with_bound.matrix, plain.matrix)  # the bound does not change the mechanism
    assert p.timings_s["relaxed_lp"] >= 0.4
    assert with_bound.build_time_s <= p.timings_s["total"] - p.timings_s["relaxed_lp"] + 0.2


def test_compare_returns_a_tidy_table_on_one_shared_instance(kotka):
    inst = panda.make_instance(kotka, n_records=40, n_outputs=15, n_users=6, seed=9)
    cfg = panda.preset("artifact", constraint_radius_km=None, epsilon_per_km=5.0)
    rows = compare(inst, ["em", "em-br", "lp", "lp-ca", "panda-e"], config=cfg, seed=0, time_limit_s=60)
    assert [r["method"] for r in rows] == ["em", "em-br", "lp", "lp-ca", "panda-e"]
    for r in rows:
        assert set(COLUMNS) <= set(r)
        assert r["status"] == "solved"
    by = {r["method"]: r for r in rows}
    assert by["em"]["violation_rate"] == 0.0 and by["lp"]["violation_rate"] == 0.0
    assert by["lp"]["utility_loss_m"] <= by["em"]["utility_loss_m"] + 1e-6
    assert by["em-br"]["utility_loss_m"] <= by["em"]["utility_loss_m"] + 1e-6
    assert 0.0 <= by["panda-e"]["pmdp_user_rate_over_delta"] <= 1.0
    with pytest.raises(ValueError, match="methods"):
        compare(inst, ["nope"], config=cfg)
