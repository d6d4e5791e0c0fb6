"""Helpers shared by the baseline mechanisms (not public API)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from panda.instance import Instance
from panda.lp import ROW_GENERATION_TOL
from panda.lp import build_highs as highs_model  # noqa: F401 (shared HiGHS builder)
from panda.mechanisms.base import MechanismResult, expected_loss_m
from panda.network import EARTH_RADIUS_KM


def output_distances_km(instance: Instance) -> np.ndarray:
    """``(K, M)`` privacy distances from every record to every output, km (never builds K x K for haversine)."""
    return instance.distances_km(None, instance.outputs)


def finish(
    name: str,
    epsilon: float,
    instance: Instance,
    matrix: np.ndarray | None,
    status: str,
    t0: float,
    details: dict,
) -> MechanismResult:
    """Wrap a matrix (or its absence) into a :class:`MechanismResult`, timing from ``t0``."""
    elapsed = time.perf_counter() - t0
    loss = expected_loss_m(instance, matrix) if matrix is not None else float("nan")
    return MechanismResult(
        name=name,
        epsilon_per_km=epsilon,
        matrix=matrix,
        status=status,
        build_time_s=elapsed,
        loss_m=loss,
        details=details,
    )


def unsolved_status(lp_status: str, elapsed_s: float) -> str:
    """Return the status line of an LP mechanism whose solve did not reach optimality."""
    if "time limit" in lp_status.lower():
        return f"unsolved: time limit after {elapsed_s:.1f} s"
    if lp_status.startswith("Too large"):
        return f"unsolved: {lp_status}"
    return f"failed: HiGHS reports {lp_status!r}"


def check_positive(value: object, name: str, where: str, *, integer: bool = False, low: float = 0.0) -> float:
    """Validate a number ``> low`` (an int when ``integer``) and return it."""
    kind = "an int" if integer else "a float"
    ok_type = (
        isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.integer, np.floating))
    )
    if isinstance(value, bool) or not ok_type:
        msg = f"The '{name}' parameter of {where} must be {kind} > {low:g}. Got {value!r} instead."
        raise TypeError(msg)
    number = float(value)  # type: ignore[arg-type]
    if not (np.isfinite(number) and number > low):
        msg = f"The '{name}' parameter of {where} must be {kind} > {low:g}. Got {value!r} instead."
        raise ValueError(msg)
    return number


def local_plane_km(lon: np.ndarray, lat: np.ndarray, lon0: float, lat0: float) -> tuple[np.ndarray, np.ndarray]:
    """Equirectangular projection around ``(lon0, lat0)``: east and north offsets in km."""
    x = np.radians(np.asarray(lon, dtype=float) - lon0) * EARTH_RADIUS_KM * np.cos(np.radians(lat0))
    y = np.radians(np.asarray(lat, dtype=float) - lat0) * EARTH_RADIUS_KM
    return x, y


def highs_run(h: highspy.Highs, time_limit_s: float) -> tuple[str, bool]:
    """Run a HiGHS model within ``time_limit_s`` more seconds; return (model status text, optimal?).

    HiGHS's ``time_limit`` counts the object's whole run time, over every earlier ``run()`` (a
    Benders master re-solved with new cuts): the limit is set to that time plus ``time_limit_s``.
    (Setting ``time_limit_s`` alone would stop a re-solved model, e.g. LP+BD's master, well within its budget.)
    """
    h.setOptionValue("time_limit", float(h.getRunTime() + max(time_limit_s, 1e-3)))
    h.run()
    status = h.getModelStatus()
    return h.modelStatusToString(status), status == highspy.HighsModelStatus.kOptimal


def repair_mdp(
    matrix: np.ndarray, d_km: np.ndarray, epsilon_per_km: float, *, max_passes: int = 10
) -> tuple[np.ndarray, dict]:
    """Remove an LP solver's tolerance-sized mDP violations from a nearly eps-mDP matrix.

    HiGHS accepts constraint violations up to its absolute feasibility tolerance (1e-7); on entries
    near the floor (1e-6) that is a relative error of several percent. The repair:

    1. *Closure*: ``Z'[x, y] = min_x' exp(eps d(x, x')) Z[x', y]``, the largest matrix below ``Z``
       that satisfies every mDP inequality (exactly, because ``eps d`` is a metric). Rows now sum to
       ``1 - m_x`` with deficits ``m_x`` of the violations' size.
    2. *Fill*: give each row its deficit back on entries with headroom,
       ``H[x, y] = min_{x' != x} exp(eps d(x, x')) Z'[x', y] - Z'[x, y]``, in proportion to ``H``.
       Raising an entry never tightens another row's constraints (it only appears on their right
       side), so all rows can be filled at once and the result stays exactly eps-mDP.
    3. A row without enough headroom (rare) is renormalised instead, and the two steps repeat.

    The utility changes by about the solver tolerance; ``info`` says by how much.

    Returns
    -------
    matrix, info
        The repaired matrix and ``{"max_log_excess_before", "max_deficit", "passes",
        "rows_renormalised"}``.
    """
    from panda.lp import repair_to_exponents

    exponent = float(epsilon_per_km) * np.asarray(d_km, dtype=float)
    return repair_to_exponents(matrix, exponent, max_passes=max_passes, closed=True)


#: The two-term rows of :func:`solve_two_term_lp`: ``v1 x[c1] + v2 x[c2] <= 0`` as ``(c1, v1, c2, v2)``.
TwoTermPool = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def rank_in_groups(score: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Each element's rank within its ``group`` by increasing ``score`` (0: the smallest; ties by position)."""
    order = np.lexsort((score, group))
    sorted_group = group[order]
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size) - np.searchsorted(sorted_group, sorted_group, side="left")
    return rank


def solve_two_term_lp(
    cost: np.ndarray,
    equalities: sp.csr_matrix,
    rhs: np.ndarray,
    col_lo: np.ndarray,
    col_hi: np.ndarray,
    pool: TwoTermPool,
    group: np.ndarray,
    active: np.ndarray,
    *,
    time_limit_s: float,
    solver: str = "simplex",
    per_entry: int = 2,
    drop_after: int = 2,
    options: dict | None = None,
    run: Callable[[highspy.Highs, float], tuple[str, bool]] = highs_run,
) -> tuple[highspy.Highs, str, bool, list[dict]]:
    """Minimise ``cost x`` s.t. ``equalities x = rhs``, bounds, and every pool row, by row generation.

    The pool rows have two terms, ``v1 x[c1] + v2 x[c2] <= 0`` (``pool = (c1, v1, c2, v2)``). The first LP
    has the equalities and the pool rows where ``active`` (updated in place); each round adds the pool rows
    its optimum violates by more than :data:`panda.lp.ROW_GENERATION_TOL`, for each value of ``group`` its
    ``per_entry`` most violated ones (by the log-ratio ``ln(v1 x[c1]) - ln(-v2 x[c2])``; 0: all), and
    the dual simplex goes on from the last basis (HiGHS's devex pricing: its default, dual steepest edge,
    recomputes its weights for the whole basis after each addition, a large cost in every round). When
    no row is violated the last optimum satisfies every pool row: each round is a relaxation of the whole
    LP, so it is the whole LP's optimum. A warm round that breaks down numerically is solved afresh. A pool
    row added ``drop_after`` rounds ago or more that is slack with a zero dual is deleted (0: never), once: if
    a later solution violates it again it comes back for good (no cycling). The last check covers every
    pool row, deleted ones included. ``run`` runs the model within a time budget (:func:`highs_run`).

    Returns
    -------
    highs, status, optimal, rounds
        The HiGHS object (its solution is the answer when ``optimal``), its model status text, and per
        round ``{"rows", "status", "time_s", "iterations", "rows_added", "rows_dropped", "check_s"}``.
    """
    t0 = time.perf_counter()
    k = equalities.shape[0]
    opts = {"simplex_dual_edge_weight_strategy": 1, **(options or {})}

    def fresh() -> highspy.Highs:
        return _two_term_model(cost, equalities, rhs, col_lo, col_hi, pool, active, solver=solver, options=opts)

    h = fresh()
    rows = _PoolRowsInLP.of(active)
    rounds: list[dict] = []
    added = np.zeros(0, dtype=np.int64)
    while True:
        tr = time.perf_counter()
        status, ok = run(h, time_limit_s - (tr - t0))
        entry = {
            "rows": int(h.getNumRow()),
            "status": status,
            "time_s": time.perf_counter() - tr,
            "iterations": int(h.getInfo().simplex_iteration_count),
        }
        if not ok and added.size and "time limit" not in status.lower():
            h = fresh()  # its pool rows in pool order, all new
            rows.rebuilt(len(rounds))
            status, ok = run(h, time_limit_s - (time.perf_counter() - t0))
            entry.update(retried="fresh", status=status, time_s=time.perf_counter() - tr)
        rounds.append(entry)
        if h.getNumRow() != k + int(active.sum()):  # the bookkeeping of added and dropped rows
            msg = f"row generation lost track of its rows: {h.getNumRow()} in HiGHS, {k + int(active.sum())} active"
            raise RuntimeError(msg)
        if not ok or active.all():
            return h, status, ok, rounds
        tc = time.perf_counter()
        added = _violated_pool_rows(np.asarray(h.getSolution().col_value), pool, active, group, per_entry)
        entry["rows_added"] = int(added.size)
        if not added.size:
            entry["check_s"] = time.perf_counter() - tc
            return h, status, ok, rounds
        if drop_after > 0 and len(rounds) >= 2:
            dropped = rows.drop_slack(h, k, len(rounds), drop_after)
            if dropped:
                entry["rows_dropped"] = dropped
        rows.add(h, added, len(rounds), pool, cost.size)
        entry["check_s"] = time.perf_counter() - tc


def _pool_rows(pool: TwoTermPool, idx: np.ndarray, n_cols: int) -> sp.csr_matrix:
    """Write the pool rows ``idx`` as a CSR matrix over ``n_cols`` columns (two entries a row)."""
    c1, v1, c2, v2 = pool
    n = idx.size
    return sp.csr_matrix(
        (
            np.column_stack([v1[idx], v2[idx]]).ravel(),
            np.column_stack([c1[idx], c2[idx]]).ravel(),
            np.arange(0, 2 * n + 1, 2),
        ),
        shape=(n, n_cols),
    )


def _two_term_model(
    cost: np.ndarray,
    equalities: sp.csr_matrix,
    rhs: np.ndarray,
    col_lo: np.ndarray,
    col_hi: np.ndarray,
    pool: TwoTermPool,
    active: np.ndarray,
    *,
    solver: str,
    options: dict,
) -> highspy.Highs:
    """Build the HiGHS model of the equalities and the pool rows active now."""
    k = equalities.shape[0]
    a = sp.vstack([equalities, _pool_rows(pool, np.flatnonzero(active), cost.size)], format="csr")
    n_all = a.shape[0]
    lo_b = np.concatenate([rhs, np.full(n_all - k, -np.inf)])
    hi_b = np.concatenate([rhs, np.zeros(n_all - k)])
    return highs_model(cost, a, lo_b, hi_b, col_lo, col_hi, solver=solver, options=options)


def _violated_pool_rows(
    x: np.ndarray, pool: TwoTermPool, active: np.ndarray, group: np.ndarray, per_entry: int
) -> np.ndarray:
    """Left-out pool rows that ``x`` violates beyond the tolerance; per ``group`` the ``per_entry`` worst (0: all)."""
    c1, v1, c2, v2 = pool
    pos, neg = v1 * x[c1], -v2 * x[c2]
    added = np.flatnonzero(~active & (pos - neg > ROW_GENERATION_TOL))
    if added.size > 0 and per_entry > 0:
        score = np.log(pos[added]) - np.log(np.maximum(neg[added], 1e-300))
        added = added[rank_in_groups(-score, group[added]) < per_entry]
    return added


@dataclass
class _PoolRowsInLP:
    """Which pool rows the HiGHS model holds (after its equalities, in its row order) and since which round."""

    active: np.ndarray  # (pool,) in the model now: the caller's array, updated in place
    in_lp: np.ndarray  # the pool row of each model row after the equalities
    born: np.ndarray  # the round each of them came in
    kept_once: np.ndarray  # (pool,) dropped once already: back for good if violated again

    @classmethod
    def of(cls, active: np.ndarray) -> _PoolRowsInLP:
        """Start with the first model's rows: the active ones, in pool order, from round 0."""
        in_lp = np.flatnonzero(active)
        return cls(active, in_lp, np.zeros(in_lp.size, dtype=np.int64), np.zeros(active.size, dtype=bool))

    def rebuilt(self, round_no: int) -> None:
        """Follow a model built afresh in round ``round_no``: its rows in pool order, all new."""
        self.in_lp = np.flatnonzero(self.active)
        self.born = np.full(self.in_lp.size, round_no)

    def drop_slack(self, h: highspy.Highs, k: int, round_no: int, drop_after: int) -> int:
        """Delete the rows at least ``drop_after`` rounds old, slack with a zero dual, not dropped before; how many.

        Once only: a row dropped and violated again stays, so the rounds cannot cycle; the basis stays small.
        """
        sol = h.getSolution()
        duals = np.asarray(sol.row_dual)[k:]
        vals = np.asarray(sol.row_value)[k:]
        age = round_no - self.born
        drop = (np.abs(duals) < 1e-12) & (vals < -1e-7) & (age >= drop_after) & ~self.kept_once[self.in_lp]
        if not drop.any():
            return 0
        idx = np.flatnonzero(drop)
        h.deleteRows(idx.size, (idx + k).astype(np.int32))
        self.active[self.in_lp[idx]] = False
        self.kept_once[self.in_lp[idx]] = True
        self.in_lp = self.in_lp[~drop]
        self.born = self.born[~drop]
        return int(idx.size)

    def add(self, h: highspy.Highs, added: np.ndarray, round_no: int, pool: TwoTermPool, n_cols: int) -> None:
        """Append the pool rows ``added`` to the model (a warm start from its basis)."""
        self.active[added] = True
        self.in_lp = np.concatenate([self.in_lp, added])
        self.born = np.concatenate([self.born, np.full(added.size, round_no)])
        new = _pool_rows(pool, added, n_cols)
        h.addRows(
            added.size,
            np.full(added.size, -np.inf),
            np.zeros(added.size),
            new.nnz,
            new.indptr[:-1].astype(np.int32),
            new.indices.astype(np.int32),
            new.data,
        )
