"""The PmDP audit of a PAnDA run: the exact probability, over anchor draws, of an eps-mDP violation.

For true records ``(x_n, x_m)`` the delivered mechanism perturbs with the rows of the surrogates
``(s, s')``. It keeps eps-mDP for the pair when, with Phase I's exact cost counted,

    max_y |ln z[s, y] - ln z[s', y]| <= (eps - eps_bar[x_n, x_m]) d[x_n, x_m].

Over the anchor draws the surrogate of ``x`` is ``s`` (an anchor of the server's union ``A``) with
probability ``v_A[x, s] = w[x, s] prod_{u in A closer than s} (1 - w[x, u])`` (ties: smaller
position). Draws whose nearest anchor in ``A`` does not exist (no anchor of ``A`` drawn) have no row
in ``z``: their probability is reported as *unaudited mass*, so the violation probability is known
to lie in ``[p_violation, p_violation + unaudited]``. A pair is compliant with (eps, delta)-PmDP when
the upper end is <= delta.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from panda.accounting import phase1_cost_sparse
from panda.anchors import SelectionModel
from panda.instance import Instance
from panda.phase2 import pair_log_ratio
from panda.pipeline import PandaResult

__all__ = ["PmdpAudit", "audit_panda", "union_surrogate_probabilities"]


@dataclass(frozen=True)
class PmdpAudit:
    """Outcome of :func:`audit_panda`.

    Attributes
    ----------
    delta
        The target failure probability.
    user_pairs, user_p_violation, user_unaudited
        ``(P, 2)`` user indices and, per pair, the exact violation probability over anchor draws
        and the probability of draws without a row in ``z``.
    user_rate_over_delta
        Fraction of user pairs whose violation probability (lower end) exceeds delta.
    user_rate_over_delta_upper
        The same with the unaudited mass counted as violating (upper end).
    record_pairs, record_p_violation, record_unaudited, record_rate_over_delta
        The same over a uniform random sample of record pairs (``n_record_pairs`` of them).
    mean_user_p_violation, mean_record_p_violation
        Average violation probability over the pairs.
    phase1_over_budget_user_pairs
        User pairs whose Phase-I cost alone exceeds eps (``eps_bar > eps``): no Phase II can help.
    worst_user_pairs
        Up to 10 ``(n, m, p_violation)`` with the highest violation probability.
    """

    delta: float
    user_pairs: np.ndarray
    user_p_violation: np.ndarray
    user_unaudited: np.ndarray
    user_rate_over_delta: float
    user_rate_over_delta_upper: float
    record_pairs: np.ndarray
    record_p_violation: np.ndarray
    record_unaudited: np.ndarray
    record_rate_over_delta: float
    mean_user_p_violation: float
    mean_record_p_violation: float
    phase1_over_budget_user_pairs: int
    worst_user_pairs: list

    def summary(self) -> dict:
        """JSON-ready numbers."""
        return {
            "delta": self.delta,
            "n_user_pairs": int(self.user_pairs.shape[0]),
            "user_rate_over_delta": self.user_rate_over_delta,
            "user_rate_over_delta_upper": self.user_rate_over_delta_upper,
            "mean_user_p_violation": self.mean_user_p_violation,
            "n_record_pairs": int(self.record_pairs.shape[0]),
            "record_rate_over_delta": self.record_rate_over_delta,
            "mean_record_p_violation": self.mean_record_p_violation,
            "phase1_over_budget_user_pairs": self.phase1_over_budget_user_pairs,
        }


def union_surrogate_probabilities(model: SelectionModel, records: np.ndarray, union: np.ndarray) -> np.ndarray:
    """``(len(records), |A|)`` probability that each anchor of ``union`` is the record's surrogate."""
    inst = model.instance
    records = np.asarray(records)
    w = model.rows_w(records)[:, union]
    d = inst.distances_km(records, union)
    order = np.lexsort((np.broadcast_to(np.arange(union.size), d.shape), d), axis=1)
    w_sorted = np.take_along_axis(w, order, axis=1)
    before = np.concatenate([np.ones((records.size, 1)), np.cumprod(1.0 - w_sorted, axis=1)[:, :-1]], axis=1)
    v_sorted = w_sorted * before
    v = np.empty_like(v_sorted)
    np.put_along_axis(v, order, v_sorted, axis=1)
    return v


def _pair_probabilities(
    model: SelectionModel, result: PandaResult, xa: np.ndarray, xb: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cfg = result.config
    union = result.anchor_union
    z = result.z
    assert z is not None  # checked by audit_panda
    lr = pair_log_ratio(z[:, None, :], z[None, :, :])  # (|A|, |A|)
    d = model.instance.distances_km_pairs(xa, xb)
    eb = phase1_cost_sparse(model, xa, xb, d)
    with np.errstate(invalid="ignore"):
        allowed = (cfg.epsilon_per_km - eb) * d
    allowed = np.where(np.isnan(allowed), -np.inf, allowed)
    records = np.unique(np.concatenate([xa, xb]))
    v = union_surrogate_probabilities(model, records, union)
    row = {int(r): i for i, r in enumerate(records)}
    ia = np.array([row[int(r)] for r in xa], dtype=np.int64)
    ib = np.array([row[int(r)] for r in xb], dtype=np.int64)
    p_viol = np.empty(xa.size)
    tol = 1e-9
    for k in range(xa.size):
        bad = lr > allowed[k] * (1 + tol) + tol
        p_viol[k] = v[ia[k]] @ bad @ v[ib[k]]
    mass = v.sum(axis=1)
    unaudited = 1.0 - mass[ia] * mass[ib]
    return p_viol, np.clip(unaudited, 0.0, 1.0), eb


def audit_panda(
    result: PandaResult, instance: Instance, *, n_record_pairs: int = 1000, seed: int | None = 0
) -> PmdpAudit:
    """Audit a PAnDA run against (eps, delta)-PmDP, exactly over the anchor draws.

    Parameters
    ----------
    result
        From :func:`panda.run_panda` on ``instance``.
    instance
        The instance the result was computed on.
    n_record_pairs
        Size of the uniform random sample of distinct record pairs audited besides the user pairs.
    seed
        Seed of that sample.
    """
    if result.z is None:
        msg = f"The PAnDA result has no perturbation matrix to audit (LP status: {result.lp_status})."
        raise ValueError(msg)
    model = SelectionModel.build(instance, result.config, gamma_km=result.gamma_km)
    delta = result.config.delta
    users = result.user_records
    ui, uj = np.triu_indices(users.size, k=1)
    up, uu, ueb = _pair_probabilities(model, result, users[ui], users[uj])
    rng = np.random.default_rng(seed)
    k = instance.n_records
    n_rec = min(n_record_pairs, k * (k - 1) // 2)
    ra = rng.integers(0, k, size=4 * n_rec + 8)
    rb = rng.integers(0, k, size=4 * n_rec + 8)
    keep = ra != rb
    ra, rb = ra[keep][:n_rec], rb[keep][:n_rec]
    rp, ru, _ = _pair_probabilities(model, result, ra, rb) if n_rec else (np.zeros(0), np.zeros(0), None)
    order = np.argsort(-up)[:10]
    return PmdpAudit(
        delta=delta,
        user_pairs=np.column_stack([ui, uj]),
        user_p_violation=up,
        user_unaudited=uu,
        user_rate_over_delta=float(np.mean(up > delta)) if up.size else float("nan"),
        user_rate_over_delta_upper=float(np.mean(up + uu > delta)) if up.size else float("nan"),
        record_pairs=np.column_stack([ra, rb]),
        record_p_violation=rp,
        record_unaudited=ru,
        record_rate_over_delta=float(np.mean(rp > delta)) if rp.size else float("nan"),
        mean_user_p_violation=float(up.mean()) if up.size else float("nan"),
        mean_record_p_violation=float(rp.mean()) if rp.size else float("nan"),
        phase1_over_budget_user_pairs=int((ueb > result.config.epsilon_per_km).sum()),
        worst_user_pairs=[(int(ui[i]), int(uj[i]), float(up[i])) for i in order],
    )
