"""The compiled min-plus loops (panda._min_plus) give numpy's results to the bit, edge values included."""

from __future__ import annotations

import numpy as np
import pytest

import panda
import panda.lp as lp
import panda.optimal.near as near_mod
import panda.optimal.repair as repair
from panda._min_plus import chunk_min_plus, mix_ratio, rows_min_plus
from panda.optimal import solve_optimal
from panda.optimal.driver import _prepared

pytestmark = pytest.mark.skipif(rows_min_plus is None, reason="numba does not import here")


@pytest.fixture(scope="module")
def exponent_and_near():
    inst = panda.make_instance(panda.load_city("liechtenstein"), n_records=120, n_outputs=30, n_users=5, seed=2)
    exponent, _, near = _prepared(inst.distances_km(), 5.0, 1e-6, 30)
    assert near is not None  # the near-list path is the one under test
    return exponent, near


def _log_matrix(seed: int, shape: tuple[int, int]) -> np.ndarray:
    """Logs of a sparse-ish stochastic matrix, with the values the repair meets: +inf, -inf and ties."""
    rng = np.random.default_rng(seed)
    w = -np.log(rng.dirichlet(np.full(shape[1], 0.3), size=shape[0]))
    w[rng.random(shape) < 0.05] = np.inf
    w[rng.random(shape) < 0.03] = -np.inf
    w[1] = w[0]  # a duplicated row: ties everywhere
    return w


def _numpy_only(monkeypatch) -> None:
    monkeypatch.setattr(lp, "rows_min_plus", None)
    monkeypatch.setattr(near_mod, "chunk_min_plus", None)
    monkeypatch.setattr(repair, "mix_ratio", None)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("exclude_self", [False, True])
def test_dense_min_plus_is_numpys_to_the_bit(exponent_and_near, monkeypatch, seed, exclude_self):
    exponent, _ = exponent_and_near
    w = _log_matrix(seed, (exponent.shape[0], 30))
    fast = lp._min_plus(w, exponent, exclude_self=exclude_self)
    _numpy_only(monkeypatch)
    slow = lp._min_plus(w, exponent, exclude_self=exclude_self)
    assert fast.tobytes() == slow.tobytes()
    assert np.isneginf(fast).any() and np.isfinite(fast).any()  # the edge values reached the result


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_near_min_plus_is_numpys_to_the_bit(exponent_and_near, monkeypatch, seed):
    exponent, near = exponent_and_near
    w = _log_matrix(seed, (exponent.shape[0], 30))
    fast = near.min_plus(w)
    _numpy_only(monkeypatch)
    slow = near.min_plus(w)
    assert fast.tobytes() == slow.tobytes()


def test_all_nan_terms_give_what_numpy_gives():
    """Every term NaN (inf + -inf): the near product says inf (as its numpy form), the dense one NaN (as fmin)."""
    w = np.full((2, 3), -np.inf)
    out = np.empty_like(w)
    chunk_min_plus(np.arange(2), np.array([[1], [0]]), np.full((2, 1), np.inf), w, out)  # padding only
    assert np.isposinf(out).all()
    e = np.array([[np.inf, np.inf], [np.inf, np.inf]])
    rows_min_plus(e, 0, False, w, out)
    assert np.isnan(out).all()
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.fmin.reduce(e[:, :, None] + w[None, :, :], axis=1)).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_uniform_mixing_weight_is_numpys(exponent_and_near, monkeypatch, seed):
    exponent, near = exponent_and_near
    rng = np.random.default_rng(seed)
    z = np.maximum(rng.dirichlet(np.full(30, 0.3), size=exponent.shape[0]), 1e-6)
    z /= z.sum(axis=1, keepdims=True)
    fast = [repair._uniform_mix_weight(z, exponent, near=n) for n in (near, None)]
    _numpy_only(monkeypatch)
    slow = [repair._uniform_mix_weight(z, exponent, near=n) for n in (near, None)]
    assert fast == slow
    assert 0.0 < fast[1] < 1.0  # violated, and mixing mends it


def test_mixing_ratio_of_a_violated_pair_at_distance_zero_is_infinite():
    z = np.array([[0.9, 0.1], [0.1, 0.9]])
    assert mix_ratio(np.arange(1), np.array([[1]]), np.array([[1.0]]), z) == np.inf
    # and of a pair with room: (0.9 - 2 * 0.1) / ((2 - 1) / 2)
    assert mix_ratio(np.arange(1), np.array([[1]]), np.array([[2.0]]), z) == pytest.approx(1.4)


def test_warming_up_compiles_what_a_solve_runs(exponent_and_near):
    """warm_up (a Docker build step) compiles each loop's one signature: a repair on both paths compiles nothing new."""
    import panda._min_plus as mp

    assert mp.warm_up()
    kernels = (mp.chunk_min_plus, mp.rows_min_plus, mp.mix_ratio)
    warmed = [set(kernel.signatures) for kernel in kernels]
    exponent, near = exponent_and_near
    rng = np.random.default_rng(3)
    z = rng.dirichlet(np.full(30, 0.3), size=exponent.shape[0])
    for n in (near, None):
        _, info = repair.exact_repair(z, exponent, eta=1e-6, cost=rng.random(z.shape), near=n)
        assert info["max_log_excess_before"] > 0  # repaired: min-plus products ran
        assert repair._uniform_mix_weight(z, exponent, near=n) > 0
    for city in ("liechtenstein", "kotka"):  # whole solves, on the near lists and on all pairs
        inst = panda.make_instance(panda.load_city(city), n_records=80, n_outputs=30, n_users=5, seed=1)
        res = solve_optimal(inst.prior[:, None] * inst.cost_m, inst.d_km, 5.0, method="pdhg", max_rounds=3)
        assert np.isfinite(res.upper_bound)
    assert all(warmed)
    assert [set(kernel.signatures) for kernel in kernels] == warmed  # nothing compiled for the repairs
