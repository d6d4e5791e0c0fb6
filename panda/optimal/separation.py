"""The separation: violated pair rows per right entry, and the sparse rows of the pair constraints."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import panda.optimal as _pkg
from panda.optimal import SEPARATION_TOL
from panda.optimal.near import _Near


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

    parts = _pkg.thread_map(block, blocks)
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
    already in the LP gets none that round: the LP already holds the row that binds it, and adding its
    worst row outside the LP as well grows the LP more than it helps; docs/benchmarks.md.)
    """
    k, m = z.shape
    ns, nx, ny, score = _pkg.separate_right(z, a_full, near=near)
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
