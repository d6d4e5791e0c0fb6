"""The optimal eps-mDP mechanism with a certificate: an exactly feasible mechanism and a proven bound.

The LP (Bordenabe et al. 2014) over records ``x`` (K) and outputs ``y`` (M)::

    minimise   sum_{x, y} cost[x, y] z[x, y]
    subject to sum_y z[x, y] = 1                              for every x        (row sums)
               z[s, y] <= exp(eps d(s, x)) z[x, y]            for every s != x, y (pair rows)
               eta <= z[x, y] <= 1

With the floor ``eta > 0`` a pair with ``exp(eps d) eta >= 1`` holds by the bounds and is never
written. :func:`solve_optimal` never claims more than it can prove. Whatever the solver does, the
answer carries

* an **upper bound**: the objective of a matrix that is *exactly* eps-mDP and row-stochastic,
  made so by :func:`exact_repair` (the min-plus closure or the envelope of the relaxation's
  solution, or the envelope of its sources, the entries with negative ``cost - u``; rows
  balanced through entries that can move alone, and if needed a mix with the uniform
  mechanism; every step keeps or restores exact feasibility), and
* a **lower bound**: the weak-duality value of *any* multipliers, ``u`` for the row sums and
  ``lam >= 0`` for any subset of pair rows (:func:`dual_bound`)::

      L(u, lam) = sum_x u_x + sum_{x, y} min(eta rc[x, y], rc[x, y]),
      rc = cost - u + sum of lam over the rows where (x, y) is the left end
                    - sum of exp(eps d) lam over the rows where (x, y) is the right end.

  Pair rows left out simply have ``lam = 0``: the bound holds for the whole LP, however few rows
  the multipliers come from. With ``eta`` replaced by 0 it also bounds the LP without the floor.

Algorithm (chosen by measurement, see docs/benchmarks.md): row generation per right entry.
Start from the rows that make every output's own record a source (``z[y, y] <= a z[x, y]``),
solve, and for every right entry ``(x, y)`` add the row of the left end ``s`` that violates
``z[s, y] <= exp(eps d(s, x)) z[x, y]`` most (beyond 1e-9, rows already in the LP are never added
again), at most ``batch * K * M`` rows per round ranked by relative violation, warm dual simplex
with Devex pricing. The lower bound is computed after every round, the upper bound whenever its
repair has cost at most half the solving time so far (and always at the end; the repair and the
separation look only at pairs within the floor radius, :class:`_Near`); the loop stops when
the gap reaches ``gap``, when no row is violated, or at the time limit.

``method="pdhg"`` replaces the LP solves by restarted PDHG (:mod:`panda.pdhg`, Halpern's scheme:
:data:`PDHG_SCHEME`), warm from round to round, for dense instances (many pairs within the floor
radius; ``build_lp``'s ``start="auto"`` picks it there): every PDHG dual point is a bound by the
formula above, and after a certified round the best pair multipliers for its row-sum multipliers
(:func:`best_pair_multipliers`) give a stronger one. Rounds end by steps, so a run is reproducible
up to where its deadline falls. Its points are approximate, so a row is added only when violated
by more than :data:`PDHG_SEPARATION_REL` (relative), and the run never counts as exact without
reaching ``gap``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import highspy
import numpy as np
import scipy.sparse as sp

from panda.lp import _min_plus, build_highs
from panda.pdhg import pdhg
from panda.threads import thread_map

__all__ = [
    "OptimalResult",
    "best_pair_multipliers",
    "dual_bound",
    "exact_repair",
    "separate_right",
    "pdhg_round_steps",
    "solve_optimal",
    "METHODS",
]

#: Solvers for the rounds: warm dual simplex with Devex pricing, interior point without crossover, or
#: restarted PDHG warm-started from round to round (:mod:`panda.pdhg`).
METHODS = ("simplex", "ipm", "pdhg")

#: ``method="pdhg"``: a pair row is added when its left end exceeds the right end's allowance by
#: more than this share (the PDHG point is approximate: smaller violations are its noise), and the
#: least number of PDHG steps between two separations (a round has ``2 K`` steps by default, at
#: least these: :func:`pdhg_round_steps`; measured, docs/benchmarks.md). Rounds end by steps, not
#: seconds, so a run's rounds do not depend on the machine's speed of the moment.
PDHG_SEPARATION_REL = 1e-2
PDHG_ROUND_STEPS = 1024

#: ``method="pdhg"``: the scheme of :func:`panda.pdhg.pdhg` for the rounds. Restarted reflected
#: Halpern PDHG against PDLP's adaptive step, side by side at 30 s (K = 500, 5/km, seeds 0-5): median
#: gap 1.36 against 1.76 %; 1/km: 2.19 against 3.06 %; K = 1000 at 120 s: 0.84 against 1.98 %
#: (docs/benchmarks.md, ninth pass).
PDHG_SCHEME = "halpern"

#: ``method="pdhg"``: after a round, a pair row with multiplier 0 whose left end lies below its
#: allowance by more than this share (relative, at PDHG's point) leaves the LP, once: it comes back
#: when found violated, and then stays. ``None``: rows never leave. About 70 % of the rows have
#: multiplier 0 at the end of a run, and a step's time grows with the rows; side by side at K = 500,
#: 5/km, 30 s (seeds 0-5) the median gap was 0.33 against 1.31 % without dropping; 0.1 and 0.3 churned
#: (the same rows out and in again), 0.7 kept too many (docs/benchmarks.md, tenth pass).
PDHG_DROP_SLACK: float | None = 0.5

#: ``method="pdhg"``: between rounds, the certificate (best pair multipliers and an exact repair)
#: gets at most this share of the time spent in rounds; the last round is always certified.
CERTIFICATE_SHARE = 0.25

#: ``method="pdhg"``: the bound of PDHG's dual point is computed every this many steps.
_BOUND_EVERY_STEPS = 512

#: ``method="pdhg"``: a round adding fewer rows than this share of the LP's pair rows doubles the
#: next rounds' steps, up to this many times ``round_steps``. With the compiled steps (2.2x faster)
#: shorter rounds pay: K = 500, 30 s, seeds 0-5, 5/km: every seed solved with 2 (median 12.2 s),
#: 3 of 6 with 8; 1/km: median gap 0.22 % with 2, 0.40 % with 4 (docs/benchmarks.md, twelfth pass).
_GROW_BELOW, _MAX_GROWTH = 0.05, 2

#: ``method="pdhg"``: no round starts when less than this share of the last round's time is left
#: before the deadline (after the certificate's share); the last round is certified instead.
_LAST_ROUND_MIN = 0.25

#: :func:`exact_repair` with a cost: a row's excess is drained from its costliest movable entries
#: first (a deficit filled on its cheapest), not pro rata. Any split within the entries' room keeps
#: every pair row (the room is computed before any move), so this only lowers the cost: K = 500,
#: 5/km, 30 s, seeds 0-2: loss 268.56 / 264.45 / 290.03 m against 269.07 / 264.63 / 290.60 m.
REPAIR_BY_COST = True

#: A left-out pair row counts as violated when ``z[s, y] - a z[x, y]`` exceeds this (absolute).
SEPARATION_TOL = 1e-9

#: The gap a run that ends with no violated row may show and still count as solved (rounding: the
#: repair moves entries by about HiGHS's tolerances).
EXACT_GAP = 1e-6

#: Row-sum deficits below this are treated as rounding by :func:`exact_repair`.
_SUM_TOL = 1e-12


@dataclass(frozen=True)
class OptimalResult:
    """Outcome of :func:`solve_optimal`.

    Attributes
    ----------
    matrix
        ``(K, M)`` exactly eps-mDP, row-stochastic matrix (``None`` only if no round finished).
    upper_bound
        ``sum(cost * matrix)``: the objective of ``matrix`` (``inf`` without one).
    lower_bound
        A proven lower bound on the optimum of the LP with the floor ``eta`` (``-inf`` if none).
    lower_bound_no_floor
        A proven lower bound on the optimum of the LP without the floor (``eta = 0``).
    gap
        ``(upper_bound - lower_bound) / upper_bound``.
    solved
        True when ``gap`` met the requested target.
    reason
        Why the loop stopped ("gap reached", "no violated row", "time limit", "HiGHS ...").
    rounds
        One dict per round: rows, HiGHS status and time, relaxation objective, bounds, rows added.
    info
        Repair facts of the returned matrix, separation tolerance, batch size, total time.
    """

    matrix: np.ndarray | None
    upper_bound: float
    lower_bound: float
    lower_bound_no_floor: float
    gap: float
    solved: bool
    reason: str
    rounds: list[dict] = field(default_factory=list)
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Near:
    """Every record's *near* records, ``exponent[i, j] < threshold`` (``j != i``), for min-plus over them only.

    Rows are sorted by their number of near records and cut into chunks; each chunk pads its lists to
    its own longest one (index 0 with exponent ``inf``), so the work is about the number of near pairs
    rather than ``K^2`` (Rome K = 2000 at 5/km: 71 near records of 2,000 on average).
    """

    threshold: float
    chunks: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]  # rows (b,), index (b, D), exponent (b, D)

    @classmethod
    def build(cls, exponent: np.ndarray, threshold: float, m: int, *, budget: int = 4_000_000) -> _Near:
        """Near lists of ``exponent`` (rows: the record whose entry is computed) for ``m`` outputs."""
        k = exponent.shape[0]
        mask = exponent < threshold
        np.fill_diagonal(mask, False)
        degree = mask.sum(axis=1)
        order = np.argsort(degree, kind="stable")
        chunks = []
        start = 0
        while start < k:
            end = start + 1
            while end < k and (end + 1 - start) * max(int(degree[order[end]]), 1) * m <= budget:
                end += 1
            rows = order[start:end]
            width = max(int(degree[rows].max()), 1)
            index = np.argsort(~mask[rows], axis=1, kind="stable")[:, :width]
            near = np.take_along_axis(mask[rows], index, axis=1)
            e = np.where(near, np.take_along_axis(exponent[rows], index, axis=1), np.inf)
            chunks.append((rows, np.where(near, index, 0), e))
            start = end
        return cls(float(threshold), tuple(chunks))

    def min_plus(self, w: np.ndarray) -> np.ndarray:
        """``min over near j of (exponent[i, j] + w[j, y])`` for every ``(i, y)`` (``inf`` without any)."""
        out = np.empty_like(w)

        def chunk(part: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
            rows, index, e = part
            with np.errstate(invalid="ignore"):
                out[rows] = np.fmin.reduce(e[:, :, None] + w[index], axis=1)

        thread_map(chunk, self.chunks)
        return np.where(np.isnan(out), np.inf, out)

    def covers(self, ratio: float) -> bool:
        """Tell whether every pair beyond the threshold has ``exp(exponent) >= ratio``."""
        return bool(ratio > 0 and np.isfinite(ratio) and np.log(ratio) <= self.threshold)


def _closure(
    z: np.ndarray, exponent: np.ndarray, *, exclude_self: bool = False, near: _Near | None = None
) -> np.ndarray:
    """``min_j exp(exponent[i, j]) z[j, y]`` (the largest matrix below ``z`` meeting every pair row).

    ``near`` (lists of ``exponent``) is used when it gives the same result: with the self term and
    ``exp(exponent) >= max z / min z`` beyond its threshold, no far term can be below ``z[i, y]``.
    """
    with np.errstate(divide="ignore"):
        log_z = np.log(z)
    low = float(z.min())
    if near is not None and not exclude_self and low > 0 and near.covers(float(z.max()) / low):
        return np.exp(np.fmin(near.min_plus(log_z), log_z))
    return np.exp(_min_plus(log_z, exponent, exclude_self=exclude_self))


def _envelope(
    z: np.ndarray, exponent: np.ndarray, *, exclude_self: bool = False, floor: float = 0.0, near: _Near | None = None
) -> np.ndarray:
    """``max(floor, max_j exp(-exponent[j, i]) z[j, y])``: the least matrix above ``z``, ``floor`` and every pair row.

    ``near`` (lists of ``exponent.T``) is used when it gives the same result: with ``floor > 0`` and
    ``exp(exponent) >= max z / floor`` beyond its threshold, every far term is at most the floor.
    """
    with np.errstate(divide="ignore"):
        neg_log = -np.log(z)
    if near is not None and floor > 0 and near.covers(float(z.max()) / floor):
        out = near.min_plus(neg_log)
        if not exclude_self:
            out = np.fmin(out, neg_log)
    else:
        out = _min_plus(neg_log, exponent.T, exclude_self=exclude_self)
    return np.maximum(np.exp(-out), floor)


def _greedy_take(room: np.ndarray, want: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Take ``want[i]`` from row ``i`` of ``room``, entries in ``order`` first (each at most its room)."""
    ranked = np.take_along_axis(room, order, axis=1)
    before = np.cumsum(ranked, axis=1) - ranked
    taken = np.clip(want[:, None] - before, 0.0, ranked)
    out = np.empty_like(room)
    np.put_along_axis(out, order, taken, axis=1)
    return out


def _balance(
    z: np.ndarray,
    exponent: np.ndarray,
    *,
    up: bool,
    max_passes: int,
    floor: float = 0.0,
    near: _Near | None = None,
    cost: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Move each row's sum to 1 through entries that can move alone without breaking a pair row.

    ``up``: fill deficits on entries below ``min_j exp(e_ij) z[j, y]`` (raising an entry only
    loosens the rows where it is the right end). Otherwise drain excesses from entries above
    ``max_j exp(-e_ji) z[j, y]`` (lowering an entry only loosens the rows where it is the left end).
    All rows move at once: each one's move stays within limits computed before any move. No entry
    is drained below ``floor``. With ``cost`` (and :data:`REPAIR_BY_COST`) a row drains its costliest
    entries first and fills its cheapest first; without, every entry moves by the same share of its room.
    """
    # The order a row's entries move in (costliest drained first, cheapest filled first): once, not per pass.
    order = np.argsort(cost if up else -cost, axis=1, kind="stable") if cost is not None and REPAIR_BY_COST else None
    passes = 0
    for passes in range(1, max_passes + 1):  # noqa: B007 (reported)
        off = (1.0 - z.sum(axis=1)) if up else (z.sum(axis=1) - 1.0)
        if off.max() <= _SUM_TOL:
            passes -= 1
            break
        if up:
            room = np.clip(_closure(z, exponent, exclude_self=True) - z, 0.0, None)
        else:
            room = np.clip(z - _envelope(z, exponent, exclude_self=True, floor=floor, near=near), 0.0, None)
        total = room.sum(axis=1)
        take = np.minimum(np.clip(off, 0.0, None), total)
        if take.max() <= _SUM_TOL:
            break
        if order is not None:
            move = _greedy_take(room, take, order)
            z = z + move if up else z - move
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(total > 0, take / total, 0.0)
        z = z + room * share[:, None] if up else z - room * share[:, None]
    return z, passes


def _source_envelope(
    z: np.ndarray, exponent: np.ndarray, sources: np.ndarray, eta: float, *, settle: int = 10, near: _Near | None = None
) -> np.ndarray:
    """``max(eta, max_s exp(-exponent[s, i]) z[s, y])`` over the sources ``s`` of each output ``y`` only.

    The envelope adds mass (row sums up to 7 at K = 500, eps = 5/km, and 33 at eps = 1/km from a
    relaxation's solution: more than the drain removes in its passes), so it is then scaled to unit
    row sums and enveloped again, up to ``settle`` times, until no row sum exceeds 1.01. Every pass
    is exactly feasible; the row sums fall towards 1 (1.04 after 3 passes, 1.005 after 10).
    """
    out = _envelope(np.where(sources, z, 0.0), exponent, floor=eta, near=near)
    for _ in range(settle):
        if out.sum(axis=1).max() <= 1.01:
            break
        out = _envelope(out / out.sum(axis=1, keepdims=True), exponent, floor=eta, near=near)
    return out


def exact_repair(
    z: np.ndarray,
    exponent: np.ndarray,
    *,
    eta: float = 0.0,
    cost: np.ndarray | None = None,
    max_passes: int = 10,
    sources: np.ndarray | None = None,
    near: _Near | None = None,
) -> tuple[np.ndarray, dict]:
    """Turn any nonnegative matrix into an exactly feasible, row-stochastic one near it.

    ``exponent`` must be a closed exponent matrix (``eps * d`` for a metric ``d``: zero diagonal,
    symmetric, triangle inequality). Two candidates are built, each keeping every pair row exact at
    every step, and the cheaper under ``cost`` is returned (``"down"`` without ``cost``); with
    ``sources`` they are *up* and *sources* (*down* never won on a relaxation's solution, K = 100 to
    1000, and costs a third of the repair):

    * *down*: the min-plus closure ``Z[i, y] = min_j exp(e_ij) z[j, y]`` (the largest matrix below
      ``z`` meeting every pair row), then each row's deficit filled on entries with headroom
      (raising an entry only loosens the rows where it is the right end);
    * *up*: the envelope ``Z[i, y] = max_j exp(-e_ji) z[j, y]`` (the smallest matrix above ``z``
      meeting every pair row), then each row's excess drained from entries above their
      neighbours' envelope (lowering an entry only loosens the rows where it is the left end).
      A relaxation's solution mostly violates pair rows by entries *too low*: this one moves less.
    * *sources* (only with ``sources``, a ``(K, M)`` mask): the envelope of the masked entries
      alone, ``Z[i, y] = max(eta, max_s exp(-e_si) z[s, y])`` over the sources ``s`` of output
      ``y``, then drained like *up*. At the LP's optimum the left ends of the binding pair rows are
      exactly the entries with negative reduced cost ``cost - u`` (the sources) and every other
      entry is the floor or a source's cone, so with ``sources = cost - u < 0`` from a relaxation's
      row-sum duals ``u`` this rebuilds the mechanism from the entries that hold it up, leaving out
      the entries a relaxation lets jump (measured in docs/benchmarks.md).

    Entries clipped at ``eta`` stay ``>= eta`` (the result is feasible for the floored LP). If a
    row cannot be balanced, the rows are normalised (small violations) and mixed with the uniform
    mechanism, ``(1 - theta) Z + theta / M``, with the smallest ``theta`` that makes every pair
    row hold (the uniform mechanism has slack ``(exp(e_ij) - 1) / M`` on every pair) and keeps
    the floor, so the result is always exactly feasible. ``near`` (a :class:`_Near` of the
    exponent, which is symmetric) only makes it faster: every step that uses it gives the same
    result as over all pairs.

    Returns
    -------
    matrix, info
        ``info``: ``max_log_excess_before``, ``kind`` (the candidate returned), per candidate its
        ``passes``, ``imbalance_after_moves``, ``theta`` and (with ``cost``) ``objective``.
    """
    z = np.maximum(np.asarray(z, dtype=float), eta if eta > 0 else 0.0)
    z = z / z.sum(axis=1, keepdims=True)
    e = np.asarray(exponent, dtype=float)
    down = _closure(z, e, near=near)
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = float(np.nan_to_num(np.log(z) - np.log(down), nan=0.0, posinf=np.inf).max())
    info: dict = {"max_log_excess_before": excess}
    if excess <= 0.0:
        return z, info | {"kind": "none"}
    if sources is None:
        starts = [("down", down), ("up", _envelope(z, e, floor=eta, near=near))]
    else:
        mask = np.asarray(sources, dtype=bool)
        if mask.shape != z.shape:
            msg = f"The 'sources' parameter of exact_repair must be a {z.shape} mask. Got shape {mask.shape} instead."
            raise ValueError(msg)
        up = _envelope(z, e, floor=eta, near=near)
        starts = [("up", up), ("sources", _source_envelope(z, e, mask, eta, near=near))]
    out = {}
    for kind, start in starts:
        bal, passes = _balance(start, e, up=kind == "down", max_passes=max_passes, floor=eta, near=near, cost=cost)
        off = float(np.abs(bal.sum(axis=1) - 1.0).max())
        theta = 0.0
        if off > _SUM_TOL:
            bal = bal / bal.sum(axis=1, keepdims=True)
            theta = _uniform_mix_weight(bal, e, near=near)
            low = float(bal.min())
            if eta > low:  # more uniform weight also lifts every entry back to the floor
                theta = max(theta, min(1.0, (eta - low) / (1.0 / bal.shape[1] - low) * (1 + 1e-9)))
            bal = (1.0 - theta) * bal + theta / bal.shape[1]
        out[kind] = bal
        info[kind] = {"passes": passes, "imbalance_after_moves": off, "theta": theta}
        if cost is not None:
            info[kind]["objective"] = float((cost * bal).sum())
    kind = starts[0][0] if cost is None else min(out, key=lambda name: info[name]["objective"])
    info["kind"] = kind
    return out[kind], info


def _uniform_mix_weight(z: np.ndarray, exponent: np.ndarray, *, near: _Near | None = None) -> float:
    """Smallest ``theta`` with ``(1 - theta) z + theta / M`` meeting every pair row (1 if none smaller).

    ``near`` (lists of ``exponent``) is used when no far pair can be violated (``exp(exponent) >=
    max z / min z`` beyond its threshold).
    """
    k, m = z.shape
    low = float(z.min())
    if near is not None and low > 0 and near.covers(float(z.max()) / low):
        blocks = ((z[rows, None, :], np.exp(e), z[index]) for rows, index, e in near.chunks)
    else:
        step = max(1, 4_000_000 // max(k * m, 1))
        blocks = ((z[s : s + step, None, :], np.exp(exponent[s : s + step]), z[None, :, :]) for s in range(0, k, step))
    ratio = 0.0
    for left, a, right in blocks:  # a: (b, D), left (b, 1, M) against right (b or 1, D, M)
        with np.errstate(invalid="ignore"):
            viol = np.clip(left - a[:, :, None] * right, 0.0, None)
        slack = (a - 1.0) / m  # uniform: a / M - 1 / M
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(viol > 0, viol / slack[:, :, None], 0.0)
        ratio = max(ratio, float(np.nan_to_num(r, nan=np.inf).max()))
    if not np.isfinite(ratio):
        return 1.0
    # Rounding: a hair more than the exact value.
    return min(1.0, ratio / (1.0 + ratio) * (1 + 1e-9) + 1e-15)


def dual_bound(
    cost: np.ndarray,
    u: np.ndarray,
    lam: np.ndarray,
    s: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    a: np.ndarray,
    *,
    eta: float,
) -> tuple[float, float]:
    """Weak-duality lower bounds from row-sum multipliers ``u`` and pair multipliers ``lam``.

    Parameters
    ----------
    cost
        ``(K, M)`` objective coefficients.
    u
        ``(K,)`` multipliers of the row sums (any sign).
    lam
        Multipliers of the pair rows ``z[s, y] - a z[x, y] <= 0``; negative values are clipped to 0.
    s, x, y, a
        The rows' left record, right record, output and coefficient ``exp(eps d(s, x))``.
    eta
        The floor on every entry.

    Returns
    -------
    bound, bound_no_floor
        Lower bounds on the LP with the floor ``eta`` and on the LP without it.
    """
    rc = np.asarray(cost, dtype=float) - np.asarray(u, dtype=float)[:, None]
    lam = np.clip(np.asarray(lam, dtype=float), 0.0, None)
    k, m = rc.shape
    flat = rc.ravel()  # a view: the sums land in rc
    flat += np.bincount(s * m + y, weights=lam, minlength=k * m)
    flat -= np.bincount(x * m + y, weights=a * lam, minlength=k * m)
    neg = np.minimum(rc, 0.0).sum()
    total = float(np.sum(u))
    return total + float(neg + eta * np.clip(rc, 0.0, None).sum()), total + float(neg)


def best_pair_multipliers(
    cost: np.ndarray, u: np.ndarray, s: np.ndarray, x: np.ndarray, y: np.ndarray, a: np.ndarray, *, eta: float
) -> np.ndarray:
    """Find the pair-row multipliers that maximise :func:`dual_bound` for fixed row-sum multipliers ``u``.

    With ``u`` fixed the bound separates by output: for each ``y`` the dual of
    ``min (cost[:, y] - u) . v  s.t.  v[s] <= a v[x] (its rows), eta <= v <= 1`` (one small LP per
    output, HiGHS dual simplex). Its multipliers, put into :func:`dual_bound`, give the Lagrangian
    value of ``u`` over these rows, computed by our own weak-duality formula (so HiGHS's tolerances
    cannot make it unsound). Returns one multiplier ``>= 0`` per row (0 where an output's LP failed).
    """
    k, m = cost.shape
    lam = np.zeros(s.size)
    order = np.argsort(y, kind="stable")
    starts = np.searchsorted(y[order], np.arange(m + 1))

    def solve(out: int) -> None:
        idx = order[starts[out] : starts[out + 1]]
        n = idx.size
        if n == 0:
            return
        rows = np.r_[np.arange(n), np.arange(n)]
        pairs = sp.csr_matrix((np.r_[np.ones(n), -a[idx]], (rows, np.r_[s[idx], x[idx]])), shape=(n, k))
        h = build_highs(
            cost[:, out] - u, pairs, np.full(n, -np.inf), np.zeros(n), np.full(k, eta), np.ones(k), solver="simplex"
        )
        h.run()
        if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
            lam[idx] = np.clip(-np.asarray(h.getSolution().row_dual, dtype=float), 0.0, None)

    thread_map(solve, range(m))  # HiGHS leaves the GIL: 1.6-1.9x faster on 2 cores
    return lam


def separate_right(
    z: np.ndarray, a_full: np.ndarray, *, tol: float = SEPARATION_TOL, near: _Near | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For every right entry ``(x, y)`` the left end ``s`` violating ``z[s, y] <= a[s, x] z[x, y]`` most.

    ``a_full`` is ``(K, K)``: ``exp(eps d)`` on the pairs to check, ``inf`` elsewhere (diagonal,
    pairs implied by the floor). Returns ``s, x, y`` of the violated rows (beyond ``tol``) and
    their relative violations ``z[s, y] / (a z[x, y]) - 1``. ``near``: lists that hold every pair
    with a finite ``a[s, x]`` (row ``x``, near records ``s``); only those are looked at.
    """
    k, m = z.shape
    if near is not None:
        blocks = []
        for rows, index, e in near.chunks:
            a = np.where(np.isfinite(e), a_full[index, rows[:, None]], np.inf)  # (b, D): a[s, x]
            blocks.append((rows, index, a))
    else:
        step = max(1, 4_000_000 // max(k * m, 1))
        blocks = [(np.arange(x0, min(k, x0 + step)), None, None) for x0 in range(0, k, step)]

    def block(part: tuple) -> tuple[np.ndarray, ...]:
        rows, index, a = part
        if index is None:
            # Dense: every s against this block of right entries, as (x, s, y).
            left, a = z[None, :, :], a_full[:, rows].T
            index = np.broadcast_to(np.arange(k), a.shape)
        else:
            left = z[index]
        with np.errstate(invalid="ignore"):
            v = left - a[:, :, None] * z[rows, None, :]  # (x, s, y)
        best = np.argmax(v, axis=1)  # (x, y)
        val = np.take_along_axis(v, best[:, None, :], axis=1)[:, 0]
        xx, yy = np.nonzero(val > tol)
        ss = index[xx, best[xx, yy]]
        return ss, rows[xx], yy, val[xx, yy] / (a_full[ss, rows[xx]] * z[rows[xx], yy])

    parts = thread_map(block, blocks)
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, np.zeros(0)
    s, x, y, score = (np.concatenate(p) for p in zip(*parts, strict=True))
    if near is not None:  # the dense order (by right entry): callers that rank by score break ties alike
        order = np.argsort(x * m + y, kind="stable")
        s, x, y, score = s[order], x[order], y[order], score[order]
    return s, x, y, score


def _new_rows(
    z: np.ndarray, a_full: np.ndarray, keys: np.ndarray, cap: int, *, min_score: float = 0.0, near: _Near | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Violated pair rows not yet in the LP: ``s, x, y`` and their keys, at most ``cap``, most violated first.

    :func:`separate_right` on ``z``; rows whose relative violation is not above ``min_score`` and
    rows whose key ``(s K + x) M + y`` is in ``keys`` are left out. (A right entry whose worst row is
    already in the LP gets none that round; adding its worst row outside the LP instead was measured
    and lost at 1/km: docs/benchmarks.md, tenth and eleventh passes.)
    """
    k, m = z.shape
    ns, nx, ny, score = separate_right(z, a_full, near=near)
    new_keys = (ns * k + nx) * m + ny
    keep = (score > min_score) & ~np.isin(new_keys, keys)
    ns, nx, ny, score, new_keys = (arr[keep] for arr in (ns, nx, ny, score, new_keys))
    if ns.size > cap:
        top = np.argsort(-score, kind="stable")[:cap]
        ns, nx, ny, new_keys = ns[top], nx[top], ny[top], new_keys[top]
    return ns, nx, ny, new_keys


def _pair_matrix(
    s: np.ndarray, x: np.ndarray, y: np.ndarray, coef: np.ndarray, m: int, n_cols: int, *, output_major: bool = False
) -> sp.csr_matrix:
    """Rows ``z[s, y] - coef z[x, y] <= 0`` as CSR; entry ``(r, y)`` is column ``r M + y``.

    ``output_major``: column ``y K + r`` instead (``K = n_cols / M``): an output's entries lie
    together, so rows sorted by output touch one small block of ``z`` each (cache-friendly).
    """
    n = s.size
    rows = np.repeat(np.arange(n), 2)
    if output_major:
        k = n_cols // m
        cols = np.stack([y * k + s, y * k + x], axis=1).ravel()
    else:
        cols = np.stack([s * m + y, x * m + y], axis=1).ravel()
    vals = np.stack([np.ones(n), -coef], axis=1).ravel()
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n_cols))


def _pdhg_rounds(
    cost: np.ndarray,
    a_full: np.ndarray,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray],
    keys: np.ndarray,
    best: dict[str, Any],
    rounds: list[dict],
    certify: Callable[[np.ndarray, np.ndarray], None],
    *,
    eta: float,
    gap: float,
    deadline: float,
    batch: float,
    round_steps: int,
    start_matrix: np.ndarray | None,
    max_rounds: int,
    near: _Near | None,
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
    ``round_steps``): PDHG restarts with each new LP, and once the rows settle longer runs pay more (K = 500, 30 s,
    1,024-step rounds: median gap 1.8 % against 4.5 % without).

    Returns the stop reason, the last rows ``(s, x, y, multipliers)`` and the point still to
    repair (``None`` if the last one was repaired).
    """
    k, m = cost.shape
    n_cols = k * m
    # PDHG's LP is output-major (entry (r, y) is column y K + r) with the pair rows sorted by output,
    # so each row touches one 4-KB block of z, and it iterates in float32: with the in-place steps of
    # panda.pdhg, 0.68 against 1.24 ms a step (K = 500, the spanner LP's 127 k rows; docs/benchmarks.md).
    # Everything outside PDHG stays (K, M).
    s_rows, x_rows, y_rows = rows
    order = np.lexsort((x_rows, s_rows, y_rows))  # by output, then left end
    s_rows, x_rows, y_rows = s_rows[order], x_rows[order], y_rows[order]
    cost_om = cost.T.ravel()
    # The separation ranks violations of 1 % and more: single precision is plenty, and twice as fast.
    a_sep = a_full.astype(np.float32)
    sums = sp.csr_matrix((np.ones(n_cols), (np.tile(np.arange(k), m), np.arange(n_cols))), shape=(k, n_cols))
    start = None if start_matrix is None else np.maximum(np.asarray(start_matrix, dtype=float), eta)
    x0 = None if start is None else start.T.ravel()
    u0 = None if start is None else (cost * start).sum(axis=1)
    y0 = None if u0 is None else np.r_[u0, np.zeros(s_rows.size)]
    omega = step_size = None
    steps_done = 0
    work_s = cert_s = 0.0
    pending: tuple[np.ndarray, np.ndarray] | None = None
    # The bound of the mechanism without privacy (every row on its cheapest outputs, the rest at the
    # floor): u = the row minima, no pair multiplier. Never negative; PDHG's early points can be.
    u_min = cost.min(axis=1)
    lb, lb0 = dual_bound(cost, u_min, np.zeros(0), *(np.zeros(0, dtype=np.int64),) * 3, np.zeros(0), eta=eta)
    if lb > best["lb"]:
        best.update(lb=lb, lb0=max(best["lb0"], lb0), u=u_min)
    solved_rows: tuple[np.ndarray, ...] = (s_rows, x_rows, y_rows, np.zeros(s_rows.size))
    reason = "max rounds"
    # Seconds a round needs after PDHG (the pair multipliers and an exact repair, as last measured):
    # PDHG stops that much before the deadline, so the run ends near it (K = 500 at 1/km ended 7-8 s
    # late without this).
    # (The multipliers' time grows with the pair rows: kept per row, and scaled to the current rows.)
    tail = {"multipliers per row": 0.0, "repair": 0.0}

    def tail_s() -> float:
        return tail["multipliers per row"] * s_rows.size + tail["repair"]

    dropped_keys = np.zeros(0, dtype=np.int64)  # rows that have left the LP once
    round_time = 0.0  # PDHG seconds of the last round (the next one takes about as long)
    steps = round_steps
    for _ in range(max_rounds):
        remaining = deadline - time.perf_counter() - tail_s()
        if remaining <= 0 and rounds:  # the first round always runs (>= 64 steps): a matrix to return
            reason = "time limit"
            break
        tr = time.perf_counter()
        coef = a_full[s_rows, x_rows]
        a = sp.vstack([sums, -_pair_matrix(s_rows, x_rows, y_rows, coef, m, n_cols, output_major=True)]).tocsr()
        b = np.r_[np.ones(k), np.zeros(s_rows.size)]

        # This round's row-sum multipliers with the best bound of PDHG's own dual point: the pair
        # multipliers are computed for these. Along a round the value of u rises and falls again
        # (K = 500, seed 1, round 5: 254.2 m after 1,536 steps, 242.4 m at its end after 4,096);
        # PDHG's own bound follows it, lagging (234.3 m at 2,560 steps, where u's value is 251.2 m).
        round_best: dict[str, Any] = {"own": -np.inf, "u": None}

        def bound(
            x: np.ndarray, y: np.ndarray, rows: tuple = (s_rows, x_rows, y_rows, coef), mine: dict = round_best
        ) -> bool:
            """Keep the bound of the dual point ``y``; True once the gap is met."""
            lb, lb0 = dual_bound(cost, y[:k], y[k:], *rows, eta=eta)
            if lb >= mine["own"]:
                mine.update(own=lb, u=y[:k].copy())
            if lb > best["lb"]:
                best.update(lb=lb, u=y[:k].copy())
            best["lb0"] = max(best["lb0"], lb0)
            return bool(np.isfinite(best["ub"]) and best["ub"] - best["lb"] <= gap * best["ub"])

        run = pdhg(
            cost_om,
            a,
            b,
            k,
            np.full(n_cols, eta),
            np.ones(n_cols),
            time_limit_s=max(remaining, 0.0),
            max_iterations=steps,
            x0=x0,
            y0=y0,
            omega=omega,
            step_size=step_size,
            steps_before=steps_done,
            on_check=bound,
            callback_every_steps=_BOUND_EVERY_STEPS,  # by steps, not seconds: reproducible
            dtype=np.float32,  # the bound is evaluated in float64 (valid for any multipliers)
            scheme=PDHG_SCHEME,
            blocks=(k, m),  # output-major, rows sorted by output: Halpern's steps run compiled
        )
        bound(run.x, run.y)
        round_time = run.time_s
        x0, omega, step_size = run.x, run.omega, run.step_size
        steps_done += run.iterations
        solved_rows = (s_rows, x_rows, y_rows, np.clip(run.y[k:], 0.0, None))
        z, u = run.x.reshape(m, k).T, run.y[:k]
        entry: dict = {"rows": int(k + s_rows.size), "status": "pdhg", "iterations": run.iterations, "steps": run.steps}
        entry["solve_s"] = run.time_s
        rounds.append(entry)
        work_s += time.perf_counter() - tr
        left = deadline - time.perf_counter() - tail_s()  # for more PDHG, a certificate kept back
        # The last round: not even a quarter of a round fits any more. A shorter stub would cost a
        # certificate more than it gives; a longer one runs, and is the last (certified) instead.
        last_chance = left < _LAST_ROUND_MIN * round_time
        # The certificate of a round (the best pair multipliers for PDHG's row-sum multipliers, then an
        # exact repair) serves only the final answer and an early stop, so between rounds it gets at
        # most CERTIFICATE_SHARE of the time, and none just before the last round; the last round is
        # always certified. The first round's point is far off (gap 37-90 % in every run measured).
        budget = len(rounds) > 1 and left >= round_time and cert_s <= CERTIFICATE_SHARE * work_s
        if last_chance or run.stopped_by_callback or budget:
            tc = time.perf_counter()
            if not run.stopped_by_callback:
                # One small LP per output: a far stronger bound than PDHG's own pair multipliers,
                # which lag its row-sum multipliers (docs/benchmarks.md, fourth pass).
                u_best = round_best["u"]
                lam_u = best_pair_multipliers(cost, u_best, s_rows, x_rows, y_rows, coef, eta=eta)
                bound(run.x, np.r_[u_best, lam_u])
                tail["multipliers per row"] = (time.perf_counter() - tc) / max(s_rows.size, 1)
            tp = time.perf_counter()
            certify(z, u)
            tail["repair"] = time.perf_counter() - tp
            cert_s += time.perf_counter() - tc
            pending = None
        else:
            pending = (z, u)
        current_gap = (best["ub"] - best["lb"]) / best["ub"] if np.isfinite(best["ub"]) else np.inf
        entry.update(lower=best["lb"], upper=best["ub"], gap=current_gap, certified=pending is None)
        if current_gap <= gap:
            reason = "gap reached"
            break
        if last_chance:
            reason = "time limit"
            break
        y_pairs = run.y[k:]
        if PDHG_DROP_SLACK is not None:
            zc = np.maximum(z, eta)
            allowance = coef * zc[x_rows, y_rows]
            drop = (y_pairs <= 0.0) & (allowance - zc[s_rows, y_rows] > PDHG_DROP_SLACK * allowance)
            row_keys = (s_rows * k + x_rows) * m + y_rows
            drop &= ~np.isin(row_keys, dropped_keys)  # once: dropping the same rows again churned
            if drop.any():
                keys = np.setdiff1d(keys, row_keys[drop], assume_unique=True)
                dropped_keys = np.union1d(dropped_keys, row_keys[drop])
                s_rows, x_rows, y_rows, y_pairs = (v[~drop] for v in (s_rows, x_rows, y_rows, y_pairs))
            entry["rows_dropped"] = int(drop.sum())
        cap = max(1, int(batch * k * m))
        ns, nx, ny, new_keys = _new_rows(
            np.maximum(z, eta).astype(np.float32), a_sep, keys, cap, min_score=PDHG_SEPARATION_REL, near=near
        )
        entry["rows_added"] = int(ns.size)
        if ns.size < _GROW_BELOW * s_rows.size:  # few new rows: the LP settles, let PDHG run longer
            steps = min(2 * steps, _MAX_GROWTH * round_steps)
        keys = np.union1d(keys, new_keys)
        s_rows, x_rows, y_rows = np.r_[s_rows, ns], np.r_[x_rows, nx], np.r_[y_rows, ny]
        order = np.lexsort((x_rows, s_rows, y_rows))
        s_rows, x_rows, y_rows = s_rows[order], x_rows[order], y_rows[order]
        y0 = np.r_[run.y[:k], np.r_[y_pairs, np.zeros(ns.size)][order]]
    return reason, solved_rows, pending


def pdhg_round_steps(k: int) -> int:
    """Return the default steps of a PDHG round for ``k`` records: ``2 k`` in multiples of 64, at least 1,024.

    Measured with Halpern's scheme, side by side (docs/benchmarks.md, ninth pass): at K = 500,
    1,024-step rounds beat 2,048 (30 s: median gap 0.84 against 1.22 % on 5/km, seeds 0-5; 1.19
    against 2.65 % on 1/km); at K = 1000, 2,048 beat 1,024 (120 s: 1.18 against 1.76 %). A larger
    LP's point needs more steps to settle before its violated rows are worth separating.
    """
    return max(PDHG_ROUND_STEPS, 64 * -(-2 * int(k) // 64))


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
        Wall-time budget for everything, seconds.
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
    """
    t0 = time.perf_counter()
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
    if method not in METHODS:
        msg = f"The 'method' parameter of solve_optimal must be one of {METHODS}. Got {method!r} instead."
        raise ValueError(msg)
    if not (0.0 <= drop_share < 1.0):
        msg = f"The 'drop_share' parameter of solve_optimal must be a float in [0, 1). Got {drop_share!r} instead."
        raise ValueError(msg)
    if round_steps is None:
        round_steps = pdhg_round_steps(k)
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
    exponent = float(epsilon_per_km) * d
    a_full = np.where(exponent < -np.log(eta), np.exp(np.minimum(exponent, 700.0)), np.inf)
    np.fill_diagonal(a_full, np.inf)
    n_cols = k * m
    # Each record's records within the floor radius (and a little more): the repair and the separation
    # look at those pairs only, with the same results (a far pair cannot bind; see _Near's users).
    # On a city where most pairs are near (mean above K / 2) the gathers cost more than they save
    # (bench/bench_repair.py: 1.9x faster at 221 of 500, 0.6x at 419 of 500), so all pairs are used.
    threshold = np.log(2.0 / eta)
    dense_city = (exponent < threshold).sum() - k > 0.5 * k * k
    near = None if dense_city or not np.array_equal(exponent, exponent.T) else _Near.build(exponent, threshold, m)

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
    keys = np.sort((s_rows * k + x_rows) * m + y_rows)
    options = (
        {"simplex_dual_edge_weight_strategy": 1}
        if method == "simplex"
        else {"run_crossover": "off", "ipm_optimality_tolerance": 1e-7}
    )
    sums = sp.csr_matrix((np.ones(n_cols), (np.repeat(np.arange(k), m), np.arange(n_cols))), shape=(k, n_cols))

    def fresh(solver: str | None = None) -> highspy.Highs:
        """Build the relaxation on the current rows from scratch (``"ipm"``: interior point with crossover)."""
        pairs = _pair_matrix(s_rows, x_rows, y_rows, a_full[s_rows, x_rows], m, n_cols)
        a = sp.vstack([sums, pairs]).tocsr()
        n_p = pairs.shape[0]
        return build_highs(
            cost.ravel(),
            a,
            np.r_[np.ones(k), np.full(n_p, -np.inf)],
            np.r_[np.ones(k), np.zeros(n_p)],
            np.full(n_cols, eta),
            np.ones(n_cols),
            solver=solver or ("simplex" if method == "simplex" else "ipm"),
            options=options if solver is None else {"run_crossover": "on"},
        )

    rounds: list[dict] = []
    best: dict[str, Any] = {"ub": np.inf, "lb": -np.inf, "lb0": -np.inf, "matrix": None, "repair": {}}
    reason = "max rounds"
    rebuilt = False
    fallback = False  # this round's model is the interior-point fallback
    work_s = repair_s = 0.0
    pending: tuple[np.ndarray, np.ndarray] | None = None
    last_rows: tuple[np.ndarray, ...] | None = None

    source_tol = 1e-9 * float(np.abs(cost).max(initial=0.0))

    def certify(z: np.ndarray, u: np.ndarray) -> None:
        """Repair ``z`` exactly (sources: its entries with negative ``cost - u``); keep the best so far."""
        sources = cost - u[:, None] < source_tol
        matrix, repair = exact_repair(z, exponent, eta=eta, cost=cost, sources=sources, near=near)
        ub = float((cost * matrix).sum())
        if ub < best["ub"]:
            best.update(ub=ub, matrix=matrix, repair=repair)

    if method == "pdhg":
        reason, last_rows, pending = _pdhg_rounds(
            cost,
            a_full,
            (s_rows, x_rows, y_rows),
            keys,
            best,
            rounds,
            certify,
            eta=eta,
            gap=gap,
            deadline=t0 + time_limit_s,
            batch=batch,
            round_steps=int(round_steps),
            start_matrix=start_matrix,
            near=near,
            max_rounds=max_rounds,
        )
        s_rows = last_rows[0]
        max_rounds = 0  # the HiGHS loop below does not run
    else:
        h = fresh()
    for _ in range(max_rounds):
        remaining = time_limit_s - (time.perf_counter() - t0)
        if remaining <= 0:
            reason = "time limit"
            break
        tr = time.perf_counter()
        h.setOptionValue("time_limit", float(h.getRunTime() + remaining))
        h.run()
        status = h.getModelStatus()
        status_text = h.modelStatusToString(status)
        entry: dict = {"rows": int(h.getNumRow()), "status": status_text, "solve_s": time.perf_counter() - tr}
        rounds.append(entry)
        if status != highspy.HighsModelStatus.kOptimal:
            if status == highspy.HighsModelStatus.kTimeLimit:
                reason = "time limit"
                break
            if method == "simplex" and not rebuilt:
                # A warm start that broke down numerically: once more from scratch.
                h = fresh()
                rebuilt = entry["rebuilt"] = True
                continue
            if method == "simplex" and not fallback:
                # Simplex broke down from scratch too (measured on Rome K = 5000 at 175 k rows): this round
                # by interior point with crossover (a basic solution with duals), then simplex again.
                h = fresh("ipm")
                fallback = entry["interior_point_next"] = True
                continue
            reason = f"HiGHS reports {status_text!r}"
            break
        rebuilt = False
        used_fallback, fallback = fallback, False
        sol = h.getSolution()
        z = np.asarray(sol.col_value, dtype=float).reshape(k, m)
        duals = np.asarray(sol.row_dual, dtype=float)
        tc = time.perf_counter()
        lb, lb0 = dual_bound(cost, duals[:k], -duals[k:], s_rows, x_rows, y_rows, a_full[s_rows, x_rows], eta=eta)
        best.update(lb=max(best["lb"], lb), lb0=max(best["lb0"], lb0), u=duals[:k])
        last_rows = (s_rows, x_rows, y_rows, np.clip(-duals[k:], 0.0, None))
        entry.update(objective=float(h.getInfo().objective_function_value), lower=lb)
        ns, nx, ny, new_keys = _new_rows(z, a_full, keys, max(1, int(batch * k * m)), near=near)
        work_s += time.perf_counter() - tr
        # The upper bound (an exact repair, a few K x K x M passes) is computed while it costs at
        # most half the solving time so far, and always when the relaxation is feasible.
        pending = (z, duals[:k])
        if ns.size == 0 or repair_s <= 0.5 * work_s:
            tp = time.perf_counter()
            certify(z, duals[:k])
            pending = None
            repair_s += time.perf_counter() - tp
        current_gap = (best["ub"] - best["lb"]) / best["ub"]
        entry.update(upper=best["ub"], gap=current_gap, rows_added=int(ns.size), certificate_s=time.perf_counter() - tc)
        if current_gap <= gap:
            reason = "gap reached"
            break
        if ns.size == 0:
            reason = "no violated row"
            break
        if drop_share > 0 and method == "simplex" and s_rows.size:
            coef = a_full[s_rows, x_rows] * z[x_rows, y_rows]
            slack_rows = (duals[k:] >= -1e-12) & (coef - z[s_rows, y_rows] > 1e-6 * coef)
            if slack_rows.mean() > drop_share:
                gone = (k + np.flatnonzero(slack_rows)).astype(np.int32)
                h.deleteRows(gone.size, gone)
                s_rows, x_rows, y_rows = (v[~slack_rows] for v in (s_rows, x_rows, y_rows))
                keys = np.sort((s_rows * k + x_rows) * m + y_rows)
                entry["rows_dropped"] = int(gone.size)
        keys = np.union1d(keys, new_keys)
        s_rows, x_rows, y_rows = np.r_[s_rows, ns], np.r_[x_rows, nx], np.r_[y_rows, ny]
        if method == "simplex" and not used_fallback:
            new = _pair_matrix(ns, nx, ny, a_full[ns, nx], m, n_cols)
            h.addRows(
                new.shape[0],
                np.full(new.shape[0], -np.inf),
                np.zeros(new.shape[0]),
                new.nnz,
                new.indptr.astype(np.int32),
                new.indices.astype(np.int32),
                new.data,
            )
        else:
            h = fresh()
    if pending is not None:  # the last relaxation's solution was not repaired yet
        certify(*pending)
    ub, lb = best["ub"], best["lb"]
    final_gap = (ub - lb) / ub if np.isfinite(ub) and np.isfinite(lb) else float("inf")
    return OptimalResult(
        matrix=best["matrix"],
        upper_bound=float(ub),
        lower_bound=float(lb),
        lower_bound_no_floor=float(best["lb0"]),
        gap=float(final_gap),
        # With no violated row left the relaxation's optimum is the LP's: the gap is rounding only.
        solved=bool(final_gap <= gap or (reason == "no violated row" and final_gap <= EXACT_GAP)),
        reason=reason,
        rounds=rounds,
        info={
            "repair": best["repair"],
            "method": method,
            "batch": batch,
            "separation_tol": PDHG_SEPARATION_REL if method == "pdhg" else SEPARATION_TOL,
            "time_s": time.perf_counter() - t0,
            "n_pair_rows": int(s_rows.size),
            "drop_share": drop_share,
            "row_sum_duals": best.get("u"),
            # The last solved relaxation's pair rows (s, x, y) and their multipliers (>= 0).
            "last_pair_rows": last_rows,
        },
    )
