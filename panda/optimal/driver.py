"""The driver: :func:`solve_optimal`, its checks and setup, the simplex loop and the result."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import panda.optimal as _pkg
from panda.optimal.near import _Near
from panda.optimal.result import OptimalResult
from panda.optimal.steps import (
    Certify,
    _pdhg_rounds,
    _simplex_certificate,
    _simplex_grow,
    _simplex_solve,
    _SimplexLP,
)
from panda.optimal.warm import WarmStart, warm_duals, warm_start_of


def solve_optimal(
    cost: np.ndarray,
    d_km: np.ndarray,
    epsilon_per_km: float,
    *,
    eta: float = 1e-6,
    gap: float = 0.005,
    time_limit_s: float = 300.0,
    method: str = "simplex",
    batch: float = 0.1,
    seed_sources: np.ndarray | None = None,
    seed_rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    max_rounds: int = 10_000,
    drop_share: float = 0.0,
    start_matrix: np.ndarray | None = None,
    round_steps: int | None = None,
    warm: OptimalResult | None = None,
) -> OptimalResult:
    """Solve the optimal eps-mDP LP to a certified gap (see the module docstring).

    Parameters
    ----------
    cost
        ``(K, M)`` objective coefficients (prior times utility cost, metres).
    d_km
        ``(K, K)`` privacy distances between the records, km (a metric).
    epsilon_per_km
        The budget.
    eta
        Floor on every entry, in ``(0, 1/M)``.
    gap
        Stop once ``(upper - lower) / upper <= gap`` (``0``: run until no row is violated; the run
        then counts as solved with a gap up to :data:`EXACT_GAP`, the repair's rounding).
    time_limit_s
        Wall-time budget for everything, seconds. ``"pdhg"``: PDHG keeps back the expected cost of the last
        round's certificate; its pair multipliers stop :data:`CERTIFICATE_GRACE` of the budget past it at the
        latest (the outputs left keep PDHG's own), and its exact repair always runs.
    method
        ``"simplex"``: warm dual simplex with Devex pricing after every batch of new rows;
        ``"ipm"``: interior point without crossover, every round afresh.
    batch
        At most ``batch * K * M`` new rows per round (the most violated, relatively).
    seed_sources
        ``(M,)`` record of each output: the first round writes ``z[seed, y] <= a z[x, y]`` for every
        ``x`` (``None``: no pair row at first).
    seed_rows
        ``(s, x, y)``: further pair rows ``z[s, y] <= a z[x, y]`` for the first LP (e.g. a coarser
        level's binding rows mapped to these records); rows implied by the floor, ``s == x`` and
        duplicates are dropped.
    max_rounds
        Safety cap on the rounds.
    drop_share
        ``"simplex"`` only: after a round, delete the pair rows that are slack (multiplier 0, slack
        above 1e-6 relative) when they are more than this share of the LP's pair rows; deleted rows
        may be found violated and added again later. ``0``: never delete (the default). Smaller
        LPs, cheaper but more rounds (docs/benchmarks.md); the bounds stay proven either way.
    start_matrix
        ``"pdhg"`` only: a ``(K, M)`` row-stochastic matrix to start from (e.g. the exponential
        mechanism); the row-sum multipliers start at its rows' costs. ``None``: zeros.
    round_steps
        ``"pdhg"`` only: PDHG steps between two separations (``None``: :func:`pdhg_round_steps`).
    warm
        An earlier result on the same ``cost`` and ``d_km`` at another eps (best: the nearest one) to
        start from (:mod:`panda.optimal.warm`): its last pair rows join the first LP, its matrix,
        repaired exactly at this eps, is the first upper bound (and PDHG's primal start, instead of
        ``start_matrix``), its multipliers start PDHG's dual and give a first lower bound. ``None``
        (the default): a cold start. The certificate does not depend on the start.
    """
    t0 = time.perf_counter()
    cost, d, round_steps = _checked(cost, d_km, eta, gap, method, drop_share, round_steps, start_matrix, batch)
    k, m = cost.shape
    exponent, a_full, near = _prepared(d, epsilon_per_km, eta, m)
    ws = None if warm is None else warm_start_of(warm, cost, a_full, epsilon_per_km, method)
    rows = _seeded(seed_sources, _with_carried_rows(seed_rows, ws), a_full, m)
    keys = np.sort((rows[0] * k + rows[1]) * m + rows[2])
    rounds: list[dict] = []
    best: dict[str, Any] = {"ub": np.inf, "lb": -np.inf, "lb0": -np.inf, "matrix": None, "repair": {}}
    certify = _certifier(cost, exponent, eta, near, best)
    warm_info, pdhg_warm = (None, None) if ws is None else _warm_begin(ws, cost, a_full, rows, eta, certify, best)
    if ws is not None and method == "pdhg":
        start_matrix = best["matrix"]  # the earlier mechanism, exactly feasible at this eps
    last_rows: tuple[np.ndarray, ...] | None
    if method == "pdhg":
        reason, last_rows, pending = _pdhg_rounds(
            cost, a_full, rows, keys, best, rounds, certify, eta=eta, gap=gap,
            deadline=t0 + time_limit_s, batch=batch, round_steps=int(round_steps), start_matrix=start_matrix,
            near=near, max_rounds=max_rounds, warm=pdhg_warm, late=t0 + (1.0 + _pkg.CERTIFICATE_GRACE) * time_limit_s,
        )  # fmt: skip
        n_pair_rows = int(last_rows[0].size)
    else:
        reason, last_rows, pending, n_pair_rows = _simplex_run(
            cost, a_full, eta, method, rows, keys, best, rounds, certify, t0=t0, time_limit_s=time_limit_s,
            max_rounds=max_rounds, gap=gap, batch=batch, drop_share=drop_share, near=near,
        )  # fmt: skip
    if pending is not None:  # the last relaxation's solution was not repaired yet
        certify(*pending)
    return _result(
        best, rounds, reason, last_rows, t0, gap=gap, method=method, batch=batch, drop_share=drop_share,
        n_pair_rows=n_pair_rows, epsilon_per_km=epsilon_per_km, eta=eta, warm_info=warm_info,
    )  # fmt: skip


def _with_carried_rows(
    seed_rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None, ws: WarmStart | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Return ``seed_rows`` with the warm start's last pair rows after them (``seed_rows`` without a warm start)."""
    if ws is None:
        return seed_rows
    if seed_rows is None:
        return ws.rows
    return tuple(np.r_[mine, carried] for mine, carried in zip(seed_rows, ws.rows, strict=True))


def _simplex_run(
    cost: np.ndarray,
    a_full: np.ndarray,
    eta: float,
    method: str,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray],
    keys: np.ndarray,
    best: dict[str, Any],
    rounds: list[dict],
    certify: Certify,
    *,
    t0: float,
    time_limit_s: float,
    max_rounds: int,
    gap: float,
    batch: float,
    drop_share: float,
    near: _Near | None,
) -> tuple[str, tuple[np.ndarray, ...] | None, tuple[np.ndarray, np.ndarray] | None, int]:
    """Run the rounds on HiGHS (:func:`_simplex_rounds`) from a fresh LP of the first pair rows ``rows``.

    Returns the reason they stopped, the last LP's pair rows, the solution still to certify and the LP's pair rows.
    """
    lp = _SimplexLP(cost, a_full, eta, method, *rows, keys, best, rounds)
    lp.h = lp.fresh()
    reason = _simplex_rounds(
        lp, certify, t0=t0, time_limit_s=time_limit_s, max_rounds=max_rounds, gap=gap, batch=batch,
        drop_share=drop_share, near=near,
    )  # fmt: skip
    return reason, lp.last_rows, lp.pending, int(lp.s_rows.size)


def _warm_begin(
    ws: WarmStart,
    cost: np.ndarray,
    a_full: np.ndarray,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray],
    eta: float,
    certify: Certify,
    best: dict[str, Any],
) -> tuple[dict[str, Any], tuple[np.ndarray, np.ndarray, float | None]]:
    """Start from ``ws``: its matrix repaired exactly (the first upper bound), its multipliers' bound.

    Returns the facts for ``info["warm"]`` and PDHG's dual start ``(u, lam of rows, omega)``.
    """
    k, m = cost.shape
    tw = time.perf_counter()
    certify(ws.matrix, ws.u)
    s, x, y = rows
    lam = warm_duals(ws, s, x, y, k, m)
    # Any multipliers give a bound (weak duality): the earlier ones, at this eps's coefficients.
    lb, lb0 = _pkg.dual_bound(cost, ws.u, lam, s, x, y, a_full[s, x], eta=eta)
    if lb > best["lb"]:
        best.update(lb=lb, u=ws.u.copy())
    best["lb0"] = max(best["lb0"], lb0)
    info = {
        "epsilon_from": ws.epsilon_from,
        "rows_carried": int(ws.rows[0].size),
        "start_upper": float(best["ub"]),
        "start_lower": float(lb),
        "repair_kind": best["repair"].get("kind"),
        "setup_s": time.perf_counter() - tw,
    }
    return info, (ws.u, lam, ws.omega)


def _checked(
    cost: np.ndarray,
    d_km: np.ndarray,
    eta: float,
    gap: float,
    method: str,
    drop_share: float,
    round_steps: int | None,
    start_matrix: np.ndarray | None,
    batch: float,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Check :func:`solve_optimal`'s parameters (raise ValueError); return ``cost``, ``d`` and ``round_steps``."""
    cost = np.asarray(cost, dtype=float)
    if cost.ndim != 2:
        msg = f"The 'cost' parameter of solve_optimal must be a 2-D array. Got shape {cost.shape} instead."
        raise ValueError(msg)
    k, m = cost.shape
    d = np.asarray(d_km, dtype=float)
    if d.shape != (k, k):
        msg = f"The 'd_km' parameter of solve_optimal must be a ({k}, {k}) array. Got shape {d.shape} instead."
        raise ValueError(msg)
    if not (0.0 < eta < 1.0 / m):
        msg = f"The 'eta' parameter of solve_optimal must be in (0, 1/M) = (0, {1.0 / m:.3g}). Got {eta!r} instead."
        raise ValueError(msg)
    if not (0.0 <= gap < 1.0):
        msg = f"The 'gap' parameter of solve_optimal must be a float in [0, 1). Got {gap!r} instead."
        raise ValueError(msg)
    if method not in _pkg.METHODS:
        msg = f"The 'method' parameter of solve_optimal must be one of {_pkg.METHODS}. Got {method!r} instead."
        raise ValueError(msg)
    if not (0.0 <= drop_share < 1.0):
        msg = f"The 'drop_share' parameter of solve_optimal must be a float in [0, 1). Got {drop_share!r} instead."
        raise ValueError(msg)
    if round_steps is None:
        round_steps = _pkg.pdhg_round_steps(k)
    if isinstance(round_steps, bool) or not isinstance(round_steps, int | np.integer) or round_steps < 1:
        msg = f"The 'round_steps' parameter of solve_optimal must be a positive integer. Got {round_steps!r} instead."
        raise ValueError(msg)
    if start_matrix is not None and np.shape(start_matrix) != (k, m):
        shape = np.shape(start_matrix)
        msg = f"The 'start_matrix' parameter of solve_optimal must be a ({k}, {m}) array. Got shape {shape} instead."
        raise ValueError(msg)
    if not (0.0 < batch <= 1.0):
        msg = f"The 'batch' parameter of solve_optimal must be a float in (0, 1]. Got {batch!r} instead."
        raise ValueError(msg)
    return cost, d, round_steps


def _prepared(d: np.ndarray, epsilon_per_km: float, eta: float, m: int) -> tuple[np.ndarray, np.ndarray, _Near | None]:
    """Return the exponents ``eps d``, the pair coefficients ``a_full`` (``inf``: no row) and the near lists."""
    k = d.shape[0]
    exponent = float(epsilon_per_km) * d
    a_full = np.where(exponent < -np.log(eta), np.exp(np.minimum(exponent, 700.0)), np.inf)
    np.fill_diagonal(a_full, np.inf)
    # Each record's records within the floor radius (and a little more): the repair and the separation
    # look at those pairs only, with the same results (a far pair cannot bind; see _Near's users).
    # On a city where most pairs are near (mean above K / 2) the gathers cost more than they save
    # (bench/bench_repair.py times both ways), so all pairs are used.
    threshold = np.log(2.0 / eta)
    dense_city = (exponent < threshold).sum() - k > 0.5 * k * k
    near = None if dense_city or not np.array_equal(exponent, exponent.T) else _Near.build(exponent, threshold, m)
    return exponent, a_full, near


def _seeded(
    seed_sources: np.ndarray | None,
    seed_rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    a_full: np.ndarray,
    m: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the first LP's pair rows ``(s, x, y)`` from ``seed_sources`` and ``seed_rows`` (checked)."""
    k = a_full.shape[0]
    if seed_sources is not None:
        src = np.asarray(seed_sources, dtype=np.int64)
        yy, xx = (g.ravel() for g in np.meshgrid(np.arange(m), np.arange(k), indexing="ij"))
        ss = src[yy]
        ok = np.isfinite(a_full[ss, xx])
        s_rows, x_rows, y_rows = ss[ok], xx[ok], yy[ok]
    else:
        s_rows = x_rows = y_rows = np.zeros(0, dtype=np.int64)
    if seed_rows is not None:
        extra = [np.asarray(v, dtype=np.int64).ravel() for v in seed_rows]
        if len(extra) != 3 or not (extra[0].size == extra[1].size == extra[2].size):
            msg = "The 'seed_rows' parameter of solve_optimal must be three equally long index arrays (s, x, y)."
            raise ValueError(msg)
        es, ex, ey = extra
        if es.size and (min(es.min(), ex.min(), ey.min()) < 0 or max(es.max(), ex.max()) >= k or ey.max() >= m):
            msg = f"The 'seed_rows' parameter of solve_optimal must index records < {k} and outputs < {m}."
            raise ValueError(msg)
        s_rows, x_rows, y_rows = np.r_[s_rows, es], np.r_[x_rows, ex], np.r_[y_rows, ey]
        ok = np.isfinite(a_full[s_rows, x_rows])
        _, first = np.unique(((s_rows * k + x_rows) * m + y_rows)[ok], return_index=True)
        s_rows, x_rows, y_rows = (v[ok][np.sort(first)] for v in (s_rows, x_rows, y_rows))
    return s_rows, x_rows, y_rows


def _certifier(cost: np.ndarray, exponent: np.ndarray, eta: float, near: _Near | None, best: dict[str, Any]) -> Certify:
    """Make the run's certificate step: ``certify(z, u)`` repairs ``z`` exactly, keeps the best matrix in ``best``."""
    source_tol = 1e-9 * float(np.abs(cost).max(initial=0.0))

    def certify(z: np.ndarray, u: np.ndarray) -> None:
        """Repair ``z`` exactly (sources: its entries with negative ``cost - u``); keep the best so far."""
        sources = cost - u[:, None] < source_tol
        matrix, repair = _pkg.exact_repair(z, exponent, eta=eta, cost=cost, sources=sources, near=near)
        ub = float((cost * matrix).sum())
        if ub < best["ub"]:
            best.update(ub=ub, matrix=matrix, repair=repair)

    return certify


def _simplex_rounds(
    lp: _SimplexLP,
    certify: Certify,
    *,
    t0: float,
    time_limit_s: float,
    max_rounds: int,
    gap: float,
    batch: float,
    drop_share: float,
    near: _Near | None,
) -> str:
    """Generate rows on HiGHS (simplex or interior point): solve, bound, separate, repair, add; return the reason."""
    reason = "max rounds"
    for _ in range(max_rounds):
        remaining = time_limit_s - (time.perf_counter() - t0)
        if remaining <= 0:
            reason = "time limit"
            break
        tr = time.perf_counter()
        entry, stop = _simplex_solve(lp, remaining, tr)
        if stop == "retry":
            continue
        if stop is not None:
            reason = stop
            break
        lp.rebuilt = False
        used_fallback, lp.fallback = lp.fallback, False
        z, duals, new = _simplex_certificate(lp, entry, certify, tr, batch=batch, near=near)
        if entry["gap"] <= gap:
            reason = "gap reached"
            break
        if new[0].size == 0:
            reason = "no violated row"
            break
        _simplex_grow(lp, entry, z, duals, new, drop_share=drop_share, used_fallback=used_fallback)
    return reason


def _result(
    best: dict[str, Any],
    rounds: list[dict],
    reason: str,
    last_rows: tuple[np.ndarray, ...] | None,
    t0: float,
    *,
    gap: float,
    method: str,
    batch: float,
    drop_share: float,
    n_pair_rows: int,
    epsilon_per_km: float,
    eta: float,
    warm_info: dict[str, Any] | None,
) -> OptimalResult:
    """Build the :class:`OptimalResult` of a run from its best bounds and matrix, with what a warm start needs."""
    ub, lb = best["ub"], best["lb"]
    final_gap = (ub - lb) / ub if np.isfinite(ub) and np.isfinite(lb) else float("inf")
    res = OptimalResult(
        matrix=best["matrix"],
        upper_bound=float(ub),
        lower_bound=float(lb),
        lower_bound_no_floor=float(best["lb0"]),
        gap=float(final_gap),
        # With no violated row left the relaxation's optimum is the LP's: the gap is rounding only.
        solved=bool(final_gap <= gap or (reason == "no violated row" and final_gap <= _pkg.EXACT_GAP)),
        reason=reason,
        rounds=rounds,
        info={
            "repair": best["repair"],
            "method": method,
            "batch": batch,
            "separation_tol": _pkg.PDHG_SEPARATION_REL if method == "pdhg" else _pkg.SEPARATION_TOL,
            "time_s": time.perf_counter() - t0,
            "n_pair_rows": n_pair_rows,
            "drop_share": drop_share,
            "row_sum_duals": best.get("u"),
            # The last solved relaxation's pair rows (s, x, y) and their multipliers (>= 0).
            "last_pair_rows": last_rows,
        },
    )
    # What a later warm start needs (panda.optimal.warm); facts only, the certificate is unchanged.
    res.info.update(epsilon_per_km=float(epsilon_per_km), eta=float(eta), warm=warm_info)
    if "pdhg_state" in best:
        res.info["pdhg_state"] = best["pdhg_state"]
    return res
