"""The experiment specification: :class:`ExperimentSpec` (validated), its TOML file, work units and seeds.

An :class:`ExperimentSpec` lists the sweep's dimensions (networks, K, methods, presets, budgets,
repetitions) and the settings shared by all rows; :func:`load_spec` reads one from a TOML file
(``[experiment]`` and ``[run]`` tables). :meth:`ExperimentSpec.units` splits it into
:class:`WorkUnit` s, one per (network, K, repetition), each with its :class:`Job` s and the seeds of
:func:`unit_seeds`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from panda.experiments.results import row_key

#: The paper's limit for LP-based methods ("unsolved if its computation time exceeds 1,800 seconds").
DEFAULT_TIME_LIMIT_S = 1800.0


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
    n_users, n_outputs, n_tasks, loss, prior, metric, user_distribution
        Instance settings (:func:`panda.make_instance`); ``loss`` is the utility loss every method
        optimises and every row reports (``"task"``, the paper's, by default).
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
    loss: str = "task"
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
        from panda.instance import LOSSES, METRICS, PRIORS, USER_DISTRIBUTIONS

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
        if self.loss not in LOSSES:
            raise _bad("loss", f"one of {LOSSES}", self.loss)
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
        identity = {k: d[k] for k in _SPEC_KEYS_IDENTITY}
        if self.loss != "task":  # the paper's loss keeps the hashes of results made before losses existed
            identity["loss"] = self.loss
        return _hash(identity)

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
