"""HiGHS plumbing: LPs built from arrays, solver outcomes as data, and mDP-shaped LPs.

Every mechanism of the project that optimises a perturbation matrix (PAnDA's AnPO, the full LP
of Bordenabe et al., LP+CA, the Benders master and subproblems) is an LP of one shape:

    minimise   sum_{r,y} cost[r, y] z[r, y]
    subject to sum_y z[r, y] = 1                            for every row r
               z[i, y] <= exp(B_ij) z[j, y]                  for every constrained pair (i, j), y
               eta <= z[r, y] <= 1

:func:`solve_mdp_lp` builds it from arrays (CSR) and solves it with HiGHS. With ``eta > 0`` every
pair whose exponent satisfies ``exp(B_ij) * eta >= 1`` is implied by the bounds (``z[i, y] <= 1 <=
exp(B_ij) eta <= exp(B_ij) z[j, y]``) and is left out exactly; rows forced to be identical
(``B = 0`` both ways) are contracted to one variable row. The guarantee is that of the full LP:
only the feasible set's lower bound moves (by at most ``eta`` per entry).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import highspy
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from panda._min_plus import rows_min_plus
from panda.threads import thread_map

__all__ = [
    "LPResult",
    "MdpLPResult",
    "build_highs",
    "solve_lp",
    "solve_mdp_lp",
    "repair_to_exponents",
    "SOLVERS",
    "MAX_EXPONENT",
    "MAX_LP_ROWS",
]

SOLVERS = ("ipm", "simplex", "choose", "pdlp")

#: LPs with more rows than this are not built (memory: a few GB at this size on these machines);
#: the outcome says "Too large" and the solve counts as unsolved.
MAX_LP_ROWS = 8_000_000

#: HiGHS treats matrix values >= 1e15 as infinite and refuses the model. Exponents above this cap
#: are lowered to it: the constraint gets tighter (the guarantee holds), and the count is reported.
MAX_EXPONENT = float(np.log(1e12))


@dataclass(frozen=True)
class LPResult:
    """Outcome of one HiGHS solve (a failure is data, not an exception).

    Attributes
    ----------
    status
        HiGHS model status as text ("Optimal", "Time limit reached", "Infeasible", ...).
    success
        True when the model status is optimal.
    x
        The column values (``None`` when no solution is available).
    objective
        The objective value (``nan`` when not solved).
    time_s
        Wall time of the HiGHS run, seconds.
    n_rows, n_cols, n_nonzeros
        The size of the LP that was solved.
    """

    status: str
    success: bool
    x: np.ndarray | None
    objective: float
    time_s: float
    n_rows: int
    n_cols: int
    n_nonzeros: int
    solver: str = "ipm"

    @property
    def message(self) -> str:
        """One line for people."""
        return (
            f"HiGHS ({self.solver}): {self.status} after {self.time_s:.2f} s on {self.n_rows:,} rows x "
            f"{self.n_cols:,} columns"
        )


def build_highs(
    c: np.ndarray,
    a: sp.csr_matrix,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    col_lower: np.ndarray,
    col_upper: np.ndarray,
    *,
    solver: str = "simplex",
    options: dict | None = None,
) -> highspy.Highs:
    """Build a HiGHS model from arrays (row-wise CSR), not yet run (also for repeated solves with duals)."""
    a = sp.csr_matrix(a)
    n_rows, n_cols = a.shape
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("solver", solver)
    for key, value in (options or {}).items():
        h.setOptionValue(key, value)
    lp = highspy.HighsLp()
    lp.num_col_ = int(n_cols)
    lp.num_row_ = int(n_rows)
    lp.col_cost_ = np.ascontiguousarray(c, dtype=float)
    lp.col_lower_ = np.ascontiguousarray(col_lower, dtype=float)
    lp.col_upper_ = np.ascontiguousarray(col_upper, dtype=float)
    lp.row_lower_ = np.ascontiguousarray(row_lower, dtype=float)
    lp.row_upper_ = np.ascontiguousarray(row_upper, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = int(n_cols)
    lp.a_matrix_.num_row_ = int(n_rows)
    lp.a_matrix_.start_ = np.ascontiguousarray(a.indptr, dtype=np.int32)
    lp.a_matrix_.index_ = np.ascontiguousarray(a.indices, dtype=np.int32)
    lp.a_matrix_.value_ = np.ascontiguousarray(a.data, dtype=float)
    h.passModel(lp)
    return h


def solve_lp(
    c: np.ndarray,
    a: sp.csr_matrix,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    col_lower: np.ndarray,
    col_upper: np.ndarray,
    *,
    time_limit_s: float = 600.0,
    solver: str = "ipm",
    threads: int | None = None,
) -> LPResult:
    """Solve ``min c x  s.t.  row_lower <= A x <= row_upper, col_lower <= x <= col_upper`` with HiGHS.

    Returns an :class:`LPResult` whatever happens; check ``success``.
    """
    if solver not in SOLVERS:
        msg = f"The 'solver' parameter of solve_lp must be one of {SOLVERS}. Got {solver!r} instead."
        raise ValueError(msg)
    if not (time_limit_s > 0):
        msg = f"The 'time_limit_s' parameter of solve_lp must be a float > 0. Got {time_limit_s!r} instead."
        raise ValueError(msg)
    a = sp.csr_matrix(a)
    n_rows, n_cols = a.shape
    options: dict = {"time_limit": float(time_limit_s)}
    if threads is not None:
        options["threads"] = int(threads)
    t0 = time.perf_counter()
    h = build_highs(c, a, row_lower, row_upper, col_lower, col_upper, solver=solver, options=options)
    return _run(h, solver, t0)


def _run(h: highspy.Highs, solver: str, t0: float | None = None) -> LPResult:
    """Run a built HiGHS model; the outcome as an :class:`LPResult` (time counted from ``t0``)."""
    t0 = time.perf_counter() if t0 is None else t0
    h.run()
    elapsed = time.perf_counter() - t0
    status = h.getModelStatus()
    success = status == highspy.HighsModelStatus.kOptimal
    x = None
    objective = float("nan")
    if success:
        x = np.asarray(h.getSolution().col_value, dtype=float)
        objective = float(h.getInfo().objective_function_value)
    return LPResult(
        status=h.modelStatusToString(status),
        success=bool(success),
        x=x,
        objective=objective,
        time_s=elapsed,
        n_rows=int(h.getNumRow()),
        n_cols=int(h.getNumCol()),
        n_nonzeros=int(h.getNumNz()),
        solver=solver,
    )


@dataclass(frozen=True)
class MdpLPResult:
    """Outcome of :func:`solve_mdp_lp`.

    Attributes
    ----------
    lp
        The HiGHS outcome of the reduced LP.
    z
        ``(R, M)`` row-stochastic perturbation matrix over the original rows (``None`` if unsolved).
    objective
        ``sum cost * z`` over the original rows (``nan`` if unsolved).
    n_pairs_given
        Ordered pairs handed in.
    n_pairs_implied
        Ordered pairs left out because the floor ``eta`` implies them exactly.
    n_pairs_kept
        Ordered pairs (between contracted groups) written as constraints.
    n_groups
        Rows after contracting rows forced to be identical.
    extra
        ``n_pairs_capped``: pairs written with the exponent lowered to :data:`MAX_EXPONENT`
        (tighter than asked: the guarantee holds).
    eta
        The floor on every entry of ``z``.
    build_time_s
        Time spent building and reducing the LP (not solving), seconds.
    """

    lp: LPResult
    z: np.ndarray | None
    objective: float
    n_pairs_given: int
    n_pairs_implied: int
    n_pairs_kept: int
    n_groups: int
    eta: float
    build_time_s: float
    extra: dict = field(default_factory=dict)

    @property
    def success(self) -> bool:
        """True when the LP was solved to optimality."""
        return self.lp.success


def _group_exponents(n: int, gi: np.ndarray, gj: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dense ``n x n`` matrix of the smallest exponent between groups (``inf``: unconstrained)."""
    out = np.full((n, n), np.inf)
    between = gi != gj
    np.minimum.at(out, (gi[between], gj[between]), b[between])
    np.fill_diagonal(out, 0.0)
    return out


#: Log-ratio excess treated as floating-point rounding by :func:`repair_to_exponents`.
_ROUNDING = 1e-12


def _min_plus(log_z: np.ndarray, exponent: np.ndarray, *, exclude_self: bool = False) -> np.ndarray:
    """``min_j (exponent[i, j] + log_z[j, y])`` for every ``(i, y)`` (``j != i`` if ``exclude_self``)."""
    k, m = log_z.shape
    out = np.empty_like(log_z)
    step = max(1, 4_000_000 // max(k * m, 1))

    if rows_min_plus is not None and log_z.dtype == np.float64:  # compiled: the same bits, no (rows, K, M) array
        log_z, exponent = np.ascontiguousarray(log_z), np.ascontiguousarray(exponent, dtype=np.float64)
        out = np.empty_like(log_z)  # C order, as log_z now: one compiled signature (panda._min_plus.warm_up)
        thread_map(
            lambda s: rows_min_plus(exponent[s : s + step], s, exclude_self, log_z, out[s : s + step]),
            range(0, k, step),
        )
        return out

    def block(s: int) -> None:
        rows = exponent[s : s + step].copy()
        if exclude_self:
            diag = np.arange(rows.shape[0])
            rows[diag, diag + s] = np.inf
        with np.errstate(invalid="ignore"):
            out[s : s + step] = np.fmin.reduce(rows[:, :, None] + log_z[None, :, :], axis=1)

    thread_map(block, range(0, k, step))
    return out


def repair_to_exponents(
    z: np.ndarray, exponent: np.ndarray, *, max_passes: int = 10, closed: bool = False
) -> tuple[np.ndarray, dict]:
    """Make a nearly feasible solution satisfy ``z[i, y] <= exp(exponent[i, j]) z[j, y]`` exactly.

    HiGHS accepts constraint violations up to its absolute feasibility tolerance (1e-7): on entries
    near a floor of 1e-6 that is a relative error of several percent, i.e. a real mDP violation.
    The exponents are first closed under shortest paths (``E*``, so chained constraints are
    consistent: ``E* <= E``); then (1) the min-plus closure ``Z' = min_j exp(E*[i, j]) Z[j]`` is the
    largest matrix below ``Z`` meeting every constraint exactly, (2) each row's deficit is given back
    on entries with headroom (raising an entry only loosens other rows' constraints), and (3) a row
    without headroom is renormalised and the steps repeat. The utility changes by about the solver
    tolerance; ``info`` reports the excess before, the largest deficit and the passes.
    ``closed=True`` skips the shortest-path closure when the exponents already satisfy the triangle
    inequality (``eps * d`` for a metric ``d``).
    """
    from scipy.sparse.csgraph import shortest_path

    n = exponent.shape[0]
    if n <= 1:
        return z, {"max_log_excess_before": 0.0, "passes": 0}
    if closed:
        closed_e = np.array(exponent, dtype=float)
    else:
        finite = np.isfinite(exponent) & ~np.eye(n, dtype=bool)
        graph = sp.csr_matrix((np.maximum(exponent[finite], 1e-300), np.nonzero(finite)), shape=(n, n))
        closed_e = shortest_path(graph, method="D", directed=True)
    np.fill_diagonal(closed_e, 0.0)
    z = np.clip(np.asarray(z, dtype=float), 0.0, None)
    z = z / z.sum(axis=1, keepdims=True)
    before = None
    max_deficit = 0.0
    renormalised = 0
    passes = 0
    for passes in range(1, max_passes + 1):  # noqa: B007 (reported)
        with np.errstate(divide="ignore"):
            log_z = np.log(z)
        closed_log = _min_plus(log_z, closed_e)
        with np.errstate(invalid="ignore"):
            gap = np.nan_to_num(log_z - closed_log, nan=0.0, posinf=np.inf)
        excess = float(gap.max()) if gap.size else 0.0
        if before is None:
            before = excess
        if excess <= _ROUNDING:
            break
        zc = np.exp(closed_log)
        deficit = 1.0 - zc.sum(axis=1)
        max_deficit = max(max_deficit, float(np.abs(deficit).max()))
        upper = np.exp(_min_plus(closed_log, closed_e, exclude_self=True))
        head = np.clip(upper - zc, 0.0, None)
        room = head.sum(axis=1)
        ok = (room >= deficit) & (deficit > 0)
        z = zc.copy()
        z[ok] += head[ok] * (deficit[ok] / room[ok])[:, None]
        short = ~ok & (np.abs(deficit) > _ROUNDING)
        renormalised += int(short.sum())
        z[short] /= zc[short].sum(axis=1, keepdims=True)
        if not short.any():
            break
    return z, {
        "max_log_excess_before": float(before or 0.0),
        "max_deficit": max_deficit,
        "passes": passes,
        "rows_renormalised": renormalised,
    }


def _contract_identical(n_rows: int, pi: np.ndarray, pj: np.ndarray, b: np.ndarray) -> tuple[int, np.ndarray]:
    """Group rows joined by pairs with ``B <= 0`` in both directions (they must be identical)."""
    zero = b <= 0.0
    if not zero.any():
        return n_rows, np.arange(n_rows)
    g = sp.coo_matrix((np.ones(int(zero.sum())), (pi[zero], pj[zero])), shape=(n_rows, n_rows))
    # A one-directional B <= 0 (z_i <= z_j for all y, both rows summing to 1) also forces z_i == z_j.
    n_groups, labels = connected_components(g, directed=False)
    return int(n_groups), labels


#: ``row_generation`` adds a left-out row ``z[i, y] - exp(B) z[j, y] <= 0`` once the current
#: solution violates it by more than this (absolute; HiGHS's own feasibility tolerance is 1e-7).
#: Smaller violations are removed by the exact repair like the solver's own.
ROW_GENERATION_TOL = 1e-9

#: A round that adds at most this fraction of the LP's rows continues from the last basis (warm
#: dual simplex); a larger batch, or a warm run that fails numerically, is solved afresh. Warm rounds
#: are cheap, but a warm start after a large share of new rows can break down numerically.
WARM_START_FRACTION = 0.1


def _too_large(n_rows: int, n_cols: int, max_rows: int, solver: str) -> LPResult:
    return LPResult(
        status=f"Too large: {n_rows:,} rows (limit {max_rows:,})",
        success=False,
        x=None,
        objective=float("nan"),
        time_s=0.0,
        n_rows=n_rows,
        n_cols=n_cols,
        n_nonzeros=0,
        solver=solver,
    )


def _mdp_rows(
    n_groups: int,
    m: int,
    gi: np.ndarray,
    gj: np.ndarray,
    gb: np.ndarray,
    pair: np.ndarray,
    y: np.ndarray,
    *,
    row_sums: bool = True,
) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """Build the LP's rows: ``n_groups`` row sums, then ``z[gi[p], y] <= exp(gb[p]) z[gj[p], y]`` per ``(p, y)``."""
    n_cols = n_groups * m
    n_sums = n_groups if row_sums else 0
    n_ineq = pair.size
    ineq_row = n_sums + np.arange(n_ineq)
    rows = [ineq_row, ineq_row]
    cols = [gi[pair] * m + y, gj[pair] * m + y]
    vals = [np.ones(n_ineq), -np.exp(np.minimum(gb[pair], MAX_EXPONENT))]
    if row_sums:
        rows.append(np.repeat(np.arange(n_groups), m))
        cols.append(np.arange(n_cols))
        vals.append(np.ones(n_cols))
    a = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n_sums + n_ineq, n_cols)
    )
    row_lower = np.concatenate([np.ones(n_sums), np.full(n_ineq, -np.inf)])
    row_upper = np.concatenate([np.ones(n_sums), np.zeros(n_ineq)])
    return a, row_lower, row_upper


def _group_first(entries: np.ndarray | None, labels: np.ndarray, n_groups: int) -> np.ndarray | None:
    """``entries`` of the first row of each contracted group (``None`` passes through)."""
    if entries is None:
        return None
    first = np.full(n_groups, -1, dtype=np.int64)
    first[labels[::-1]] = np.arange(labels.size)[::-1]
    return np.asarray(entries, dtype=bool)[first]


def _solve_by_row_generation(
    gcost: np.ndarray,
    gi: np.ndarray,
    gj: np.ndarray,
    gb: np.ndarray,
    *,
    eta: float,
    time_limit_s: float,
    solver: str,
    max_rows: int,
    initial_neighbours: int,
    initial_entries: np.ndarray | None,
    t_start: float,
) -> tuple[LPResult, dict]:
    """Constraint generation for the reduced mDP LP (see ``row_generation`` in :func:`solve_mdp_lp`)."""
    n_groups, m = gcost.shape
    n_kept = gi.size
    eb = np.exp(np.minimum(gb, MAX_EXPONENT))
    active = _first_round_rows(gi, gb, n_groups, m, initial_neighbours, initial_entries)
    log: list[dict] = []
    info = {"rounds": log, "tolerance": ROW_GENERATION_TOL, "rows_full": int(n_groups + n_kept * m)}
    build = 0.0
    res: LPResult | None = None
    step = max(1, 8_000_000 // max(m, 1))  # pairs checked at once
    h: highspy.Highs | None = None
    new = active

    def fresh(with_solver: str) -> highspy.Highs:
        """Build a new HiGHS model of the rows active now."""
        a, row_lower, row_upper = _mdp_rows(n_groups, m, gi, gj, gb, *np.nonzero(active))
        lower, upper = np.full(n_groups * m, eta), np.ones(n_groups * m)
        return build_highs(gcost.ravel(), a, row_lower, row_upper, lower, upper, solver=with_solver)

    while True:
        tb = time.perf_counter()
        n_active = int(active.sum())
        if n_groups + n_active > max_rows:
            res = _too_large(n_groups + n_active, n_groups * m, max_rows, solver)
            break
        remaining = time_limit_s - (time.perf_counter() - t_start)
        if remaining <= 0:
            res = LPResult(
                "Time limit reached", False, None, float("nan"), 0.0, n_groups + n_active, n_groups * m, 0, solver
            )
            break
        warm = h is not None and int(new.sum()) <= WARM_START_FRACTION * (n_groups + n_active)
        if warm:
            assert h is not None  # warm implies a model from an earlier round
            # Few rows added: append them and let the dual simplex continue from the last basis.
            _append_mdp_rows(h, n_groups, m, gi, gj, gb, new)
        else:
            h = fresh(solver)
        build += time.perf_counter() - tb
        assert h is not None
        h, res, entry = _run_round(
            h, fresh, warm=warm, solver=solver, remaining=remaining, time_limit_s=time_limit_s, t_start=t_start
        )
        log.append(entry)
        if not res.success or res.x is None or n_active == n_kept * m:
            break  # unsolved, or every row was in the LP (no row generation): nothing to check
        tb = time.perf_counter()
        new = _violated_mdp_rows(res.x.reshape(n_groups, m), gi, gj, eb, active, step)
        added = int(new.sum())
        active |= new
        entry["rows_added"] = added
        build += time.perf_counter() - tb
        if added == 0:
            break
    info["build_time_s"] = build
    info["n_rounds"] = len(log)
    # Every round is a relaxation of the (floored) LP: its optimum bounds the LP's from below, which
    # is worth reporting when the rounds stop before the end (time limit).
    solved = [r["objective"] for r in log if r["status"] == "Optimal"]
    info["lower_bound"] = max(solved) if solved else float("nan")
    return res, info


def _first_round_rows(
    gi: np.ndarray,
    gb: np.ndarray,
    n_groups: int,
    m: int,
    initial_neighbours: int,
    initial_entries: np.ndarray | None,
) -> np.ndarray:
    """Pick the ``(pair, y)`` rows of the first round: each row's ``initial_neighbours`` smallest exponents.

    Where ``initial_entries`` is given, only at the entries it marks (of each pair's left row).
    """
    n_kept = gi.size
    # Each row's pairs by increasing exponent: the first ``initial_neighbours`` start active.
    order = np.lexsort((gb, gi))
    first = np.searchsorted(gi[order], np.arange(n_groups))
    rank = np.empty(n_kept, dtype=np.int64)
    rank[order] = np.arange(n_kept) - first[gi[order]]
    active = np.zeros((n_kept, m), dtype=bool)
    active[rank < initial_neighbours] = True
    if initial_entries is not None:
        active &= initial_entries[gi]
    return active


def _append_mdp_rows(
    h: highspy.Highs, n_groups: int, m: int, gi: np.ndarray, gj: np.ndarray, gb: np.ndarray, new: np.ndarray
) -> None:
    """Append the pair rows marked in ``new`` to the model (a warm start from its basis)."""
    a_new, _, _ = _mdp_rows(n_groups, m, gi, gj, gb, *np.nonzero(new), row_sums=False)
    h.addRows(
        a_new.shape[0],
        np.full(a_new.shape[0], -np.inf),
        np.zeros(a_new.shape[0]),
        a_new.nnz,
        a_new.indptr.astype(np.int32),
        a_new.indices.astype(np.int32),
        a_new.data,
    )


def _run_round(
    h: highspy.Highs,
    fresh: Callable[[str], highspy.Highs],
    *,
    warm: bool,
    solver: str,
    remaining: float,
    time_limit_s: float,
    t_start: float,
) -> tuple[highspy.Highs, LPResult, dict]:
    """Solve one round's model within ``remaining`` seconds; the model, its outcome and the round's log entry.

    A numerical breakdown (HiGHS "Not Set" and the like, with coefficients up to 1 / eta): a failed warm start
    is solved afresh (``fresh``); a failed fresh dual simplex is retried with IPM.
    """
    # HiGHS's time limit counts the object's whole run time (all warm rounds): extend it.
    h.setOptionValue("time_limit", float(h.getRunTime() + remaining))
    res = _run(h, solver)
    entry: dict = {
        "rows": res.n_rows,
        "status": res.status,
        "time_s": res.time_s,
        "objective": res.objective,
        "warm": warm,
    }
    retry = None
    if not res.success and res.status != "Time limit reached":
        retry = solver if warm else ("ipm" if solver == "simplex" else None)
    if retry is not None:
        h = fresh(retry)
        h.setOptionValue("time_limit", max(time_limit_s - (time.perf_counter() - t_start), 1e-3))
        res = _run(h, retry)
        entry.update(
            failed=f"{entry['status']} ({'warm ' if warm else ''}{solver})",
            retried_with=retry,
            status=res.status,
            time_s=float(entry["time_s"]) + res.time_s,
            objective=res.objective,
        )
    return h, res, entry


def _violated_mdp_rows(
    z: np.ndarray, gi: np.ndarray, gj: np.ndarray, eb: np.ndarray, active: np.ndarray, step: int
) -> np.ndarray:
    """Mark the left-out ``(pair, y)`` rows that ``z`` violates by more than :data:`ROW_GENERATION_TOL`.

    ``step`` pairs are checked at once (the memory of a ``(step, M)`` block).
    """
    new = np.zeros_like(active)
    for s in range(0, gi.size, step):
        sl = slice(s, s + step)
        new[sl] = (z[gi[sl]] - eb[sl, None] * z[gj[sl]] > ROW_GENERATION_TOL) & ~active[sl]
    return new


def solve_mdp_lp(
    cost: np.ndarray,
    pairs_i: np.ndarray,
    pairs_j: np.ndarray,
    exponent: np.ndarray,
    *,
    eta: float = 1e-6,
    time_limit_s: float = 600.0,
    solver: str = "ipm",
    reduce: bool = True,
    max_rows: int = MAX_LP_ROWS,
    row_generation: bool = False,
    initial_neighbours: int = 4,
    initial_entries: np.ndarray | None = None,
) -> MdpLPResult:
    """Solve the mDP-shaped LP described in the module docstring.

    Parameters
    ----------
    cost
        ``(R, M)`` objective coefficients (for a mechanism: prior times utility cost, metres).
    pairs_i, pairs_j, exponent
        Ordered pairs ``(i, j)`` of rows and their exponents ``B_ij``: ``z[i, y] <= exp(B_ij) z[j, y]``.
        Negative exponents are not allowed: clip them to 0 (identical rows) before calling, and
        report those pairs.
    eta
        Floor on every entry (``0 <= eta < 1 / M``). With ``eta > 0`` and ``reduce``, pairs with
        ``exp(B) * eta >= 1`` are implied and dropped.
    time_limit_s, solver
        HiGHS settings.
    reduce
        Apply the exact reductions (implied pairs, contraction of identical rows). ``False`` builds
        the monolithic LP, for comparison.
    max_rows
        Do not build an LP with more rows than this (reported as "Too large", unsolved).
    row_generation
        Solve by constraint (row) generation: start from the pair rows of each row's
        ``initial_neighbours`` smallest exponents, solve, add every left-out ``(pair, y)`` row the
        solution violates by more than :data:`ROW_GENERATION_TOL`, and repeat until none is
        violated. The last LP's optimum then satisfies every constraint: it is the optimum of the
        whole LP (each round is a relaxation of it), found with far fewer rows, since few pair
        rows bind. ``max_rows`` and ``time_limit_s`` apply to the rounds together.
    initial_neighbours
        Pairs per row in the first round of ``row_generation``.
    initial_entries
        ``(R, M)`` booleans, for ``row_generation``: the first round writes a pair row
        ``z[i, y] <= exp(B) z[j, y]`` only where ``initial_entries[i, y]`` (entries expected above
        the floor; the others mostly sit on it, where no pair row can bind). Only a starting guess:
        the rounds add whatever is violated. Rows contracted into a group use the group's first.
    """
    t0 = time.perf_counter()
    cost, pi, pj, b = _checked_mdp_inputs(cost, pairs_i, pairs_j, exponent, eta)
    keep = pi != pj
    pi, pj, b = pi[keep], pj[keep], b[keep]  # every given pair, for the exact repair of the solution
    n_capped = int((b > MAX_EXPONENT).sum())
    lp = _reduced_lp(cost, pi, pj, b, eta=eta, reduce=reduce)
    n_kept = int(lp.gi.size)
    # Without row generation every pair row starts active: one round, nothing left to add.
    res, rounds = _solve_by_row_generation(
        lp.gcost,
        lp.gi,
        lp.gj,
        lp.gb,
        eta=eta,
        time_limit_s=time_limit_s,
        solver=solver,
        max_rows=max_rows,
        initial_neighbours=initial_neighbours if row_generation else n_kept,
        initial_entries=_group_first(initial_entries, lp.labels, lp.n_groups) if row_generation else None,
        t_start=t0,
    )
    z = None
    objective = float("nan")
    repair_info: dict = {}
    if res.success and res.x is not None:
        z, repair_info = _repaired_rows(res.x.reshape(lp.gcost.shape), lp.labels, pi, pj, b)
        objective = float((cost * z).sum())
    return MdpLPResult(
        lp=res,
        z=z,
        objective=objective,
        n_pairs_given=int(pi.size),
        n_pairs_implied=lp.n_implied,
        n_pairs_kept=n_kept,
        n_groups=lp.n_groups,
        eta=float(eta),
        build_time_s=rounds["build_time_s"],
        extra={
            "n_pairs_capped": n_capped if not (reduce and eta > 0) else 0,
            "repair": repair_info,
            **({"row_generation": rounds} if row_generation else {}),
        },
    )


def _checked_mdp_inputs(
    cost: np.ndarray, pairs_i: np.ndarray, pairs_j: np.ndarray, exponent: np.ndarray, eta: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate :func:`solve_mdp_lp`'s arrays and floor; return ``cost`` (float) and the pairs (flat)."""
    cost = np.asarray(cost, dtype=float)
    if cost.ndim != 2:
        msg = f"The 'cost' parameter of solve_mdp_lp must be a 2-D array. Got shape {cost.shape} instead."
        raise ValueError(msg)
    m = cost.shape[1]
    pi = np.asarray(pairs_i, dtype=np.int64).ravel()
    pj = np.asarray(pairs_j, dtype=np.int64).ravel()
    b = np.asarray(exponent, dtype=float).ravel()
    if not (pi.shape == pj.shape == b.shape):
        msg = "The 'pairs_i', 'pairs_j' and 'exponent' parameters of solve_mdp_lp must have the same length."
        raise ValueError(msg)
    if b.size and (np.nanmin(b) < 0 or np.isnan(b).any()):
        msg = "The 'exponent' parameter of solve_mdp_lp must be >= 0 (clip infeasible pairs to 0 and report them)."
        raise ValueError(msg)
    if not (0.0 <= eta < 1.0 / m):
        msg = f"The 'eta' parameter of solve_mdp_lp must be in [0, 1/M) = [0, {1.0 / m:.3g}). Got {eta!r} instead."
        raise ValueError(msg)
    return cost, pi, pj, b


@dataclass(frozen=True)
class _ReducedLP:
    """The mDP LP after the exact reductions: rows contracted into groups, one pair row per group pair."""

    n_implied: int  # pairs left out because the floor implies them
    n_groups: int
    labels: np.ndarray  # (R,) the group of every original row
    gcost: np.ndarray  # (n_groups, M) sum of the members' costs (members share one row of z)
    gi: np.ndarray  # pairs between groups, with their smallest exponent
    gj: np.ndarray
    gb: np.ndarray


def _reduced_lp(
    cost: np.ndarray, pi: np.ndarray, pj: np.ndarray, b: np.ndarray, *, eta: float, reduce: bool
) -> _ReducedLP:
    """Apply the exact reductions (``reduce``): leave out the pairs the floor implies, contract identical rows."""
    n_rows, m = cost.shape
    n_implied = 0
    if reduce and eta > 0:
        implied = b >= -np.log(eta)
        n_implied = int(implied.sum())
        pi, pj, b = pi[~implied], pj[~implied], b[~implied]
    if reduce:
        n_groups, labels = _contract_identical(n_rows, pi, pj, b)
    else:
        n_groups, labels = n_rows, np.arange(n_rows)
    # Group cost: sum of member rows' costs (members share one row of z).
    gcost = np.zeros((n_groups, m))
    np.add.at(gcost, labels, cost)
    gi, gj, gb = _group_pairs(labels[pi], labels[pj], b, n_groups)
    return _ReducedLP(n_implied=n_implied, n_groups=n_groups, labels=labels, gcost=gcost, gi=gi, gj=gj, gb=gb)


def _group_pairs(
    gi: np.ndarray, gj: np.ndarray, b: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs between different groups, one per ordered pair of groups (its smallest exponent)."""
    between = gi != gj
    gi, gj, gb = gi[between], gj[between], b[between]
    if gi.size:
        # Several pairs between the same two groups: the smallest exponent is the binding one.
        key = gi * n_groups + gj
        order = np.lexsort((gb, key))
        key, gi, gj, gb = key[order], gi[order], gj[order], gb[order]
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        gi, gj, gb = gi[first], gj[first], gb[first]
    return gi, gj, gb


def _repaired_rows(
    zg: np.ndarray, labels: np.ndarray, pi: np.ndarray, pj: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, dict]:
    """Turn the LP's group rows into the original rows: clipped, renormalised, repaired exactly to every given pair."""
    zg = np.clip(zg, 0.0, None)
    zg /= zg.sum(axis=1, keepdims=True)
    exp_g = _group_exponents(zg.shape[0], labels[pi], labels[pj], np.minimum(b, MAX_EXPONENT))
    zg, repair_info = repair_to_exponents(zg, exp_g)
    return zg[labels], repair_info
