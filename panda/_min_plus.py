"""Min-plus products compiled by numba: the exact repair's inner loops (and its uniform mixing weight).

``min_j (e[i, j] + w[j, y])`` over a record's near records (:class:`panda.optimal.near._Near`) or over
all records (:func:`panda.lp._min_plus`). numpy computes them as a broadcast sum and a reduction that
write a ``(rows, records, M)`` array first; these loops keep one row of ``M`` minima instead
(``nogil``: :func:`panda.threads.thread_map` runs blocks of rows on every core). The result is the same
to the bit: each term is one addition, a minimum does not round, and NaN terms are left out as
``np.fmin`` leaves them out. Without the large temporary the repair is much faster, on near pairs
and all pairs alike (``bench/bench_repair.py`` times a whole exact repair both ways; docs/benchmarks.md).

``None`` where numba does not import: the callers then use numpy.
"""

from __future__ import annotations

import numpy as np

from panda import _numba_cache

try:  # numba is a dependency (requirements.txt); without it the callers use numpy
    import numba
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None

if numba is not None:  # its cache is unpickled when loaded: only from a folder of this account's own
    _numba_cache.use_private_cache(numba)

__all__ = ["chunk_min_plus", "mix_ratio", "rows_min_plus", "warm_up"]


def _chunk_min_plus(rows: np.ndarray, index: np.ndarray, e: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    """``out[rows[r], y] = min_t (e[r, t] + w[index[r, t], y])``, NaN terms left out (``inf`` if all are).

    Padding (``e[r, t] = inf``) is skipped: its terms are ``inf`` or NaN, never a minimum.
    """
    m = w.shape[1]
    acc = np.empty(m, dtype=w.dtype)
    for r in range(index.shape[0]):
        acc[:] = np.inf
        for t in range(index.shape[1]):
            et = e[r, t]
            if et == np.inf:
                continue
            wj = w[index[r, t]]
            for y in range(m):
                v = et + wj[y]
                if v < acc[y]:  # False for NaN: left out, as fmin leaves it out
                    acc[y] = v
        out[rows[r]] = acc


def _rows_min_plus(e: np.ndarray, first: int, exclude_self: bool, w: np.ndarray, out: np.ndarray) -> None:
    """``out[r, y] = min_j (e[r, j] + w[j, y])`` for the rows ``first + r`` (``j != first + r`` if ``exclude_self``).

    A row whose terms are all NaN gets NaN, as ``np.fmin.reduce`` gives it.
    """
    k, m = w.shape
    acc = np.empty(m, dtype=w.dtype)
    for r in range(e.shape[0]):
        acc[:] = np.nan
        for j in range(k):
            if exclude_self and j == first + r:
                continue
            ej = e[r, j]
            wj = w[j]
            for y in range(m):
                v = ej + wj[y]
                if v < acc[y] or (acc[y] != acc[y] and v == v):  # fmin: a number beats NaN
                    acc[y] = v
        out[r] = acc


def _mix_ratio(rows: np.ndarray, index: np.ndarray, a: np.ndarray, z: np.ndarray) -> float:
    """Return the uniform mixing weight's ratio (:func:`panda.optimal.repair`), 0 when no term is violated.

    That is ``max (z[i, y] - a[r, t] z[j, y]) / ((a[r, t] - 1) / M)`` over the violated terms, with
    ``i = rows[r]`` and ``j = index[r, t]``.

    ``a = exp(exponent)`` comes from numpy (numba's ``exp`` may round otherwise); padding (``a = inf``) is
    skipped, as its terms are never violated. A violated pair with ``a = 1`` gives ``inf``.
    """
    m = z.shape[1]
    ratio = 0.0
    for r in range(index.shape[0]):
        zi = z[rows[r]]
        for t in range(index.shape[1]):
            at = a[r, t]
            if at == np.inf:
                continue
            zj = z[index[r, t]]
            slack = (at - 1.0) / m
            for y in range(m):
                viol = zi[y] - at * zj[y]
                if viol > 0.0:
                    q = viol / slack if slack > 0.0 else np.inf
                    if q > ratio:
                        ratio = q
    return ratio


def _compiled(fn):  # noqa: ANN001, ANN202
    return numba.njit(nogil=True, cache=True, boundscheck=False)(fn) if numba is not None else None


chunk_min_plus = _compiled(_chunk_min_plus)
rows_min_plus = _compiled(_rows_min_plus)
mix_ratio = _compiled(_mix_ratio)


def warm_up() -> bool:
    """Compile both loops for the types the solver passes (or load them from numba's cache); False without numba."""
    if numba is None:
        return False
    w = np.zeros((2, 3))
    out = np.empty_like(w)
    chunk_min_plus(np.arange(2), np.zeros((2, 1), dtype=np.int64), np.zeros((2, 1)), w, out)
    rows_min_plus(np.zeros((2, 2)), 0, True, w, out)
    mix_ratio(np.arange(2), np.zeros((2, 1), dtype=np.int64), np.ones((2, 1)), w)
    return True
