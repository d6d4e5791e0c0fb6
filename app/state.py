"""The dashboard's caches: the ONLY module with st.cache_resource and st.cache_data.

* Road networks, instances and the executor of the heavy jobs are resources (``st.cache_resource``),
  shared by every session; networks and instances are read-only (no page writes into their arrays).
* PAnDA results, lower bounds, sweeps, baselines and audits are data (``st.cache_data``):
  keyed by plain hashable values, bounded (``max_entries``), each session gets its own copy.

Cached functions are pure functions of their arguments and never call ``st.*`` (no cache spinners
either: they may run in a helper thread). A progress callback, left out of the cache key by its
leading underscore, only puts messages on a queue; :mod:`app.page_jobs` runs the function in a
helper thread and shows those messages from the script thread. The heavy work itself (PAnDA runs,
sweeps, baselines, the PmDP audit, trade-off curves: :mod:`panda.jobs`) runs on Dask worker
processes through :mod:`panda.execution`, with a memory limit, a time limit, priorities (interactive
jobs first) and sharing (identical jobs of several sessions run once).
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import streamlit as st

import panda
from app import job_owner
from app.figures import maps
from app.model import instances
from app.model.params import parse_source
from app.server import result_store
from app.server.instance_budget import InstanceBudget
from panda import jobs
from panda.execution import HIGH, LOW, Executor, close_executor, default_n_workers, get_executor
from panda.instance import check_instance_arguments, instance_footprint

__all__ = [
    "MAX_LOWER_BOUND_ROWS",
    "city_network",
    "bbox_network",
    "upload_network",
    "network",
    "road_segments",
    "instance",
    "panda_worker",
    "panda_result",
    "lower_bound",
    "delta_sweep",
    "baseline",
    "pmdp_audit",
    "config_items",
    "clear_all",
    "TRADEOFF_POINT_LIMIT_S",
    "TRADEOFF_METHOD_BUDGET_S",
    "tradeoff_method",
    "repeated_reports",
    "background_errors",
    "users_numbers",
    "score_round",
]

#: Cached entries per function (each holds one result; a few MB at most).
MAX_ENTRIES = 16
#: Instances kept, shared by every session (a class's few views); their bytes are bounded too (instance_budget).
MAX_INSTANCES = 8
#: Largest Relaxed AnPO the dashboard solves (LP constraint rows = kept ordered pairs x outputs).
#: Beyond this HiGHS needs longer than its time limit just to load the model.
MAX_LOWER_BOUND_ROWS = 600_000
#: Time limit of one PAnDA run or one delta sweep on its worker, seconds.
JOB_TIMEOUT_S = 90.0
#: Config fields that change neither the anchor draws nor the Relaxed AnPO: the lower bound's cache key sets
#: them to the dashboard's defaults (so the default view's lower bound reuses its own PAnDA run, and a
#: delta or Gamma change reuses the bound).
_NOT_IN_LOWER_BOUND = {"delta": 1e-7, "neighbourhood_size": 10}


def config_items(config: panda.PandaConfig) -> tuple:
    """A PandaConfig as a sorted tuple of (field, value): a plain, hashable cache key."""
    return tuple(sorted(config.to_dict().items()))


def _config(items: tuple) -> panda.PandaConfig:
    return panda.PandaConfig(**dict(items))


#: Local worker processes for the heavy computations (one per core, at least 2, plus one kept for interactive jobs).
N_WORKERS = default_n_workers()


def _close_executor(executor: Executor) -> None:
    close_executor(executor)


def _run_job(job: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a job function of :mod:`panda.jobs` on the executor, as this run's session."""
    return panda_worker().run(job, *args, **job_owner.of_this_run(), **kwargs)


@st.cache_resource(max_entries=1, show_spinner=False, on_release=_close_executor, validate=lambda ex: not ex.closed)
def panda_worker() -> Executor:
    """The executor of the heavy jobs (panda.execution: Dask workers, local or PANDA_DASK_SCHEDULER's), shared."""
    return get_executor()


@st.cache_resource(max_entries=8, show_spinner=False)
def city_network(name: str) -> panda.RoadNetwork:
    """An embedded city (offline)."""
    return panda.load_city(name)


@st.cache_resource(max_entries=4, show_spinner=False)
def bbox_network(west: float, south: float, east: float, north: float) -> panda.RoadNetwork:
    """A live OpenStreetMap download (or its disk cache); raises OfflineError/DownloadError/ValueError."""
    return panda.network_from_bbox(west, south, east, north)


@st.cache_resource(max_entries=4, show_spinner=False)
def upload_network(file_id: str) -> panda.RoadNetwork:
    """An uploaded file's network (panda.network.load_upload); raises DataUnavailableError when not kept here."""
    return panda.network.load_upload(file_id)


def network(source: str) -> panda.RoadNetwork:
    """The road network of a source string (``city:<name>``, ``bbox:w,s,e,n`` or ``file:<id>``)."""
    kind, value = parse_source(source)
    if kind == "city":
        return city_network(str(value))
    if kind == "file":
        return upload_network(str(value))
    return bbox_network(*value)  # type: ignore[misc]


def road_segments(source: str) -> tuple[list[dict], int]:
    """The network's road segments as the maps draw them (:func:`app.figures.maps.road_segments`), shared by
    every session (a class's phones draw the same roads on every run); no page may change them."""
    net = network(source)
    return _road_segments_on(result_store.store_key((source,), net)[0], _net=net)


@st.cache_resource(max_entries=8, show_spinner=False)
def _road_segments_on(fingerprint: str, _net: panda.RoadNetwork) -> tuple[list[dict], int]:
    return maps.road_segments(_net)


def instance(
    source: str,
    n_records: int,
    n_users: int,
    n_outputs: int,
    seed: int,
    loss: str = "task",
    n_tasks: int = 1,
    prior: str = "uniform",
) -> panda.Instance:
    """The problem instance (records, outputs, prior, users, loss) of a view (``Params.instance_key``).

    ``prior``: a name of :data:`panda.instance.PRIORS`, or ``csv:<id>`` for uploaded places
    (:func:`panda.priors.save_places_upload`), snapped to the network.

    The view is checked here at once, before any work is sent away: a view whose tables would exceed
    :data:`panda.instance.MAX_DENSE_BYTES` raises :class:`panda.instance.InstanceTooLargeError` (a sentence for
    the page), a bad size the ValueError :func:`panda.make_instance` raises. The tables (shortest paths from
    every output or task) are built on a worker (:func:`panda.jobs.instance_job`), under its limits, and kept
    once here for every session, under the network they are built on (a box downloaded again with other data
    gets new tables). No page may write into its arrays: that would change every other session's view. (They
    are not flagged read-only: the flag would travel to the worker, whose compiled code refuses such buffers.)
    """
    net = network(source)
    key = (result_store.store_key((source,), net)[0], n_records, n_users, n_outputs, seed, loss, n_tasks, prior)
    inst = _instance_on(*key, _net=net)
    nbytes = instance_footprint(net.n_nodes, inst.n_records, inst.n_outputs, loss=loss, n_tasks=inst.tasks.size)
    for old in _INSTANCE_BYTES.use(key, nbytes):  # the kept instances' bytes bounded, not only their number
        _instance_on.clear(*old, _net=None)
    return inst


_INSTANCE_BYTES = InstanceBudget(max_entries=MAX_INSTANCES)


@st.cache_resource(max_entries=MAX_INSTANCES, show_spinner=False)
def _instance_on(
    fingerprint: str,
    n_records: int,
    n_users: int,
    n_outputs: int,
    seed: int,
    loss: str,
    n_tasks: int,
    prior: str,
    _net: panda.RoadNetwork,
) -> panda.Instance:
    """:func:`instance` on ``_net`` (``fingerprint``: its source, with its content's fingerprint if a box's)."""
    n_tasks = min(int(n_tasks), int(n_records))
    prior_arg = instances.prior_argument(_net, prior)
    sizes = {"n_records": n_records, "n_users": n_users, "n_outputs": n_outputs, "n_tasks": n_tasks}
    check_instance_arguments(_net, **sizes, loss=loss, prior=prior_arg)
    args = (n_records, n_users, n_outputs, seed, loss, n_tasks, prior_arg)
    fields = _run_job(jobs.instance_job, _net, *args, timeout_s=JOB_TIMEOUT_S, priority=HIGH)
    return panda.Instance(network=_net, **fields)


@st.cache_data(max_entries=MAX_ENTRIES, show_spinner=False)
def panda_result(
    instance_key: tuple, items: tuple, seed: int, _progress: Callable[[str, float], None] | None = None
) -> panda.PandaResult:
    """One PAnDA run (``items``: :func:`config_items` of its config), on a worker."""
    inst = instance(*instance_key)
    return _run_job(jobs.run_panda_job, inst, items, seed, timeout_s=JOB_TIMEOUT_S, priority=HIGH, progress=_progress)


def lower_bound(instance_key: tuple, items: tuple, seed: int, time_limit_s: float) -> dict:
    """The Relaxed AnPO lower bound of a view (cached independently of delta and Gamma)."""
    items = tuple((k, _NOT_IN_LOWER_BOUND.get(k, v)) for k, v in items)
    return _lower_bound(instance_key, items, seed, float(time_limit_s))


@st.cache_data(max_entries=MAX_ENTRIES, show_spinner=False)
def _lower_bound(instance_key: tuple, items: tuple, seed: int, time_limit_s: float) -> dict:
    inst = instance(*instance_key)
    config = _config(items)
    res = panda_result(instance_key, items, seed)
    out: dict[str, Any] = {"status": "not computed", "objective_m": float("nan"), "time_s": 0.0, "rows": 0}
    union = res.anchor_union
    if union.size == 0:
        return out | {"status": "no anchors"}
    b = config.epsilon_per_km * res.pair_d_km
    implied = b >= -np.log(config.lp_floor) if config.lp_floor > 0 else np.zeros(b.size, dtype=bool)
    rows = int(2 * (~implied).sum() * inst.n_outputs)
    out["rows"] = rows
    if rows > MAX_LOWER_BOUND_ROWS:
        return out | {"status": "too large"}
    weights = inst.prior[union] / inst.prior[union].sum()
    cost = weights[:, None] * inst.cost_m[union]
    # On a worker, like every heavy job (the executor's time limit leaves HiGHS its own limit first).
    out.update(
        _run_job(
            jobs.relaxed_lower_bound_job,
            cost,
            np.concatenate([res.pair_i, res.pair_j]),
            np.concatenate([res.pair_j, res.pair_i]),
            np.concatenate([b, b]),
            float(config.lp_floor),
            float(time_limit_s),
            config.lp_solver,
            timeout_s=float(time_limit_s) + JOB_TIMEOUT_S,
        )
    )
    return out


@st.cache_data(max_entries=8, show_spinner=False)
def delta_sweep(instance_key: tuple, items: tuple, seed: int, deltas: tuple) -> list[dict]:
    """PAnDA at several delta values (no lower bound): violation rate and flagged pairs per delta."""
    inst = instance(*instance_key)
    return _run_job(jobs.delta_sweep_job, inst, items, seed, tuple(deltas), timeout_s=JOB_TIMEOUT_S, priority=LOW)


#: An optimal LP with at most this time limit (s) is an interactive job (the Lesson's first certified mechanism,
#: which a student waits for), like the other mechanisms. A longer one is a long job (the long worker).
INTERACTIVE_LP_S = 5.0


#: A baseline matrix is K x M floats (0.4 MB at K = 500, M = 100): the Lesson caches one per mechanism and eps.
@st.cache_data(max_entries=64, show_spinner=False)
def baseline(
    instance_key: tuple,
    name: str,
    epsilon_per_km: float,
    options: tuple,
    _progress: Callable[[str, float], None] | None = None,
    _numbers: bool = False,
) -> Any:
    """A baseline mechanism (panda.mechanisms.BASELINES[name]) on the view's instance, on a worker.

    ``_numbers``: measure it in the same job (:func:`mechanism_numbers` then finds its numbers at once: what
    the Lesson shows of a new mechanism costs one trip through the class's queue, not two).

    The optimal LP ("lp") is a long job (low priority) unless its time limit is at most :data:`INTERACTIVE_LP_S`;
    the other mechanisms are interactive. One in the result store (app/server/result_store.py) is read from there.
    ``_progress`` (not part of the cache key) gets the job's messages, "busy: N ahead of you" included.
    """
    key = _store_key(instance_key)
    kept = result_store.get_mechanism(key, name, epsilon_per_km, options)
    if kept is not None:  # computed before (by any server of the class, or prepared): at once
        return kept
    limit = float(dict(options).get("time_limit_s", 0.0)) + JOB_TIMEOUT_S
    long_lp = name == "lp" and float(dict(options).get("time_limit_s", math.inf)) > INTERACTIVE_LP_S
    priority = LOW if long_lp else HIGH
    out = _run_job(
        jobs.baseline_numbers_job if _numbers else jobs.baseline_job,
        instance(*instance_key),
        name,
        float(epsilon_per_km),
        options,
        timeout_s=limit,
        priority=priority,
        progress=_progress,
    )
    mech, numbers = out if _numbers else (out, None)
    result_store.put_mechanism(key, name, epsilon_per_km, options, mech)
    if numbers is not None:
        _keep_numbers(key, name, epsilon_per_km, options, mech, numbers)
    return mech


def kept_mechanism(instance_key: tuple, name: str, epsilon_per_km: float, options: tuple) -> bool:
    """Whether the result store holds this mechanism (another session's, another server's or a prepared one):
    :func:`baseline` would then read it at once, whatever this process has cached for other options."""
    return result_store.has_mechanism(_store_key(instance_key), name, epsilon_per_km, options)


def _store_key(instance_key: tuple) -> tuple:
    """The key the result store keeps a view's results under (:func:`app.server.result_store.store_key`): a box's or an
    upload's carries the fingerprint of the network the view's instance was built on."""
    return result_store.store_key(instance_key, lambda: network(str(instance_key[0])))


#: Numbers measured with their mechanism (``baseline(..., _numbers=True)``), for :func:`mechanism_numbers`.
_FRESH_NUMBERS: collections.OrderedDict = collections.OrderedDict()
_FRESH_NUMBERS_MAX = 256
_FRESH_LOCK = threading.Lock()


def _keep_numbers(store_key: tuple, name: str, epsilon_per_km: float, options: tuple, mech: Any, numbers: dict) -> None:
    inputs = result_store.mechanism_key_inputs(store_key, name, epsilon_per_km, options)
    with _FRESH_LOCK:
        _FRESH_NUMBERS[repr(inputs)] = numbers
        _FRESH_NUMBERS.move_to_end(repr(inputs))
        while len(_FRESH_NUMBERS) > _FRESH_NUMBERS_MAX:
            _FRESH_NUMBERS.popitem(last=False)
    if result_store.keepable(name, mech):
        result_store.put_value("numbers", inputs, numbers, prepared=bool(mech.details.get("prepared")))


@st.cache_data(max_entries=MAX_ENTRIES, show_spinner=False)
def pmdp_audit(instance_key: tuple, items: tuple, seed: int, n_record_pairs: int) -> Any:
    """The exact (eps, delta)-PmDP audit of a view's PAnDA run (panda.pmdp.audit_panda), on a worker."""
    res = panda_result(instance_key, items, seed)
    inst = instance(*instance_key)
    return _run_job(jobs.audit_panda_job, res, inst, int(n_record_pairs), timeout_s=JOB_TIMEOUT_S, priority=HIGH)


def clear_all() -> None:
    """Drop every cached value (tests)."""
    st.cache_data.clear()
    st.cache_resource.clear()
    _INSTANCE_BYTES.clear()


# --- Lesson: one mechanism's numbers at one eps (cached per instance, mechanism, eps; shared by sessions) ---


@st.cache_data(max_entries=64, show_spinner=False)
def mechanism_numbers(
    instance_key: tuple,
    name: str,
    epsilon_per_km: float,
    options: tuple,
    _progress: Callable[[str, float], None] | None = None,
) -> dict:
    """Exact mDP audit (every record pair), Bayes attacker's error and loss of a baseline's matrix.

    Plain values only. A sampled estimate (``details["estimated"]``) is not audited: an exact audit
    of sampling noise would report violations the mechanism does not have.
    """
    mech = baseline(instance_key, name, epsilon_per_km, options)
    out: dict[str, Any] = {"status": mech.status, "audited": False, "loss_m": float(mech.loss_m)}
    if mech.matrix is None:
        return out
    inputs = result_store.mechanism_key_inputs(_store_key(instance_key), name, epsilon_per_km, options)
    kept = result_store.get_value("numbers", inputs)
    if kept is not None and kept[0].get("loss_m") == out["loss_m"]:  # the numbers of this very matrix
        return kept[0]
    with _FRESH_LOCK:
        fresh = _FRESH_NUMBERS.get(repr(inputs))
    if fresh is not None and fresh.get("loss_m") == out["loss_m"]:  # measured with the mechanism
        return fresh
    # On a worker (time and memory limits): the audit of every pair grows with K squared, too heavy for the web
    # server at the largest K.
    out = _run_job(
        jobs.mechanism_numbers_job,
        instance(*instance_key),
        mech,
        float(epsilon_per_km),
        timeout_s=JOB_TIMEOUT_S,
        progress=_progress,
    )
    if result_store.keepable(name, mech):
        result_store.put_value("numbers", inputs, out, prepared=bool(mech.details.get("prepared")))
    return out


@st.cache_data(max_entries=64, show_spinner=False)
def phase1_pair_cost(instance_key: tuple, items: tuple, seed: int, a: int, b: int) -> float:
    """PAnDA's exact Phase-I leak between records ``a`` and ``b``: eps_bar(a, b) * d(a, b), nats."""
    from panda.accounting import phase1_cost_sparse
    from panda.anchors import SelectionModel

    inst = instance(*instance_key)
    res = panda_result(instance_key, items, seed)
    model = SelectionModel.build(inst, res.config, gamma_km=res.gamma_km)
    aa, bb = np.array([a]), np.array([b])
    d = inst.distances_km_pairs(aa, bb)
    eps_bar = float(phase1_cost_sparse(model, aa, bb, d)[0])
    return eps_bar * float(d[0]) if math.isfinite(eps_bar) else float("inf")


#: Time limit of one point of LP+CA, LP+EM, LP+BD and PAnDA (their LPs) on the curve, seconds.
TRADEOFF_POINT_LIMIT_S = 8.0
#: Seconds one of those methods may spend on all its points (the rest are reported as skipped).
TRADEOFF_METHOD_BUDGET_S = 20.0


def _tradeoff_timeout_s(method: str, n_eps: int, lp_time_limit_s: float) -> float:
    """The worker's hard stop for one method's curve: the library's own limits plus generous room."""
    if method == "lp":
        return n_eps * (float(lp_time_limit_s) + 15.0) + 60.0
    return TRADEOFF_METHOD_BUDGET_S + TRADEOFF_POINT_LIMIT_S + 10.0 * n_eps + 60.0


@st.cache_data(max_entries=64, show_spinner=False)
def tradeoff_method(
    instance_key: tuple,
    method: str,
    epsilons: tuple,
    panda_items: tuple,
    seed: int,
    lp_time_limit_s: float,
    _progress: Callable[[str, float], None] | None = None,
) -> list[dict]:
    """One method's curve rows (panda.tradeoff.tradeoff_curve), on a worker (a long job); raises JobError."""
    inputs = result_store.curve_key_inputs(_store_key(instance_key), method, epsilons, panda_items, seed)
    kept = result_store.get_value("curve", inputs)
    if kept is not None:  # a complete curve computed before (or prepared)
        return [dict(r, prepared=kept[2]) for r in kept[0]]
    inst = instance(*instance_key)
    options = (("time_limit_s", TRADEOFF_POINT_LIMIT_S), ("method_budget_s", TRADEOFF_METHOD_BUDGET_S))
    rows = _run_job(
        jobs.tradeoff_curve_job,
        inst,
        (method,),
        tuple(float(e) for e in epsilons),
        tuple(panda_items),
        seed,
        float(lp_time_limit_s),
        options,
        timeout_s=_tradeoff_timeout_s(method, len(epsilons), lp_time_limit_s),
        priority=LOW,
        progress=_progress,
    )
    if result_store.curve_complete(rows):
        result_store.put_value("curve", inputs, rows)
    return rows


# --- Lesson: repeated reports and background knowledge (cached per view; shared by sessions) ---


def _matrix_or_none(instance_key: tuple, name: str, epsilon_per_km: float, options: tuple) -> np.ndarray | None:
    """A baseline's exact matrix (None when it has none: unsolved, or a sampled estimate)."""
    mech = baseline(instance_key, name, epsilon_per_km, options)
    if mech.matrix is None or (isinstance(mech.details, dict) and mech.details.get("estimated")):
        return None
    return mech.matrix


@st.cache_data(max_entries=32, show_spinner=False)
def repeated_reports(instance_key: tuple, mechanisms: tuple, epsilon_per_km: float, seed: int) -> list:
    """``[(name, panda.repeated.RepeatedReports)]``: the attacker's error after 1..20 reports per mechanism.

    ``mechanisms``: ``((name, options), ...)`` of baselines; those without an exact matrix are left out.
    """
    matrices = []
    for name, options in mechanisms:
        matrix = _matrix_or_none(instance_key, name, epsilon_per_km, options)
        if matrix is not None:
            matrices.append((name, matrix))
    if not matrices:
        return []
    return _run_job(
        jobs.repeated_reports_job,
        instance(*instance_key),
        tuple(matrices),
        float(epsilon_per_km),
        int(seed),
        timeout_s=JOB_TIMEOUT_S,
        priority=HIGH,
    )


@st.cache_data(max_entries=32, show_spinner=False)
def background_errors(instance_key: tuple, name: str, epsilon_per_km: float, options: tuple) -> dict | None:
    """The attacker's error on one mechanism's matrix, without and with background knowledge.

    People are spread by a peaked prior (the view's own prior when it is not uniform, else
    :func:`app.model.instances.peaked_prior_name`'s); the attacker believes the uniform prior, or knows the peaked one.
    None when the mechanism has no exact matrix.
    """
    matrix = _matrix_or_none(instance_key, name, epsilon_per_km, options)
    if matrix is None:
        return None
    inst = instance(*instance_key)
    view_prior = instance_key[-1]
    peaked_name = view_prior if view_prior != "uniform" else instances.peaked_prior_name(instance_key[0])
    peaked = (
        inst.prior
        if view_prior != "uniform"
        else panda.priors.prior_for_records(inst.network, inst.records, peaked_name)
    )
    uniform = np.full(inst.n_records, 1.0 / inst.n_records)
    # People are where the peaked prior says; one attacker believes every place equally likely, the
    # other knows where people go (the Bayes-optimal attacker: never the larger error).
    errors = _run_job(
        jobs.attacker_errors_job, inst, matrix, peaked, (uniform, peaked), timeout_s=JOB_TIMEOUT_S, priority=HIGH
    )
    top = np.sort(peaked)[::-1]
    return {
        "uniform_m": errors[0],
        "peaked_m": errors[1],
        "peaked_name": peaked_name,
        "top_decile_share": float(top[: max(1, inst.n_records // 10)].sum()),
        "peaked_prior": peaked,
    }


# --- Compare: each method's numbers at the users' records (cached per view and method; shared by sessions) ---


@st.cache_data(max_entries=64, show_spinner=False)
def users_numbers(
    instance_key: tuple,
    method: str,
    epsilon_per_km: float,
    options: tuple,
    items: tuple = (),
    seed: int = 0,
    _progress: Callable[[str, float], None] | None = None,
) -> dict | None:
    """A method's numbers at the users' true records (the Compare page), measured on a worker.

    ``method``: ``"panda"`` (the view's PAnDA run: ``items`` (:func:`config_items`) and ``seed``; its released
    rows at the users with a surrogate) or a name of ``panda.mechanisms.BASELINES`` with its ``options``
    (its matrix's rows at every user). Returns plain floats (``loss_m``, ``adversary_error_m``,
    ``violation_rate``, ``epsilon_min_per_km``: job :func:`panda.jobs.users_numbers_job`), or None
    when the mechanism has no matrix. Raises the job's errors (JobError) and the baseline's.
    """
    inst = instance(*instance_key)
    if method == "panda":
        from app.model.panda_numbers import surrogate_rows

        res = panda_result(instance_key, items, seed)
        if res.z is None:
            return None
        rows_idx = surrogate_rows(res)
        ok = rows_idx >= 0
        users, rows = res.user_records[ok], res.z[rows_idx[ok]]
    else:
        mech = baseline(instance_key, method, epsilon_per_km, options)
        if mech.matrix is None:
            return None
        users = inst.users
        rows = mech.matrix[users]
    if users.size == 0:
        return dict.fromkeys(("loss_m", "adversary_error_m", "violation_rate", "epsilon_min_per_km"), float("nan"))
    return _run_job(
        jobs.users_numbers_job,
        inst,
        np.asarray(users),
        np.asarray(rows),
        float(epsilon_per_km),
        timeout_s=JOB_TIMEOUT_S,
        priority=HIGH,
        progress=_progress,
    )


# --- Class round: the reveal's scoring (never cached: every reveal draws its own seed) ---


def score_round(
    prior: np.ndarray, matrix: np.ndarray, distance_m: np.ndarray, entries: list, n_reports: int, seed: int
) -> tuple[list[dict], dict]:
    """Score a class round (``panda.class_round.score_round`` with ``numpy.random.default_rng(seed)``) on a worker.

    Returns ``(scored entries, summary)``; raises JobError when the job fails (the caller says so).
    """
    return _run_job(
        jobs.score_round_job,
        np.asarray(prior, dtype=float),
        np.asarray(matrix, dtype=float),
        np.asarray(distance_m, dtype=float),
        [dict(e) for e in entries],
        int(n_reports),
        int(seed),
        timeout_s=JOB_TIMEOUT_S,
        priority=HIGH,
    )
