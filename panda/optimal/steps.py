"""The rounds' steps: one HiGHS round of the simplex loop (solve, certificate, new rows), and the PDHG rounds."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import highspy
import numpy as np
import scipy.sparse as sp

import panda.optimal as _pkg
from panda.optimal.near import _Near
from panda.optimal.separation import _new_rows, _pair_matrix

#: Repairs a relaxation's point ``z`` with row-sum multipliers ``u`` and keeps the best matrix so far.
Certify = Callable[[np.ndarray, np.ndarray], None]


def pdhg_round_steps(k: int) -> int:
    """Return the default steps of a PDHG round for ``k`` records: ``2 k`` in multiples of 64, in [1,024, 1,280].

    Rounds are short because a round's rows are worth separating well before its LP's point has
    settled, and each new LP restarts PDHG anyway; they are capped (:data:`PDHG_ROUND_STEPS_MAX`)
    because on large instances longer rounds cost more than they gain (``bench/bench_optimal.py
    --round-steps-max N`` measures this; docs/benchmarks.md).
    """
    steps = max(_pkg.PDHG_ROUND_STEPS, 64 * -(-2 * int(k) // 64))
    cap = _pkg.PDHG_ROUND_STEPS_MAX
    return steps if cap is None else max(_pkg.PDHG_ROUND_STEPS, min(steps, int(cap)))


@dataclass
class _SimplexLP:
    """The HiGHS relaxation of the simplex loop on the current pair rows ``z[s, y] <= a z[x, y]``, and the loop's state.

    ``best`` (bounds, matrix, repair facts) and ``rounds`` (one dict per round) are the run's, shared with the
    driver; ``pending`` is a solved point not repaired yet, ``last_rows`` the last solved relaxation's pair rows
    and multipliers.
    """

    cost: np.ndarray
    a_full: np.ndarray
    eta: float
    method: str
    s_rows: np.ndarray
    x_rows: np.ndarray
    y_rows: np.ndarray
    keys: np.ndarray
    best: dict[str, Any]
    rounds: list[dict]
    options: dict = field(init=False)
    sums: sp.csr_matrix = field(init=False)
    h: Any = None
    rebuilt: bool = False
    fallback: bool = False  # this round's model is the interior-point fallback
    work_s: float = 0.0
    repair_s: float = 0.0
    pending: tuple[np.ndarray, np.ndarray] | None = None
    last_rows: tuple[np.ndarray, ...] | None = None

    def __post_init__(self) -> None:
        k, m = self.cost.shape
        n_cols = k * m
        self.options = (
            {"simplex_dual_edge_weight_strategy": 1}
            if self.method == "simplex"
            else {"run_crossover": "off", "ipm_optimality_tolerance": 1e-7}
        )
        self.sums = sp.csr_matrix((np.ones(n_cols), (np.repeat(np.arange(k), m), np.arange(n_cols))), shape=(k, n_cols))

    def fresh(self, solver: str | None = None) -> highspy.Highs:
        """Build the relaxation on the current rows from scratch (``"ipm"``: interior point with crossover)."""
        k, m = self.cost.shape
        n_cols = k * m
        s_rows, x_rows, y_rows = self.s_rows, self.x_rows, self.y_rows
        pairs = _pair_matrix(s_rows, x_rows, y_rows, self.a_full[s_rows, x_rows], m, n_cols)
        a = sp.vstack([self.sums, pairs]).tocsr()
        n_p = pairs.shape[0]
        return _pkg.build_highs(
            self.cost.ravel(),
            a,
            np.r_[np.ones(k), np.full(n_p, -np.inf)],
            np.r_[np.ones(k), np.zeros(n_p)],
            np.full(n_cols, self.eta),
            np.ones(n_cols),
            solver=solver or ("simplex" if self.method == "simplex" else "ipm"),
            options=self.options if solver is None else {"run_crossover": "on"},
        )


def _simplex_solve(lp: _SimplexLP, remaining: float, tr: float) -> tuple[dict, str | None]:
    """Solve the round's relaxation (started at ``tr``, ``remaining`` seconds left); append its entry to the rounds.

    Returns the entry and ``None`` (solved), ``"retry"`` (a breakdown: the model was rebuilt, or rebuilt for
    interior point with crossover, for another try) or the reason to stop.
    """
    h = lp.h
    h.setOptionValue("time_limit", float(h.getRunTime() + remaining))
    h.run()
    status = h.getModelStatus()
    status_text = h.modelStatusToString(status)
    entry: dict = {"rows": int(h.getNumRow()), "status": status_text, "solve_s": time.perf_counter() - tr}
    lp.rounds.append(entry)
    if status != highspy.HighsModelStatus.kOptimal:
        if status == highspy.HighsModelStatus.kTimeLimit:
            return entry, "time limit"
        if lp.method == "simplex" and not lp.rebuilt:
            # A warm start that broke down numerically: once more from scratch.
            lp.h = lp.fresh()
            lp.rebuilt = entry["rebuilt"] = True
            return entry, "retry"
        if lp.method == "simplex" and not lp.fallback:
            # Simplex broke down from scratch too (it can, on large LPs): this round by interior point
            # with crossover (a basic solution with duals), then simplex again.
            lp.h = lp.fresh("ipm")
            lp.fallback = entry["interior_point_next"] = True
            return entry, "retry"
        return entry, f"HiGHS reports {status_text!r}"
    return entry, None


def _simplex_certificate(
    lp: _SimplexLP, entry: dict, certify: Certify, tr: float, *, batch: float, near: _Near | None
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """Bound, separate and (within its time share) repair the solved relaxation; fill in the round's entry.

    Returns the relaxation's point ``z``, its duals and the new rows ``(s, x, y, keys)``.
    """
    k, m = lp.cost.shape
    s_rows, x_rows, y_rows, best = lp.s_rows, lp.x_rows, lp.y_rows, lp.best
    sol = lp.h.getSolution()
    z = np.asarray(sol.col_value, dtype=float).reshape(k, m)
    duals = np.asarray(sol.row_dual, dtype=float)
    tc = time.perf_counter()
    a = lp.a_full[s_rows, x_rows]
    lb, lb0 = _pkg.dual_bound(lp.cost, duals[:k], -duals[k:], s_rows, x_rows, y_rows, a, eta=lp.eta)
    best.update(lb=max(best["lb"], lb), lb0=max(best["lb0"], lb0), u=duals[:k])
    lp.last_rows = (s_rows, x_rows, y_rows, np.clip(-duals[k:], 0.0, None))
    entry.update(objective=float(lp.h.getInfo().objective_function_value), lower=lb)
    new = _new_rows(z, lp.a_full, lp.keys, max(1, int(batch * k * m)), near=near)
    lp.work_s += time.perf_counter() - tr
    # The upper bound (an exact repair, a few K x K x M passes) is computed while it costs at
    # most half the solving time so far, and always when the relaxation is feasible.
    lp.pending = (z, duals[:k])
    if new[0].size == 0 or lp.repair_s <= 0.5 * lp.work_s:
        tp = time.perf_counter()
        certify(z, duals[:k])
        lp.pending = None
        lp.repair_s += time.perf_counter() - tp
    current_gap = (best["ub"] - best["lb"]) / best["ub"]
    entry.update(upper=best["ub"], gap=current_gap, rows_added=int(new[0].size), certificate_s=time.perf_counter() - tc)
    return z, duals, new


def _simplex_grow(
    lp: _SimplexLP,
    entry: dict,
    z: np.ndarray,
    duals: np.ndarray,
    new: tuple[np.ndarray, ...],
    *,
    drop_share: float,
    used_fallback: bool,
) -> None:
    """Drop the slack rows (``drop_share``), add the new ones: warm (simplex) or by a rebuilt model."""
    k, m = lp.cost.shape
    ns, nx, ny, new_keys = new
    if drop_share > 0 and lp.method == "simplex" and lp.s_rows.size:
        s_rows, x_rows, y_rows = lp.s_rows, lp.x_rows, lp.y_rows
        coef = lp.a_full[s_rows, x_rows] * z[x_rows, y_rows]
        slack_rows = (duals[k:] >= -1e-12) & (coef - z[s_rows, y_rows] > 1e-6 * coef)
        if slack_rows.mean() > drop_share:
            gone = (k + np.flatnonzero(slack_rows)).astype(np.int32)
            lp.h.deleteRows(gone.size, gone)
            lp.s_rows, lp.x_rows, lp.y_rows = (v[~slack_rows] for v in (s_rows, x_rows, y_rows))
            lp.keys = np.sort((lp.s_rows * k + lp.x_rows) * m + lp.y_rows)
            entry["rows_dropped"] = int(gone.size)
    lp.keys = np.union1d(lp.keys, new_keys)
    lp.s_rows, lp.x_rows, lp.y_rows = np.r_[lp.s_rows, ns], np.r_[lp.x_rows, nx], np.r_[lp.y_rows, ny]
    if lp.method == "simplex" and not used_fallback:
        rows = _pair_matrix(ns, nx, ny, lp.a_full[ns, nx], m, k * m)
        lp.h.addRows(
            rows.shape[0],
            np.full(rows.shape[0], -np.inf),
            np.zeros(rows.shape[0]),
            rows.nnz,
            rows.indptr.astype(np.int32),
            rows.indices.astype(np.int32),
            rows.data,
        )
    else:
        lp.h = lp.fresh()


@dataclass
class _PdhgRun:
    """The state of :func:`_pdhg_rounds` between rounds (the LP's rows, PDHG's warm start, the clocks)."""

    cost: np.ndarray
    a_full: np.ndarray
    best: dict[str, Any]
    rounds: list[dict]
    certify: Certify
    eta: float
    gap: float
    deadline: float
    batch: float
    round_steps: int
    near: _Near | None
    s_rows: np.ndarray
    x_rows: np.ndarray
    y_rows: np.ndarray
    keys: np.ndarray
    x0: np.ndarray | None
    y0: np.ndarray | None
    omega: Any = None
    step_size: Any = None
    steps_done: int = 0
    work_s: float = 0.0
    cert_s: float = 0.0
    pending: tuple[np.ndarray, np.ndarray] | None = None
    # Seconds a round needs after PDHG (the pair multipliers and an exact repair, as last measured):
    # PDHG stops that much before the deadline, so the run ends near it, not late by a certificate.
    # (The multipliers' time grows with the pair rows: kept per row, and scaled to the current rows.)
    tail: dict[str, float] = field(default_factory=dict)  # the measured costs ({} before: the priors)
    late: float = np.inf  # the certificate after the deadline starts no multiplier LP after this
    dropped_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # rows that left once
    round_time: float = 0.0  # PDHG seconds of the last round (the next one takes about as long)
    warm: bool = False  # started from an earlier solve (panda.optimal.warm): the first round is near
    last_u: np.ndarray | None = None  # the last PDHG point's row-sum multipliers
    steps: int = field(init=False)
    solved_rows: tuple[np.ndarray, ...] = field(init=False)
    cost_om: np.ndarray = field(init=False)
    a_sep: np.ndarray = field(init=False)
    sums: sp.csr_matrix = field(init=False)

    def __post_init__(self) -> None:
        k, m = self.cost.shape
        n_cols = k * m
        self.steps = self.round_steps
        self.solved_rows = (self.s_rows, self.x_rows, self.y_rows, np.zeros(self.s_rows.size))
        self.cost_om = self.cost.T.ravel()
        # The separation ranks violations of 1 % and more: single precision is plenty, and moves half the bytes.
        self.a_sep = self.a_full.astype(np.float32)
        self.sums = sp.csr_matrix((np.ones(n_cols), (np.tile(np.arange(k), m), np.arange(n_cols))), shape=(k, n_cols))

    def tail_s(self, prior: bool = True) -> float:
        """Seconds the work after PDHG is expected to take, for the current rows (``prior=False``: the multipliers'
        only once measured; PDHG's round is not cut for a prior guess)."""
        per_row = self.tail.get("multipliers per row", _pkg.TAIL_PER_ROW_S if prior else 0.0)
        repair = self.tail.get("repair", _pkg.TAIL_PER_ENTRY_S * self.cost.size)
        return per_row * self.s_rows.size + repair


def _pdhg_rounds(
    cost: np.ndarray,
    a_full: np.ndarray,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray],
    keys: np.ndarray,
    best: dict[str, Any],
    rounds: list[dict],
    certify: Certify,
    *,
    eta: float,
    gap: float,
    deadline: float,
    batch: float,
    round_steps: int,
    start_matrix: np.ndarray | None,
    max_rounds: int,
    near: _Near | None,
    warm: tuple[np.ndarray, np.ndarray, float | None] | None = None,
    late: float = np.inf,
) -> tuple[str, tuple[np.ndarray, ...], tuple[np.ndarray, np.ndarray] | None]:
    """Row generation on restarted PDHG (``solve_optimal(method="pdhg")``); updates ``best`` and ``rounds``.

    Each round runs ``round_steps`` PDHG steps (scheme :data:`PDHG_SCHEME`) on the current pair rows, warm-started
    from the last round (its point and primal weight, and the step size of the adaptive scheme; new rows'
    multipliers at 0). While it runs, the lower bound of every checked dual point is computed (:func:`dual_bound`:
    valid for any multipliers), and PDHG stops as soon as the gap is met (the bound is computed every 512 steps, so
    the iterates never depend on the clock; only the deadline cuts a run). After the round it is certified (the best
    pair multipliers for its row-sum multipliers, then an exact repair of its primal point; not the first round)
    while that costs at most :data:`CERTIFICATE_SHARE` of the rounds' time, and always when it is the last one
    before the deadline. Then for every right entry the left end violating its row by more than
    :data:`PDHG_SEPARATION_REL` (relative) is added, at most ``batch * K * M`` rows ranked by violation, and rows
    with multiplier 0 and a slack above :data:`PDHG_DROP_SLACK` leave the LP (each row at most once; rows in the LP
    are never added again). Without new rows the next round continues on the same LP. A round adding fewer rows than
    :data:`_GROW_BELOW` of the LP's doubles the steps of the next ones (up to :data:`_MAX_GROWTH` times
    ``round_steps``): PDHG restarts with each new LP, and once the rows settle longer runs pay more than
    restarts.

    ``late``: after this time (past ``deadline``) a certificate starts no more multiplier LPs: the outputs left keep
    PDHG's multipliers (:data:`CERTIFICATE_GRACE`). Before a certificate was measured, PDHG keeps back its expected
    cost (:data:`TAIL_PER_ROW_S`, :data:`TAIL_PER_ENTRY_S`).

    ``warm``: ``(u, lam, omega)``, the dual start (row-sum multipliers, one multiplier per row of
    ``rows``) and primal weight of a warm start (:mod:`panda.optimal.warm`; ``start_matrix`` is then
    its repaired matrix); its first round may be certified like any later one.

    Returns the stop reason, the last rows ``(s, x, y, multipliers)`` and the point still to
    repair (``None`` if the last one was repaired). ``best["pdhg_state"]`` gets the last PDHG
    point's row-sum multipliers and primal weight (for a later warm start).
    """
    # PDHG's LP is output-major (entry (r, y) is column y K + r) with the pair rows sorted by output,
    # so each row touches one 4-KB block of z, and it iterates in float32: both make a step of the
    # in-place steps of panda.pdhg cheaper (bench/bench_pdhg_step.py compares the layouts; docs/benchmarks.md).
    # Everything outside PDHG stays (K, M).
    s_rows, x_rows, y_rows = rows
    order = np.lexsort((x_rows, s_rows, y_rows))  # by output, then left end
    s_rows, x_rows, y_rows = s_rows[order], x_rows[order], y_rows[order]
    start = None if start_matrix is None else np.maximum(np.asarray(start_matrix, dtype=float), eta)
    x0 = None if start is None else start.T.ravel()
    u0 = None if start is None else (cost * start).sum(axis=1)
    y0 = None if u0 is None else np.r_[u0, np.zeros(s_rows.size)]
    if warm is not None:
        y0 = np.r_[np.asarray(warm[0], dtype=float), np.asarray(warm[1], dtype=float)[order]]
    st = _PdhgRun(
        cost, a_full, best, rounds, certify, eta, gap, deadline, batch, round_steps, near,
        s_rows, x_rows, y_rows, keys, x0, y0,
    )  # fmt: skip
    st.late = late
    if warm is not None:
        st.omega, st.warm = warm[2], True
    # The bound of the mechanism without privacy (every row on its cheapest outputs, the rest at the
    # floor): u = the row minima, no pair multiplier. Never negative; PDHG's early points can be.
    u_min = cost.min(axis=1)
    lb, lb0 = _pkg.dual_bound(cost, u_min, np.zeros(0), *(np.zeros(0, dtype=np.int64),) * 3, np.zeros(0), eta=eta)
    if lb > best["lb"]:
        best.update(lb=lb, lb0=max(best["lb0"], lb0), u=u_min)
    reason = "max rounds"
    for _ in range(max_rounds):
        stop = _pdhg_round(st)
        if stop is not None:
            reason = stop
            break
    if st.last_u is not None:
        omega = None if st.omega is None else float(st.omega)
        best["pdhg_state"] = {"u": st.last_u, "omega": omega}
    return reason, st.solved_rows, st.pending


def _pdhg_round(st: _PdhgRun) -> str | None:
    """One PDHG round: solve, certify (within its budget), then the next LP's rows; returns a stop reason or None."""
    k, m = st.cost.shape
    remaining = st.deadline - time.perf_counter() - st.tail_s(prior=False)
    if remaining <= 0 and st.rounds:  # the first round always runs (>= 64 steps): a matrix to return
        return "time limit"
    tr = time.perf_counter()
    coef = st.a_full[st.s_rows, st.x_rows]
    run, round_best, bound = _pdhg_solve(st, coef, remaining)
    st.round_time = run.time_s
    st.x0, st.omega, st.step_size = run.x, run.omega, run.step_size
    st.last_u = np.asarray(run.y[:k], dtype=float)
    st.steps_done += run.iterations
    st.solved_rows = (st.s_rows, st.x_rows, st.y_rows, np.clip(run.y[k:], 0.0, None))
    z, u = run.x.reshape(m, k).T, run.y[:k]
    entry: dict = {"rows": int(k + st.s_rows.size), "status": "pdhg", "iterations": run.iterations, "steps": run.steps}
    entry["solve_s"] = run.time_s
    st.rounds.append(entry)
    st.work_s += time.perf_counter() - tr
    left = st.deadline - time.perf_counter() - st.tail_s()  # for more PDHG, a certificate kept back
    # The last round: not even a quarter of a round fits any more. A shorter stub would cost a
    # certificate more than it gives; a longer one runs, and is the last (certified) instead.
    last_chance = left < _pkg._LAST_ROUND_MIN * st.round_time
    # The certificate of a round (the best pair multipliers for PDHG's row-sum multipliers, then an
    # exact repair) serves only the final answer and an early stop, so between rounds it gets at
    # most CERTIFICATE_SHARE of the time, and none just before the last round; the last round is
    # always certified. The first round's point is far off (its certificate would bound little), unless warm.
    near_point = len(st.rounds) > 1 or st.warm
    budget = near_point and left >= st.round_time and st.cert_s <= _pkg.CERTIFICATE_SHARE * st.work_s
    if last_chance or run.stopped_by_callback or budget:
        _pdhg_certify(st, run, coef, round_best, bound, z, u)
    else:
        st.pending = (z, u)
    best = st.best
    current_gap = (best["ub"] - best["lb"]) / best["ub"] if np.isfinite(best["ub"]) else np.inf
    entry.update(lower=best["lb"], upper=best["ub"], gap=current_gap, certified=st.pending is None)
    if current_gap <= st.gap:
        return "gap reached"
    if last_chance:
        return "time limit"
    _pdhg_next_rows(st, run, z, coef, entry)
    return None


def _pdhg_solve(st: _PdhgRun, coef: np.ndarray, remaining: float) -> tuple[Any, dict[str, Any], Callable[..., bool]]:
    """Run the round's PDHG steps on the current rows, warm; returns PDHG's result, the round's best ``u`` and bound.

    The bound (``bound(x, y)``) keeps the bound of every checked dual point, in the run's best and in the
    round's own best (``{"own": value, "u": row-sum multipliers}``).
    """
    k, m = st.cost.shape
    n_cols = k * m
    a = sp.vstack([st.sums, -_pair_matrix(st.s_rows, st.x_rows, st.y_rows, coef, m, n_cols, output_major=True)]).tocsr()
    b = np.r_[np.ones(k), np.zeros(st.s_rows.size)]

    # This round's row-sum multipliers with the best bound of PDHG's own dual point: the pair
    # multipliers are computed for these. Along a round the value of u rises and falls again, and
    # PDHG's own bound follows it, lagging: so the round's best u is kept, not its last.
    round_best: dict[str, Any] = {"own": -np.inf, "u": None}
    best = st.best

    # The round's rows and best as defaults: tests read the rows from ``on_check.__defaults__[0]``.
    def bound(
        x: np.ndarray, y: np.ndarray, rows: tuple = (st.s_rows, st.x_rows, st.y_rows, coef), mine: dict = round_best
    ) -> bool:
        """Keep the bound of the dual point ``y``; True once the gap is met."""
        lb, lb0 = _pkg.dual_bound(st.cost, y[:k], y[k:], *rows, eta=st.eta)
        if lb >= mine["own"]:
            mine.update(own=lb, u=y[:k].copy())
        if lb > best["lb"]:
            best.update(lb=lb, u=y[:k].copy())
        best["lb0"] = max(best["lb0"], lb0)
        return bool(np.isfinite(best["ub"]) and best["ub"] - best["lb"] <= st.gap * best["ub"])

    run = _pkg.pdhg(
        st.cost_om,
        a,
        b,
        k,
        np.full(n_cols, st.eta),
        np.ones(n_cols),
        time_limit_s=max(remaining, 0.0),
        max_iterations=st.steps,
        x0=st.x0,
        y0=st.y0,
        omega=st.omega,
        step_size=st.step_size,
        steps_before=st.steps_done,
        on_check=bound,
        callback_every_steps=_pkg._BOUND_EVERY_STEPS,  # by steps, not seconds: reproducible
        dtype=np.float32,  # the bound is evaluated in float64 (valid for any multipliers)
        scheme=_pkg.PDHG_SCHEME,
        blocks=(k, m),  # output-major, rows sorted by output: Halpern's steps run compiled
    )
    bound(run.x, run.y)
    return run, round_best, bound


def _pdhg_certify(
    st: _PdhgRun,
    run: Any,
    coef: np.ndarray,
    round_best: dict[str, Any],
    bound: Callable[..., bool],
    z: np.ndarray,
    u: np.ndarray,
) -> None:
    """Certify a PDHG round: the best pair multipliers for its best ``u`` (a bound), then an exact repair of ``z``."""
    tc = time.perf_counter()
    if not run.stopped_by_callback:
        # One small LP per output: a far stronger bound than PDHG's own pair multipliers,
        # which lag its row-sum multipliers (docs/benchmarks.md).
        # Outputs not started by st.late (past the deadline) keep PDHG's own multipliers.
        u_best, k = round_best["u"], st.cost.shape[0]
        late = st.late if np.isfinite(st.late) else None
        lam_u, solved = _pkg.best_pair_multipliers(
            st.cost, u_best, st.s_rows, st.x_rows, st.y_rows, coef, eta=st.eta, deadline=late, fallback=run.y[k:]
        )
        bound(run.x, np.r_[u_best, lam_u])
        st.rounds[-1]["multiplier_outputs"] = solved
        if solved == np.unique(st.y_rows).size:  # a whole set measured
            st.tail["multipliers per row"] = (time.perf_counter() - tc) / max(st.s_rows.size, 1)
    tp = time.perf_counter()
    st.certify(z, u)
    st.tail["repair"] = time.perf_counter() - tp
    st.cert_s += time.perf_counter() - tc
    st.pending = None


def _pdhg_next_rows(st: _PdhgRun, run: Any, z: np.ndarray, coef: np.ndarray, entry: dict) -> None:
    """Make the next round's LP: slack rows with multiplier 0 leave (once), violated rows join; warm duals."""
    k, m = st.cost.shape
    y_pairs = run.y[k:]
    drop_slack = _pkg.PDHG_DROP_SLACK
    if drop_slack is not None:
        zc = np.maximum(z, st.eta)
        allowance = coef * zc[st.x_rows, st.y_rows]
        drop = (y_pairs <= 0.0) & (allowance - zc[st.s_rows, st.y_rows] > drop_slack * allowance)
        row_keys = (st.s_rows * k + st.x_rows) * m + st.y_rows
        drop &= ~np.isin(row_keys, st.dropped_keys)  # once: dropping the same rows again churned
        if drop.any():
            st.keys = np.setdiff1d(st.keys, row_keys[drop], assume_unique=True)
            st.dropped_keys = np.union1d(st.dropped_keys, row_keys[drop])
            st.s_rows, st.x_rows, st.y_rows, y_pairs = (v[~drop] for v in (st.s_rows, st.x_rows, st.y_rows, y_pairs))
        entry["rows_dropped"] = int(drop.sum())
    cap = max(1, int(st.batch * k * m))
    ns, nx, ny, new_keys = _new_rows(
        np.maximum(z, st.eta).astype(np.float32), st.a_sep, st.keys, cap, min_score=_pkg.PDHG_SEPARATION_REL,
        near=st.near,
    )  # fmt: skip
    entry["rows_added"] = int(ns.size)
    if ns.size < _pkg._GROW_BELOW * st.s_rows.size:  # few new rows: the LP settles, let PDHG run longer
        st.steps = min(2 * st.steps, _pkg._MAX_GROWTH * st.round_steps)
    st.keys = np.union1d(st.keys, new_keys)
    s_rows, x_rows, y_rows = np.r_[st.s_rows, ns], np.r_[st.x_rows, nx], np.r_[st.y_rows, ny]
    order = np.lexsort((x_rows, s_rows, y_rows))
    st.s_rows, st.x_rows, st.y_rows = s_rows[order], x_rows[order], y_rows[order]
    st.y0 = np.r_[run.y[:k], np.r_[y_pairs, np.zeros(ns.size)][order]]
