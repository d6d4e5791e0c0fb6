"""Instances bounded (issue 38, item 3): the dense tables an instance needs, stated before anything is drawn.

make_instance refuses, at once and in a sentence, an instance whose tables would exceed the limit; the tables it
builds are filled a block at a time, so what it holds is what instance_footprint says, whatever the network's size;
the largest views the dashboard's controls allow on the embedded cities stay well under the limit.
"""

from __future__ import annotations

import math
import pickle
import time
import tracemalloc

import numpy as np
import pytest

import panda
from panda.network import RoadNetwork

ARRAYS = ("records", "outputs", "prior", "users", "tasks", "task_weights", "cost_m")
#: The 1-D vectors (one entry per node or edge: the draws, the prior, the reversed graph) that the footprint leaves
#: out, in bytes per node of a grid (four directed edges a node).
VECTOR_BYTES_PER_NODE = 64


def grid(side: int, spacing_m: float = 100.0) -> RoadNetwork:
    """A ``side`` x ``side`` grid of two-way streets ``spacing_m`` apart (a synthetic upload of any size)."""
    n = side * side
    idx = np.arange(n).reshape(side, side)
    u = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    v = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    u, v = np.concatenate([u, v]), np.concatenate([v, u])
    deg = spacing_m / 111_195.0
    return RoadNetwork(
        name=f"grid{side}",
        osm_id=np.arange(n, dtype=np.int64),
        lon=13.0 + (idx % side).ravel() * deg,
        lat=53.0 + (idx // side).ravel() * deg,
        street_count=np.full(n, 4),
        edge_u=u,
        edge_v=v,
        edge_length_m=np.full(u.size, spacing_m),
    )


def test_an_instance_over_the_limit_is_refused_at_once_with_a_sentence():
    """A 300,000-node upload (the largest the dashboard accepts) with K = 12,000 places: the K x K distance table
    alone is 1.15 GB. The refusal comes before any table is drawn: no time, no memory."""
    net = grid(548)  # 300,304 nodes
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=r"^This view needs about ") as caught:
            panda.make_instance(net, n_records=12_000, n_outputs=1_000, n_users=50, seed=0)
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0 and peak < 1_000_000, (elapsed, peak)
    text = str(caught.value)
    assert text == (
        "This view needs about 1.3 GB of distance tables (K = 12,000, M = 1,000 on a network of 300,304 nodes); "
        "the limit is 1.0 GB: choose fewer places, fewer outputs, or a smaller area."
    )
    from panda.instance import InstanceTooLargeError

    assert isinstance(caught.value, InstanceTooLargeError)
    # The same answer without drawing anything (what the dashboard asks before it sends the work to a worker).
    with pytest.raises(InstanceTooLargeError, match=r"^This view needs about 1\.3 GB"):
        panda.instance.check_instance_arguments(net, n_records=12_000, n_outputs=1_000)


@pytest.mark.parametrize(("loss", "n_tasks", "n_outputs"), [("task", 150, 50), ("road", 1, 150)])
def test_the_tables_held_are_the_footprint_whatever_the_network(loss, n_tasks, n_outputs):
    """The shortest paths from every output (or task) to every node of a 40,000-node grid would be 48 MB: built a
    block of sources at a time, only the columns of the places are kept, as instance_footprint counts."""
    net = grid(200)
    net.adjacency  # noqa: B018 (the network's own sparse graph, built before the count)
    fp = panda.instance.instance_footprint(net.n_nodes, 300, n_outputs, loss=loss, n_tasks=n_tasks)
    tracemalloc.start()
    try:
        inst = panda.make_instance(
            net, n_records=300, n_outputs=n_outputs, n_users=5, n_tasks=n_tasks, loss=loss, seed=0
        )
        inst.d_km  # noqa: B018 (the K x K table the attacker view builds)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= fp + VECTOR_BYTES_PER_NODE * net.n_nodes, (peak, fp)
    assert fp < 0.5 * 8 * max(n_tasks, n_outputs) * net.n_nodes  # far below sources x nodes


def test_the_largest_views_of_the_dashboard_on_every_embedded_city_are_under_the_limit():
    from app.model.params import RANGES

    k_max, m_max, t_max = (int(RANGES[name][1]) for name in ("n_records", "n_outputs", "n_tasks"))
    for city in panda.list_cities():
        n = panda.load_city(city).n_nodes
        k = min(k_max, n)  # the sidebar offers K up to the network's nodes
        for loss in panda.instance.LOSSES:
            fp = panda.instance.instance_footprint(n, k, min(m_max, k), loss=loss, n_tasks=min(t_max, k))
            assert fp < panda.instance.MAX_DENSE_BYTES / 2, (city, loss, fp)
    # Whatever the network: the controls' largest sizes on the largest upload (300,000 nodes).
    assert panda.instance.instance_footprint(300_000, k_max, m_max, loss="road") < panda.instance.MAX_DENSE_BYTES / 2


def test_the_limit_is_read_when_called_and_can_be_lifted(kotka, monkeypatch):
    with pytest.raises(ValueError, match=r"the limit is 1 kB: choose fewer places"):
        panda.make_instance(kotka, n_records=60, n_outputs=20, n_users=5, max_bytes=1_000)
    monkeypatch.setattr(panda.instance, "MAX_DENSE_BYTES", 1_000)
    with pytest.raises(ValueError, match=r"K = 60, M = 20, 3 tasks on a network of 224 nodes"):
        panda.make_instance(kotka, n_records=60, n_outputs=20, n_users=5, n_tasks=3)
    inst = panda.make_instance(kotka, n_records=60, n_outputs=20, n_users=5, max_bytes=math.inf)
    assert inst.cost_m.shape == (60, 20)
    # The other checks come first, with their own messages.
    with pytest.raises(ValueError, match="must be at most the network's 224 nodes"):
        panda.instance.check_instance_arguments(kotka, n_records=500)


@pytest.mark.parametrize(("loss", "metric"), [("road", "road"), ("task", "haversine"), ("straight", "haversine")])
def test_blocks_of_any_size_give_the_same_tables(kotka, monkeypatch, loss, metric):
    """Filled in blocks of 500 entries (a handful of sources or rows at a time) or in one block: the same bits."""
    kw = {"n_records": 150, "n_outputs": 40, "n_users": 5, "n_tasks": 7, "loss": loss, "metric": metric, "seed": 2}
    whole = panda.make_instance(kotka, **kw)
    monkeypatch.setattr(panda.instance, "_BLOCK_ENTRIES", 500)
    blocks = panda.make_instance(kotka, **kw)
    for name in ARRAYS:
        assert np.array_equal(getattr(whole, name), getattr(blocks, name)), name
    assert np.array_equal(whole.d_km, blocks.d_km)
    assert whole.cost_m.flags.c_contiguous and blocks.cost_m.flags.c_contiguous  # rows quick to pick


def test_a_pickled_instance_leaves_its_distance_table_behind(kotka):
    """A job pickles its instance: the K x K table one page asked for does not travel with it (the worker rebuilds
    it when it needs it)."""
    inst = panda.make_instance(kotka, n_records=120, n_outputs=30, n_users=5, seed=1)
    d = inst.d_km.copy()
    back = pickle.loads(pickle.dumps(inst))
    assert "d_km" in inst._cache and back._cache == {}
    assert len(pickle.dumps(inst)) < 120 * 120 * 8
    for name in ARRAYS:
        assert np.array_equal(getattr(inst, name), getattr(back, name)), name
    assert np.array_equal(back.d_km, d)


def test_the_instance_job_gives_the_fields_of_make_instance(kotka):
    """What the dashboard's worker sends back: every field but the network, put together again on the server's."""
    from panda.jobs import instance_job

    fields = instance_job(kotka, 80, 6, 25, 3, "road", 1, "street_count", lambda *_: None)
    assert "network" not in fields and "_cache" not in fields
    inst = panda.Instance(network=kotka, **fields)
    direct = panda.make_instance(
        kotka, n_records=80, n_users=6, n_outputs=25, seed=3, loss="road", prior="street_count"
    )
    for name in ARRAYS:
        assert np.array_equal(getattr(inst, name), getattr(direct, name)), name
    assert (inst.loss, inst.metric, inst.seed) == ("road", "haversine", 3)
