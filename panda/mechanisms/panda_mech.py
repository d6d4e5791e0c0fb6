"""PAnDA behind the shared mechanism interface.

The record-level matrix of a PAnDA run is the *surrogate mixture*: a user at ``x`` draws anchors
(eq. 11); its surrogate is the nearest drawn anchor of the server's union ``A``, which is anchor
``s`` with probability ``v_A[x, s]`` (see :func:`panda.pmdp.union_surrogate_probabilities`); it then
samples from ``z[s]``. Draws with no anchor of ``A`` have no row in ``z``: the mixture is
conditioned on having one, and the conditioning mass is reported (``details["mean_unaudited_mass"]``).
The PmDP audit of :func:`panda.audit_panda` is the exact check of the paper's guarantee; the mDP
audit of this matrix shows what an attacker who knows ``z`` and ``w`` faces on average.
"""

from __future__ import annotations

import time

import numpy as np

from panda.anchors import SelectionModel
from panda.config import PandaConfig
from panda.instance import Instance
from panda.mechanisms.base import MechanismResult, check_epsilon, expected_loss_m
from panda.pipeline import run_panda
from panda.pmdp import union_surrogate_probabilities

__all__ = ["build_panda", "panda_mixture_matrix"]


def panda_mixture_matrix(instance: Instance, result) -> tuple[np.ndarray, np.ndarray]:
    """``(K, M)`` surrogate-mixture matrix of a PAnDA result and the ``(K,)`` mass of draws it covers."""
    model = SelectionModel.build(instance, result.config, gamma_km=result.gamma_km)
    v = union_surrogate_probabilities(model, np.arange(instance.n_records), result.anchor_union)
    mass = v.sum(axis=1)
    mixture = (v @ result.z) / np.maximum(mass, np.finfo(float).tiny)[:, None]
    return mixture, mass


def build_panda(
    instance: Instance,
    epsilon_per_km: float,
    *,
    config: PandaConfig | None = None,
    decay: str | None = None,
    seed: int | None = 0,
    time_limit_s: float | None = None,
    relaxed_bound: bool = False,
) -> MechanismResult:
    """Run PAnDA (``config`` with ``epsilon_per_km`` and ``decay`` set) and wrap it as a mechanism.

    ``relaxed_bound=True`` also solves the relaxed AnPO LP, PAnDA's own lower bound (its result's
    ``relaxed_objective_m`` and ``approximation_ratio``). The bound is a measurement, not part of the
    mechanism: its time is left out of ``build_time_s``. Off by default (the dashboard never shows it).
    """
    eps = check_epsilon(epsilon_per_km, "build_panda")
    cfg = config or PandaConfig()
    changes: dict = {"epsilon_per_km": eps, "solve_relaxed": bool(relaxed_bound)}
    if decay is not None:
        changes["decay"] = decay
    if time_limit_s is not None:
        changes["lp_time_limit_s"] = float(time_limit_s)
    cfg = cfg.replace(**changes)
    name = {"exponential": "panda-e", "power": "panda-p", "logistic": "panda-l"}[cfg.decay]
    t0 = time.perf_counter()
    result = run_panda(instance, cfg, seed=seed)
    elapsed = time.perf_counter() - t0 - float(result.timings_s.get("relaxed_lp", 0.0))
    if result.z is None:
        return MechanismResult(
            name, eps, None, f"unsolved: {result.lp_status}", elapsed, float("nan"), {"panda": result}
        )
    matrix, mass = panda_mixture_matrix(instance, result)
    return MechanismResult(
        name=name,
        epsilon_per_km=eps,
        matrix=matrix,
        status="solved",
        build_time_s=elapsed,
        loss_m=expected_loss_m(instance, matrix),
        details={
            "panda": result,
            "mean_unaudited_mass": float(1.0 - mass.mean()),
            "users_loss_expected_m": result.loss_expected_m,
            "anchor_union": result.n_anchors,
        },
    )
