"""panda.threads: the certificate's independent pieces on several threads give what one thread gives."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import panda.lp
import panda.optimal
import panda.threads as threads
from panda.instance import make_instance
from panda.optimal import best_pair_multipliers, exact_repair, separate_right


def test_thread_map_keeps_the_order_and_uses_the_pool(monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 2)
    names = []

    def square(i):
        names.append(threading.current_thread().name)
        return i * i

    assert threads.thread_map(square, range(50)) == [i * i for i in range(50)]
    assert any(name.startswith("panda") for name in names)


def test_a_nested_thread_map_runs_serially_instead_of_waiting_on_itself(monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 2)
    inner = threads.thread_map(lambda i: threads.thread_map(lambda j: (i, j), range(3)), range(4))
    assert inner == [[(i, j) for j in range(3)] for i in range(4)]


@pytest.fixture(scope="module")
def certificate_inputs(kotka):
    # K x M = 22,400 entries: the min-plus products and the separation split the records in two blocks.
    inst = make_instance(kotka, n_records=224, n_outputs=100, n_users=10, seed=1)
    eps, eta = 2.0, 1e-6
    cost = inst.prior[:, None] * inst.cost_m
    exponent = eps * inst.d_km
    a_full = np.where(exponent < np.log(1 / eta), np.exp(exponent), np.inf)
    np.fill_diagonal(a_full, np.inf)
    rng = np.random.default_rng(0)
    z = rng.dirichlet(np.ones(100), size=224)
    return cost, a_full, z, eta, exponent


def test_the_certificate_on_threads_equals_the_one_on_one_thread(monkeypatch, certificate_inputs):
    cost, a_full, z, eta, exponent = certificate_inputs
    calls = []

    def counting_map(fn, items):
        items = list(items)
        calls.append(len(items))
        return threads.thread_map(fn, items)

    for module in (panda.lp, panda.optimal):  # the modules that split work
        monkeypatch.setattr(module, "thread_map", counting_map)
    results = {}
    for n in (1, 2):
        monkeypatch.setattr(threads, "THREADS", n)
        s, x, y, score = separate_right(z, a_full)
        u = cost.min(axis=1) + 5.0
        lam, _ = best_pair_multipliers(cost, u, s, x, y, a_full[s, x], eta=eta)
        repaired, _ = exact_repair(z, exponent, eta=eta, cost=cost)  # min-plus products over blocks
        results[n] = (s, x, y, score, lam, repaired)
    assert min(calls) >= 2  # every threaded loop had work to split
    assert results[1][0].size > 100  # a random matrix violates many pair rows
    assert (results[1][4] > 0).any()  # and some multipliers are positive
    for one, two in zip(results[1], results[2], strict=True):
        np.testing.assert_array_equal(one, two)


def test_a_forked_child_makes_its_own_pool(monkeypatch):
    import multiprocessing

    monkeypatch.setattr(threads, "THREADS", 2)
    assert threads.thread_map(abs, [-1, -2]) == [1, 2]  # the parent's pool exists now
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:  # a child that inherits the parent's pool object, not its threads
        assert pool.apply_async(threads.thread_map, (abs, [-3, -4])).get(timeout=20) == [3, 4]
