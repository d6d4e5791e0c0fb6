"""LP+BD as the paper ran it: Benders decomposition of the 0.8 km relaxation of the optimal LP.

What the published code (functions/myBDToolbox of the authors' CCS-2025-PAnDA repository) solves is
NOT the optimal eps-mDP LP of Bordenabe et al. It constrains only ordered record pairs closer than
``pair_radius_km`` (0.8 km): a relaxation, whose optimum lies below the exact LP's and whose solution
breaks eps-mDP between farther records (``bench/bench_lp_bd.py`` measures both; docs/benchmarks.md,
"LP+BD"). This module reproduces that method, with a correct lower bound, and says so:

* **Clusters.** k-means (50 clusters, seeded k-means++ start) on the records' planar coordinates.
* **Boundary records** have a constrained (< 0.8 km) pair crossing clusters; the others are the
  clusters' *interior* records. Interior records of different clusters share no constraint.
* **Master**: the boundary rows ``z_B`` (row sums, floor ``eta``, the pairs among boundary records)
  plus one ``theta_k >= 0`` per cluster standing for the cluster's interior cost::

      minimise  sum_b p_b cost[b] . z_b + sum_k theta_k    subject to the cuts found so far

  The boundary cost is counted once (the published code's bound counted it twice, so its "lower
  bound" could exceed the optimum); the master's value is a true lower bound on the relaxation.
* **Subproblem k**, for a fixed ``z_B``: the interior rows of cluster k with every constrained pair
  touching them; its optimal value is convex in ``z_B`` and the fixed columns' reduced costs are a
  subgradient (optimality cut ``theta_k >= phi_k(z0) + g . (z_B - z0)``). An infeasible subproblem
  gives a feasibility cut from its phase-1 LP (slacks on the pair rows).
* **Stopping rule** (the paper's): relative gap ``(UB - LB) / UB <= 0.1``, or 100 iterations; the
  best feasible point found is the mechanism. Options change both.

The matrix is NOT repaired to eps-mDP: it is the relaxation's solution (rows renormalised against the
solver's tolerance). Audit it like any mechanism: the audit shows the violations. The status says
what it is, e.g. ``"solved (paper's LP+BD: 0.8 km pairs, not eps-mDP, stopped at gap 7.3 %)"``, and
``details`` has ``pair_radius_km``, ``gap``, ``iterations``, ``upper_bound_m``, ``lower_bound_m`` and
``eps_mdp: False``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import highspy
import numpy as np
import scipy.sparse as sp

from panda.instance import Instance
from panda.lp import SOLVERS
from panda.mechanisms._common import (
    check_positive,
    finish,
    highs_model,
    highs_run,
    local_plane_km,
)
from panda.mechanisms.base import MechanismResult, check_epsilon
from panda.mechanisms.lp_full import check_eta, mdp_pairs

__all__ = ["build_lp_bd", "kmeans_labels", "lp_bd_label", "PAPER_PAIR_RADIUS_KM"]


def kmeans_labels(points: np.ndarray, n_clusters: int, *, rng: np.random.Generator, n_iter: int = 100) -> np.ndarray:
    """Lloyd's k-means with a k-means++ start; returns ``(n,)`` labels ``0 .. k'-1`` (empty clusters dropped)."""
    n = points.shape[0]
    k = min(int(n_clusters), n)
    centres = [points[rng.integers(n)]]
    d2 = ((points - centres[0]) ** 2).sum(axis=1)
    for _ in range(1, k):
        total = d2.sum()
        idx = rng.choice(n, p=d2 / total) if total > 0 else rng.integers(n)
        centres.append(points[idx])
        d2 = np.minimum(d2, ((points - points[idx]) ** 2).sum(axis=1))
    c = np.asarray(centres)
    labels = np.zeros(n, dtype=np.int64)
    for _ in range(n_iter):
        dist = ((points[:, None, :] - c[None, :, :]) ** 2).sum(axis=2)
        new = dist.argmin(axis=1)
        if _ and (new == labels).all():
            break
        labels = new
        for j in range(c.shape[0]):
            members = labels == j
            if members.any():
                c[j] = points[members].mean(axis=0)
    return np.unique(labels, return_inverse=True)[1]


@dataclass
class _Sub:
    """One cluster's subproblem (and its phase-1 twin), with fixed boundary columns."""

    interior: np.ndarray  # record positions of the interior rows
    fixed: np.ndarray  # record positions of the adjacent boundary rows (fixed columns)
    fixed_master_rows: np.ndarray  # their row index among the master's boundary rows
    model: highspy.Highs
    phase1: highspy.Highs
    n_var_cols: int  # interior columns (phase 1: plus slacks after the fixed ones)


def _pair_rows(
    pi: np.ndarray, pj: np.ndarray, b: np.ndarray, col_of: np.ndarray, m: int, row0: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """COO triplets of ``z[i, y] - exp(b) z[j, y] <= 0`` for each pair and y; rows from ``row0``."""
    ys = np.arange(m)
    n = pi.size
    r = row0 + (np.arange(n)[:, None] * m + ys[None, :]).ravel()
    ci = (col_of[pi][:, None] * m + ys[None, :]).ravel()
    cj = (col_of[pj][:, None] * m + ys[None, :]).ravel()
    rows = np.concatenate([r, r])
    cols = np.concatenate([ci, cj])
    vals = np.concatenate([np.ones(n * m), -np.repeat(np.exp(b), m)])
    return rows, cols, vals


def _build_sub(
    interior: np.ndarray,
    pi: np.ndarray,
    pj: np.ndarray,
    b: np.ndarray,
    weighted: np.ndarray,
    master_row_of: np.ndarray,
    eta: float,
) -> _Sub:
    k_total, m = weighted.shape
    in_i = np.zeros(k_total, dtype=bool)
    in_i[interior] = True
    touch = in_i[pi] | in_i[pj]
    spi, spj, sb = pi[touch], pj[touch], b[touch]
    others = np.concatenate([spi[~in_i[spi]], spj[~in_i[spj]]])
    fixed = np.unique(others)
    n_int, n_fix = interior.size, fixed.size
    col_of = np.full(k_total, -1, dtype=np.int64)
    col_of[interior] = np.arange(n_int)
    col_of[fixed] = n_int + np.arange(n_fix)
    n_cols = (n_int + n_fix) * m
    n_pairs = spi.size
    # Rows: interior row sums, then pair constraints.
    eq_r = np.repeat(np.arange(n_int), m)
    eq_c = np.arange(n_int * m)
    pr, pc, pv = _pair_rows(spi, spj, sb, col_of, m, n_int)
    rows = np.concatenate([eq_r, pr])
    cols = np.concatenate([eq_c, pc])
    vals = np.concatenate([np.ones(n_int * m), pv])
    n_rows = n_int + n_pairs * m
    a = sp.csr_matrix((vals, (rows, cols)), shape=(n_rows, n_cols))
    cost = np.concatenate([weighted[interior].ravel(), np.zeros(n_fix * m)])
    lo = np.full(n_cols, eta)
    hi = np.ones(n_cols)
    row_lo = np.concatenate([np.ones(n_int), np.full(n_pairs * m, -np.inf)])
    row_hi = np.concatenate([np.ones(n_int), np.zeros(n_pairs * m)])
    model = highs_model(cost, a, row_lo, row_hi, lo, hi, solver="simplex")
    # Phase 1: the same rows, plus one slack column per pair row (coefficient -1), cost 1 on slacks.
    slack = sp.csr_matrix(
        (-np.ones(n_pairs * m), (n_int + np.arange(n_pairs * m), np.arange(n_pairs * m))),
        shape=(n_rows, n_pairs * m),
    )
    a1 = sp.hstack([a, slack], format="csr")
    cost1 = np.concatenate([np.zeros(n_cols), np.ones(n_pairs * m)])
    lo1 = np.concatenate([lo, np.zeros(n_pairs * m)])
    hi1 = np.concatenate([hi, np.full(n_pairs * m, np.inf)])
    phase1 = highs_model(cost1, a1, row_lo, row_hi, lo1, hi1, solver="simplex")
    return _Sub(
        interior=interior,
        fixed=fixed,
        fixed_master_rows=master_row_of[fixed],
        model=model,
        phase1=phase1,
        n_var_cols=n_int * m,
    )


def _fix_and_solve(h: highspy.Highs, first_col: int, values: np.ndarray, time_left: float) -> tuple[str, bool]:
    n = values.size
    idx = np.arange(first_col, first_col + n, dtype=np.int32)
    h.changeColsBounds(n, idx, values, values)
    return highs_run(h, time_left)


#: The paper's defaults: pairs closer than 0.8 km, k-means(50), stop at a 10 % gap or 100 iterations.
PAPER_PAIR_RADIUS_KM = 0.8
PAPER_CLUSTERS = 50
PAPER_GAP = 0.1
PAPER_MAX_ITERATIONS = 100


def lp_bd_label(pair_radius_km: float = PAPER_PAIR_RADIUS_KM) -> str:
    """Display label of the method: ``"paper's LP+BD (0.8 km pairs, not eps-mDP)"``."""
    return f"paper's LP+BD ({pair_radius_km:g} km pairs, not eps-mDP)"


def build_lp_bd(
    instance: Instance,
    epsilon_per_km: float,
    *,
    pair_radius_km: float = PAPER_PAIR_RADIUS_KM,
    n_clusters: int = PAPER_CLUSTERS,
    gap: float = PAPER_GAP,
    max_iterations: int = PAPER_MAX_ITERATIONS,
    eta: float = 1e-6,
    time_limit_s: float = 1800.0,
    rng: np.random.Generator | int | None = 0,
    master_solver: str = "ipm",
) -> MechanismResult:
    """Build the paper's LP+BD: Benders decomposition of the LP on pairs closer than ``pair_radius_km``.

    A relaxation of the optimal eps-mDP LP, solved the way the published experiments did (see the
    module docstring); its matrix is not eps-mDP in general and is not repaired to be.

    Parameters
    ----------
    instance
        The problem instance.
    epsilon_per_km
        Privacy budget, 1/km (exponent ``eps d`` on the constrained pairs).
    pair_radius_km
        Only ordered pairs closer than this are constrained (the paper: 0.8 km).
    n_clusters
        Number of k-means clusters (the paper: 50; at most K).
    gap
        Stop when ``(UB - LB) / UB <= gap`` (the paper: 0.1).
    max_iterations
        Stop after this many Benders iterations with the best feasible point (the paper: 100).
    eta
        Floor on every entry (as in the project's other LPs).
    time_limit_s
        Wall-time limit; reached before the stopping rule, the status is ``"unsolved: time limit ..."``
        and the matrix ``None`` (the best point found, if any, is in ``details["incumbent_matrix"]``).
    rng
        Random generator or seed of the k-means start.
    master_solver
        HiGHS solver of the first master solve; later solves are warm-started dual simplex.

    Returns
    -------
    MechanismResult
        ``status`` ``"solved (paper's LP+BD: 0.8 km pairs, not eps-mDP, stopped at gap 7.3 %)"`` (or
        ``"... stopped after 100 iterations at gap 12.0 %"``) when the stopping rule was met with a
        feasible point. ``details``: ``label``, ``pair_radius_km``, ``gap``, ``gap_target``,
        ``iterations``, ``max_iterations``, ``stopped_by``, ``upper_bound_m``, ``lower_bound_m``,
        ``eps_mdp`` (False), ``n_boundary``, ``n_clusters``, cut counts, ``bounds_history`` and the pair
        counts.
    """
    eps = check_epsilon(epsilon_per_km, "build_lp_bd")
    eta = check_eta(eta, instance.n_outputs, "build_lp_bd")
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not 0 <= gap < 1:
        msg = f"The 'gap' parameter of build_lp_bd must be a float in [0, 1). Got {gap!r} instead."
        raise ValueError(msg)
    radius = float(check_positive(pair_radius_km, "pair_radius_km", "build_lp_bd"))
    max_it = int(check_positive(max_iterations, "max_iterations", "build_lp_bd", integer=True))
    n_clusters = int(check_positive(n_clusters, "n_clusters", "build_lp_bd", integer=True))
    if master_solver not in SOLVERS:
        msg = f"The 'master_solver' parameter of build_lp_bd must be one of {SOLVERS}. Got {master_solver!r} instead."
        raise ValueError(msg)
    check_positive(time_limit_s, "time_limit_s", "build_lp_bd")
    gen = np.random.default_rng(rng)
    t0 = time.perf_counter()
    deadline = t0 + float(time_limit_s)
    pi, pj, b, info = mdp_pairs(instance.d_km, eps, eta=eta, neighbour_radius_km=radius)
    weighted = instance.prior[:, None] * instance.cost_m
    split = _split(instance, pi, pj, n_clusters, gen)
    master = _build_master(split, pi, pj, b, weighted, eta, master_solver)
    subs = [_build_sub(c, pi, pj, b, weighted, split.master_row_of, eta) for c in split.clusters]
    label = lp_bd_label(radius)
    details: dict = {
        **info,
        "label": label,
        "pair_radius_km": radius,
        "eps_mdp": False,
        "relaxation": (
            f"only ordered pairs closer than {radius:g} km are constrained (the published code's rule): a "
            "relaxation of the optimal eps-mDP LP; the matrix is not repaired to eps-mDP"
        ),
        "eta": eta,
        "gap_target": float(gap),
        "max_iterations": max_it,
        **split.counts(),
        "solver": f"master: {master_solver}, then warm-started simplex; subproblems: warm-started simplex",
    }
    run = _Benders()
    run.iterate(master, subs, split.boundary, weighted, gap=gap, max_it=max_it, deadline=deadline, t0=t0)
    return _result(run, eps, instance, radius, label, details, t0)


@dataclass(frozen=True)
class _Split:
    """The records split into clusters: the boundary rows (the master's) and each cluster's interior."""

    labels: np.ndarray  # (K,) k-means cluster of every record
    is_boundary: np.ndarray  # (K,) records with a constrained pair crossing clusters
    boundary: np.ndarray  # their positions, in record order
    master_row_of: np.ndarray  # (K,) row among the boundary rows (-1: interior)
    clusters: list[np.ndarray]  # interior records of each cluster that has some
    n_crossing: int  # constrained pairs crossing clusters

    def counts(self) -> dict:
        """Return the split's counts for ``details``."""
        return {
            "n_clusters": int(self.labels.max()) + 1,
            "n_subproblems": len(self.clusters),
            "n_boundary": int(self.boundary.size),
            "n_interior": int(self.is_boundary.size - self.boundary.size),
            "n_crossing_pairs": self.n_crossing,
        }


def _split(instance: Instance, pi: np.ndarray, pj: np.ndarray, n_clusters: int, gen: np.random.Generator) -> _Split:
    """Cluster the records (k-means in the plane) and find the boundary records, whose pairs cross clusters."""
    k_total = instance.n_records
    x, y = local_plane_km(instance.lon, instance.lat, float(np.mean(instance.lon)), float(np.mean(instance.lat)))
    labels = kmeans_labels(np.stack([x, y], axis=1), n_clusters, rng=gen)
    crossing = labels[pi] != labels[pj]
    is_boundary = np.zeros(k_total, dtype=bool)
    is_boundary[pi[crossing]] = True
    is_boundary[pj[crossing]] = True
    boundary = np.flatnonzero(is_boundary)
    master_row_of = np.full(k_total, -1, dtype=np.int64)
    master_row_of[boundary] = np.arange(boundary.size)
    clusters = [np.flatnonzero((labels == c) & ~is_boundary) for c in range(int(labels.max()) + 1)]
    return _Split(
        labels=labels,
        is_boundary=is_boundary,
        boundary=boundary,
        master_row_of=master_row_of,
        clusters=[c for c in clusters if c.size],
        n_crossing=int(crossing.sum()),
    )


def _build_master(
    split: _Split,
    pi: np.ndarray,
    pj: np.ndarray,
    b: np.ndarray,
    weighted: np.ndarray,
    eta: float,
    solver: str,
) -> highspy.Highs:
    """Build the master LP: z_B (``n_b * m`` columns) then one theta per cluster with interior records.

    Its rows: the boundary rows' sums and the pairs among boundary records; the cuts come later.
    """
    m = weighted.shape[1]
    boundary, n_theta = split.boundary, len(split.clusters)
    n_b = boundary.size
    bb = split.is_boundary[pi] & split.is_boundary[pj]
    eq_r = np.repeat(np.arange(n_b), m)
    eq_c = np.arange(n_b * m)
    pr, pc, pv = _pair_rows(pi[bb], pj[bb], b[bb], split.master_row_of, m, n_b)
    n_mrows = n_b + int(bb.sum()) * m
    n_mcols = n_b * m + n_theta
    a = sp.csr_matrix(
        (np.concatenate([np.ones(n_b * m), pv]), (np.concatenate([eq_r, pr]), np.concatenate([eq_c, pc]))),
        shape=(n_mrows, n_mcols),
    )
    return highs_model(
        np.concatenate([weighted[boundary].ravel(), np.ones(n_theta)]),
        a,
        np.concatenate([np.ones(n_b), np.full(n_mrows - n_b, -np.inf)]),
        np.concatenate([np.ones(n_b), np.zeros(n_mrows - n_b)]),
        np.concatenate([np.full(n_b * m, eta), np.zeros(n_theta)]),
        np.concatenate([np.ones(n_b * m), np.full(n_theta, np.inf)]),
        solver=solver,
    )


@dataclass
class _Benders:
    """The Benders iterations: bounds, the best feasible point, the cuts added, and how they ended."""

    lb: float = -np.inf
    ub: float = np.inf
    best: np.ndarray | None = None
    n_opt_cuts: int = 0
    n_feas_cuts: int = 0
    iteration: int = 0
    status: str = ""  # set when the iterations end without the stopping rule: unsolved or failed
    stopped_by: str = ""  # "gap" or "iterations" when the stopping rule ended them
    history: list[tuple[float, float]] = field(default_factory=list)

    def iterate(
        self,
        master: highspy.Highs,
        subs: list[_Sub],
        boundary: np.ndarray,
        weighted: np.ndarray,
        *,
        gap: float,
        max_it: int,
        deadline: float,
        t0: float,
    ) -> None:
        """Solve the master, then every subproblem at its z_B (adding cuts), until the stopping rule or a failure."""
        k_total, m = weighted.shape
        n_b = boundary.size

        def left() -> float:
            return deadline - time.perf_counter()

        while True:
            if left() <= 0:
                self.status = f"unsolved: time limit after {time.perf_counter() - t0:.1f} s"
                break
            self.iteration += 1
            if self.iteration == 2:
                master.setOptionValue("solver", "simplex")  # warm starts from the first solve's basis
            mstat, ok = highs_run(master, left())
            if not ok:
                self.status = (
                    f"unsolved: time limit after {time.perf_counter() - t0:.1f} s"
                    if "time limit" in mstat.lower()
                    else f"failed: master LP {mstat!r}"
                )
                break
            sol = np.asarray(master.getSolution().col_value)
            self.lb = max(self.lb, float(master.getInfo().objective_function_value))
            z_b = sol[: n_b * m].reshape(n_b, m)
            theta = sol[n_b * m :]
            total = float((weighted[boundary] * z_b).sum())  # the boundary cost, once
            z_full = np.zeros((k_total, m))
            z_full[boundary] = z_b
            total, feasible, timed_out = self._solve_subproblems(master, subs, z_b, theta, total, z_full, left)
            if timed_out:
                self.status = f"unsolved: time limit after {time.perf_counter() - t0:.1f} s"
                break
            if self.status:
                break
            if feasible and total < self.ub:
                self.ub = total
                self.best = z_full
            self.history.append((self.lb, self.ub))
            if np.isfinite(self.ub) and self.ub - self.lb <= gap * max(self.ub, 1e-12):
                self.stopped_by = "gap"
                break
            if self.iteration >= max_it:
                self.stopped_by = "iterations"
                break

    def _solve_subproblems(
        self,
        master: highspy.Highs,
        subs: list[_Sub],
        z_b: np.ndarray,
        theta: np.ndarray,
        total: float,
        z_full: np.ndarray,
        left: Callable[[], float],
    ) -> tuple[float, bool, bool]:
        """Solve each cluster's subproblem at ``z_b``, fill its rows of ``z_full``, add the cuts they give.

        Returns the point's cost (``total`` plus the subproblems'), whether every subproblem was feasible,
        and whether the time ran out; a failure sets :attr:`status`.
        """
        m = z_b.shape[1]
        theta_col0 = z_b.size
        feasible = True
        timed_out = False
        for k, sub in enumerate(subs):
            fixed_vals = z_b[sub.fixed_master_rows].ravel()
            if left() <= 0:
                timed_out = True
                break
            sstat, ok = _fix_and_solve(sub.model, sub.n_var_cols, fixed_vals, left())
            if ok:
                s = sub.model.getSolution()
                phi = float(sub.model.getInfo().objective_function_value)
                g = np.asarray(s.col_dual)[sub.n_var_cols :]
                z_full[sub.interior] = np.asarray(s.col_value)[: sub.n_var_cols].reshape(-1, m)
                total += phi
                if phi > theta[k] + 1e-9 * max(1.0, abs(phi)):
                    _add_cut(master, sub, g, fixed_vals, phi, m, theta_col=theta_col0 + k, feasibility=False)
                    self.n_opt_cuts += 1
            elif "infeasible" in sstat.lower():
                feasible = False
                pstat, ok1 = _fix_and_solve(sub.phase1, sub.n_var_cols, fixed_vals, left())
                if not ok1:
                    timed_out = "time limit" in pstat.lower()
                    self.status = self.status or f"failed: phase-1 LP {pstat!r}"
                    break
                psi = float(sub.phase1.getInfo().objective_function_value)
                n_fix_cols = fixed_vals.size
                g = np.asarray(sub.phase1.getSolution().col_dual)[sub.n_var_cols : sub.n_var_cols + n_fix_cols]
                _add_cut(master, sub, g, fixed_vals, psi, m, theta_col=None, feasibility=True)
                self.n_feas_cuts += 1
            else:
                timed_out = "time limit" in sstat.lower()
                self.status = self.status or f"failed: subproblem LP {sstat!r}"
                break
        return total, feasible, timed_out


def _result(
    run: _Benders, eps: float, instance: Instance, radius: float, label: str, details: dict, t0: float
) -> MechanismResult:
    """Report the iterations: the best point as the mechanism when the stopping rule was met, else no matrix."""
    lb, ub, best, stopped_by, iteration, status = run.lb, run.ub, run.best, run.stopped_by, run.iteration, run.status
    reached = max(0.0, (ub - lb) / ub) if np.isfinite(ub) and ub > 0 else (0.0 if ub == 0 else float("inf"))
    details.update(
        iterations=iteration,
        stopped_by=stopped_by or "not stopped by the rule",
        lower_bound_m=float(lb),
        upper_bound_m=float(ub),
        gap=float(reached),
        gap_reached=float(reached),
        n_optimality_cuts=run.n_opt_cuts,
        n_feasibility_cuts=run.n_feas_cuts,
        bounds_history=run.history,
    )
    if stopped_by and best is None:
        status = f"unsolved: no feasible point after {iteration} iterations ({label})"
    if not stopped_by or best is None:
        if best is not None:
            details["incumbent_matrix"] = _normalised(best)
        return finish("lp-bd", eps, instance, None, status or "failed: no feasible point", t0, details)
    matrix = _normalised(best)
    details["row_sum_error"] = float(np.abs(best.sum(axis=1) - 1.0).max())
    how = (
        f"stopped at gap {100 * reached:.1f} %"
        if stopped_by == "gap"
        else f"stopped after {iteration} iterations at gap {100 * reached:.1f} %"
    )
    status = f"solved (paper's LP+BD: {radius:g} km pairs, not eps-mDP, {how})"
    return finish("lp-bd", eps, instance, matrix, status, t0, details)


def _normalised(z: np.ndarray) -> np.ndarray:
    """Rows clipped to >= 0 and renormalised to sum 1 (the LP solver's tolerance; no mDP repair)."""
    z = np.clip(z, 0.0, None)
    return z / z.sum(axis=1, keepdims=True)


def _add_cut(
    master: highspy.Highs,
    sub: _Sub,
    g: np.ndarray,
    fixed_vals: np.ndarray,
    value: float,
    m: int,
    *,
    theta_col: int | None,
    feasibility: bool,
) -> None:
    """Optimality cut ``theta - g.z_B >= value - g.z0`` or feasibility cut ``g.z_B <= g.z0 - value``."""
    cols = (sub.fixed_master_rows[:, None] * m + np.arange(m)[None, :]).ravel()
    nz = g != 0
    cols, coef = cols[nz], g[nz]
    const = value - float(g @ fixed_vals)
    if feasibility:
        master.addRow(-np.inf, -const, int(cols.size), cols.astype(np.int32), coef.astype(float))
    else:
        idx = np.concatenate([cols, [theta_col]]).astype(np.int32)
        val = np.concatenate([-coef, [1.0]]).astype(float)
        master.addRow(const, np.inf, int(idx.size), idx, val)
