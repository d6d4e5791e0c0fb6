"""The fast safety-margin search returns exactly what the former search returned.

``tests/support/margins_reference.py`` is the margin search as it was before the fast version (commit
32100d1). On seeded instances of three embedded cities and several presets, both run on the same
anchor pairs: the margins must be bit-identical (``inf`` and ``nan`` included) and every flag equal.
"""

from __future__ import annotations

import margins_reference as ref
import numpy as np
import pytest

import panda
import panda._margin_chunks as chunks
import panda.margins as pm
from panda.anchors import SelectionModel, sample_anchor_sets

#: (preset, overrides): the three presets, plus settings whose targets are reachable (finite margins
#: found by the search itself, not by the fallback) and a fallback run with reachable targets.
SETTINGS = [
    ("artifact", {"constraint_radius_km": None}),
    ("paper", {}),
    ("recommended", {}),
    ("paper", {"gamma_km": 0.35, "lambda_per_km": 1.0, "alpha": 0.9, "delta": 0.3, "bayes_adjustment": False}),
    ("artifact", {"delta": 0.02, "neighbourhood_size": 3}),
    ("paper", {"gamma_km": 0.2, "alpha": 0.9, "delta": 0.1, "bayes_adjustment": False, "neighbourhood_size": 3}),
    ("artifact", {"delta": 0.2, "bayes_adjustment": False, "neighbourhood_size": 4}),
    ("recommended", {"delta": 0.4, "gamma_km": 0.3}),
    ("artifact", {"gamma_km": 0.2, "delta": 0.1, "bayes_adjustment": False, "neighbourhood_size": 3}),
]


def _pairs(network: str, n_records: int, name: str, overrides: dict, seed: int):
    inst = panda.make_instance(panda.load_city(network), n_records=n_records, n_outputs=30, n_users=20, seed=seed)
    model = SelectionModel.build(inst, panda.preset(name, **overrides))
    sets = sample_anchor_sets(model, inst.users, rng=np.random.default_rng(seed))
    union = np.unique(np.concatenate(sets))
    i, j = np.triu_indices(union.size, 1)
    keep = np.random.default_rng(seed).random(i.size) < min(1.0, 1500 / max(i.size, 1))
    return model, union[i[keep]], union[j[keep]]


@pytest.mark.parametrize(
    "network,n_records,seed", [("kotka", 224, 0), ("neubrandenburg", 400, 1), ("liechtenstein", 300, 2)]
)
@pytest.mark.parametrize("name,overrides", SETTINGS)
def test_safety_margins_are_bit_identical_to_the_former_search(network, n_records, seed, name, overrides):
    model, x, x2 = _pairs(network, n_records, name, overrides, seed)
    new = pm.safety_margins(model, x, x2)
    old = ref.safety_margins(model, x, x2)
    for field in ("xi_hat", "target", "bayes_prob", "unreachable", "fallback_used"):
        np.testing.assert_array_equal(getattr(new, field), getattr(old, field), err_msg=field, strict=True)


@pytest.mark.parametrize("chunk", [2_000_000, 3_000])
@pytest.mark.parametrize("name,overrides", [SETTINGS[0], SETTINGS[5], SETTINGS[6], SETTINGS[8]])
def test_every_chunk_through_the_grid_path_is_bit_identical(monkeypatch, name, overrides, chunk):
    """No chunk falls back to sorting whole (the grid path answers it), with large and with tiny chunks."""
    monkeypatch.setattr(chunks, "_MAX_SORTED_SHARE", 1.0)
    monkeypatch.setattr(pm, "CHUNK_CANDIDATES", chunk)
    monkeypatch.setattr(ref, "CHUNK_CANDIDATES", chunk)
    calls = {"grid": 0, "whole": 0}
    original = pm._GridPlan.chunk

    def counted(self, *args):
        out = original(self, *args)
        calls["grid" if out is not None else "whole"] += 1
        return out

    monkeypatch.setattr(pm._GridPlan, "chunk", counted)
    for network, n_records, seed in [("kotka", 224, 0), ("neubrandenburg", 400, 1), ("liechtenstein", 300, 2)]:
        model, x, x2 = _pairs(network, n_records, name, overrides, seed)
        new, old = pm.safety_margins(model, x, x2), ref.safety_margins(model, x, x2)
        for field in ("xi_hat", "target", "bayes_prob", "unreachable", "fallback_used"):
            np.testing.assert_array_equal(getattr(new, field), getattr(old, field), err_msg=field, strict=True)
    assert calls["grid"] > 0


@pytest.mark.parametrize("share", [0.3, 1.0])
@pytest.mark.parametrize("fallback", ["infinite", "second_largest"])
@pytest.mark.parametrize("network", ["kotka", "liechtenstein"])
def test_margin_for_records_is_bit_identical_for_any_target(monkeypatch, network, fallback, share):
    """Random record pairs (p == q included) and targets from 0 to above 1, both fallbacks."""
    monkeypatch.setattr(chunks, "_MAX_SORTED_SHARE", share)
    inst = panda.make_instance(panda.load_city(network), n_records=200, n_outputs=20, n_users=10, seed=3)
    cfg = panda.preset("paper", gamma_km=0.5, alpha=0.9, margin_fallback=fallback)
    model = SelectionModel.build(inst, cfg)
    rng = np.random.default_rng(4)
    p = rng.integers(0, inst.n_records, 3000)
    q = np.where(rng.random(3000) < 0.05, p, rng.integers(0, inst.n_records, 3000))
    t = rng.choice([0.0, 1e-9, 0.1, 0.5, 0.9, 0.99, 1 - 1e-7, 1.0, 1.5], 3000)
    t[::7] = rng.random(t[::7].size)
    xi_new, ok_new = pm.margin_for_records(model, p, q, t, fallback=fallback)
    xi_old, ok_old = ref.margin_for_records(model, p, q, t, fallback=fallback)
    np.testing.assert_array_equal(xi_new, xi_old, strict=True)
    np.testing.assert_array_equal(ok_new, ok_old, strict=True)


@pytest.mark.parametrize("network,n_records", [("kotka", 224), ("liechtenstein", 500), ("helsinki", 800)])
def test_the_pruned_diameter_equals_the_all_pairs_maximum(network, n_records):
    """gamma = d_max / div: the pruned diameter (K = 20,000 in 0.02 s instead of 20 s) is the brute-force value."""
    for seed in range(3):
        inst = panda.make_instance(panda.load_city(network), n_records=n_records, n_users=5, seed=seed)
        brute = max(
            float(inst.distances_km(np.arange(s, min(s + 100, n_records))).max()) for s in range(0, n_records, 100)
        )
        assert inst.d_max_km == brute
