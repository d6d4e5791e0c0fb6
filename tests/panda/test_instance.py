"""Problem instances: reproducibility, road distances against networkx, cost matrix properties, bad input."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from conftest import OAKLAND_FILE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from panda.instance import METRICS, PRIORS, Instance, make_instance
from panda.network import haversine_km

ARRAYS = ("records", "outputs", "prior", "users", "tasks", "task_weights", "cost_m")


@pytest.fixture(scope="module")
def oakland_graph() -> nx.MultiDiGraph:
    """The fixture as osmnx reads it, independent of RoadNetwork's arrays (lengths in metres)."""
    import osmnx as ox

    return ox.graph_from_xml(OAKLAND_FILE, retain_all=True)


def _road_m(graph: nx.MultiDiGraph, a: int, b: int) -> float:
    return nx.shortest_path_length(graph, a, b, weight="length")


def _assert_instance_shapes(inst: Instance) -> None:
    k, m, n = inst.n_records, inst.n_outputs, inst.n_users
    assert inst.records.shape == (k,) and inst.outputs.shape == (m,) and inst.users.shape == (n,)
    assert inst.prior.shape == (k,) and inst.cost_m.shape == (k, m)
    assert len(np.unique(inst.records)) == k and np.all(np.diff(inst.records) > 0)
    assert inst.records.min() >= 0 and inst.records.max() < inst.network.n_nodes
    assert len(np.unique(inst.outputs)) == m and inst.outputs.min() >= 0 and inst.outputs.max() < k
    assert len(np.unique(inst.users)) == n and inst.users.min() >= 0 and inst.users.max() < k
    assert len(np.unique(inst.tasks)) == inst.tasks.shape[0] and inst.tasks.max() < k
    assert inst.prior.sum() == pytest.approx(1.0) and np.all(inst.prior > 0)
    assert inst.task_weights.sum() == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------
# Against networkx on the West Oakland fixture
# ---------------------------------------------------------------------------------------------


def test_road_metric_matches_networkx(oakland, oakland_graph):
    inst = make_instance(oakland, n_records=oakland.n_nodes, n_outputs=None, n_users=5, metric="road", seed=3)
    osm = oakland.osm_id[inst.records]
    expected = np.array(
        [[(_road_m(oakland_graph, a, b) + _road_m(oakland_graph, b, a)) / 2000.0 for b in osm] for a in osm]
    )
    np.testing.assert_allclose(inst.d_km, expected, rtol=1e-12, atol=1e-12)
    assert inst.d_max_km == pytest.approx(expected.max())
    rows = np.array([0, 4, 7])
    np.testing.assert_allclose(inst.distances_km(rows), expected[rows])
    np.testing.assert_allclose(inst.distances_km(rows, rows), expected[np.ix_(rows, rows)])
    np.testing.assert_allclose(inst.distances_km(slice(2, 5), rows), expected[2:5][:, rows])


def test_cost_matches_networkx(oakland, oakland_graph):
    inst = make_instance(oakland, n_records=15, n_outputs=8, n_users=4, n_tasks=3, seed=11)
    osm = oakland.osm_id[inst.records]
    road = np.array([[_road_m(oakland_graph, osm[t], x) for x in osm] for t in inst.tasks])  # (T, K)
    expected = np.zeros((inst.n_records, inst.n_outputs))
    for w, r in zip(inst.task_weights, road, strict=True):
        for x in range(inst.n_records):
            for j, y in enumerate(inst.outputs):
                expected[x, j] += w * abs(r[x] - r[y])
    np.testing.assert_allclose(inst.cost_m, expected, rtol=1e-12, atol=1e-9)


def test_haversine_metric(oakland):
    inst = make_instance(oakland, n_records=10, n_outputs=None, n_users=3, seed=1)
    lon, lat = oakland.lon[inst.records], oakland.lat[inst.records]
    for i in range(10):
        for j in range(10):
            assert inst.d_km[i, j] == pytest.approx(float(haversine_km(lon[i], lat[i], lon[j], lat[j])), abs=1e-12)
    np.testing.assert_array_equal(inst.lon, lon)
    np.testing.assert_array_equal(inst.lat, lat)


# ---------------------------------------------------------------------------------------------
# Properties on Kotka
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full_output(kotka) -> Instance:
    """Y = X, several tasks: every cost property can be checked on the whole matrix."""
    return make_instance(kotka, n_records=60, n_outputs=None, n_users=20, n_tasks=4, metric="road", seed=5)


def test_cost_is_nonnegative_and_zero_on_the_diagonal(full_output):
    cost = full_output.cost_m
    assert np.all(cost >= 0)
    # outputs == arange(K): the output y == x is position x.
    np.testing.assert_array_equal(full_output.outputs, np.arange(full_output.n_records))
    np.testing.assert_allclose(np.diag(cost), 0.0, atol=1e-9)


def test_cost_zero_where_output_is_the_true_record(kotka):
    inst = make_instance(kotka, n_records=50, n_outputs=20, n_users=10, n_tasks=2, seed=8)
    for j, y in enumerate(inst.outputs):  # y is a position in X
        assert inst.cost_m[y, j] == pytest.approx(0.0, abs=1e-9)


def test_cost_symmetric_in_x_and_y(full_output, kotka):
    np.testing.assert_allclose(full_output.cost_m, full_output.cost_m.T, atol=1e-9)
    # With Y a subset of X: cost[x, pos_of(y)] == cost[y, pos_of(x)] for x, y both in Y.
    inst = make_instance(kotka, n_records=50, n_outputs=20, n_users=10, n_tasks=2, seed=8)
    pos_of = {int(y): j for j, y in enumerate(inst.outputs)}
    for x in inst.outputs:
        for y in inst.outputs:
            assert inst.cost_m[x, pos_of[int(y)]] == pytest.approx(inst.cost_m[y, pos_of[int(x)]], abs=1e-9)


def test_cost_triangle_inequality(full_output):
    c = full_output.cost_m  # a weighted sum of |r_t(x) - r_t(y)|: a pseudometric
    assert np.all(c[:, None, :] <= c[:, :, None] + c[None, :, :] + 1e-6)  # c(x,z) <= c(x,y) + c(y,z)


def test_cost_single_task_is_difference_of_task_distances(kotka):
    inst = make_instance(kotka, n_records=40, n_outputs=None, n_users=5, n_tasks=1, metric="road", seed=2)
    t = inst.tasks[0]
    # c[x, y] = |r(x) - r(y)| with r(x) the road distance from the task: c[t, y] = r(y).
    r = inst.cost_m[t]
    np.testing.assert_allclose(inst.cost_m, np.abs(r[:, None] - r[None, :]), atol=1e-6)


@pytest.mark.parametrize("metric", METRICS)
def test_privacy_metric_is_a_metric(full_output, kotka, metric):
    inst = full_output if metric == "road" else make_instance(kotka, n_records=60, n_outputs=None, n_users=20, seed=5)
    d = inst.d_km
    assert np.all(d >= 0)
    np.testing.assert_allclose(np.diag(d), 0.0, atol=1e-12)
    np.testing.assert_allclose(d, d.T, atol=1e-12)
    off = d[~np.eye(inst.n_records, dtype=bool)]
    assert np.all(off > 0)  # distinct nodes are at positive distance
    assert np.all(d[:, None, :] <= d[:, :, None] + d[None, :, :] + 1e-9)
    assert inst.d_max_km == pytest.approx(d.max())


def test_haversine_d_max_without_full_matrix(kotka):
    inst = make_instance(kotka, n_records=100, n_outputs=10, n_users=10, seed=4)
    d_max = inst.d_max_km  # computed block by block
    assert "d_km" not in inst._cache
    assert d_max == pytest.approx(inst.d_km.max())


def test_street_count_prior_and_prior_users(kotka):
    inst = make_instance(
        kotka, n_records=80, n_outputs=20, n_users=30, prior="street_count", user_distribution="prior", seed=9
    )
    _assert_instance_shapes(inst)
    weights = np.maximum(kotka.street_count[inst.records].astype(float), 1.0)
    np.testing.assert_allclose(inst.prior, weights / weights.sum())
    uniform = make_instance(kotka, n_records=80, n_outputs=20, n_users=30, seed=9)
    np.testing.assert_allclose(uniform.prior, 1.0 / 80)


def test_summary(kotka):
    inst = make_instance(kotka, n_records=30, n_outputs=10, n_users=5, n_tasks=2, metric="road", seed=6)
    assert inst.summary() == {
        "network": "kotka",
        "n_records": 30,
        "n_outputs": 10,
        "n_users": 5,
        "n_tasks": 2,
        "loss": "task",
        "loss_label": "the paper's task cost (2 tasks)",
        "metric": "road",
        "seed": 6,
    }


# ---------------------------------------------------------------------------------------------
# Loss functions
# ---------------------------------------------------------------------------------------------


def test_distance_losses_are_the_distances_from_place_to_report(kotka):
    road = make_instance(kotka, n_records=60, n_outputs=15, n_users=5, metric="road", loss="road", seed=3)
    # The road loss is the road metric in metres (the mean of both directions), column by column.
    np.testing.assert_allclose(road.cost_m, 1000.0 * road.d_km[:, road.outputs], rtol=1e-12, atol=1e-9)
    straight = make_instance(kotka, n_records=60, n_outputs=15, n_users=5, loss="straight", seed=3)
    lon, lat = straight.lon, straight.lat
    x, j = 7, 4
    y = straight.outputs[j]
    assert straight.cost_m[x, j] == pytest.approx(1000.0 * float(haversine_km(lon[x], lat[x], lon[y], lat[y])))
    # Reporting the place itself costs nothing; a road is never shorter than the straight line.
    assert np.all(straight.cost_m[straight.outputs, np.arange(15)] == 0.0)
    assert np.all(road.cost_m >= straight.cost_m - 1e-6)
    # The loss changes nothing else: the same records, outputs, users and prior.
    task = make_instance(kotka, n_records=60, n_outputs=15, n_users=5, seed=3)
    for field in ("records", "outputs", "users", "prior", "tasks"):
        np.testing.assert_array_equal(getattr(task, field), getattr(road, field))
        np.testing.assert_array_equal(getattr(task, field), getattr(straight, field))
    assert (task.loss, road.loss, straight.loss) == ("task", "road", "straight")


def test_one_task_makes_far_reports_free_and_the_distance_loss_does_not(kotka):
    # The paper's one-task cost charges nothing for a report at the same road distance from the task,
    # however far it is from the place: the distance loss charges its length.
    task = make_instance(kotka, n_records=80, n_outputs=80, n_users=5, seed=1)
    road = make_instance(kotka, n_records=80, n_outputs=80, n_users=5, loss="road", seed=1)
    free_far = (task.cost_m < 1.0) & (road.cost_m > 500.0)
    assert free_far.any()


def test_unknown_loss_is_refused(kotka):
    with pytest.raises(ValueError, match="'loss' parameter of make_instance must be one of"):
        make_instance(kotka, n_records=20, n_outputs=5, n_users=2, loss="euclid")


# ---------------------------------------------------------------------------------------------
# Reproducibility
# ---------------------------------------------------------------------------------------------


def test_same_seed_same_instance(kotka):
    a = make_instance(kotka, n_records=50, n_outputs=20, n_users=10, n_tasks=2, seed=42)
    b = make_instance(kotka, n_records=50, n_outputs=20, n_users=10, n_tasks=2, seed=42)
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.seed == b.seed == 42


def test_different_seed_different_instance(kotka):
    a = make_instance(kotka, n_records=50, n_outputs=20, n_users=10, seed=1)
    b = make_instance(kotka, n_records=50, n_outputs=20, n_users=10, seed=2)
    assert not np.array_equal(a.records, b.records)
    assert not np.array_equal(a.cost_m, b.cost_m)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(2, 60),
    data=st.data(),
)
def test_instances_are_valid_for_any_seed_and_sizes(kotka, seed, k, data):
    m = data.draw(st.one_of(st.none(), st.integers(1, k)), label="n_outputs")
    n = data.draw(st.integers(1, k), label="n_users")
    t = data.draw(st.integers(1, min(k, 4)), label="n_tasks")
    prior = data.draw(st.sampled_from(PRIORS), label="prior")
    inst = make_instance(kotka, n_records=k, n_outputs=m, n_users=n, n_tasks=t, prior=prior, seed=seed)
    _assert_instance_shapes(inst)
    assert inst.n_outputs == (k if m is None else m)
    assert np.all(inst.cost_m >= 0) and np.all(np.isfinite(inst.cost_m))
    again = make_instance(kotka, n_records=k, n_outputs=m, n_users=n, n_tasks=t, prior=prior, seed=seed)
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(inst, name), getattr(again, name))


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "expected"),
    [
        ({"n_records": 225}, ValueError, "at most the network's 224 nodes"),
        ({"n_records": 10**6}, ValueError, "at most the network's 224 nodes"),
        ({"n_records": 1}, ValueError, "'n_records' parameter of make_instance must be an int >= 2"),
        ({"n_records": 0}, ValueError, "'n_records'"),
        ({"n_records": -5}, ValueError, "'n_records'"),
        ({"n_records": 2.5}, TypeError, "'n_records' parameter of make_instance must be an int"),
        ({"n_records": True}, TypeError, "'n_records'"),
        ({"n_records": "50"}, TypeError, "'n_records'"),
        ({"n_users": 51}, ValueError, "'n_users' parameter of make_instance must be at most n_records \\(50\\)"),
        ({"n_users": 0}, ValueError, "'n_users'"),
        ({"n_users": -1}, ValueError, "'n_users'"),
        ({"n_outputs": 0}, ValueError, "'n_outputs'"),
        ({"n_outputs": 51}, ValueError, "'n_outputs' parameter of make_instance must be at most n_records"),
        ({"n_tasks": 0}, ValueError, "'n_tasks'"),
        ({"n_tasks": 51}, ValueError, "'n_tasks'"),
        ({"prior": "gaussian"}, ValueError, "'prior' parameter of make_instance must be one of"),
        ({"prior": None}, ValueError, "'prior'"),
        ({"metric": "euclidean"}, ValueError, "'metric' parameter of make_instance must be one of"),
        ({"metric": "Road"}, ValueError, "'metric'"),
        ({"user_distribution": "zipf"}, ValueError, "'user_distribution'"),
    ],
)
def test_make_instance_rejects(kotka, kwargs, error, expected):
    args = {"n_records": 50, "n_outputs": 20, "n_users": 10, **kwargs}
    with pytest.raises(error, match=expected):
        make_instance(kotka, **args)


def test_make_instance_rejects_a_non_network():
    with pytest.raises(TypeError, match="must be a RoadNetwork"):
        make_instance("kotka", n_records=10)


def test_whole_network_as_domain(oakland):
    inst = make_instance(oakland, n_records=oakland.n_nodes, n_outputs=None, n_users=oakland.n_nodes, seed=0)
    np.testing.assert_array_equal(inst.records, np.arange(oakland.n_nodes))
    assert inst.n_users == oakland.n_nodes
