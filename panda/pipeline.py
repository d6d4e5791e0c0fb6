"""`run_panda`: PAnDA end to end (Phase I to Phase II), everything timed and measured."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from panda.accounting import phase1_cost_sparse
from panda.anchors import SelectionModel, sample_anchor_sets, surrogates
from panda.anpo import AnpoPairs, anchor_pairs, solve_anpo
from panda.config import PandaConfig
from panda.instance import Instance
from panda.lp import solve_mdp_lp
from panda.margins import safety_margins
from panda.phase2 import pair_log_ratio, sample_outputs

__all__ = ["PandaResult", "run_panda"]


@dataclass(frozen=True)
class PandaResult:
    """Everything one PAnDA run produced (plain arrays and numbers: picklable).

    Positions are positions in the secret domain X unless said otherwise. Units are in the names.

    Attributes
    ----------
    config, gamma_km, far_value
        The settings, the threshold gamma and the selection probability beyond it.
    user_records, anchor_sets, surrogates
        Users' true records, their anchor sets, and their surrogates (-1: empty anchor set).
    empty_anchor_users
        Users whose anchor set is empty (they cannot perturb; excluded from the losses).
    anchor_union
        ``(A,)`` sorted union of the anchor sets: the rows of ``z``.
    pair_i, pair_j
        ``(P,)`` constrained unordered pairs as indices into ``anchor_union``.
    pair_d_km, pair_eps_bar_per_km, pair_xi, pair_exponent
        Per pair: distance, exact Phase-I cost, safety margin, and the Phase-II exponent
        ``B = (eps - eps_bar) d - xi`` (before clipping; ``-inf`` for an infinite margin).
    pair_over_budget
        ``B < 0``: the target cannot be met; the LP forces identical rows for the pair.
    pair_unreachable
        The success target ``1 - delta`` (Bayes-adjusted) is out of reach for the pair.
    z
        ``(A, M)`` anchor perturbation matrix (``None`` when the LP failed).
    outputs
        ``(N,)`` sampled outputs (positions in Y; -1 for users without anchors).
    lp_status, lp_objective_m, lp_info
        AnPO LP outcome; objective = expected cost over anchors under the normalised prior, metres.
    relaxed_objective_m, approximation_ratio
        Relaxed AnPO optimum (the lower bound) and ``lp_objective_m / relaxed_objective_m``.
    loss_expected_m, loss_sampled_m
        Utility loss at the users' true records: expected over Phase II, and of the sampled outputs.
    user_pair_violation_rate
        Fraction of user pairs (both with a surrogate) whose realised surrogate rows break
        ``eps``-mDP once Phase I's eps_bar is counted: ``max_y |ln z[s_n] - ln z[s_m]| >
        (eps - eps_bar[x_n, x_m]) d[x_n, x_m]``.
    budget_split
        Medians and means of the shares of ``eps d`` spent on Phase I, the margin and Phase II over
        the constrained pairs with finite margins, plus counts.
    timings_s
        Wall time per phase, seconds.
    """

    config: PandaConfig
    instance_summary: dict
    gamma_km: float
    far_value: float
    user_records: np.ndarray
    anchor_sets: list
    surrogates: np.ndarray
    empty_anchor_users: np.ndarray
    anchor_union: np.ndarray
    pair_i: np.ndarray
    pair_j: np.ndarray
    pair_d_km: np.ndarray
    pair_eps_bar_per_km: np.ndarray
    pair_xi: np.ndarray
    pair_exponent: np.ndarray
    pair_over_budget: np.ndarray
    pair_unreachable: np.ndarray
    z: np.ndarray | None
    outputs: np.ndarray
    lp_status: str
    lp_objective_m: float
    lp_info: dict
    relaxed_objective_m: float
    approximation_ratio: float
    loss_expected_m: float
    loss_sampled_m: float
    user_pair_violation_rate: float
    user_pair_eps_bar_per_km: np.ndarray
    budget_split: dict
    timings_s: dict = field(default_factory=dict)

    @property
    def n_anchors(self) -> int:
        """|A|, the size of the anchor union."""
        return int(self.anchor_union.size)

    def summary(self) -> dict:
        """JSON-ready summary (sizes, losses in metres, bound, ratio, split, counts, status, timings)."""
        sizes = np.array([a.size for a in self.anchor_sets])
        return {
            "config": self.config.to_dict(),
            "instance": self.instance_summary,
            "gamma_km": self.gamma_km,
            "far_value": self.far_value,
            "anchor_set_size_mean": float(sizes.mean()) if sizes.size else 0.0,
            "anchor_set_size_max": int(sizes.max()) if sizes.size else 0,
            "n_anchor_union": self.n_anchors,
            "n_empty_anchor_sets": int(self.empty_anchor_users.size),
            "n_constrained_pairs": int(self.pair_i.size),
            "n_over_budget_pairs": int(self.pair_over_budget.sum()),
            "n_unreachable_target_pairs": int(self.pair_unreachable.sum()),
            "lp_status": self.lp_status,
            "lp_objective_m": self.lp_objective_m,
            "relaxed_lower_bound_m": self.relaxed_objective_m,
            "approximation_ratio": self.approximation_ratio,
            "loss_expected_m": self.loss_expected_m,
            "loss_sampled_m": self.loss_sampled_m,
            "user_pair_violation_rate": self.user_pair_violation_rate,
            "budget_split": self.budget_split,
            "lp": self.lp_info,
            "timings_s": self.timings_s,
        }


def _budget_split(eps: float, d: np.ndarray, eps_bar: np.ndarray, xi: np.ndarray) -> dict:
    total = eps * d
    finite = np.isfinite(xi) & np.isfinite(eps_bar) & (total > 0)
    out: dict = {"n_pairs": int(d.size), "n_finite": int(finite.sum())}
    if finite.any():
        p1 = eps_bar[finite] * d[finite] / total[finite]
        mg = xi[finite] / total[finite]
        p2 = 1.0 - p1 - mg
        for name, arr in (("phase1", p1), ("margin", mg), ("phase2", p2)):
            out[f"{name}_share_median"] = float(np.median(arr))
            out[f"{name}_share_mean"] = float(np.mean(arr))
    return out


def run_panda(
    instance: Instance, config: PandaConfig | None = None, *, seed: int | None = 0, progress=None
) -> PandaResult:
    """Run PAnDA on an instance: anchors, exact accounting, margins, AnPO LP, Phase II, measurements.

    Parameters
    ----------
    instance
        From :func:`panda.make_instance`.
    config
        A :class:`panda.PandaConfig` (default: ``preset("paper")``).
    seed
        Seed of the anchor draws and Phase-II sampling.
    progress
        Optional callable ``progress(phase: str, fraction: float)`` for long runs (dashboards).
    """
    config = _checked(instance, config)
    report = progress or (lambda phase, fraction: None)
    rng = np.random.default_rng(seed)
    t: dict[str, float] = {}
    eps = config.epsilon_per_km

    with _phase(report, "Phase I: selection probabilities", 0.0, t, "selection_model"):
        model = SelectionModel.build(instance, config)
    with _phase(report, "Phase I: anchor draws", 0.1, t, "anchors"):
        anchors = _draw_anchors(instance, model, rng)
    union = anchors.union
    with _phase(report, "Phase I: exact privacy cost", 0.2, t, "phase1_cost"):
        pairs, a, b = _constrained_pairs(instance, union, config.constraint_radius_km)
        eps_bar = phase1_cost_sparse(model, a, b, pairs.d_km)
    with _phase(report, "Safety margins", 0.35, t, "margins"):
        margins = safety_margins(model, a, b)
        exponent = _phase2_exponent(eps, eps_bar, pairs.d_km, margins.xi_hat)

    report("AnPO LP", 0.55)
    cost = _anchor_cost(instance, union)
    z, lp_status, lp_obj, lp_info = _solve_anpo(instance, union, cost, pairs, exponent, config)
    t["anpo_lp"] = lp_info.get("solve_time_s", 0.0) + lp_info.get("build_time_s", 0.0)

    relaxed_obj = float("nan")
    if config.solve_relaxed and union.size:
        with _phase(report, "Relaxed AnPO (lower bound)", 0.75, t, "relaxed_lp"):
            relaxed_obj, lp_info["relaxed_status"] = _solve_relaxed(cost, pairs, eps, config)

    with _phase(report, "Phase II", 0.9, t, "phase2"):
        measured = _phase2(instance, model, anchors, z, eps, rng)
    t["total"] = float(sum(t.values()))
    report("Done", 1.0)

    ratio = lp_obj / relaxed_obj if relaxed_obj and np.isfinite(relaxed_obj) and relaxed_obj > 0 else float("nan")
    return PandaResult(
        config=config,
        instance_summary=instance.summary(),
        gamma_km=model.gamma_km,
        far_value=model.far,
        user_records=instance.users.copy(),
        anchor_sets=anchors.sets,
        surrogates=anchors.surrogates,
        empty_anchor_users=anchors.empty,
        anchor_union=union,
        pair_i=pairs.i,
        pair_j=pairs.j,
        pair_d_km=pairs.d_km,
        pair_eps_bar_per_km=eps_bar,
        pair_xi=margins.xi_hat,
        pair_exponent=exponent,
        pair_over_budget=exponent < 0,
        pair_unreachable=margins.unreachable,
        z=z,
        outputs=measured.outputs,
        lp_status=lp_status,
        lp_objective_m=lp_obj,
        lp_info=lp_info,
        relaxed_objective_m=relaxed_obj,
        approximation_ratio=float(ratio),
        loss_expected_m=measured.loss_expected_m,
        loss_sampled_m=measured.loss_sampled_m,
        user_pair_violation_rate=measured.violation_rate,
        user_pair_eps_bar_per_km=measured.user_eps_bar,
        budget_split=_budget_split(eps, pairs.d_km, eps_bar, margins.xi_hat),
        timings_s=t,
    )


def _checked(instance: Instance, config: PandaConfig | None) -> PandaConfig:
    """Return the run's config (``PandaConfig()`` for ``None``); TypeError on an argument of another type."""
    if config is None:
        config = PandaConfig()
    if not isinstance(config, PandaConfig):
        msg = f"The 'config' parameter of run_panda must be a PandaConfig. Got {type(config).__name__} instead."
        raise TypeError(msg)
    if not isinstance(instance, Instance):
        msg = f"The 'instance' parameter of run_panda must be an Instance. Got {type(instance).__name__} instead."
        raise TypeError(msg)
    return config


@contextmanager
def _phase(
    report: Callable[[str, float], None], message: str, fraction: float, timings: dict[str, float], key: str
) -> Iterator[None]:
    """Report a phase to the caller's progress, then time its body into ``timings[key]`` (seconds)."""
    report(message, fraction)
    t0 = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - t0


class _Anchors(NamedTuple):
    """Phase I's draws: each user's anchor set and surrogate (-1: empty set), those users, the sets' union."""

    sets: list
    surrogates: np.ndarray
    empty: np.ndarray
    union: np.ndarray


def _draw_anchors(instance: Instance, model: SelectionModel, rng: np.random.Generator) -> _Anchors:
    """Draw the users' anchor sets; return them with the surrogates, the users without anchors and the union."""
    users = instance.users
    sets = sample_anchor_sets(model, users, rng=rng)
    sur = surrogates(instance, users, sets)
    empty = np.flatnonzero(sur < 0)
    union = np.unique(np.concatenate(sets)) if any(s.size for s in sets) else np.zeros(0, dtype=np.int64)
    return _Anchors(sets, sur, empty, union)


def _constrained_pairs(
    instance: Instance, union: np.ndarray, radius_km: float | None
) -> tuple[AnpoPairs, np.ndarray, np.ndarray]:
    """Return the constrained pairs of the anchor union (within ``radius_km``) and their two records."""
    pairs = anchor_pairs(lambda i, j: instance.distances_km_pairs(union[i], union[j]), union.size, radius_km)
    return pairs, union[pairs.i], union[pairs.j]


def _phase2_exponent(eps: float, eps_bar: np.ndarray, d_km: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """Return each pair's Phase-II exponent ``B = (eps - eps_bar) d - xi`` (``-inf`` where it is undefined)."""
    with np.errstate(invalid="ignore"):
        exponent = (eps - eps_bar) * d_km - xi
    return np.where(np.isnan(exponent), -np.inf, exponent)


def _anchor_cost(instance: Instance, union: np.ndarray) -> np.ndarray:
    """Return the LP's cost: each anchor's utility cost row weighted by its prior normalised over the union."""
    weights = instance.prior[union]
    weights = weights / weights.sum() if union.size else weights
    return weights[:, None] * instance.cost_m[union]


def _solve_anpo(
    instance: Instance, union: np.ndarray, cost: np.ndarray, pairs: AnpoPairs, exponent: np.ndarray, config: PandaConfig
) -> tuple[np.ndarray | None, str, float, dict]:
    """Solve the AnPO LP over the anchor union; return ``z`` (``None`` without anchors), status, objective, facts."""
    if not union.size:
        return None, "no anchors", float("nan"), {}
    res = solve_anpo(
        cost, pairs, exponent, eta=config.lp_floor, time_limit_s=config.lp_time_limit_s, solver=config.lp_solver
    )
    lp_info = {
        "rows": res.lp.n_rows,
        "columns": res.lp.n_cols,
        "nonzeros": res.lp.n_nonzeros,
        "ordered_pairs_given": res.n_pairs_given,
        "ordered_pairs_implied_by_floor": res.n_pairs_implied,
        "group_pairs_kept": res.n_pairs_kept,
        "row_groups": res.n_groups,
        "floor_eta": res.eta,
        "floor_cost_bound_m": float(res.eta * instance.n_outputs * instance.cost_m[union].max()),
        "solve_time_s": res.lp.time_s,
        "build_time_s": res.build_time_s,
        "solver": res.lp.solver,
    }
    return res.z, res.lp.status, res.objective, lp_info


def _solve_relaxed(cost: np.ndarray, pairs: AnpoPairs, eps: float, config: PandaConfig) -> tuple[float, str]:
    """Solve the relaxed AnPO LP (eps-mDP on the anchor pairs, no Phase I): its optimum, a lower bound, and status."""
    pi = np.concatenate([pairs.i, pairs.j])
    pj = np.concatenate([pairs.j, pairs.i])
    rel = solve_mdp_lp(
        cost,
        pi,
        pj,
        np.tile(eps * pairs.d_km, 2),
        eta=config.lp_floor,
        time_limit_s=config.relaxed_time_limit_s,
        solver=config.lp_solver,
    )
    return rel.objective, rel.lp.status


class _Phase2(NamedTuple):
    """Phase II's outputs and what they are measured by (``nan`` or empty where there is nothing to measure)."""

    outputs: np.ndarray
    loss_expected_m: float
    loss_sampled_m: float
    violation_rate: float
    user_eps_bar: np.ndarray


def _phase2(
    instance: Instance,
    model: SelectionModel,
    anchors: _Anchors,
    z: np.ndarray | None,
    eps: float,
    rng: np.random.Generator,
) -> _Phase2:
    """Sample each user's output from its surrogate's row of ``z``; measure the losses and the realised check."""
    users = instance.users
    row_of = np.full(instance.n_records, -1, dtype=np.int64)
    row_of[anchors.union] = np.arange(anchors.union.size)
    sur_rows = np.where(anchors.surrogates >= 0, row_of[np.maximum(anchors.surrogates, 0)], -1)
    outputs = np.full(users.size, -1, dtype=np.int64)
    loss_exp = loss_smp = float("nan")
    viol_rate = float("nan")
    user_eps_bar = np.zeros(0)
    if z is not None:
        outputs = sample_outputs(z, sur_rows, rng=rng)
        ok = sur_rows >= 0
        if ok.any():
            c_users = instance.cost_m[users[ok]]
            loss_exp = float((c_users * z[sur_rows[ok]]).sum(axis=1).mean())
            loss_smp = float(c_users[np.arange(ok.sum()), outputs[ok]].mean())
        viol_rate, user_eps_bar = _user_pair_violations(instance, model, z, sur_rows, eps)
    return _Phase2(outputs, loss_exp, loss_smp, viol_rate, user_eps_bar)


def _user_pair_violations(
    instance: Instance, model: SelectionModel, z: np.ndarray, sur_rows: np.ndarray, eps: float
) -> tuple[float, np.ndarray]:
    """Realised check over user pairs with surrogates: the share breaking eps-mDP, and the pairs' eps_bar.

    ``(nan, empty)`` with fewer than two such users.
    """
    users = instance.users
    idx = np.flatnonzero(sur_rows >= 0)
    if idx.size < 2:
        return float("nan"), np.zeros(0)
    ui, uj = np.triu_indices(idx.size, k=1)
    xn, xm = users[idx[ui]], users[idx[uj]]
    d_u = instance.distances_km_pairs(xn, xm)
    user_eps_bar = phase1_cost_sparse(model, xn, xm, d_u)
    with np.errstate(invalid="ignore"):
        allowed = (eps - user_eps_bar) * d_u
    actual = pair_log_ratio(z[sur_rows[idx[ui]]], z[sur_rows[idx[uj]]])
    viol = actual > np.where(np.isnan(allowed), -np.inf, allowed) * (1 + 1e-9) + 1e-9
    return float(viol.mean()), user_eps_bar


def result_to_jsonable(result: PandaResult) -> dict:
    """Return the summary plus per-user data, JSON-ready."""
    out = result.summary()
    out["users"] = {
        "records": result.user_records.tolist(),
        "surrogates": result.surrogates.tolist(),
        "outputs": result.outputs.tolist(),
        "anchor_set_sizes": [int(s.size) for s in result.anchor_sets],
    }
    return out
