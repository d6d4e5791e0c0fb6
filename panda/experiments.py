"""Experiment sweeps: networks x K x repetitions x presets x budgets x methods, resumable and parallel.

A sweep is described by an :class:`ExperimentSpec` (from a TOML file or the command line) and run
by :func:`run_experiment` into an output folder:

``rows.csv``
    Tidy results, one row per (network, K, preset, epsilon, delta, method, repetition); each row is
    appended (and flushed) the moment it is finished, so an interrupted sweep keeps its work and a
    rerun into the same folder resumes (rows already present are skipped, not recomputed).
``experiment.json``
    The full specification, its hash, the seeds of every instance, package versions, the machine
    and the history of runs into the folder.
``tables.md``
    Markdown tables shaped like the paper's Tables 2 and 4: rows = methods, columns = K, cells
    ``mean ± 1.96 std`` over the repetitions.
``figures/``
    Plotly figures (HTML; PNG too when kaleido is installed). Optional: plotly is imported only here.

The unit of work is one instance, i.e. one (network, K, repetition): :func:`panda.make_instance`
is called once per unit, with a seed derived from the base seed, the network's name, K and the
repetition (:func:`unit_seeds`), and every method, preset and budget of the unit runs on that same
instance (same X, Y, users, tasks and prior) with the same mechanism seed. Methods that do not read a
:class:`panda.PandaConfig` (the baselines) run once per epsilon and have an empty ``preset`` and
``delta``.

Units run on local processes (``concurrent.futures.ProcessPoolExecutor``, the default), in this
process (``"serial"``), or on a dask.distributed cluster (``"tcp://host:port"`` or
``"dask://host:port"``, the scheduler's address). Inside a unit each method runs in a child process
(``isolate=True``) so that its time limit is a hard wall-clock limit: a method that reaches it is
stopped and recorded as ``"unsolved: time limit ..."`` with the time spent; a child that dies (for
example killed for lack of memory) is recorded as failed. Where a child process cannot be started
(daemonic dask workers) the method runs in the unit's process and only the LP solvers' own time
limits apply (``limit_enforced`` is then ``False`` in its row).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import hashlib
import json
import math
import multiprocessing
import os
import platform
import queue as _queue
import sys
import threading
import time
import traceback
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

__all__ = [
    "ExperimentSpec",
    "Job",
    "WorkUnit",
    "SweepOutcome",
    "ROW_KEY",
    "ROW_COLUMNS",
    "DEFAULT_TIME_LIMIT_S",
    "unit_seeds",
    "load_spec",
    "run_experiment",
    "run_unit",
    "measure_method",
    "read_rows",
    "row_key",
    "summarise",
    "markdown_table",
    "markdown_tables",
    "write_tables",
    "write_figures",
    "METHOD_LABELS",
    "TABLES",
    "Cell",
]

#: The paper's limit for LP-based methods ("unsolved if its computation time exceeds 1,800 seconds").
DEFAULT_TIME_LIMIT_S = 1800.0

#: Columns that identify a row (a rerun skips rows whose key is already in ``rows.csv``).
ROW_KEY = ("network", "K", "preset", "epsilon_per_km", "delta", "method", "repetition")

#: Every column of ``rows.csv``, in order. Units are in the names; times are wall-clock seconds.
ROW_COLUMNS = (
    *ROW_KEY,
    "status",
    # utility and privacy (panda.compare.COLUMNS)
    "utility_loss_m",
    "users_loss_m",
    "violation_rate",
    "pmdp_user_rate_over_delta",
    "epsilon_min_per_km",
    "adversary_error_m",
    "audit_scope",
    # time
    "time_s",
    "cpu_time_s",
    "lp_time_s",
    "audit_time_s",
    "wall_time_s",
    "instance_time_s",
    "time_limit_s",
    "limit_enforced",
    # PAnDA only
    "anchor_union",
    "anchor_set_size_mean",
    "n_empty_anchor_sets",
    "n_constrained_pairs",
    "n_over_budget_pairs",
    "n_unreachable_target_pairs",
    "gamma_km",
    "far_value",
    "lp_objective_m",
    "relaxed_lower_bound_m",
    "approximation_ratio",
    "user_pair_violation_rate",
    "budget_pairs_finite",
    "phase1_share_median",
    "margin_share_median",
    "phase2_share_median",
    "phase1_share_mean",
    "margin_share_mean",
    "phase2_share_mean",
    "time_phase1_cost_s",
    "time_margins_s",
    "time_relaxed_lp_s",
    # instance and provenance
    "n_users",
    "n_outputs",
    "n_tasks",
    "instance_seed",
    "method_seed",
    "host",
    "finished_at",
    "details",
)

_INT_COLUMNS = {
    "K",
    "repetition",
    "anchor_union",
    "n_empty_anchor_sets",
    "n_constrained_pairs",
    "n_over_budget_pairs",
    "n_unreachable_target_pairs",
    "budget_pairs_finite",
    "n_users",
    "n_outputs",
    "n_tasks",
    "instance_seed",
    "method_seed",
}
_STR_COLUMNS = {"network", "preset", "method", "status", "audit_scope", "host", "finished_at", "details"}
_BOOL_COLUMNS = {"limit_enforced"}

#: Display names (the paper's spelling) of the method short names.
METHOD_LABELS = {
    "em": "EM",
    "em-br": "EM+BR",
    "laplace": "Planar Laplace",
    "lp": "LP",
    "lp-ca": "LP+CA",
    "lp-bd": "LP+BD",
    "lp-em": "LP+EM",
    "panda-e": "PAnDA-e",
    "panda-p": "PAnDA-p",
    "panda-l": "PAnDA-l",
}
_METHOD_ORDER = tuple(METHOD_LABELS)

_SPEC_KEYS_IDENTITY = (
    "n_users",
    "n_outputs",
    "n_tasks",
    "prior",
    "metric",
    "user_distribution",
    "seed",
    "preset_overrides",
    "audit_sample_pairs",
)


# ---------------------------------------------------------------------------------------------
# specification
# ---------------------------------------------------------------------------------------------


def _bad(name: str, rule: str, value: object) -> ValueError:
    return ValueError(f"The '{name}' parameter of ExperimentSpec must be {rule}. Got {value!r} instead.")


def _tuple(value: object, name: str) -> tuple:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        value = (value,)
    out = tuple(value)
    if not out:
        raise _bad(name, "a non-empty list", value)
    return out


def _int(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        msg = f"The '{name}' parameter of ExperimentSpec must be an int >= {low}. Got {value!r} instead."
        raise TypeError(msg)
    if int(value) < low:
        raise _bad(name, f"an int >= {low}", value)
    return int(value)


def _float(value: object, name: str, *, low: float = 0.0, inclusive: bool = False, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        msg = f"The '{name}' parameter of ExperimentSpec must be a number. Got {value!r} instead."
        raise TypeError(msg)
    x = float(value)
    ok = (x >= low if inclusive else x > low) and x < high and math.isfinite(x)
    if not ok:
        rule = f"a number {'>=' if inclusive else '>'} {low:g}" + (f" and < {high:g}" if high < math.inf else "")
        raise _bad(name, rule, value)
    return x


@dataclass(frozen=True)
class ExperimentSpec:
    """What a sweep runs. Every list is a sweep dimension; the rest is shared by all rows.

    Attributes
    ----------
    networks
        Network names for :func:`panda.load_city` (``"kotka"``, ``"rome-paper"``, ...).
    k_values
        Secret-domain sizes K.
    methods
        Method short names (:data:`panda.compare.METHODS`).
    presets
        :func:`panda.preset` names the PAnDA methods run under.
    epsilons_per_km, deltas
        Privacy budgets (1/km) and PmDP failure probabilities. Baselines use only epsilon.
    n_users, n_outputs, n_tasks, prior, metric, user_distribution
        Instance settings (:func:`panda.make_instance`).
    repeats
        Repetitions per (network, K): each is a fresh instance.
    seed
        Base seed; every instance's and mechanism's seed derives from it (:func:`unit_seeds`).
    time_limit_s
        Per-method wall-clock limit, seconds (the paper's 1,800 s by default).
    method_time_limits_s
        Per-method exceptions to ``time_limit_s``, e.g. ``{"lp": 600}``.
    method_max_k
        Run a method only for K up to this, e.g. ``{"lp": 500}`` (the full LP beyond it is hopeless).
    method_presets
        Run a PAnDA method only under these presets, e.g. ``{"panda-p": ("artifact",)}``.
    preset_max_k
        Run PAnDA methods under a preset only for K up to this, e.g. ``{"paper": 2000}``.
    preset_overrides
        :class:`panda.PandaConfig` fields to change per preset, e.g. ``{"paper": {"lp_solver": "ipm"}}``.
    audit_sample_pairs
        The mDP audit's record-pair sample above ``K (K - 1) / 2`` of them (see :func:`panda.compare.compare`).
    memory_limit_gb
        Address-space limit of each method's child process (a method beyond it fails with MemoryError
        instead of taking the machine down); ``None``: no limit.
    isolate
        Run each method in a child process (hard time limit, crash containment). ``False`` runs it in
        the unit's process (for debugging and profiling; only LP solvers' time limits apply).
    name
        A free label stored with the results.
    """

    networks: tuple[str, ...]
    k_values: tuple[int, ...]
    methods: tuple[str, ...]
    presets: tuple[str, ...] = ("artifact",)
    epsilons_per_km: tuple[float, ...] = (5.0,)
    deltas: tuple[float, ...] = (1e-7,)
    n_users: int = 50
    n_outputs: int = 100
    n_tasks: int = 1
    prior: str = "uniform"
    metric: str = "haversine"
    user_distribution: str = "uniform"
    repeats: int = 1
    seed: int = 0
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    method_time_limits_s: Mapping[str, float] = field(default_factory=dict)
    method_max_k: Mapping[str, int] = field(default_factory=dict)
    method_presets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    preset_max_k: Mapping[str, int] = field(default_factory=dict)
    preset_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    audit_sample_pairs: int = 20_000
    memory_limit_gb: float | None = None
    isolate: bool = True
    name: str = ""

    def __post_init__(self) -> None:
        from panda.compare import METHODS
        from panda.config import PRESETS
        from panda.instance import METRICS, PRIORS, USER_DISTRIBUTIONS

        set_ = object.__setattr__
        nets = tuple(str(n).strip() for n in _tuple(self.networks, "networks"))
        set_(self, "networks", tuple(dict.fromkeys(nets)))
        ks = tuple(_int(k, "k_values", 2) for k in _tuple(self.k_values, "k_values"))
        set_(self, "k_values", tuple(dict.fromkeys(ks)))
        methods = tuple(str(m).strip().lower() for m in _tuple(self.methods, "methods"))
        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise _bad("methods", f"a list of names from {METHODS}", unknown)
        set_(self, "methods", tuple(dict.fromkeys(methods)))
        presets = tuple(str(p).strip() for p in _tuple(self.presets, "presets"))
        if any(p not in PRESETS for p in presets):
            raise _bad("presets", f"a list of names from {PRESETS}", list(presets))
        set_(self, "presets", tuple(dict.fromkeys(presets)))
        eps = tuple(_float(e, "epsilons_per_km") for e in _tuple(self.epsilons_per_km, "epsilons_per_km"))
        set_(self, "epsilons_per_km", tuple(dict.fromkeys(eps)))
        deltas = tuple(_float(d, "deltas", low=0.0, inclusive=True, high=1.0) for d in _tuple(self.deltas, "deltas"))
        set_(self, "deltas", tuple(dict.fromkeys(deltas)))
        set_(self, "n_users", _int(self.n_users, "n_users", 1))
        set_(self, "n_outputs", _int(self.n_outputs, "n_outputs", 1))
        set_(self, "n_tasks", _int(self.n_tasks, "n_tasks", 1))
        if self.prior not in PRIORS:
            raise _bad("prior", f"one of {PRIORS}", self.prior)
        if self.metric not in METRICS:
            raise _bad("metric", f"one of {METRICS}", self.metric)
        if self.user_distribution not in USER_DISTRIBUTIONS:
            raise _bad("user_distribution", f"one of {USER_DISTRIBUTIONS}", self.user_distribution)
        set_(self, "repeats", _int(self.repeats, "repeats", 1))
        set_(self, "seed", _int(self.seed, "seed", 0))
        set_(self, "time_limit_s", _float(self.time_limit_s, "time_limit_s"))
        limits = {str(m).lower(): _float(v, "method_time_limits_s") for m, v in dict(self.method_time_limits_s).items()}
        if any(m not in METHODS for m in limits):
            raise _bad("method_time_limits_s", f"a table keyed by names from {METHODS}", limits)
        set_(self, "method_time_limits_s", limits)
        max_k = {str(m).lower(): _int(v, "method_max_k", 2) for m, v in dict(self.method_max_k).items()}
        if any(m not in METHODS for m in max_k):
            raise _bad("method_max_k", f"a table keyed by names from {METHODS}", max_k)
        set_(self, "method_max_k", max_k)
        mp = {
            str(m).lower(): tuple(str(p) for p in _tuple(v, "method_presets"))
            for m, v in dict(self.method_presets).items()
        }
        if any(m not in METHODS for m in mp) or any(p not in PRESETS for v in mp.values() for p in v):
            raise _bad("method_presets", f"a table of method names to lists of presets from {PRESETS}", mp)
        set_(self, "method_presets", mp)
        pmk = {str(p): _int(v, "preset_max_k", 2) for p, v in dict(self.preset_max_k).items()}
        if any(p not in PRESETS for p in pmk):
            raise _bad("preset_max_k", f"a table keyed by presets from {PRESETS}", pmk)
        set_(self, "preset_max_k", pmk)
        overrides = {str(p): dict(v) for p, v in dict(self.preset_overrides).items()}
        for p, fields in overrides.items():
            if p not in PRESETS:
                raise _bad("preset_overrides", f"a table keyed by presets from {PRESETS}", overrides)
            from panda.config import preset as _preset

            _preset(p, **fields)  # validates the fields now, not in a worker an hour later
        set_(self, "preset_overrides", overrides)
        set_(self, "audit_sample_pairs", _int(self.audit_sample_pairs, "audit_sample_pairs", 1))
        if self.memory_limit_gb is not None:
            set_(self, "memory_limit_gb", _float(self.memory_limit_gb, "memory_limit_gb"))
        set_(self, "isolate", bool(self.isolate))
        set_(self, "name", str(self.name))

    # -- derived ------------------------------------------------------------------------------

    def time_limit_for(self, method: str) -> float:
        """Return the wall-clock limit of ``method``, seconds."""
        return float(self.method_time_limits_s.get(method, self.time_limit_s))

    def config_for(self, preset_name: str, epsilon_per_km: float, delta: float):
        """Return the :class:`panda.PandaConfig` of one (preset, epsilon, delta)."""
        from panda.config import preset

        fields = dict(self.preset_overrides.get(preset_name, {}))
        fields.update(epsilon_per_km=float(epsilon_per_km), delta=float(delta))
        return preset(preset_name, **fields)

    def jobs_for(self, k: int) -> tuple[Job, ...]:
        """Every (preset, epsilon, delta, method) of one instance of size ``k``, in run order."""
        from panda.compare import PANDA_METHODS

        jobs = []
        for eps in self.epsilons_per_km:
            for method in self.methods:
                if k > self.method_max_k.get(method, k):
                    continue
                if method in PANDA_METHODS:
                    allowed = self.method_presets.get(method, self.presets)
                    for p in self.presets:
                        if p not in allowed or k > self.preset_max_k.get(p, k):
                            continue
                        for delta in self.deltas:
                            jobs.append(Job(method, p, eps, delta, self.time_limit_for(method)))
                else:
                    jobs.append(Job(method, "", eps, None, self.time_limit_for(method)))
        return tuple(jobs)

    def units(self) -> list[WorkUnit]:
        """One :class:`WorkUnit` per (network, K, repetition), in sweep order."""
        out = []
        for net in self.networks:
            for k in self.k_values:
                jobs = self.jobs_for(k)
                if not jobs:
                    continue
                for rep in range(self.repeats):
                    inst_seed, mech_seed = unit_seeds(self.seed, net, k, rep)
                    out.append(WorkUnit(net, k, rep, inst_seed, mech_seed, jobs, self))
        return out

    def to_dict(self) -> dict:
        """Plain-data form (JSON- and TOML-ready)."""
        d = dataclasses.asdict(self)
        for key, value in list(d.items()):
            if isinstance(value, tuple):
                d[key] = list(value)
        d["method_presets"] = {m: list(v) for m, v in self.method_presets.items()}
        return d

    def config_hash(self) -> str:
        """16 hex digits of SHA-256 over the canonical JSON of the whole specification."""
        return _hash(self.to_dict())

    def identity_hash(self) -> str:
        """Hash of the settings a row depends on but that are not in its key (see :data:`ROW_KEY`)."""
        d = self.to_dict()
        return _hash({k: d[k] for k in _SPEC_KEYS_IDENTITY})

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ExperimentSpec:
        """Build from a mapping with the TOML spelling (``K``, ``epsilon``, ``delta``, ``users``, ...)."""
        aliases = {
            "K": "k_values",
            "k": "k_values",
            "epsilon": "epsilons_per_km",
            "epsilon_per_km": "epsilons_per_km",
            "delta": "deltas",
            "users": "n_users",
            "outputs": "n_outputs",
            "tasks": "n_tasks",
            "preset": "presets",
            "network": "networks",
            "time_limit": "time_limit_s",
            "time_limits": "method_time_limits_s",
            "max_K": "method_max_k",
            "preset_max_K": "preset_max_k",
            "overrides": "preset_overrides",
        }
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            target = aliases.get(key, key)
            if target not in names:
                msg = (
                    f"Unknown experiment setting {key!r}. Known: {sorted(names | set(aliases))} "
                    "(out and executor are command-line settings of the [run] table)."
                )
                raise ValueError(msg)
            kwargs[target] = value
        return cls(**kwargs)


def _hash(obj: object) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_spec(path: str | os.PathLike) -> tuple[ExperimentSpec, dict]:
    """Read a TOML experiment file.

    The file holds an ``[experiment]`` table (the :class:`ExperimentSpec` fields, TOML spelling:
    ``networks``, ``K``, ``methods``, ``presets``, ``epsilon``, ``delta``, ``users``, ``outputs``,
    ``repeats``, ``seed``, ``time_limit``, sub-tables ``time_limits``, ``max_K``, ``method_presets``,
    ``overrides``) and optionally a ``[run]`` table (``out``, ``executor``, ``workers``).

    Returns
    -------
    spec, run
        The specification and the ``[run]`` table (a dict, possibly empty).
    """
    import tomllib

    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        msg = f"The experiment file {str(p)!r} does not exist. See experiments/*.toml for examples."
        raise ValueError(msg) from None
    except tomllib.TOMLDecodeError as exc:
        msg = f"The experiment file {str(p)!r} is not valid TOML: {exc}."
        raise ValueError(msg) from None
    if "experiment" not in data:
        msg = f"The experiment file {str(p)!r} must have an [experiment] table."
        raise ValueError(msg)
    unknown = set(data) - {"experiment", "run"}
    if unknown:
        msg = (
            f"The experiment file {str(p)!r} has unknown top-level tables {sorted(unknown)}: "
            "use [experiment] and [run]."
        )
        raise ValueError(msg)
    run = dict(data.get("run", {}))
    unknown_run = set(run) - {"out", "executor", "workers"}
    if unknown_run:
        msg = f"The [run] table of {str(p)!r} has unknown keys {sorted(unknown_run)}: use out, executor, workers."
        raise ValueError(msg)
    return ExperimentSpec.from_mapping(data["experiment"]), run


def unit_seeds(base_seed: int, network: str, k: int, repetition: int) -> tuple[int, int]:
    """Seeds ``(instance_seed, mechanism_seed)`` of one (network, K, repetition).

    Derived with :class:`numpy.random.SeedSequence` from the base seed, a CRC-32 of the network's
    name, K and the repetition: the same unit gets the same instance in every sweep that contains it,
    whatever else the sweep holds.
    """
    ss = np.random.SeedSequence([int(base_seed), zlib.crc32(network.encode("utf-8")), int(k), int(repetition)])
    inst, mech = ss.generate_state(2)
    return int(inst), int(mech)


@dataclass(frozen=True)
class Job:
    """One method run on a unit's instance (``preset`` is ``""`` and ``delta`` ``None`` for baselines)."""

    method: str
    preset: str
    epsilon_per_km: float
    delta: float | None
    time_limit_s: float


@dataclass(frozen=True)
class WorkUnit:
    """One (network, K, repetition): an instance and all its jobs. Picklable (sent to workers)."""

    network: str
    k: int
    repetition: int
    instance_seed: int
    method_seed: int
    jobs: tuple[Job, ...]
    spec: ExperimentSpec

    def key(self, job: Job) -> tuple[str, ...]:
        """Return the :data:`ROW_KEY` of a job of this unit, as strings (see :func:`row_key`)."""
        return row_key(
            {
                "network": self.network,
                "K": self.k,
                "preset": job.preset,
                "epsilon_per_km": job.epsilon_per_km,
                "delta": job.delta,
                "method": job.method,
                "repetition": self.repetition,
            }
        )

    @property
    def label(self) -> str:
        """Short description for progress lines."""
        return f"{self.network} K={self.k} rep {self.repetition}"


def _key_float(value: object) -> str:
    if value is None or value == "":
        return ""
    x = float(value)  # type: ignore[arg-type]
    return "" if math.isnan(x) else repr(x)


def row_key(row: Mapping[str, Any]) -> tuple[str, ...]:
    """Canonical key of a row (strings; floats through ``repr(float(.))``, so CSV round trips match)."""
    return (
        str(row["network"]),
        str(int(row["K"])),
        str(row["preset"] or ""),
        _key_float(row["epsilon_per_km"]),
        _key_float(row["delta"]),
        str(row["method"]),
        str(int(row["repetition"])),
    )


# ---------------------------------------------------------------------------------------------
# measuring one method
# ---------------------------------------------------------------------------------------------


def _nan_row() -> dict:
    return {c: float("nan") for c in ROW_COLUMNS if c not in _STR_COLUMNS and c not in ROW_KEY}


def measure_method(
    instance,
    job: Job,
    *,
    config=None,
    seed: int | None,
    audit_sample_pairs: int = 20_000,
    on_built: Callable[[dict], None] | None = None,
) -> dict:
    """Build one method on an instance and measure it: the metrics of one row.

    Follows :func:`panda.compare.compare` (same builders, same audits), and also keeps what the
    sweep tables need: the loss at the users' true records for every method, the LP time, and for
    PAnDA the anchor union, pair counts and budget split.

    Parameters
    ----------
    instance
        The unit's :class:`panda.Instance`.
    job
        Which method (and budget).
    config
        The :class:`panda.PandaConfig` of the job (PAnDA methods; ignored by baselines).
    seed
        Mechanism seed.
    audit_sample_pairs
        See :func:`panda.compare.compare`.
    on_built
        Called with ``{"status", "time_s", "utility_loss_m"}`` once the mechanism is built, before the
        audits (the isolated runner uses it to separate the build's time limit from the audit's).

    Returns
    -------
    dict
        Metric columns of :data:`ROW_COLUMNS` (missing ones are written empty).
    """
    from panda.compare import PANDA_METHODS, _build, audit_columns
    from panda.config import PandaConfig

    cfg = config if config is not None else PandaConfig(epsilon_per_km=job.epsilon_per_km)
    row = _nan_row()
    t0 = time.perf_counter()
    c0 = time.process_time()
    try:
        mech = _build(job.method, instance, cfg, seed, job.time_limit_s)
    except Exception as exc:  # a broken builder must not end the sweep: record it
        row.update(status=f"failed: {type(exc).__name__}: {exc}", time_s=time.perf_counter() - t0)
        row["details"] = json.dumps({"traceback": traceback.format_exc(limit=8)})
        if on_built is not None:
            on_built({"status": row["status"], "time_s": row["time_s"], "utility_loss_m": float("nan")})
        return row
    row.update(status=mech.status, time_s=float(mech.build_time_s), utility_loss_m=float(mech.loss_m))
    row["cpu_time_s"] = time.process_time() - c0  # all threads of this process: robust to a busy machine
    if on_built is not None:
        on_built({"status": mech.status, "time_s": row["time_s"], "utility_loss_m": row["utility_loss_m"]})
    details = {k: v for k, v in mech.details.items() if k != "panda"}
    lp_time = details.get("lp_time_s")
    if isinstance(lp_time, (int, float)):
        row["lp_time_s"] = float(lp_time)

    t_audit = time.perf_counter()
    row.update(audit_columns(instance, job.method, mech, audit_sample_pairs=audit_sample_pairs, seed=seed))
    if "audit_note" in row:
        details["audit_note"] = row.pop("audit_note")
    if job.method in PANDA_METHODS and "panda" in mech.details:
        res = mech.details["panda"]
        s = res.summary()
        row.update(
            anchor_union=s["n_anchor_union"],
            anchor_set_size_mean=s["anchor_set_size_mean"],
            n_empty_anchor_sets=s["n_empty_anchor_sets"],
            n_constrained_pairs=s["n_constrained_pairs"],
            n_over_budget_pairs=s["n_over_budget_pairs"],
            n_unreachable_target_pairs=s["n_unreachable_target_pairs"],
            gamma_km=s["gamma_km"],
            far_value=s["far_value"],
            lp_objective_m=s["lp_objective_m"],
            relaxed_lower_bound_m=s["relaxed_lower_bound_m"],
            approximation_ratio=s["approximation_ratio"],
            user_pair_violation_rate=s["user_pair_violation_rate"],
        )
        split = s["budget_split"]
        row["budget_pairs_finite"] = split.get("n_finite", 0)
        for part in ("phase1", "margin", "phase2"):
            for stat in ("median", "mean"):
                row[f"{part}_share_{stat}"] = split.get(f"{part}_share_{stat}", float("nan"))
        t = res.timings_s
        row["lp_time_s"] = float(t.get("anpo_lp", float("nan")))
        row["time_phase1_cost_s"] = float(t.get("phase1_cost", float("nan")))
        row["time_margins_s"] = float(t.get("margins", float("nan")))
        row["time_relaxed_lp_s"] = float(t.get("relaxed_lp", 0.0))  # the lower bound: a diagnostic, not the mechanism
        details["panda_timings_s"] = dict(t)
        details["lp_status"] = res.lp_status
    row["audit_time_s"] = time.perf_counter() - t_audit
    row["details"] = json.dumps(details, default=_json_default, sort_keys=True)
    return row


def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size <= 64 else f"array{value.shape}"
    return str(value)


# ---------------------------------------------------------------------------------------------
# running one method in a child process (hard time limit)
# ---------------------------------------------------------------------------------------------

_BUILD_GRACE_S = 10.0


def _mp_context():
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        # Import the library once in the fork server; children are forked from it ready to work.
        ctx.set_forkserver_preload(["__main__", "panda.experiments", "panda.compare"])
    return ctx


def _can_isolate() -> bool:
    return not multiprocessing.current_process().daemon


def _watch_parent() -> None:
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        while parent.is_alive():
            time.sleep(1.0)
        os._exit(1)  # the unit's process is gone: nobody will read the result

    threading.Thread(target=watch, daemon=True).start()


def _child_main(conn, instance, job: Job, config, seed: int, audit_sample_pairs: int, memory_limit_gb) -> None:
    try:
        _watch_parent()
        if memory_limit_gb:
            try:
                import resource

                limit = int(memory_limit_gb * 2**30)
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX
                pass
        row = measure_method(
            instance,
            job,
            config=config,
            seed=seed,
            audit_sample_pairs=audit_sample_pairs,
            on_built=lambda info: conn.send(("built", info)),
        )
        conn.send(("row", row))
    except KeyboardInterrupt:
        os._exit(130)
    except BaseException as exc:  # noqa: BLE001 - report anything, the parent writes the row
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=8)))
        except Exception:  # pragma: no cover
            pass
    finally:
        conn.close()


class _Interrupted(Exception):
    """A method's child process was stopped by Ctrl-C: stop the unit, write nothing."""


def _receive(conn, proc, deadline: float):
    """Next message from the child, ``("timeout",)`` at the deadline, ``("died", code)`` if it ended."""
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return ("timeout",)
        if conn.poll(min(remaining, 0.5)):
            try:
                return conn.recv()
            except (EOFError, OSError):
                proc.join(5.0)
                return ("died", proc.exitcode)
        if not proc.is_alive() and not conn.poll(0):
            return ("died", proc.exitcode)


def _stop(proc) -> None:
    if proc.is_alive():
        proc.kill()
    proc.join(10.0)


def _died_status(code: int | None) -> str:
    if code == 130:
        raise _Interrupted
    if code is not None and code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        if -code == signal.SIGINT:
            raise _Interrupted
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"failed: method process killed by {name}{hint}"
    return f"failed: method process ended with exit code {code} without a result"


def _run_isolated(instance, job: Job, config, spec: ExperimentSpec, seed: int) -> dict:
    ctx = _mp_context()
    recv, send = ctx.Pipe(duplex=False)
    slim = dataclasses.replace(instance, _cache={})  # d_km is rebuilt in the child, not pickled
    proc = ctx.Process(
        target=_child_main,
        args=(send, slim, job, config, seed, spec.audit_sample_pairs, spec.memory_limit_gb),
        daemon=True,
        name=f"panda-{job.method}",
    )
    t0 = time.perf_counter()
    proc.start()
    send.close()
    limit = job.time_limit_s
    try:
        msg = _receive(recv, proc, t0 + limit + _BUILD_GRACE_S)
        row = _nan_row()
        if msg[0] == "timeout":
            _stop(proc)
            row.update(status=f"unsolved: time limit {limit:g} s reached (stopped)", time_s=time.perf_counter() - t0)
            return row
        if msg[0] == "died":
            row.update(status=_died_status(msg[1]), time_s=time.perf_counter() - t0)
            return row
        if msg[0] == "error":
            row.update(
                status=f"failed: {msg[1]}", time_s=time.perf_counter() - t0, details=json.dumps({"traceback": msg[2]})
            )
            return row
        built = msg[1] if msg[0] == "built" else None
        if msg[0] == "built":
            audit_start = time.perf_counter()
            msg = _receive(recv, proc, audit_start + max(60.0, limit))
        if msg[0] == "row":
            return msg[1]
        assert built is not None
        if msg[0] == "died":
            status = _died_status(msg[1])
            what = f"audit failed ({status.removeprefix('failed: ')})"
        elif msg[0] == "timeout":
            _stop(proc)
            what = f"audit stopped after {max(60.0, limit):g} s"
        else:
            what = f"audit failed: {msg[1]}"
        row.update(status=built["status"], time_s=built["time_s"], utility_loss_m=built["utility_loss_m"])
        row["details"] = json.dumps({"audit": what})
        return row
    finally:
        recv.close()
        if proc.is_alive():
            _stop(proc)
        else:
            proc.join(1.0)


# ---------------------------------------------------------------------------------------------
# running one unit
# ---------------------------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def run_unit(
    unit: WorkUnit,
    sink: Callable[[dict], None] | None = None,
    *,
    skip: Iterable[tuple[str, ...]] = (),
) -> list[dict]:
    """Build the unit's instance once and run every job on it.

    Parameters
    ----------
    unit
        The (network, K, repetition) and its jobs.
    sink
        Called with each finished row at once (the driver appends it to ``rows.csv``).
    skip
        Row keys already done: their jobs are not run.

    Returns
    -------
    list of dict
        The rows, in job order.
    """
    from panda.compare import PANDA_METHODS
    from panda.instance import make_instance
    from panda.network import load_city

    spec = unit.spec
    done = set(skip)
    jobs = [j for j in unit.jobs if unit.key(j) not in done]
    if not jobs:
        return []
    net = load_city(unit.network)  # cached per process; not part of the instance's time
    t0 = time.perf_counter()
    instance = make_instance(
        net,
        n_records=unit.k,
        n_outputs=min(spec.n_outputs, unit.k),
        n_users=min(spec.n_users, unit.k),
        n_tasks=min(spec.n_tasks, unit.k),
        prior=spec.prior,
        metric=spec.metric,
        user_distribution=spec.user_distribution,
        seed=unit.instance_seed,
    )
    instance_time = time.perf_counter() - t0
    isolate = spec.isolate and _can_isolate()
    host = platform.node()
    rows = []
    for job in jobs:
        config = None
        if job.method in PANDA_METHODS:
            config = spec.config_for(job.preset, job.epsilon_per_km, job.delta if job.delta is not None else 0.0)
        t_job = time.perf_counter()
        if isolate:
            metrics = _run_isolated(instance, job, config, spec, unit.method_seed)
        else:
            metrics = measure_method(
                instance, job, config=config, seed=unit.method_seed, audit_sample_pairs=spec.audit_sample_pairs
            )
        row = {
            "network": unit.network,
            "K": unit.k,
            "preset": job.preset,
            "epsilon_per_km": job.epsilon_per_km,
            "delta": "" if job.delta is None else job.delta,
            "method": job.method,
            "repetition": unit.repetition,
            **metrics,
            "wall_time_s": time.perf_counter() - t_job,
            "instance_time_s": instance_time,
            "time_limit_s": job.time_limit_s,
            "limit_enforced": isolate,
            "n_users": instance.n_users,
            "n_outputs": instance.n_outputs,
            "n_tasks": int(instance.tasks.shape[0]),
            "instance_seed": unit.instance_seed,
            "method_seed": unit.method_seed,
            "host": host,
            "finished_at": _now(),
        }
        rows.append(row)
        if sink is not None:
            sink(row)
    return rows


# Worker-process state of the local executor, set once by the pool's initializer.
_POOL_QUEUE = None


def _pool_init(q) -> None:
    import signal

    global _POOL_QUEUE
    _POOL_QUEUE = q
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and stops the pool


def _pool_run_unit(unit: WorkUnit, skip: tuple) -> list[dict]:
    q = _POOL_QUEUE
    try:
        return run_unit(unit, None if q is None else q.put, skip=skip)
    except _Interrupted:
        return []


class _DaskSink:
    """Picklable row sink of the dask executor: puts rows on a named ``distributed.Queue``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: Any = None

    def __getstate__(self) -> dict:
        return {"name": self.name}

    def __setstate__(self, state: dict) -> None:
        self.name = state["name"]
        self._queue = None

    def __call__(self, row: dict) -> None:
        if self._queue is None:
            from distributed import Queue

            self._queue = Queue(self.name)
        self._queue.put(row)


def _dask_run_unit(unit: WorkUnit, skip: tuple, sink: _DaskSink) -> list[dict]:
    try:
        return run_unit(unit, sink, skip=skip)
    except _Interrupted:
        return []


# ---------------------------------------------------------------------------------------------
# rows.csv
# ---------------------------------------------------------------------------------------------


def _parse_value(column: str, text: str) -> object:
    if column in _STR_COLUMNS:
        return text
    if text == "":
        return "" if column in ("delta", "preset") else float("nan")
    if column in _BOOL_COLUMNS:
        return text.strip().lower() in ("true", "1", "yes")
    if column in _INT_COLUMNS:
        try:
            return int(text)
        except ValueError:
            return float(text)
    try:
        return float(text)
    except ValueError:
        return text


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Read ``rows.csv`` (or the folder holding it) into typed dicts (missing numbers are NaN)."""
    p = Path(path)
    if p.is_dir():
        p = p / "rows.csv"
    if not p.exists():
        return []
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return [{c: _parse_value(c, v if v is not None else "") for c, v in r.items() if c is not None} for r in reader]


def _format_cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else repr(float(value))
    if isinstance(value, np.integer):
        return str(int(value))
    return str(value)


class _RowWriter:
    """Appends rows to ``rows.csv`` one at a time (flushed and synced), skipping known keys."""

    def __init__(self, path: Path) -> None:
        self.path = path
        existing = read_rows(path) if path.exists() else []
        self.keys = {row_key(r) for r in existing}
        needs_header = not path.exists() or path.stat().st_size == 0
        if not needs_header:
            with path.open(newline="", encoding="utf-8") as fh:
                header = next(csv.reader(fh), [])
            if tuple(header) != ROW_COLUMNS:  # written by another version: rewrite with today's columns
                self._rewrite(existing)
        self.fh = path.open("a", newline="", encoding="utf-8")
        self.writer = csv.writer(self.fh)
        if needs_header:
            self.writer.writerow(ROW_COLUMNS)
            self.fh.flush()
        self.n_written = 0

    def _rewrite(self, rows: list[dict]) -> None:
        tmp = self.path.with_suffix(".csv.tmp")
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(ROW_COLUMNS)
            for r in rows:
                w.writerow([_format_cell(r.get(c, "")) for c in ROW_COLUMNS])
        tmp.replace(self.path)

    def write(self, row: Mapping[str, Any]) -> bool:
        key = row_key(row)
        if key in self.keys:
            return False
        self.writer.writerow([_format_cell(row.get(c, "")) for c in ROW_COLUMNS])
        self.fh.flush()
        try:
            os.fsync(self.fh.fileno())
        except OSError:  # pragma: no cover
            pass
        self.keys.add(key)
        self.n_written += 1
        return True

    def close(self) -> None:
        self.fh.close()


# ---------------------------------------------------------------------------------------------
# progress
# ---------------------------------------------------------------------------------------------


def _hms(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f}s"
    m, s = divmod(int(round(seconds)), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


class _Progress:
    """Stderr lines with rows done and an estimate of the time left.

    Each remaining row is costed at its method's (and preset's) observed seconds per record (K) so
    far, or at the median method's rate until its method has finished once; the estimate is the
    elapsed time scaled by remaining cost over finished cost, so parallel workers are accounted for.
    Rough by nature: the first row of a slow method changes it a lot.
    """

    def __init__(self, stream: TextIO | None, todo: Sequence[tuple[tuple[str, ...], int]], n_units: int) -> None:
        self.stream = stream
        self.remaining = {key: float(k) for key, k in todo}
        self.n_rows = len(todo)
        self.n_done = 0
        self.n_units = n_units
        self.units_done = 0
        self.t0 = time.perf_counter()
        self.spent: dict[tuple[str, str], float] = {}  # (method, preset) -> wall seconds
        self.size: dict[tuple[str, str], float] = {}  # (method, preset) -> sum of K

    def say(self, text: str) -> None:
        if self.stream is not None:
            print(text, file=self.stream, flush=True)

    def _left(self, elapsed: float) -> float:
        done = sum(self.spent.values())
        if done <= 0 or not self.size:
            return float("nan")
        rates = sorted(self.spent[mp] / self.size[mp] for mp in self.size if self.size[mp] > 0)
        overall = rates[len(rates) // 2]  # a method not seen yet: the median method's rate
        cost = 0.0
        for key, k in self.remaining.items():
            mp = (key[5], key[2])
            rate = self.spent[mp] / self.size[mp] if mp in self.size and self.size[mp] > 0 else overall
            cost += rate * k
        return elapsed * cost / done

    def row(self, row: Mapping[str, Any]) -> None:
        key = row_key(row)
        k = self.remaining.pop(key, None)
        self.n_done += 1
        wall = row.get("wall_time_s")
        if k is not None and isinstance(wall, float) and math.isfinite(wall):
            mp = (key[5], key[2])
            self.spent[mp] = self.spent.get(mp, 0.0) + wall
            self.size[mp] = self.size.get(mp, 0.0) + k
        elapsed = time.perf_counter() - self.t0
        left = self._left(elapsed) if self.remaining else 0.0
        eta = f"about {_hms(left)} left" if math.isfinite(left) else "time left unknown"
        method = str(row["method"]) + (f"/{row['preset']}" if row.get("preset") else "")
        t = row.get("time_s")
        t_text = f"{t:.2f} s" if isinstance(t, float) and math.isfinite(t) else "n/a"
        self.say(
            f"[experiment] {self.n_done}/{self.n_rows} rows, {self.units_done}/{self.n_units} instances, "
            f"{_hms(elapsed)} elapsed, {eta} | {row['network']} K={row['K']} rep {row['repetition']} "
            f"{method}: {row['status']} ({t_text})"
        )


# ---------------------------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepOutcome:
    """What :func:`run_experiment` did.

    Attributes
    ----------
    out_dir
        The output folder.
    n_rows_total, n_rows_skipped, n_rows_written
        Rows of the sweep, rows already present (resumed), rows added by this run.
    n_units_run
        Instances built by this run (0 when everything was already done).
    failed_units
        ``(label, error)`` of units that raised (their finished rows are kept).
    wall_time_s
        Duration of the run, seconds.
    interrupted
        True when the run was stopped by Ctrl-C (finished rows are saved; rerun to resume).
    """

    out_dir: Path
    n_rows_total: int
    n_rows_skipped: int
    n_rows_written: int
    n_units_run: int
    failed_units: tuple[tuple[str, str], ...]
    wall_time_s: float
    interrupted: bool = False


def _package_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in (
        "panda-explorer",
        "numpy",
        "scipy",
        "highspy",
        "networkx",
        "osmnx",
        "pandas",
        "plotly",
        "dask",
        "distributed",
    ):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    import panda

    out["panda.__version__"] = panda.__version__
    return out


def _check_networks(spec: ExperimentSpec, executor: str) -> None:
    from panda.network import CITIES, ROME_PAPER, list_cities

    known = set(CITIES) | {ROME_PAPER}
    unknown = [n for n in spec.networks if n.lower() not in known]
    if unknown:
        msg = f"The 'networks' of the experiment must be names from {sorted(known)}. Got {unknown} instead."
        raise ValueError(msg)
    if executor in ("local", "serial"):
        from panda.errors import DataUnavailableError

        missing = [n for n in spec.networks if n.lower() not in list_cities()]
        if missing:
            msg = (
                f"The network(s) {missing} are not on this machine (rome-paper needs ../shared/data/rome-paper "
                "or $PANDA_ROME_PAPER_DIR). Choose an embedded city or run on a cluster that has the data."
            )
            raise DataUnavailableError(msg)


def _dask_address(executor: str) -> str | None:
    for prefix in ("dask://", "tcp://", "tls://", "inproc://", "ws://", "wss://"):
        if executor.startswith(prefix):
            return "tcp://" + executor[len("dask://") :] if prefix == "dask://" else executor
    return None


def _normalise_executor(executor: object) -> str:
    if executor is None:
        return "local"
    if not isinstance(executor, str):
        return "dask-client"
    e = executor.strip()
    if e in ("local", "serial") or _dask_address(e):
        return e
    msg = (
        "The 'executor' parameter of run_experiment must be 'local', 'serial', a dask scheduler address "
        f"('tcp://host:8786' or 'dask://host:8786') or a distributed.Client. Got {executor!r} instead."
    )
    raise ValueError(msg)


def _write_metadata(out: Path, spec: ExperimentSpec, units: Sequence[WorkUnit], run_info: dict) -> None:
    path = out / "experiment.json"
    previous: dict = {}
    if path.exists():
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = {}
    runs = list(previous.get("runs", []))
    # replace the entry of this run (same started_at) or append it
    runs = [r for r in runs if r.get("started_at") != run_info.get("started_at")] + [run_info]
    meta = {
        "spec": spec.to_dict(),
        "config_hash": spec.config_hash(),
        "identity_hash": spec.identity_hash(),
        "row_key": list(ROW_KEY),
        "units": [
            {
                "network": u.network,
                "K": u.k,
                "repetition": u.repetition,
                "instance_seed": u.instance_seed,
                "method_seed": u.method_seed,
                "jobs": len(u.jobs),
            }
            for u in units
        ],
        "packages": _package_versions(),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
        },
        "runs": runs,
        "seed_derivation": "numpy.random.SeedSequence([seed, crc32(network), K, repetition]).generate_state(2)",
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, default=_json_default) + "\n", encoding="utf-8")
    tmp.replace(path)


def _check_identity(out: Path, spec: ExperimentSpec) -> None:
    path = out / "experiment.json"
    if not path.exists() or not (out / "rows.csv").exists():
        return
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    old_spec = previous.get("spec", {})
    new_spec = spec.to_dict()
    diff = {k: (old_spec.get(k), new_spec.get(k)) for k in _SPEC_KEYS_IDENTITY if old_spec.get(k) != new_spec.get(k)}
    if diff:
        msg = (
            f"The folder {str(out)!r} holds rows made with other settings ({diff}, as (old, new)); rows with "
            "the same key would not be comparable. Use another --out folder, or the old settings."
        )
        raise ValueError(msg)


def run_experiment(
    spec: ExperimentSpec,
    out_dir: str | os.PathLike,
    *,
    executor: object = "local",
    workers: int | None = None,
    progress: TextIO | None = sys.stderr,
    tables: bool = True,
    figures: bool = True,
) -> SweepOutcome:
    """Run a sweep into ``out_dir``, resuming whatever is already there.

    Parameters
    ----------
    spec
        What to run.
    out_dir
        Output folder (created). Rows already in its ``rows.csv`` are skipped.
    executor
        ``"local"`` (a ``ProcessPoolExecutor`` of ``workers`` processes, the default), ``"serial"``
        (this process), a dask scheduler address (``"tcp://host:8786"``, ``"dask://host:8786"``),
        or a ``distributed.Client``.
    workers
        Processes of the local executor (default: the number of CPUs, at most the number of units).
    progress
        Stream for progress lines (``None``: quiet).
    tables, figures
        Also write ``tables.md`` and ``figures/`` at the end (also after an interruption).

    Returns
    -------
    SweepOutcome
        Counts and timing; the rows are in ``out_dir/rows.csv`` (:func:`read_rows`).
    """
    if not isinstance(spec, ExperimentSpec):
        msg = f"The 'spec' parameter of run_experiment must be an ExperimentSpec. Got {type(spec).__name__} instead."
        raise TypeError(msg)
    kind = _normalise_executor(executor)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        msg = f"The 'workers' parameter of run_experiment must be an int >= 1. Got {workers!r} instead."
        raise ValueError(msg)
    _check_networks(spec, kind)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _check_identity(out, spec)
    t_start = time.perf_counter()
    started_at = _now()
    units = spec.units()
    writer = _RowWriter(out / "rows.csv")
    todo_units = []
    todo_rows: list[tuple[tuple[str, ...], int]] = []
    n_total = n_skipped = 0
    for u in units:
        pending = [u.key(j) for j in u.jobs if u.key(j) not in writer.keys]
        n_total += len(u.jobs)
        n_skipped += len(u.jobs) - len(pending)
        if pending:
            todo_units.append(u)
            todo_rows.extend((key, u.k) for key in pending)
    prog = _Progress(progress, todo_rows, len(todo_units))
    run_info = {
        "started_at": started_at,
        "executor": kind if kind != "dask-client" else "distributed.Client",
        "command": " ".join(sys.argv),
        "rows_total": n_total,
        "rows_skipped": n_skipped,
        "status": "running",
    }
    _write_metadata(out, spec, units, run_info)
    prog.say(
        f"[experiment] {out}: {n_total} rows in {len(units)} instances; {n_skipped} already done, "
        f"{len(todo_rows)} to run in {len(todo_units)} instances (executor: {run_info['executor']})"
    )

    failed: list[tuple[str, str]] = []
    interrupted = False
    crashed = ""

    def accept(row: Mapping[str, Any]) -> None:
        if writer.write(row):
            prog.row(row)

    try:
        if todo_units:
            skip = tuple(writer.keys)
            if kind == "serial":
                _run_serial(todo_units, skip, accept, prog, failed)
            elif kind == "local":
                n_workers = workers or os.cpu_count() or 1
                _run_local(todo_units, skip, accept, prog, failed, min(n_workers, len(todo_units)))
            else:
                _run_dask(executor, todo_units, skip, accept, prog, failed)
    except KeyboardInterrupt:
        interrupted = True
        prog.say(
            f"[experiment] interrupted: {writer.n_written} new rows saved in {out / 'rows.csv'}; "
            "run the same command again to resume."
        )
    except BaseException as exc:
        crashed = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        writer.close()
        wall = time.perf_counter() - t_start
        run_info.update(
            finished_at=_now(),
            wall_time_s=wall,
            rows_written=writer.n_written,
            units_run=len(todo_units),
            failed_units=[list(f) for f in failed],
            status="interrupted"
            if interrupted
            else (f"crashed: {crashed}" if crashed else ("finished with errors" if failed else "finished")),
        )
        _write_metadata(out, spec, units, run_info)
        rows = read_rows(out)
        if tables:
            write_tables(rows, out / "tables.md", spec=spec)
        if figures:
            try:
                write_figures(rows, out / "figures")
            except Exception as exc:  # figures are a convenience: never lose a run over them
                prog.say(f"[experiment] figures not written: {type(exc).__name__}: {exc}")
    prog.say(
        f"[experiment] done: {writer.n_written} rows written, {n_skipped} skipped, {len(failed)} failed instances, "
        f"{_hms(wall)}; results in {out}"
    )
    return SweepOutcome(out, n_total, n_skipped, writer.n_written, len(todo_units), tuple(failed), wall, interrupted)


def _run_serial(units, skip, accept, prog: _Progress, failed: list) -> None:
    for u in units:
        try:
            for row in run_unit(u, accept, skip=skip):
                accept(row)
        except _Interrupted:
            raise KeyboardInterrupt from None
        except Exception as exc:
            failed.append((u.label, f"{type(exc).__name__}: {exc}"))
            prog.say(f"[experiment] {u.label} failed: {type(exc).__name__}: {exc}")
        prog.units_done += 1


def _drain(q, accept) -> None:
    while True:
        try:
            row = q.get_nowait()
        except _queue.Empty:
            return
        except (EOFError, OSError):  # the queue's manager is gone (interpreter shutting down)
            return
        accept(row)


def _collect(fut, unit, accept, failed: list, prog) -> None:
    """Accept the rows of a finished unit (a local or a Dask future); record a failure instead."""
    try:
        for row in fut.result():
            accept(row)
    except Exception as exc:
        failed.append((unit.label, f"{type(exc).__name__}: {exc}"))
        prog.say(f"[experiment] {unit.label} failed: {type(exc).__name__}: {exc}")
    prog.units_done += 1


def _run_local(units, skip, accept, prog: _Progress, failed: list, n_workers: int) -> None:
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = _mp_context()
    q = ctx.Queue()
    pool = ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx, initializer=_pool_init, initargs=(q,))
    futures = {}
    try:
        futures = {pool.submit(_pool_run_unit, u, skip): u for u in units}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(q, accept)
            for fut in done:
                _collect(fut, futures[fut], accept, failed, prog)
        _drain(q, accept)
        pool.shutdown(wait=True)
    except BaseException:
        for fut in futures:
            fut.cancel()
        procs = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:  # their method children follow (they watch their parent)
            if p.is_alive():
                p.terminate()
        raise
    finally:
        q.close()


def _run_dask(executor, units, skip, accept, prog: _Progress, failed: list) -> None:
    import uuid

    try:
        from distributed import Client, Queue, as_completed
    except ImportError as exc:  # pragma: no cover - distributed is in requirements.txt
        msg = "The dask executor needs dask.distributed: pip install 'dask[distributed]'."
        raise ValueError(msg) from exc

    own_client = isinstance(executor, str)
    client = Client(_dask_address(executor), set_as_default=False) if own_client else executor
    name = f"panda-rows-{uuid.uuid4().hex[:12]}"
    q = Queue(name, client=client)
    sink = _DaskSink(name)
    futures = {}
    try:
        for u in units:
            fut = client.submit(
                _dask_run_unit,
                u,
                skip,
                sink,
                pure=False,
                key=f"panda-unit-{u.network}-{u.k}-{u.repetition}-{uuid.uuid4().hex[:8]}",
            )
            futures[fut] = u

        def drain() -> None:
            while True:
                batch = q.get(batch=True)
                if not batch:
                    return
                for row in batch:
                    accept(row)

        finished = as_completed(list(futures), loop=client.loop)
        while not finished.is_empty():
            done = finished.next_batch(block=False)
            drain()
            if not done:
                time.sleep(0.3)
            for fut in done:
                _collect(fut, futures[fut], accept, failed, prog)
        drain()
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise
    finally:
        try:
            q.close()
        except Exception:  # pragma: no cover
            pass
        if own_client:
            client.close()


# ---------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """Aggregate of one (method, K) over repetitions."""

    n: int
    n_solved: int
    mean: float
    half_width: float
    time_limit_s: float
    unsolved_time_s: float = float("nan")

    def unsolved_text(self, value: str) -> str:
        """Return the text of a cell with no solved repetition.

        For times: ``> limit`` (the paper's "> 1,800") when the limit was reached, ``unsolved after N s``
        when the method gave up earlier; ``-`` for every other value.
        """
        if not value.endswith("time_s") or not math.isfinite(self.time_limit_s):
            return "-"
        lim = self.time_limit_s
        if math.isfinite(self.unsolved_time_s) and self.unsolved_time_s < 0.95 * lim:
            return f"unsolved after {self.unsolved_time_s:,.0f} s"
        return f"> {lim:,.0f}" if lim >= 10 else f"> {lim:g}"

    def format(self, digits: int, *, unsolved: str = "-", percent: bool = False) -> str:
        """``mean ± 1.96 std`` (sample std), with how many repetitions were solved when not all."""
        if self.n == 0:
            return ""
        if self.n_solved == 0:
            return unsolved
        scale = 100.0 if percent else 1.0
        unit = " %" if percent else ""
        text = f"{self.mean * scale:,.{digits}f}"
        if self.n_solved >= 2:
            text += f" ± {self.half_width * scale:,.{digits}f}"
        text += unit
        if self.n_solved < self.n:
            text += f" ({self.n_solved}/{self.n} solved)"
        return text


def _solved(row: Mapping[str, Any]) -> bool:
    return str(row.get("status", "")).startswith("solved")


def _matches(row: Mapping[str, Any], network: str, preset: str, eps: float, delta: float | None) -> bool:
    if row["network"] != network or not math.isclose(float(row["epsilon_per_km"]), eps, rel_tol=1e-12):
        return False
    if not row.get("preset"):  # baselines: no preset and no delta, they belong to every table
        return True
    if row["preset"] != preset:
        return False
    return delta is None or (row["delta"] != "" and math.isclose(float(row["delta"]), delta, rel_tol=1e-12))


def summarise(
    rows: Sequence[Mapping[str, Any]],
    value: str,
    *,
    network: str,
    preset: str,
    epsilon_per_km: float,
    delta: float | None = None,
) -> dict[tuple[str, int], Cell]:
    """Aggregate ``value`` per (method, K) over repetitions: mean and 1.96 x sample std.

    Baseline rows (no preset) enter every preset's table. Unsolved rows count in ``n`` but not in
    the mean; for ``value="time_s"`` they are shown as "> limit" by :func:`markdown_table`.
    """
    groups: dict[tuple[str, int], list] = {}
    for r in rows:
        if _matches(r, network, preset, epsilon_per_km, delta):
            groups.setdefault((str(r["method"]), int(r["K"])), []).append(r)
    out = {}
    for key, rs in groups.items():
        vals = []
        for r in rs:
            v = r.get(value)
            if _solved(r) and isinstance(v, (int, float)) and math.isfinite(float(v)):
                vals.append(float(v))
        arr = np.asarray(vals)
        limits = [float(r["time_limit_s"]) for r in rs if isinstance(r.get("time_limit_s"), (int, float))]
        spent = [
            float(r["time_s"])
            for r in rs
            if not _solved(r) and isinstance(r.get("time_s"), (int, float)) and math.isfinite(float(r["time_s"]))
        ]
        out[key] = Cell(
            n=len(rs),
            n_solved=len(vals),
            mean=float(arr.mean()) if arr.size else float("nan"),
            half_width=float(1.96 * arr.std(ddof=1)) if arr.size >= 2 else float("nan"),
            time_limit_s=max(limits) if limits else float("nan"),
            unsolved_time_s=max(spent) if spent else float("nan"),
        )
    return out


def _ordered_methods(methods: Iterable[str]) -> list[str]:
    ms = set(methods)
    return [m for m in _METHOD_ORDER if m in ms] + sorted(ms - set(_METHOD_ORDER))


def markdown_table(
    rows: Sequence[Mapping[str, Any]],
    value: str = "users_loss_m",
    *,
    network: str,
    preset: str,
    epsilon_per_km: float,
    delta: float | None = None,
    methods: Sequence[str] | None = None,
    k_values: Sequence[int] | None = None,
    digits: int = 2,
    percent: bool = False,
) -> str:
    """Render a Markdown table shaped like the paper's Tables 2 and 4: rows = methods, columns = K.

    Cells are ``mean ± 1.96 std`` over repetitions. For times (``value`` ending in ``time_s``) a method
    unsolved in every repetition shows ``> limit``; for other values it shows ``-`` (as the paper).
    """
    cells = summarise(rows, value, network=network, preset=preset, epsilon_per_km=epsilon_per_km, delta=delta)
    ms = list(methods) if methods is not None else _ordered_methods(m for m, _ in cells)
    ks = sorted(set(k_values) if k_values is not None else {k for _, k in cells})
    lines = ["| Method | " + " | ".join(f"K={k:,}" for k in ks) + " |", "|---|" + "---:|" * len(ks)]
    for m in ms:
        if not any((m, k) in cells for k in ks):
            continue
        texts = []
        for k in ks:
            c = cells.get((m, k))
            if c is None:
                texts.append("")
                continue
            texts.append(c.format(digits, unsolved=c.unsolved_text(value), percent=percent))
        lines.append(f"| {METHOD_LABELS.get(m, m)} | " + " | ".join(texts) + " |")
    return "\n".join(lines)


#: (column, title, digits, percent) of the tables :func:`markdown_tables` writes.
TABLES = (
    ("time_s", "Computation time, s (Table 2 shape; everything the method builds, audits excluded)", 2, False),
    ("users_loss_m", "Utility loss at the users' true records, m (Table 4 shape)", 2, False),
    ("utility_loss_m", "Expected utility loss over the prior (all records), m", 2, False),
    ("violation_rate", "mDP violation rate of the record-level matrix (audited pairs)", 2, True),
    ("pmdp_user_rate_over_delta", "PmDP: user pairs whose violation probability exceeds delta", 2, True),
    ("anchor_union", "Anchor union size |A|", 1, False),
    ("phase1_share_median", "Budget split: Phase-I share of eps*d (median over constrained pairs)", 3, False),
    ("margin_share_median", "Budget split: safety-margin share (median)", 3, False),
    ("phase2_share_median", "Budget split: Phase-II share (median)", 3, False),
)


def markdown_tables(rows: Sequence[Mapping[str, Any]], *, spec: ExperimentSpec | None = None) -> str:
    """All tables of a sweep: for each (network, preset, epsilon, delta), :data:`TABLES`."""
    if not rows:
        return "# Experiment tables\n\nNo rows yet.\n"
    nets = list(dict.fromkeys(str(r["network"]) for r in rows))
    presets = sorted({str(r["preset"]) for r in rows if r.get("preset")}) or [""]
    epsilons = sorted({float(r["epsilon_per_km"]) for r in rows})
    deltas: list[float | None] = [*sorted({float(r["delta"]) for r in rows if r.get("delta") != ""})] or [None]
    reps = sorted({int(r["repetition"]) for r in rows})
    out = [
        "# Experiment tables",
        "",
        f"Cells: mean ± 1.96 x sample standard deviation over repetitions ({len(reps)} repetition(s) in the file); "
        "'-' = unsolved in every repetition, '> N' = time limit N s reached, 'unsolved after N s' = the method "
        "gave up before its limit; "
        "'(s/n solved)' when only some were solved. "
        "Baselines do not depend on the preset or delta and appear in every table.",
        "",
    ]
    if spec is not None:
        out += [f"Specification hash {spec.config_hash()}; see experiment.json.", ""]
    for net in nets:
        for p in presets:
            for eps in epsilons:
                for delta in deltas:
                    has_panda = any(_matches(r, net, p, eps, delta) and r.get("preset") for r in rows)
                    head = f"## {net}, preset {p or '-'}, eps = {eps:g}/km" + (
                        f", delta = {delta:g}" if delta is not None else ""
                    )
                    out += [head, ""]
                    for value, title, digits, percent in TABLES:
                        if not has_panda and value in {
                            "pmdp_user_rate_over_delta",
                            "anchor_union",
                            "phase1_share_median",
                            "margin_share_median",
                            "phase2_share_median",
                        }:
                            continue
                        table = markdown_table(
                            rows,
                            value,
                            network=net,
                            preset=p,
                            epsilon_per_km=eps,
                            delta=delta,
                            digits=digits,
                            percent=percent,
                        )
                        if table.count("\n") < 2:
                            continue
                        out += [f"### {title}", "", table, ""]
    return "\n".join(out)


def write_tables(
    rows: Sequence[Mapping[str, Any]], path: str | os.PathLike, *, spec: ExperimentSpec | None = None
) -> Path:
    """Write :func:`markdown_tables` to ``path``."""
    p = Path(path)
    p.write_text(markdown_tables(rows, spec=spec) + "\n", encoding="utf-8")
    return p


# ---------------------------------------------------------------------------------------------
# figures (optional: plotly is imported here only)
# ---------------------------------------------------------------------------------------------


def write_figures(rows: Sequence[Mapping[str, Any]], folder: str | os.PathLike) -> list[Path]:
    """Write plotly line charts of loss, time and violation rate against K (HTML; PNG when kaleido works).

    One file per (network, epsilon, delta, measure), one line per method (and preset), error bars
    1.96 x std. Returns the files written; nothing when plotly is not installed.
    """
    try:
        import plotly.graph_objects as go
    except ImportError:
        return []
    if not rows:
        return []
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import kaleido  # noqa: F401

        png = True
    except ImportError:
        png = False
    written: list[Path] = []
    nets = list(dict.fromkeys(str(r["network"]) for r in rows))
    presets = sorted({str(r["preset"]) for r in rows if r.get("preset")}) or [""]
    epsilons = sorted({float(r["epsilon_per_km"]) for r in rows})
    deltas: list[float | None] = [*sorted({float(r["delta"]) for r in rows if r.get("delta") != ""})] or [None]
    measures = (
        ("users_loss_m", "Utility loss at users' true records (m)", False),
        ("time_s", "Computation time (s)", True),
        ("violation_rate", "mDP violation rate", False),
    )
    js = "directory"
    for net in nets:
        for eps in epsilons:
            for delta in deltas:
                for value, title, log_y in measures:
                    fig = go.Figure()
                    seen_baselines: set[str] = set()
                    for p in presets:
                        cells = summarise(rows, value, network=net, preset=p, epsilon_per_km=eps, delta=delta)
                        for m in _ordered_methods(m for m, _ in cells):
                            is_panda = m.startswith("panda")
                            if not is_panda and m in seen_baselines:
                                continue
                            if not is_panda:
                                seen_baselines.add(m)
                            ks = sorted(k for mm, k in cells if mm == m)
                            ys = [cells[(m, k)].mean for k in ks]
                            es = [cells[(m, k)].half_width for k in ks]
                            if all(not math.isfinite(y) for y in ys):
                                continue
                            label = METHOD_LABELS.get(m, m) + (f" ({p})" if is_panda and p else "")
                            fig.add_trace(
                                go.Scatter(
                                    x=ks,
                                    y=ys,
                                    error_y={"type": "data", "array": [e if math.isfinite(e) else 0 for e in es]},
                                    mode="lines+markers",
                                    name=label,
                                )
                            )
                    if not fig.data:
                        continue
                    dtext = f", delta={delta:g}" if delta is not None else ""
                    fig.update_layout(
                        title=f"{title}: {net}, eps={eps:g}/km{dtext}",
                        xaxis_title="K (secret domain size)",
                        yaxis_title=title,
                        template="plotly_white",
                    )
                    if log_y:
                        fig.update_yaxes(type="log")
                    stem = f"{value}_{net}_eps{eps:g}" + (f"_delta{delta:g}" if delta is not None else "")
                    html = folder / f"{stem}.html"
                    fig.write_html(html, include_plotlyjs=js)
                    written.append(html)
                    if png:
                        try:
                            fig.write_image(folder / f"{stem}.png")
                            written.append(folder / f"{stem}.png")
                        except Exception:  # kaleido without a usable browser: HTML only
                            png = False
    return written
