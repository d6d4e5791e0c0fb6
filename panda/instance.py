"""Problem instances: secret domain, outputs, prior, users, tasks, privacy distances, utility cost.

Indices: ``records`` are node indices into the road network; every other index (``outputs``,
``users``, ``tasks``, rows and columns of ``cost_m``) is a *position in the secret domain X*,
``0 .. n_records-1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.sparse.csgraph import dijkstra

from panda.network import RoadNetwork, haversine_km
from panda.priors import PRIOR_NAMES, prior_for_records

__all__ = [
    "Instance",
    "make_instance",
    "METRICS",
    "PRIORS",
    "LOSSES",
    "LOSS_LABELS",
    "loss_label",
    "MAX_DENSE_BYTES",
    "InstanceTooLargeError",
    "instance_footprint",
    "check_instance_arguments",
]

METRICS = ("haversine", "road")
#: Loss functions (what a report costs the person who makes it, in metres): see :func:`make_instance`.
LOSSES = ("road", "straight", "task")
#: Short names of the loss functions, for tables, charts and help texts.
LOSS_LABELS = {
    "road": "road distance from the place to its report",
    "straight": "straight-line distance from the place to its report",
    "task": "the paper's task cost",
}
PRIORS = PRIOR_NAMES  # ("uniform", "street_count", "road_density", "poi")
USER_DISTRIBUTIONS = ("uniform", "prior")

Metric = Literal["haversine", "road"]

#: Largest footprint (:func:`instance_footprint`) :func:`make_instance` accepts by default: 10**9 bytes (1 GB) of
#: float64 tables. Why this number: the largest view the dashboard's controls allow on an embedded city (the paper's
#: Rome network, 42,894 nodes, at K = 5,000, M = 1,000 and the road loss, with the K x K distance table of the
#: attacker view) needs about 0.34 GB, a third of it, and every other embedded city 0.16 GB or less (K is at most
#: its number of nodes); the tables do not grow with the network (they are filled a block of sources at a
#: time), so the limit holds on any upload too. One instance at the limit still fits a dashboard worker's memory
#: on an 8 GB machine with three workers (they share 40 % of it), while a library user who wants a larger one
#: passes ``max_bytes=math.inf``.
MAX_DENSE_BYTES = 1_000_000_000
#: Entries of one block of rows (float64: 16 MB) when a table with many columns is filled a block at a time
#: (shortest paths from many sources, great-circle distances): its largest temporary, whatever K and the network.
_BLOCK_ENTRIES = 2_000_000
#: Temporaries of :func:`panda.network.haversine_km` on a block, in blocks (its broadcast terms live at once).
_HAVERSINE_TEMPORARIES = 4


@dataclass(frozen=True, eq=False)
class Instance:
    """Everything a mechanism needs, built reproducibly by :func:`make_instance`.

    Attributes
    ----------
    network
        The road network the records are drawn from.
    records
        ``(K,)`` node indices of the secret domain X.
    outputs
        ``(M,)`` positions in X of the output set Y.
    prior
        ``(K,)`` prior over X (sums to 1).
    users
        ``(N,)`` positions in X of the users' true records (distinct).
    tasks, task_weights
        ``(T,)`` positions in X of the tasks and their weights ``p_t`` (sum to 1). Drawn for every loss (so
        that the other draws do not depend on the loss) and used only by the ``"task"`` loss.
    cost_m
        ``(K, M)`` utility loss in metres of reporting output ``y`` from record ``x``, under ``loss``.
    metric
        The privacy metric: ``"haversine"`` (great-circle km) or ``"road"`` (road km, the mean of
        both directions, which is a metric).
    seed
        The seed the instance was built from.
    loss
        The loss function behind ``cost_m``: ``"road"`` (road distance from the place to its report, the
        mean of both directions), ``"straight"`` (great-circle distance) or ``"task"`` (the paper's cost,
        ``sum_t p_t |road(t, x) - road(t, y)|``).
    """

    network: RoadNetwork
    records: np.ndarray
    outputs: np.ndarray
    prior: np.ndarray
    users: np.ndarray
    tasks: np.ndarray
    task_weights: np.ndarray
    cost_m: np.ndarray
    metric: str
    seed: int | None
    loss: str = "task"
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_records(self) -> int:
        """K, the size of the secret domain."""
        return int(self.records.shape[0])

    @property
    def n_outputs(self) -> int:
        """|Y|."""
        return int(self.outputs.shape[0])

    @property
    def n_users(self) -> int:
        """N."""
        return int(self.users.shape[0])

    @property
    def lon(self) -> np.ndarray:
        """``(K,)`` longitudes of the records, degrees."""
        return self.network.lon[self.records]

    @property
    def lat(self) -> np.ndarray:
        """``(K,)`` latitudes of the records, degrees."""
        return self.network.lat[self.records]

    def distances_km(
        self, rows: np.ndarray | slice | None = None, cols: np.ndarray | slice | None = None
    ) -> np.ndarray:
        """Privacy distances in km between records ``rows`` and ``cols`` (positions in X).

        Computed on demand (haversine) or read from the road-distance matrix, so a caller that
        needs ``|A| x K`` never builds ``K x K``.
        """
        rows = slice(None) if rows is None else rows
        cols = slice(None) if cols is None else cols
        if self.metric == "road":
            return self.d_km[rows][:, cols] if not isinstance(rows, slice) else self.d_km[rows, cols]
        lon, lat = self.lon, self.lat
        return haversine_km(
            np.asarray(lon[rows])[:, None], np.asarray(lat[rows])[:, None], lon[cols][None, :], lat[cols][None, :]
        )

    def distances_km_pairs(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Privacy distances in km between records ``a[i]`` and ``b[i]`` (element-wise)."""
        a, b = np.asarray(a), np.asarray(b)
        if self.metric == "road":
            return self.d_km[a, b]
        lon, lat = self.lon, self.lat
        return haversine_km(lon[a], lat[a], lon[b], lat[b])

    @property
    def d_km(self) -> np.ndarray:
        """The full ``K x K`` privacy distance matrix in km (built once, then cached)."""
        if "d_km" not in self._cache:
            if self.metric == "road":
                self._cache["d_km"] = _road_metric_km(self.network, self.records)
            else:
                lon, lat = self.lon, self.lat
                self._cache["d_km"] = _haversine_table_km(lon, lat, lon, lat)
        return self._cache["d_km"]

    def __getstate__(self) -> dict:
        """Pickle the instance without its lazily filled tables (``d_km`` is K x K): the receiver rebuilds them.

        A job sends its instance to a worker by pickling it, and the dashboard shares one instance among its
        sessions: a distance table that one page asked for must not travel with every later job.
        """
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    def _haversine_diameter_km(self) -> float:
        """Largest great-circle distance between two records, equal to the all-pairs maximum.

        Every pair at distance ``D >= D_lb`` (a lower bound from two farthest-point sweeps) has both ends
        at distance ``>= D_lb - r`` from a centre record (``r`` its largest distance), by the triangle
        inequality; only those records are compared pairwise, with the same formula, so the value is
        the brute-force maximum bit for bit (a slack of 1e-9 km covers the rounding of the bounds).
        """
        k = self.n_records
        if k < 2:
            return 0.0
        lon, lat = self.lon, self.lat
        centre = int(np.argmin((lon - lon.mean()) ** 2 + (lat - lat.mean()) ** 2))
        d_c = self.distances_km(np.array([centre]))[0]
        far = int(np.argmax(d_c))
        d_a = self.distances_km(np.array([far]))[0]
        d_b = self.distances_km(np.array([int(np.argmax(d_a))]))[0]
        lower = max(float(d_a.max()), float(d_b.max()))
        cand = np.flatnonzero(d_c >= lower - float(d_c.max()) - 1e-9 - 1e-12 * lower)
        value = 0.0
        step = max(1, 4_000_000 // cand.size)
        for start in range(0, cand.size, step):
            value = max(value, float(self.distances_km(cand[start : start + step], cand).max()))
        return value

    @property
    def d_max_km(self) -> float:
        """The largest privacy distance between two records, km."""
        if "d_max_km" not in self._cache:
            if self.metric == "road" or "d_km" in self._cache:
                value = float(self.d_km.max())
            else:
                value = self._haversine_diameter_km()
            self._cache["d_max_km"] = value
        return self._cache["d_max_km"]

    def summary(self) -> dict:
        """Plain-data description for JSON output."""
        return {
            "network": self.network.name,
            "n_records": self.n_records,
            "n_outputs": self.n_outputs,
            "n_users": self.n_users,
            "n_tasks": int(self.tasks.shape[0]),
            "loss": self.loss,
            "loss_label": loss_label(self.loss, int(self.tasks.shape[0])),
            "metric": self.metric,
            "seed": self.seed,
        }


def loss_label(loss: str, n_tasks: int = 1) -> str:
    """Name a loss function in words, e.g. ``"the paper's task cost (1 task)"``."""
    if loss not in LOSS_LABELS:
        msg = f"The 'loss' parameter must be one of {LOSSES}. Got {loss!r} instead."
        raise ValueError(msg)
    if loss == "task":
        return f"{LOSS_LABELS[loss]} ({n_tasks} task{'s' if n_tasks != 1 else ''})"
    return LOSS_LABELS[loss]


def _check_int(value: object, name: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        msg = f"The '{name}' parameter of make_instance must be an int. Got {value!r} instead."
        raise TypeError(msg)
    value = int(value)
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        msg = f"The '{name}' parameter of make_instance must be an int {bound}. Got {value} instead."
        raise ValueError(msg)
    return value


def _block_rows(n_columns: int) -> int:
    """Rows of one block of a table with ``n_columns`` columns: :data:`_BLOCK_ENTRIES` entries, at least one row."""
    return max(1, _BLOCK_ENTRIES // max(int(n_columns), 1))


def _road_rows_m(graph: object, sources: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``(len(sources), len(columns))`` shortest-path lengths in metres from each source node to the nodes ``columns``.

    One Dijkstra call per block of sources: a call returns ``(sources, n_nodes)``, so the whole call would hold
    ``len(sources) x n_nodes`` floats (gigabytes for a thousand outputs on a large upload) where only
    ``len(columns)`` columns are kept. A source's paths do not depend on the other sources: the same values.
    The table is laid out column by column (Fortran order), as ``dijkstra(...)[:, columns]`` lays it out: the
    ``"road"`` loss, its transpose, is then a C-ordered ``(K, M)`` table whose rows are quick to pick.
    """
    sources = np.asarray(sources)
    columns = np.asarray(columns)
    out = np.empty((columns.size, sources.size)).T
    step = _block_rows(graph.shape[0])  # type: ignore[attr-defined]
    for start in range(0, sources.size, step):
        block = sources[start : start + step]
        out[start : start + block.size] = dijkstra(graph, directed=True, indices=block)[:, columns]
    return out


def _road_metric_km(network: RoadNetwork, records: np.ndarray) -> np.ndarray:
    """Symmetric road metric: mean of both directions' shortest paths, in km."""
    out_m = _road_rows_m(network.adjacency, records, records)
    return (out_m + out_m.T) / 2000.0


def _haversine_table_km(lon1: np.ndarray, lat1: np.ndarray, lon2: np.ndarray, lat2: np.ndarray) -> np.ndarray:
    """``(len(lon1), len(lon2))`` great-circle distances in km, a block of rows at a time.

    The formula's broadcast terms are as large as its result (several of them live at once): by blocks they are a
    block's, not the whole table's. Element by element the same arithmetic as one broadcast.
    """
    out = np.empty((lon1.shape[0], lon2.shape[0]))
    step = _block_rows(lon2.shape[0])
    for start in range(0, lon1.shape[0], step):
        rows = slice(start, start + step)
        out[rows] = haversine_km(lon1[rows, None], lat1[rows, None], lon2[None, :], lat2[None, :])
    return out


def instance_footprint(
    n_nodes: int,
    n_records: int,
    n_outputs: int | None,
    *,
    loss: str = "task",
    n_tasks: int = 1,
    metric: str = "haversine",
) -> int:
    """Bytes of the dense tables an instance of these sizes holds at once, at most (computed from the sizes alone).

    Every table is float64 (8 bytes an entry). Counted: the ``(K, M)`` loss ``cost_m``; the ``(K, K)`` privacy
    distance table ``d_km`` (built on demand, and by every page that audits a mechanism or plays the attacker:
    the dashboard's views need it), twice for the ``"road"`` metric (the table and its symmetrised copy); the
    loss's own working table (the second direction's ``(M, K)`` for the ``"road"`` loss, the ``(T, K)`` task
    distances for ``"task"``); and the temporaries of the blocks the tables are filled by (shortest paths from a
    block of sources to every node, the great-circle formula's terms), at most a few times ``_BLOCK_ENTRIES``.
    Not counted: vectors of one entry per node or record, and the network itself.

    Parameters
    ----------
    n_nodes
        Nodes of the road network.
    n_records, n_outputs
        K and M (``None``: M = K).
    loss, n_tasks, metric
        As in :func:`make_instance`.

    Returns
    -------
    int
        Bytes; :func:`make_instance` refuses an instance above :data:`MAX_DENSE_BYTES`.
    """
    n, k = int(n_nodes), int(n_records)
    m = k if n_outputs is None else int(n_outputs)
    t = int(n_tasks)

    def block(rows: int, cols: int) -> int:  # entries of one block of a (rows, cols) table
        return min(rows, _block_rows(cols)) * cols

    def paths(sources: int) -> int:  # one Dijkstra call's table and the columns kept from it
        return min(sources, _block_rows(n)) * (n + k)

    distances = (2 if metric == "road" else 1) * k * k
    temporaries = [_HAVERSINE_TEMPORARIES * block(k, k)] if metric != "road" else [paths(k)]
    if loss == "road":
        working = m * k
        temporaries.append(paths(m))
    elif loss == "task":
        working = t * k
        temporaries += [paths(t), 2 * block(k, m)]
    else:
        working = 0
        temporaries.append(_HAVERSINE_TEMPORARIES * block(k, m))
    return 8 * (k * m + distances + working + max(temporaries))


def _fmt_bytes(n_bytes: float) -> str:
    """Write a size in words: '2.4 GB', '350 MB', '12 kB'."""
    if n_bytes >= 1e9:
        return f"{n_bytes / 1e9:.1f} GB"
    if n_bytes >= 1e6:
        return f"{n_bytes / 1e6:,.0f} MB"
    return f"{n_bytes / 1e3:,.0f} kB"


class InstanceTooLargeError(ValueError):
    """The dense tables of an instance would exceed the limit (:data:`MAX_DENSE_BYTES`).

    The message says so in a sentence, with what to choose instead.
    """


def _check_footprint(n_nodes: int, k: int, m: int, loss: str, t: int, metric: str, max_bytes: float | None) -> None:
    limit = MAX_DENSE_BYTES if max_bytes is None else max_bytes
    need = instance_footprint(n_nodes, k, m, loss=loss, n_tasks=t, metric=metric)
    if need > limit:
        tasks = f", {t:,} tasks" if loss == "task" and t > 1 else ""
        msg = (
            f"This view needs about {_fmt_bytes(need)} of distance tables (K = {k:,}, M = {m:,}{tasks} on a network "
            f"of {n_nodes:,} nodes); the limit is {_fmt_bytes(limit)}: choose fewer places, fewer outputs, or a "
            "smaller area."
        )
        raise InstanceTooLargeError(msg)


def make_instance(
    network: RoadNetwork,
    *,
    n_records: int,
    n_outputs: int | None = 100,
    n_users: int = 50,
    n_tasks: int = 1,
    prior: str | np.ndarray = "uniform",
    metric: str = "haversine",
    user_distribution: str = "uniform",
    loss: str = "task",
    seed: int | None = 0,
    max_bytes: float | None = None,
) -> Instance:
    """Draw a problem instance from a road network, reproducibly from ``seed``.

    Parameters
    ----------
    network
        The road network.
    n_records
        K, the size of the secret domain X (distinct nodes drawn uniformly).
    n_outputs
        |Y|: that many distinct records of X drawn uniformly; ``None`` (or ``n_records``) uses
        all of X.
    n_users
        N users with distinct true records of X.
    n_tasks
        Number of tasks (records of X) in the ``"task"`` loss; each has weight ``1 / n_tasks``.
    prior
        The prior over X (:func:`panda.priors.prior_for_records`): ``"uniform"``, ``"street_count"``
        (proportional to the number of streets at a record), ``"road_density"`` (road length within
        300 m), ``"poi"`` (the embedded city's points of interest: amenities, shops, offices), or a
        ``(n_nodes,)`` numpy array of per-node weights of places people go to, e.g. an uploaded CSV
        through :func:`panda.parse_places_csv` and :func:`panda.poi_weights`. Place-based priors keep
        a 5 % uniform share, so every record stays possible. Places only shape the prior, never X:
        the mechanism protects every record whatever the prior (geo-indistinguishability does not
        depend on it), while the optimal mechanisms' expected loss and the Bayes attacker's error do.
    metric
        Privacy metric: ``"haversine"`` (great-circle km) or ``"road"`` (shortest-path km,
        mean of both directions).
    user_distribution
        ``"uniform"`` over X, or ``"prior"``: users drawn (without replacement) from the prior.
    loss
        What a report costs the person who makes it (``cost_m``, metres), the loss every optimising
        mechanism minimises and every table reports:

        - ``"road"``: the road distance between the place and its report (the mean of both
          directions' shortest paths, the same as the ``"road"`` metric): what people mean by "how far
          off is my report".
        - ``"straight"``: the straight-line (great-circle) distance between the place and its report,
          the loss of the geo-indistinguishability literature (Andrés et al., Bordenabe et al.).
        - ``"task"`` (default, the paper's setup): ``sum_t p_t |road(t, x) - road(t, y)|`` over
          ``n_tasks`` tasks, how much the report changes the road distance to a service's tasks. With one
          task any report at the same road distance from it is free, however far it is from the place.
    seed
        Seed of the random draws.
    max_bytes
        The most bytes the instance's dense tables may need (:func:`instance_footprint`, checked before anything
        is drawn); ``None``: :data:`MAX_DENSE_BYTES`, read when called; ``math.inf``: no limit.

    Raises
    ------
    InstanceTooLargeError
        When the tables would need more than ``max_bytes``: a sentence with the sizes and the limit.
    """
    k, m, n, t = _check_arguments(
        network, n_records, n_outputs, n_users, n_tasks, prior, metric, user_distribution, loss, max_bytes
    )

    rng = np.random.default_rng(seed)
    records = np.sort(rng.choice(network.n_nodes, size=k, replace=False))
    outputs = np.arange(k) if m == k else np.sort(rng.choice(k, size=m, replace=False))
    p = prior_for_records(network, records, prior)
    user_p = None if user_distribution == "uniform" else p
    users = rng.choice(k, size=n, replace=False, p=user_p)
    tasks = rng.choice(k, size=t, replace=False)
    task_weights = np.full(t, 1.0 / t)

    cost = _loss_m(network, records, outputs, tasks, task_weights, loss)
    return Instance(
        network=network,
        records=records,
        outputs=outputs,
        prior=p,
        users=users,
        tasks=tasks,
        task_weights=task_weights,
        cost_m=cost,
        metric=metric,
        seed=seed,
        loss=loss,
    )


def check_instance_arguments(
    network: RoadNetwork,
    *,
    n_records: int,
    n_outputs: int | None = 100,
    n_users: int = 50,
    n_tasks: int = 1,
    prior: str | np.ndarray = "uniform",
    metric: str = "haversine",
    user_distribution: str = "uniform",
    loss: str = "task",
    max_bytes: float | None = None,
) -> None:
    """Raise what :func:`make_instance` would raise for these arguments, at once and without drawing anything.

    The sizes, the named choices and the footprint (:class:`InstanceTooLargeError`): a caller that builds the
    instance elsewhere (the dashboard, on a worker) answers a bad view before it sends the work away.

    Parameters
    ----------
    network, n_records, n_outputs, n_users, n_tasks, prior, metric, user_distribution, loss, max_bytes
        As in :func:`make_instance`.
    """
    _check_arguments(network, n_records, n_outputs, n_users, n_tasks, prior, metric, user_distribution, loss, max_bytes)


def _check_arguments(
    network: object,
    n_records: object,
    n_outputs: object,
    n_users: object,
    n_tasks: object,
    prior: object,
    metric: object,
    user_distribution: object,
    loss: object,
    max_bytes: float | None,
) -> tuple[int, int, int, int]:
    """Every check of :func:`make_instance`, the footprint last: return ``(K, M, N, T)``."""
    k, m, n, t = _check_sizes(network, n_records, n_outputs, n_users, n_tasks)
    _check_choices(prior, metric, user_distribution, loss)
    _check_footprint(network.n_nodes, k, m, str(loss), t, str(metric), max_bytes)  # type: ignore[attr-defined]
    return k, m, n, t


def _check_sizes(
    network: object, n_records: object, n_outputs: object, n_users: object, n_tasks: object
) -> tuple[int, int, int, int]:
    """Check the network and the sizes :func:`make_instance` draws: return ``(K, M, N, T)``."""
    if not isinstance(network, RoadNetwork):
        msg = f"The 'network' parameter of make_instance must be a RoadNetwork. Got {type(network).__name__} instead."
        raise TypeError(msg)
    k = _check_int(n_records, "n_records", 2)
    if k > network.n_nodes:
        msg = (
            f"The 'n_records' parameter of make_instance must be at most the network's {network.n_nodes} nodes "
            f"({network.name}). Got {k} instead."
        )
        raise ValueError(msg)
    m = k if n_outputs is None else _check_int(n_outputs, "n_outputs", 1)
    if m > k:
        msg = f"The 'n_outputs' parameter of make_instance must be at most n_records ({k}). Got {m} instead."
        raise ValueError(msg)
    n = _check_int(n_users, "n_users", 1)
    if n > k:
        msg = (
            f"The 'n_users' parameter of make_instance must be at most n_records ({k}): users have distinct "
            f"records. Got {n} instead."
        )
        raise ValueError(msg)
    t = _check_int(n_tasks, "n_tasks", 1, k)
    return k, m, n, t


def _check_choices(prior: object, metric: object, user_distribution: object, loss: object) -> None:
    """Check the named choices of :func:`make_instance` (the prior, metric, loss and user distribution)."""
    if not isinstance(prior, np.ndarray) and (not isinstance(prior, str) or prior not in PRIORS):
        msg = (
            f"The 'prior' parameter of make_instance must be one of {PRIORS} or a numpy array of per-node "
            f"weights. Got {prior!r} instead."
        )
        raise ValueError(msg)
    if metric not in METRICS:
        msg = f"The 'metric' parameter of make_instance must be one of {METRICS}. Got {metric!r} instead."
        raise ValueError(msg)
    if loss not in LOSSES:
        msg = f"The 'loss' parameter of make_instance must be one of {LOSSES}. Got {loss!r} instead."
        raise ValueError(msg)
    if user_distribution not in USER_DISTRIBUTIONS:
        msg = (
            f"The 'user_distribution' parameter of make_instance must be one of {USER_DISTRIBUTIONS}. "
            f"Got {user_distribution!r} instead."
        )
        raise ValueError(msg)


def _loss_m(
    network: RoadNetwork,
    records: np.ndarray,
    outputs: np.ndarray,
    tasks: np.ndarray,
    task_weights: np.ndarray,
    loss: str,
) -> np.ndarray:
    """``(K, M)`` loss in metres of reporting output ``outputs[j]`` from record ``x`` (see make_instance).

    Filled a block at a time (:func:`_road_rows_m`, :func:`_haversine_table_km`): the tables held are those
    :func:`instance_footprint` counts, never one as large as the network times the outputs.
    """
    if loss == "straight":
        lon, lat = network.lon[records], network.lat[records]
        return 1000.0 * _haversine_table_km(lon, lat, lon[outputs], lat[outputs])
    if loss == "road":
        # 2M Dijkstras (from every output, forwards and on the reversed graph), never one per record.
        targets = records[outputs]
        both = _road_rows_m(network.adjacency, targets, records)  # road(y -> x)
        both += _road_rows_m(network.adjacency.T.tocsr(), targets, records)  # road(x -> y)
        both /= 2.0
        return both.T
    # The paper's task cost: one Dijkstra per task, road(t, x) for every record x, then a broadcast by blocks of rows.
    road_m = _road_rows_m(network.adjacency, records[tasks], records)  # (T, K)
    cost = np.zeros((records.size, outputs.size))
    step = _block_rows(outputs.size)
    for w_t, r in zip(task_weights, road_m, strict=True):
        r_y = r[outputs][None, :]
        for start in range(0, records.size, step):
            rows = slice(start, start + step)
            cost[rows] += w_t * np.abs(r[rows, None] - r_y)
    return cost
