"""The exact repair: any nonnegative matrix made exactly eps-mDP and row-stochastic (the upper bound)."""

from __future__ import annotations

import numpy as np

import panda.optimal as _pkg
from panda._min_plus import mix_ratio
from panda.optimal.near import _Near


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
    return np.exp(_pkg._min_plus(log_z, exponent, exclude_self=exclude_self))


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
        out = _pkg._min_plus(neg_log, exponent.T, exclude_self=exclude_self)
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
    order: np.ndarray | None = None
    if cost is not None and _pkg.REPAIR_BY_COST:
        order = np.argsort(cost if up else -cost, axis=1, kind="stable")
    passes = 0
    for passes in range(1, max_passes + 1):
        off = (1.0 - z.sum(axis=1)) if up else (z.sum(axis=1) - 1.0)
        if off.max() <= _pkg._SUM_TOL:
            passes -= 1
            break
        if up:
            room = np.clip(_closure(z, exponent, exclude_self=True) - z, 0.0, None)
        else:
            room = np.clip(z - _envelope(z, exponent, exclude_self=True, floor=floor, near=near), 0.0, None)
        total = room.sum(axis=1)
        take = np.minimum(np.clip(off, 0.0, None), total)
        if take.max() <= _pkg._SUM_TOL:
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
        out[kind], info[kind] = _finish(kind, start, e, eta=eta, cost=cost, max_passes=max_passes, near=near)
    kind = starts[0][0] if cost is None else min(out, key=lambda name: info[name]["objective"])
    info["kind"] = kind
    return out[kind], info


def _finish(
    kind: str,
    start: np.ndarray,
    e: np.ndarray,
    *,
    eta: float,
    cost: np.ndarray | None,
    max_passes: int,
    near: _Near | None,
) -> tuple[np.ndarray, dict]:
    """Balance one candidate of :func:`exact_repair`; mix it with the uniform mechanism if a row stays off.

    Returns the exactly feasible, row-stochastic candidate and its facts (``passes``,
    ``imbalance_after_moves``, ``theta`` and, with ``cost``, ``objective``).
    """
    bal, passes = _balance(start, e, up=kind == "down", max_passes=max_passes, floor=eta, near=near, cost=cost)
    off = float(np.abs(bal.sum(axis=1) - 1.0).max())
    theta = 0.0
    if off > _pkg._SUM_TOL:
        bal = bal / bal.sum(axis=1, keepdims=True)
        theta = _uniform_mix_weight(bal, e, near=near)
        low = float(bal.min())
        if eta > low:  # more uniform weight also lifts every entry back to the floor
            theta = max(theta, min(1.0, (eta - low) / (1.0 / bal.shape[1] - low) * (1 + 1e-9)))
        bal = (1.0 - theta) * bal + theta / bal.shape[1]
    info: dict = {"passes": passes, "imbalance_after_moves": off, "theta": theta}
    if cost is not None:
        info["objective"] = float((cost * bal).sum())
    return bal, info


def _uniform_mix_weight(z: np.ndarray, exponent: np.ndarray, *, near: _Near | None = None) -> float:
    """Smallest ``theta`` with ``(1 - theta) z + theta / M`` meeting every pair row (1 if none smaller).

    ``near`` (lists of ``exponent``) is used when no far pair can be violated (``exp(exponent) >=
    max z / min z`` beyond its threshold).
    """
    k, m = z.shape
    low = float(z.min())
    use_near = near is not None and low > 0 and near.covers(float(z.max()) / low)
    if mix_ratio is not None and z.dtype == np.float64:  # compiled: the same ratio, no (rows, near, M) arrays
        ratio = _mix_ratio_compiled(np.ascontiguousarray(z), exponent, near if use_near else None)
    else:
        ratio = _mix_ratio_numpy(z, exponent, near if use_near else None)
    if not np.isfinite(ratio):
        return 1.0
    # Rounding: a hair more than the exact value.
    return min(1.0, ratio / (1.0 + ratio) * (1 + 1e-9) + 1e-15)


def _mix_ratio_compiled(z: np.ndarray, exponent: np.ndarray, near: _Near | None) -> float:
    """:func:`_mix_ratio_numpy`'s value by :func:`panda._min_plus.mix_ratio`, over blocks of rows on every core."""
    k = z.shape[0]
    if near is not None:
        return max(_pkg.thread_map(lambda part: mix_ratio(part[0], part[1], np.exp(part[2]), z), near.chunks))
    step = max(1, 4_000_000 // max(k * z.shape[1], 1))
    every = np.arange(k)

    def block(s: int) -> float:
        a = np.exp(exponent[s : s + step])
        return mix_ratio(every[s : s + step], np.tile(every, (a.shape[0], 1)), a, z)

    return max(_pkg.thread_map(block, range(0, k, step)))


def _mix_ratio_numpy(z: np.ndarray, exponent: np.ndarray, near: _Near | None) -> float:
    """Return the largest violation of a pair row by ``z`` over its slack under the uniform mechanism (0: none)."""
    k, m = z.shape
    if near is not None:
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
    return ratio
