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

Row generation (the default, :func:`solve_two_term_lp`): of the ~140,000 pair rows and ~7,000 box
rows of the Lesson's default view (K = 500, M = 100, r = 38) about 2,000 bind at the optimum. The LP
starts with the row sums and one pair row per candidate entry, adds each round the rows its optimum
violates (each entry's two worst), drops rows slack for two rounds, and goes on from the last basis with
the dual simplex (devex pricing), until nothing is violated: the same optimum from a small share of the
rows, so in a fraction of the single LP's time (``bench/bench_lesson_mechanisms.py`` measures it;
docs/benchmarks.md, "The Lesson's menu on its default view").
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from panda.instance import Instance
from panda.lp import ROW_GENERATION_TOL, SOLVERS
from panda.mechanisms._common import (
    TwoTermPool,
    check_positive,
    finish,
    highs_run,
    output_distances_km,
    rank_in_groups,
    repair_mdp,
    solve_two_term_lp,
    unsolved_status,
)
from panda.mechanisms.base import MechanismResult, check_epsilon
from panda.mechanisms.em import em_matrix

__all__ = ["build_lp_em", "solve_two_term_lp"]

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
    row_generation: bool = True,
    initial_pairs: int = 1,
    per_entry: int = 2,
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
    row_generation
        Solve by constraint (row) generation (default): the first LP has the row sums and a few pair rows
        per candidate entry; every round adds the left-out pair and box rows its optimum violates (by more
        than :data:`panda.lp.ROW_GENERATION_TOL`; each entry's ``per_entry`` worst) and the dual simplex goes
        on from its basis, until none is violated. Each round is a relaxation of the whole LP, so the last
        one's optimum is the whole LP's optimum. ``False``: every pair row in one LP (the former way).
    initial_pairs
        Pair rows per candidate entry in the first round of ``row_generation`` (those of the candidates
        most nearly between it and the output; 0: none).
    per_entry
        Rows added per candidate entry and round of ``row_generation``: its most violated ones (0: all).
    """
    eps = check_epsilon(epsilon_per_km, "build_lp_em")
    r = int(check_positive(n_candidates, "n_candidates", "build_lp_em", integer=True))
    check_positive(time_limit_s, "time_limit_s", "build_lp_em")
    initial_pairs = int(check_positive(initial_pairs, "initial_pairs", "build_lp_em", integer=True, low=-1))
    per_entry = int(check_positive(per_entry, "per_entry", "build_lp_em", integer=True, low=-1))
    if solver not in SOLVERS:
        msg = f"The 'solver' parameter of build_lp_em must be one of {SOLVERS}. Got {solver!r} instead."
        raise ValueError(msg)
    t0 = time.perf_counter()
    r = min(r, instance.n_records)
    cands = _candidates(instance, eps, r)
    lp = _lp_model(instance, eps, cands, row_generation=row_generation, initial_pairs=initial_pairs)
    build_s = time.perf_counter() - t0
    h, status, ok, rounds = solve_two_term_lp(
        lp.cost,
        lp.sums,
        lp.rhs_rows,
        lp.col_lo,
        lp.col_hi,
        lp.pool,
        lp.z_of,
        lp.active,
        time_limit_s=time_limit_s - build_s,
        solver=solver,
        per_entry=per_entry,
        run=highs_run,  # looked up here, so a test can put a flaky run in this module
        # One monolithic LP (row_generation=False): HiGHS's own choice of pricing.
        options={"small_matrix_value": _TINY, **({} if row_generation else {"simplex_dual_edge_weight_strategy": -1})},
    )
    details: dict = {
        "n_candidates": r,
        "lp_rows": int(h.getNumRow()),
        "lp_rows_full": int(instance.n_records + lp.pool[0].size),
        "lp_cols": int(cands.n_z + instance.n_outputs),
        "lp_status": status,
        "solver": solver,
        "build_s": build_s,
        "lp_time_s": float(sum(e["time_s"] for e in rounds)),
        "row_generation": {
            "initial_pairs": initial_pairs,
            "per_entry": per_entry,
            "tolerance": ROW_GENERATION_TOL,
            "rounds": rounds,
        }
        if row_generation
        else None,
        "tail": "lam_y * EM(eps d / 2), one scale per output",
        "numerics": lp.numerics,
    }
    if not ok:
        return finish("lp-em", eps, instance, None, unsolved_status(status, time.perf_counter() - t0), t0, details)
    x = np.asarray(h.getSolution().col_value)
    details["objective_m"] = float(h.getInfo().objective_function_value)
    tr = time.perf_counter()
    matrix, details["tail_scale_lam"] = _mechanism_matrix(x, cands)
    details["max_row_sum_error"] = float(np.abs(matrix.sum(axis=1) - 1).max())
    matrix, details["repair"] = repair_mdp(matrix, instance.d_km, eps)
    details["repair_s"] = time.perf_counter() - tr
    return finish("lp-em", eps, instance, matrix, "solved", t0, details)


@dataclass(frozen=True)
class _Candidates:
    """Each output's candidate records, the EM tail over the other entries, and the LP's columns."""

    cand: np.ndarray  # (M, r): the r records nearest each output (ties broken by position)
    valid: np.ndarray  # (M, r): candidates the LP optimises (EM entry at least _FLOOR)
    is_cand: np.ndarray  # (K, M): entries that are LP variables
    has_tail: np.ndarray  # (M,): outputs with at least one tail entry
    log_em: np.ndarray  # (K, M): ln EM
    log_s: np.ndarray  # (M,): ln s_y, the column's largest tail value (its scale)
    coef_tail: np.ndarray  # (K, M): EM / s_y on tail entries, 0 on candidate entries
    d_out: np.ndarray  # (K, M): privacy distances to the outputs, km
    # Variable columns: z for candidate entries (in (y, rank) order), then mu_y.
    zc_row: np.ndarray  # record of each z column
    zc_y: np.ndarray  # output of each z column
    zc_valid: np.ndarray  # z columns of valid candidates
    n_z: int
    col_mu: np.ndarray  # column of mu_y


@dataclass(frozen=True)
class _Model:
    """The LP+EM model for :func:`panda.mechanisms._common.solve_two_term_lp`."""

    cost: np.ndarray
    sums: sp.csr_matrix  # the row sums (always in the LP)
    rhs_rows: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    pool: TwoTermPool  # candidate pairs, then both sides of every box
    z_of: np.ndarray  # the candidate entry each pool row bounds
    active: np.ndarray  # pool rows of the first LP
    numerics: dict  # for details["numerics"]


def _candidates(instance: Instance, eps: float, r: int) -> _Candidates:
    """Pick each output's ``r`` nearest records as candidates and scale the EM tail over the rest."""
    k, m = instance.n_records, instance.n_outputs
    d_out = output_distances_km(instance)
    em = em_matrix(d_out, eps)
    with np.errstate(divide="ignore"):
        log_em = np.log(em)
    cand = np.argsort(d_out, axis=0, kind="stable")[:r].T  # (M, r)
    # A candidate whose EM entry is below the floor stays in the tail: its LP variable is fixed at 0
    # and not used. (Floored at _FLOOR it would have to exceed EM's own value, and where its box
    # against the tail lies below the floor the LP would be infeasible, as it is at large eps.)
    valid = em[cand, np.arange(m)[:, None]] >= _FLOOR  # (M, r); an output's own record is always valid
    is_cand = np.zeros((k, m), dtype=bool)
    is_cand[cand[valid], np.nonzero(valid)[0]] = True
    has_tail = ~is_cand.all(axis=0)
    # Column scale s_y: the largest tail value of column y (tail coefficients <= 1 after scaling).
    tail_log = np.where(is_cand, -np.inf, log_em)
    log_s = np.where(has_tail, tail_log.max(axis=0), 0.0)
    coef_tail = np.exp(tail_log - log_s[None, :])  # (K, M); 0 on candidate entries
    return _Candidates(
        cand=cand,
        valid=valid,
        is_cand=is_cand,
        has_tail=np.asarray(has_tail),
        log_em=log_em,
        log_s=log_s,
        coef_tail=coef_tail,
        d_out=d_out,
        zc_row=cand.ravel(),
        zc_y=np.repeat(np.arange(m), r),
        zc_valid=valid.ravel(),
        n_z=r * m,
        col_mu=r * m + np.arange(m),
    )


def _lp_model(instance: Instance, eps: float, c: _Candidates, *, row_generation: bool, initial_pairs: int) -> _Model:
    """Write the LP: row sums, candidate pairs and boxes against the tail, columns' costs and bounds."""
    m = instance.n_outputs
    weighted = instance.prior[:, None] * instance.cost_m
    lo_coef, hi_coef, n_hi_clipped, n_lo_clipped = _box_coefficients(instance.d_km, eps, c)
    sums, rhs_rows, n_dropped = _row_sums(c, instance.n_records)
    first = initial_pairs if row_generation else None
    pool, z_of, active, n_pair_implied = _pool(instance.d_km, eps, c, lo_coef, hi_coef, first)
    return _Model(
        cost=np.concatenate([weighted[c.zc_row, c.zc_y], (weighted * c.coef_tail).sum(axis=0)]),
        sums=sums,
        rhs_rows=rhs_rows,
        col_lo=np.concatenate([np.where(c.zc_valid, _FLOOR, 0.0), np.zeros(m)]),
        col_hi=np.concatenate([np.where(c.zc_valid, 1.0, 0.0), np.where(c.has_tail, 1.0, 0.0)]),
        pool=pool,
        z_of=z_of,
        active=active,
        numerics={
            "column_scale": "mu_y = lam_y * max tail value of column y",
            "row_sum_coefficients_dropped_below_1e-12": n_dropped,
            "box_upper_lowered_to_1e12": n_hi_clipped,
            "box_lower_raised_to_1e-12": n_lo_clipped,
            "candidate_floor": _FLOOR,
            "candidates_left_in_tail_below_floor": int((~c.valid).sum()),
            "candidate_pairs_implied_by_floor": n_pair_implied,
        },
    )


def _box_coefficients(d: np.ndarray, eps: float, c: _Candidates) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Bound each candidate entry by its column's scaled tail: ``lo mu <= z <= hi mu``.

    ``lo`` and ``hi`` are ``max_x' e^{-eps d(x, x')} E[x', y] / s_y`` and ``min_x' e^{eps d(x, x')} E[x', y] / s_y``
    over the tail entries ``x'``, clipped into ``[1e-12, 1e12]`` (a tighter, still sound LP); also the numbers
    clipped at the top and at the bottom.
    """
    r = c.cand.shape[1]
    lo_box = np.zeros(c.n_z)
    hi_box = np.zeros(c.n_z)
    for y in np.flatnonzero(c.has_tail):
        out = np.flatnonzero(~c.is_cand[:, y])
        dd = eps * d[np.ix_(c.cand[y], out)]
        le = c.log_em[out, y] - c.log_s[y]
        hi_box[y * r : (y + 1) * r] = np.min(dd + le[None, :], axis=1)
        lo_box[y * r : (y + 1) * r] = np.max(le[None, :] - dd, axis=1)
    n_hi_clipped = int((hi_box > np.log(_HUGE)).sum())
    n_lo_clipped = int((lo_box < np.log(_TINY)).sum())
    hi_coef = np.exp(np.minimum(hi_box, np.log(_HUGE)))
    lo_coef = np.minimum(np.exp(np.maximum(lo_box, np.log(_TINY))), hi_coef)
    return lo_coef, hi_coef, n_hi_clipped, n_lo_clipped


def _row_sums(c: _Candidates, k: int) -> tuple[sp.csr_matrix, np.ndarray, int]:
    """Rows sum to 1, each scaled so its largest coefficient is 1; tail coefficients below 1e-12 left out.

    Returns the ``(K, columns)`` matrix, its right-hand sides and the number of coefficients left out.
    """
    m = c.col_mu.size
    tail_r, tail_y = np.nonzero(c.coef_tail > 0)
    row_max = np.maximum(c.is_cand.any(axis=1).astype(float), c.coef_tail.max(axis=1))  # candidate coefficients are 1
    tail_v = c.coef_tail[tail_r, tail_y] / row_max[tail_r]
    keep = tail_v >= _TINY
    n_dropped = int((~keep).sum())
    rhs_rows = 1.0 / row_max
    sums = sp.csr_matrix(
        (
            np.concatenate([1.0 / row_max[c.zc_row[c.zc_valid]], tail_v[keep]]),
            (
                np.concatenate([c.zc_row[c.zc_valid], tail_r[keep]]),
                np.concatenate([np.flatnonzero(c.zc_valid), c.col_mu[tail_y[keep]]]),
            ),
        ),
        shape=(k, c.n_z + m),
    )
    return sums, rhs_rows, n_dropped


def _pool(
    d: np.ndarray, eps: float, c: _Candidates, lo_coef: np.ndarray, hi_coef: np.ndarray, initial_pairs: int | None
) -> tuple[TwoTermPool, np.ndarray, np.ndarray, int]:
    """Write every two-term row ``v1 x[c1] + v2 x[c2] <= 0`` (v1 > 0 > v2): candidate pairs, then boxes.

    Returns the pool, the candidate entry each row bounds, the rows of the first LP (with ``initial_pairs``
    pair rows per candidate entry; ``None``: every row, no row generation), and the number of candidate
    pairs the floor implies (left out).
    """
    r, m = c.cand.shape[1], c.col_mu.size
    # 2. Candidate pairs: z[a, y] - e^{eps d(a, b)} z[b, y] <= 0 for ordered a != b in N(y).
    #    Candidate entries are floored at _FLOOR, so a pair with e^{eps d} >= 1 / _FLOOR holds by the
    #    bounds alone (z[a, y] <= 1 <= e^{eps d} _FLOOR <= e^{eps d} z[b, y]) and is left out.
    ia, ib = np.nonzero(~np.eye(r, dtype=bool))
    pair_exp = eps * d[c.cand[:, ia], c.cand[:, ib]]  # (M, r(r-1))
    written = (pair_exp < -np.log(_FLOOR)) & c.valid[:, ia] & c.valid[:, ib]
    n_pair_implied = int((~written & c.valid[:, ia] & c.valid[:, ib]).sum())
    py, pk = np.nonzero(written)
    n_pairs = py.size
    # 3. Boxes against the tail (only outputs with a tail): z - hi mu <= 0 and lo mu - z <= 0.
    boxed = np.flatnonzero(c.has_tail[c.zc_y] & c.zc_valid)
    nb = boxed.size
    mu_of = c.col_mu[c.zc_y[boxed]]
    c1 = np.concatenate([py * r + ia[pk], boxed, mu_of])
    c2 = np.concatenate([py * r + ib[pk], mu_of, boxed])
    v1 = np.concatenate([np.ones(n_pairs), np.ones(nb), lo_coef[boxed]])
    v2 = -np.concatenate([np.exp(pair_exp[py, pk]), hi_coef[boxed], np.ones(nb)])
    z_of = np.concatenate([c1[: n_pairs + nb], boxed])  # the candidate entry each row bounds
    if initial_pairs is None:
        return (c1, v1, c2, v2), z_of, np.ones(c1.size, dtype=bool), n_pair_implied
    # The first round: for each candidate entry z[b, y], the pair rows z[a, y] <= e^{eps d(a, b)} z[b, y]
    # of its ``initial_pairs`` fellow candidates a that lie most nearly between b and the output
    # (least d(y, a) + d(a, b) - d(y, b)): a mechanism that falls off with the distance from the output
    # binds those. No box: the rounds add what the solutions violate.
    dy = c.d_out[c.cand, np.arange(m)[:, None]]  # (M, r)
    excess = dy[py, ia[pk]] + pair_exp[py, pk] / eps - dy[py, ib[pk]]
    active = np.concatenate([rank_in_groups(excess, c2[:n_pairs]) < initial_pairs, np.zeros(2 * nb, dtype=bool)])
    return (c1, v1, c2, v2), z_of, active, n_pair_implied


def _mechanism_matrix(x: np.ndarray, c: _Candidates) -> tuple[np.ndarray, np.ndarray]:
    """Rebuild the matrix exactly from the LP's ``(z, mu)``; also the tail scales ``lam_y``."""
    mu = np.clip(x[c.n_z :], 0.0, None)
    matrix = c.coef_tail * mu[None, :]
    matrix[c.zc_row[c.zc_valid], c.zc_y[c.zc_valid]] = np.clip(x[: c.n_z][c.zc_valid], 0.0, None)
    return matrix, mu * np.exp(-c.log_s)
