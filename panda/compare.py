"""Run several mechanisms on one shared instance and tabulate utility, privacy and time."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from panda.audit import adversary_error_m, audit_mechanism
from panda.config import PandaConfig
from panda.instance import Instance
from panda.mechanisms import BASELINES
from panda.mechanisms.base import MechanismResult
from panda.mechanisms.panda_mech import build_panda
from panda.optimal import OptimalResult
from panda.pmdp import audit_panda

__all__ = ["compare", "METHODS", "COLUMNS"]

PANDA_METHODS = {"panda-e": "exponential", "panda-p": "power", "panda-l": "logistic"}
METHODS = tuple(BASELINES) + tuple(PANDA_METHODS)
#: Columns of every row :func:`compare` returns (units in the names).
COLUMNS = (
    "method",
    "status",
    "utility_loss_m",
    "violation_rate",
    "epsilon_min_per_km",
    "adversary_error_m",
    "time_s",
    "pmdp_user_rate_over_delta",
    "users_loss_m",
)


def _build(
    method: str,
    instance: Instance,
    config: PandaConfig,
    seed: int | None,
    time_limit_s: float,
    *,
    relaxed_bound: bool = False,
) -> MechanismResult:
    eps = config.epsilon_per_km
    if method in PANDA_METHODS:
        return build_panda(
            instance,
            eps,
            config=config,
            decay=PANDA_METHODS[method],
            seed=seed,
            time_limit_s=time_limit_s,
            relaxed_bound=relaxed_bound,
        )
    builder = BASELINES[method]
    kwargs: dict = {}
    import inspect

    params = inspect.signature(builder).parameters
    if "time_limit_s" in params:
        kwargs["time_limit_s"] = time_limit_s
    if "rng" in params:
        kwargs["rng"] = np.random.default_rng(seed)
    elif "seed" in params:
        kwargs["seed"] = seed
    return builder(instance, eps, **kwargs)


def build_warm(
    method: str,
    instance: Instance,
    config: PandaConfig,
    seed: int | None,
    time_limit_s: float,
    warm: OptimalResult | None = None,
) -> tuple[MechanismResult, OptimalResult | None]:
    """:func:`_build`, and for the optimal LP (``"lp"``) warm from ``warm`` and with its solver's result.

    Returns ``(mechanism, state)``: for ``"lp"``, ``state`` is the :class:`panda.optimal.OptimalResult` a
    later eps can start from (:func:`panda.mechanisms.lp_full.build_lp_warm`: the same build as
    :func:`_build`'s, the start passed on); for every other method ``_build``'s mechanism and ``None``.
    """
    if method != "lp":
        return _build(method, instance, config, seed, time_limit_s), None
    from panda.mechanisms.lp_full import build_lp_warm

    return build_lp_warm(instance, config.epsilon_per_km, time_limit_s=time_limit_s, warm=warm)


def audit_columns(instance: Instance, method: str, mech, *, audit_sample_pairs: int, seed: int | None) -> dict:
    """Measure one built mechanism's privacy columns (shared by :func:`compare` and the experiments).

    The exact mDP audit (every record pair up to ``audit_sample_pairs`` pairs; beyond, user pairs
    exactly plus that many random record pairs, stated in ``audit_scope``), the Bayes adversary's
    error, the loss at the users' true records, and for PAnDA the PmDP audit over anchor draws.
    Planar Laplace's exact matrix (the default) is audited like every other mechanism; only its
    sampled estimate (``method="sampled"``, whose zeros are sampling artefacts) is not
    (``audit_note``).
    """
    out: dict[str, object] = {}
    eps = mech.epsilon_per_km
    if mech.matrix is not None:
        k, d = instance.n_records, instance.d_km
        if k * (k - 1) // 2 <= audit_sample_pairs:
            aud = audit_mechanism(mech.matrix, d, eps)
        else:
            ui, uj = np.triu_indices(instance.n_users, k=1)
            pairs = (instance.users[ui], instance.users[uj])
            aud = audit_mechanism(mech.matrix, d, eps, pairs=pairs, sample_pairs=audit_sample_pairs, rng=seed)
        if method == "laplace" and mech.details.get("estimated"):
            out.update(violation_rate=float("nan"), epsilon_min_per_km=float("nan"))
            out["audit_note"] = "not audited: sampled estimate of planar Laplace (eps-geo-ind by construction)"
        else:
            out.update(violation_rate=float(aud.violation_rate), epsilon_min_per_km=float(aud.epsilon_min_per_km))
        out["audit_scope"] = str(aud.scope)
        out["adversary_error_m"] = float(adversary_error_m(mech.matrix, instance.prior, d * 1000.0))
        users = instance.users
        out["users_loss_m"] = float((instance.cost_m[users] * mech.matrix[users]).sum(axis=1).mean())
    if method in PANDA_METHODS and "panda" in mech.details and mech.details["panda"].z is not None:
        res = mech.details["panda"]
        out["pmdp_user_rate_over_delta"] = float(audit_panda(res, instance, n_record_pairs=0).user_rate_over_delta)
        out["users_loss_m"] = float(res.loss_expected_m)
    return out


def compare(
    instance: Instance,
    methods: Sequence[str] = ("em", "em-br", "lp-ca", "panda-e"),
    *,
    config: PandaConfig | None = None,
    seed: int | None = 0,
    time_limit_s: float = 1800.0,
    audit_sample_pairs: int = 20_000,
) -> list[dict]:
    """Build each method on the same instance and measure it.

    Parameters
    ----------
    instance
        The shared instance (same X, Y, users, tasks, prior for every method).
    methods
        Names from :data:`METHODS`.
    config
        PAnDA settings; its ``epsilon_per_km`` is every method's budget.
    seed
        Seed of the randomised methods.
    time_limit_s
        Per-method time limit (LP solves); a method that hits it is reported "unsolved" with the
        time spent, never with a number it did not reach.
    audit_sample_pairs
        Above ``K (K - 1) / 2`` this many pairs, the mDP audit checks user pairs exactly plus this
        many random record pairs (stated in the row's ``audit_scope``).

    Returns
    -------
    list of dict
        One row per method with the keys of :data:`COLUMNS` plus ``audit_scope`` and ``details``.
    """
    config = config or PandaConfig()
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        msg = f"The 'methods' parameter of compare must hold names from {METHODS}. Got {unknown} instead."
        raise ValueError(msg)
    rows: list[dict] = []
    for method in methods:
        t0 = time.perf_counter()
        try:
            mech = _build(method, instance, config, seed, time_limit_s)
        except (ValueError, MemoryError) as exc:
            rows.append({"method": method, "status": f"failed: {exc}", "time_s": time.perf_counter() - t0})
            continue
        row: dict[str, object] = {c: float("nan") for c in COLUMNS}
        row.update(method=method, status=mech.status, time_s=mech.build_time_s, utility_loss_m=mech.loss_m)
        row.update(audit_columns(instance, method, mech, audit_sample_pairs=audit_sample_pairs, seed=seed))
        row["details"] = {key: val for key, val in mech.details.items() if key != "panda"}
        rows.append(row)
    return rows
