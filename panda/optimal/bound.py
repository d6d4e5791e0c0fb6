"""Weak-duality lower bounds: on the floored LP and on the LP without the floor."""

from __future__ import annotations

import time

import highspy
import numpy as np
import scipy.sparse as sp

import panda.optimal as _pkg


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
    cost: np.ndarray,
    u: np.ndarray,
    s: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    a: np.ndarray,
    *,
    eta: float,
    deadline: float | None = None,
    fallback: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Find the pair-row multipliers that maximise :func:`dual_bound` for fixed row-sum multipliers ``u``.

    With ``u`` fixed the bound separates by output: for each ``y`` the dual of
    ``min (cost[:, y] - u) . v  s.t.  v[s] <= a v[x] (its rows), eta <= v <= 1`` (one small LP per
    output, HiGHS dual simplex). Its multipliers, put into :func:`dual_bound`, give the Lagrangian
    value of ``u`` over these rows, computed by our own weak-duality formula (so HiGHS's tolerances
    cannot make it unsound).

    An output whose LP fails, or is not started by ``deadline`` (``time.perf_counter()``; ``None``: no
    deadline), keeps ``fallback``'s multipliers on its rows (0 without one): any multipliers ``>= 0``
    give a valid bound, and the bound separates by output.

    Returns
    -------
    lam, solved
        One multiplier ``>= 0`` per row, and how many outputs (of those with rows) got their LP's.
    """
    k, m = cost.shape
    lam = np.zeros(s.size) if fallback is None else np.clip(np.asarray(fallback, dtype=float), 0.0, None)
    order = np.argsort(y, kind="stable")
    starts = np.searchsorted(y[order], np.arange(m + 1))

    def solve(out: int) -> bool:
        idx = order[starts[out] : starts[out + 1]]
        n = idx.size
        if n == 0 or (deadline is not None and time.perf_counter() > deadline):
            return False
        rows = np.r_[np.arange(n), np.arange(n)]
        pairs = sp.csr_matrix((np.r_[np.ones(n), -a[idx]], (rows, np.r_[s[idx], x[idx]])), shape=(n, k))
        h = _pkg.build_highs(
            cost[:, out] - u, pairs, np.full(n, -np.inf), np.zeros(n), np.full(k, eta), np.ones(k), solver="simplex"
        )
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return False
        lam[idx] = np.clip(-np.asarray(h.getSolution().row_dual, dtype=float), 0.0, None)
        return True

    solved = _pkg.thread_map(solve, range(m))  # HiGHS leaves the GIL: the outputs' LPs use every core
    return lam, int(sum(solved))
