"""LP+EM: an LP over candidate entries with an exponential-mechanism tail (after Imola et al., UAI 2022).

ConstOPTMech optimises a mechanism only where it matters (near each output) and leaves the rest
to the exponential mechanism. The exact construction of Imola et al. is not reproduced here; this
is a variant that is eps-mDP by construction and never worse than EM:

* ``E`` is the eps-mDP exponential mechanism (``exp(-eps d / 2)``, rows normalised).
* Candidates ``N(y)``: the ``r`` records nearest to output ``y`` (the artifact: r = 38) whose EM
  entry is at least the floor below (1e-6); the others stay in the tail (an output's own record
  always qualifies: its EM entry is at least ``1 / M``).
* Entries ``P[x, y]`` with ``x`` in ``N(y)`` are LP variables ``z[x, y]``; every other entry of
  column ``y`` is the EM tail scaled by one variable per output: ``P[x, y] = lam_y E[x, y]``.

Constraints, all linear:

1. rows sum to 1: ``sum_{candidates} z[x, y] + sum_{tail} lam_y E[x, y] = 1`` for every record;
2. candidates among themselves: ``z[x, y] <= exp(eps d(x, x')) z[x', y]``;
3. candidate against tail: for ``x`` in ``N(y)`` and every ``x'`` outside, both directions. Only the
   tightest ``x'`` matters, so this is a box per entry::

       lam_y * max_{x' not in N(y)} exp(-eps d(x, x')) E[x', y]  <=  z[x, y]
       z[x, y]  <=  lam_y * min_{x' not in N(y)} exp(eps d(x, x')) E[x', y]

4. tail against tail holds for every ``lam_y`` (``E`` is eps-mDP and ``lam_y`` cancels in a column).

So every feasible point is an eps-mDP mechanism, and ``lam = 1, z = E`` is feasible: the LP
optimum is at most EM's loss (up to the floor below). The objective is
``sum p_x cost[x, y] P[x, y]`` over all entries.

Numerics (``details["numerics"]``): the coefficients span ``exp(+-eps d)``. Each ``lam_y`` is
rescaled by the largest tail value of its column (``mu_y = lam_y s_y``), so tail coefficients
are ``<= 1``; box coefficients are clipped into ``[1e-12, 1e12]`` (a lower bound raised or an
upper bound lowered: a tighter, still sound LP); candidate entries are floored at 1e-6 (a
utility cost of at most ``1e-6 r max cost``), so a candidate pair with ``exp(eps d) >= 1e6``
holds by the bounds and is left out. So ``lam = 1, z = E`` is feasible wherever EM's candidate
entries are above the floor (then the LP optimum is at most EM's loss). An earlier version capped
those pairs' coefficients at 1e12 instead: where candidates span more than ``ln(1e12) / eps`` km
(Rome at K = 500) that cut off every mechanism near the floor, and HiGHS reported "Infeasible".
HiGHS's interior point method also reports "Infeasible" on feasible LP+EM models (Neubrandenburg,
K = 1000), so the default solver is the dual simplex. Row-sum coefficients below ``1e-12`` (after
scaling each row to a largest coefficient of 1) are left out of the LP and the row is
renormalised afterwards; HiGHS's ``small_matrix_value`` is 1e-12. The matrix is then rebuilt
exactly from ``(z, lam)`` and passed through :func:`panda.mechanisms.repair_mdp` (solver
tolerance and the dropped coefficients), so the final matrix is exactly eps-mDP.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from panda.instance import Instance
from panda.lp import SOLVERS
from panda.mechanisms._common import (
    check_positive,
    finish,
    highs_model,
    highs_run,
    output_distances_km,
    repair_mdp,
    unsolved_status,
)
from panda.mechanisms.base import MechanismResult, check_epsilon
from panda.mechanisms.em import em_matrix

__all__ = ["build_lp_em"]

_TINY = 1e-12
_HUGE = 1e12
#: Floor on candidate entries: candidate pairs with exp(eps d) >= 1 / _FLOOR hold by the bounds.
#: 1e-6 keeps the pair coefficients <= 1e6 (at 1e-12 HiGHS's simplex breaks down on Rome) and
#: the floor 10x above HiGHS's feasibility tolerance (at 1e-8 entries near the floor come back as
#: zeros and the mechanism's ratios are unbounded).
_FLOOR = 1e-6


def build_lp_em(
    instance: Instance,
    epsilon_per_km: float,
    *,
    n_candidates: int = 38,
    time_limit_s: float = 1800.0,
    solver: str = "simplex",
) -> MechanismResult:
    """LP over each output's ``n_candidates`` nearest records, an eps-mDP EM tail elsewhere.

    Parameters
    ----------
    instance
        The problem instance.
    epsilon_per_km
        Privacy budget, 1/km.
    n_candidates
        ``r``: records per output whose entries the LP optimises (the artifact's 38).
    time_limit_s, solver
        HiGHS settings; beyond the limit the status is ``"unsolved: ..."`` and the matrix ``None``.
    """
    eps = check_epsilon(epsilon_per_km, "build_lp_em")
    r = int(check_positive(n_candidates, "n_candidates", "build_lp_em", integer=True))
    check_positive(time_limit_s, "time_limit_s", "build_lp_em")
    if solver not in SOLVERS:
        msg = f"The 'solver' parameter of build_lp_em must be one of {SOLVERS}. Got {solver!r} instead."
        raise ValueError(msg)
    t0 = time.perf_counter()
    k, m = instance.n_records, instance.n_outputs
    r = min(r, k)
    d = instance.d_km
    d_out = output_distances_km(instance)
    em = em_matrix(d_out, eps)
    with np.errstate(divide="ignore"):
        log_em = np.log(em)
    weighted = instance.prior[:, None] * instance.cost_m

    # Candidates: r nearest records of every output (stable: ties broken by position).
    cand = np.argsort(d_out, axis=0, kind="stable")[:r].T  # (M, r)
    # A candidate whose EM entry is below the floor stays in the tail: its LP variable is fixed at 0
    # and not used. (Floored at _FLOOR it would have to exceed EM's own value, and where its box
    # against the tail lies below the floor the LP was infeasible: eps >= 20/km on Neubrandenburg.)
    valid = em[cand, np.arange(m)[:, None]] >= _FLOOR  # (M, r); an output's own record is always valid
    is_cand = np.zeros((k, m), dtype=bool)
    is_cand[cand[valid], np.nonzero(valid)[0]] = True
    # Variable columns: z for candidate entries (in (y, rank) order), then mu_y.
    zc_row = cand.ravel()
    zc_y = np.repeat(np.arange(m), r)
    zc_valid = valid.ravel()
    n_z = r * m
    col_mu = n_z + np.arange(m)
    has_tail = ~is_cand.all(axis=0)

    # Column scale s_y: the largest tail value of column y (tail coefficients <= 1 after scaling).
    tail_log = np.where(is_cand, -np.inf, log_em)
    log_s = np.where(has_tail, tail_log.max(axis=0), 0.0)
    coef_tail = np.exp(tail_log - log_s[None, :])  # (K, M); 0 on candidate entries

    # Boxes: log of lam_y * [max_x' e^{-eps d(x,x')} E[x',y], min_x' e^{eps d(x,x')} E[x',y]], scaled.
    lo_box = np.zeros(n_z)
    hi_box = np.zeros(n_z)
    for y in np.flatnonzero(has_tail):
        out = np.flatnonzero(~is_cand[:, y])
        dd = eps * d[np.ix_(cand[y], out)]
        le = log_em[out, y] - log_s[y]
        hi_box[y * r : (y + 1) * r] = np.min(dd + le[None, :], axis=1)
        lo_box[y * r : (y + 1) * r] = np.max(le[None, :] - dd, axis=1)
    n_hi_clipped = int((hi_box > np.log(_HUGE)).sum())
    n_lo_clipped = int((lo_box < np.log(_TINY)).sum())
    hi_coef = np.exp(np.minimum(hi_box, np.log(_HUGE)))
    lo_coef = np.minimum(np.exp(np.maximum(lo_box, np.log(_TINY))), hi_coef)

    rows, cols, vals = [], [], []
    # 1. Row sums (scaled so the largest coefficient of each row is 1).
    tail_r, tail_y = np.nonzero(coef_tail > 0)
    row_max = np.maximum(is_cand.any(axis=1).astype(float), coef_tail.max(axis=1))  # candidate coefficients are 1
    tail_v = coef_tail[tail_r, tail_y] / row_max[tail_r]
    keep = tail_v >= _TINY
    n_dropped = int((~keep).sum())
    rows += [zc_row[zc_valid], tail_r[keep]]
    cols += [np.flatnonzero(zc_valid), col_mu[tail_y[keep]]]
    vals += [1.0 / row_max[zc_row[zc_valid]], tail_v[keep]]
    rhs_rows = 1.0 / row_max
    n_rows = k
    # 2. Candidate pairs: z[a, y] - e^{eps d(a, b)} z[b, y] <= 0 for ordered a != b in N(y).
    #    Candidate entries are floored at _FLOOR, so a pair with e^{eps d} >= 1 / _FLOOR holds by the
    #    bounds alone (z[a, y] <= 1 <= e^{eps d} _FLOOR <= e^{eps d} z[b, y]) and is left out.
    ia, ib = np.nonzero(~np.eye(r, dtype=bool))
    pair_exp = eps * d[cand[:, ia], cand[:, ib]]  # (M, r(r-1))
    written = (pair_exp < -np.log(_FLOOR)) & valid[:, ia] & valid[:, ib]
    n_pair_implied = int((~written & valid[:, ia] & valid[:, ib]).sum())
    py, pk = np.nonzero(written)
    n_pairs = py.size
    pr = n_rows + np.arange(n_pairs)
    rows += [pr, pr]
    cols += [py * r + ia[pk], py * r + ib[pk]]
    vals += [np.ones(n_pairs), -np.exp(pair_exp[py, pk])]
    n_rows += n_pairs
    # 3. Boxes against the tail (only outputs with a tail).
    boxed = np.flatnonzero(np.asarray(has_tail)[zc_y] & zc_valid)
    nb = boxed.size
    up = n_rows + np.arange(nb)  # z - hi * mu <= 0
    lo = n_rows + nb + np.arange(nb)  # lo * mu - z <= 0
    rows += [up, up, lo, lo]
    cols += [boxed, col_mu[zc_y[boxed]], col_mu[zc_y[boxed]], boxed]
    vals += [np.ones(nb), -hi_coef[boxed], lo_coef[boxed], -np.ones(nb)]
    n_rows += 2 * nb
    a = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n_rows, n_z + m))
    row_lo = np.concatenate([rhs_rows, np.full(n_rows - k, -np.inf)])
    row_hi = np.concatenate([rhs_rows, np.zeros(n_rows - k)])
    cost = np.concatenate([weighted[zc_row, zc_y], (weighted * coef_tail).sum(axis=0)])
    col_hi = np.concatenate([np.where(zc_valid, 1.0, 0.0), np.where(has_tail, 1.0, 0.0)])
    col_lo = np.concatenate([np.where(zc_valid, _FLOOR, 0.0), np.zeros(m)])
    h = highs_model(cost, a, row_lo, row_hi, col_lo, col_hi, solver=solver, options={"small_matrix_value": _TINY})
    build_s = time.perf_counter() - t0
    status, ok = highs_run(h, time_limit_s - build_s)
    details: dict = {
        "n_candidates": r,
        "lp_rows": int(n_rows),
        "lp_cols": int(n_z + m),
        "lp_status": status,
        "solver": solver,
        "tail": "lam_y * EM(eps d / 2), one scale per output",
        "numerics": {
            "column_scale": "mu_y = lam_y * max tail value of column y",
            "row_sum_coefficients_dropped_below_1e-12": n_dropped,
            "box_upper_lowered_to_1e12": n_hi_clipped,
            "box_lower_raised_to_1e-12": n_lo_clipped,
            "candidate_floor": _FLOOR,
            "candidates_left_in_tail_below_floor": int((~valid).sum()),
            "candidate_pairs_implied_by_floor": n_pair_implied,
        },
    }
    if not ok:
        return finish("lp-em", eps, instance, None, unsolved_status(status, time.perf_counter() - t0), t0, details)
    x = np.asarray(h.getSolution().col_value)
    details["objective_m"] = float(h.getInfo().objective_function_value)
    mu = np.clip(x[n_z:], 0.0, None)
    matrix = coef_tail * mu[None, :]
    matrix[zc_row[zc_valid], zc_y[zc_valid]] = np.clip(x[:n_z][zc_valid], 0.0, None)
    details["tail_scale_lam"] = mu * np.exp(-log_s)
    details["max_row_sum_error"] = float(np.abs(matrix.sum(axis=1) - 1).max())
    matrix, details["repair"] = repair_mdp(matrix, d, eps)
    return finish("lp-em", eps, instance, matrix, "solved", t0, details)
