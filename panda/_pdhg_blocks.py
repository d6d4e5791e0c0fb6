"""Halpern PDHG steps compiled by numba for the optimal LP's block structure, on every core.

The LP of :func:`panda.optimal.solve_optimal` has a structure a general sparse product does not
use. Its columns are ``m`` blocks of ``k`` entries (output-major: entry ``(r, y)`` is column
``y k + r``); its first ``k`` rows are the row sums (row ``r`` has one entry in every block, at
position ``r``); every other row is a pair row with two entries in one block, and the pair rows are
sorted by block. So one pass over a block's pair rows computes their part of ``A x``, their
multipliers and their part of ``A^T y`` together, the blocks are independent (one thread takes
half of them, no two threads write the same entry), and only the row sums join the blocks. A step
is three parallel loops: the blocks (primal step, pair rows), the row sums, the blocks again
(``A^T y``'s row-sum part, Halpern's update).

Fusing the passes this way makes a step cheaper than scipy's two sparse products and numpy's
vector updates (``bench/bench_pdhg_step.py`` compares them; docs/benchmarks.md). The indices are
unsigned: numba checks signed indices for wraparound on every access, which costs more than the
fused passes save.

The iterates are those of :class:`panda.pdhg._Halpern`'s numpy steps up to float32 rounding (the
sums run in another order); ``tests/panda/test_pdhg.py`` checks both against each other.

numba's threads: the default layer (OpenMP where present) is thread-safe but not safe across
``fork()`` once it has run (the project's processes are started by ``spawn``, ``forkserver`` or as
commands). Calls are serialised by a lock, so two threads of one process never launch the kernel at
once (workqueue, numba's last fallback, would abort on that) and never oversubscribe the cores.
Across processes, :data:`thread_policy` decides: the Dask workers (:mod:`panda.execution`) set it
to their share of the cores among the jobs running on the machine, asked before every call, so a
lone job steps on every core and two jobs at once on one each (two solves with a thread per core
each would spin against each other at every step's barrier and both end with far larger gaps).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from panda import _numba_cache

try:  # numba is a dependency (requirements.txt); without it panda.pdhg steps with numpy
    import numba
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None

if numba is not None:  # its cache is unpickled when loaded: only from a folder of this account's own
    _numba_cache.use_private_cache(numba)

__all__ = ["AVAILABLE", "Blocks", "apply_thread_policy", "blocks_of", "steps", "warm_up"]

#: Whether the compiled steps can run here (numba imports).
AVAILABLE = numba is not None

_LOCK = threading.Lock()

#: ``thread_policy()``: the threads the next call may use (capped at numba's thread count), asked
#: before every call; ``None`` (the library, the CLI, the benches): numba's default, every core.
thread_policy: Callable[[], int] | None = None


@dataclass(frozen=True)
class Blocks:
    """The scaled LP in block form (see the module docstring); float32 throughout."""

    row_sums: np.ndarray  # (m, k): the coefficient of entry (r, y) in row r
    starts: np.ndarray  # (m + 1,) int64: the pair rows of block y are rows starts[y] .. starts[y + 1] - 1
    left: np.ndarray  # (n_pairs,) unsigned: the first entry's position in its block
    right: np.ndarray  # (n_pairs,) unsigned: the second entry's position
    left_val: np.ndarray  # (n_pairs,) its coefficient
    right_val: np.ndarray  # (n_pairs,)


def blocks_of(a: sp.csr_matrix, k: int, m: int) -> Blocks:
    """Read the block form out of ``a`` (``k + n_pairs`` rows, ``k m`` columns, CSR, float32).

    Raises ValueError when ``a`` does not have the structure (see the module docstring).
    """
    a = sp.csr_matrix(a)
    n_rows, n_cols = a.shape
    if n_cols != k * m or n_rows < k:
        msg = f"blocks_of: a {n_rows} x {n_cols} matrix cannot hold {k} row sums over {m} blocks of {k}."
        raise ValueError(msg)
    indptr, idx, val = a.indptr, a.indices.astype(np.int64), a.data.astype(np.float32)
    head = indptr[k]
    rows = np.repeat(np.arange(k), np.diff(indptr[: k + 1]))
    cols = idx[:head]
    if head != k * m or not np.array_equal(cols % k, rows):
        msg = "blocks_of: the first k rows must be the row sums (row r: entry r of every block)."
        raise ValueError(msg)
    row_sums = np.zeros((m, k), np.float32)
    row_sums[cols // k, cols % k] = val[:head]
    if not (np.diff(indptr[k:]) == 2).all():
        msg = "blocks_of: every row after the row sums must have exactly two entries."
        raise ValueError(msg)
    pair_cols, pair_val = idx[head:].reshape(-1, 2), val[head:].reshape(-1, 2)
    block = pair_cols[:, 0] // k
    if not (np.array_equal(block, pair_cols[:, 1] // k) and (np.diff(block) >= 0).all()):
        msg = "blocks_of: a pair row's two entries must lie in one block, and the rows must be sorted by block."
        raise ValueError(msg)
    starts = k + np.searchsorted(block, np.arange(m + 1)).astype(np.int64)
    position = (pair_cols % k).astype(np.uint16 if k < 2**16 else np.uint32)
    return Blocks(
        row_sums=row_sums,
        starts=starts,
        left=np.ascontiguousarray(position[:, 0]),
        right=np.ascontiguousarray(position[:, 1]),
        left_val=np.ascontiguousarray(pair_val[:, 0]),
        right_val=np.ascontiguousarray(pair_val[:, 1]),
    )


if AVAILABLE:

    @numba.njit(parallel=True, cache=True)
    def _steps(
        row_sums, starts, left, right, left_val, right_val,
        c, b, lo, hi, tau, sigma, w_all,
        x, y, aty, x_hat, x_bar, y_hat, aty_hat, anchor_x, anchor_y, anchor_aty, row_terms,
    ):  # fmt: skip
        m, k = row_sums.shape
        zero, two = np.float32(0.0), np.float32(2.0)
        n_steps = w_all.size
        for step in range(n_steps):
            w = w_all[step]
            v = np.float32(1.0) - w
            last = step == n_steps - 1
            # Each block: the primal step, then its pair rows (A x_bar, multipliers, A^T y_hat).
            for blk in numba.prange(m):
                base = blk * k
                for r in range(k):
                    j = base + r
                    t = (aty[j] - c[j]) * tau + x[j]
                    t = min(max(t, lo[j]), hi[j])
                    x_hat[j] = t
                    xb = t * two - x[j]
                    x_bar[j] = xb
                    row_terms[blk, r] = row_sums[blk, r] * xb
                    aty_hat[j] = zero
                for i in range(starts[blk], starts[blk + 1]):
                    p = i - k
                    j0, j1 = base + left[p], base + right[p]
                    yh = y[i] - (left_val[p] * x_bar[j0] + right_val[p] * x_bar[j1]) * sigma
                    yh = max(yh, zero)
                    if last:
                        y_hat[i] = yh
                    else:
                        y[i] = (yh * two - y[i]) * w + anchor_y[i] * v
                    aty_hat[j0] += left_val[p] * yh
                    aty_hat[j1] += right_val[p] * yh
            # The row sums (equalities: no projection).
            for r in numba.prange(k):
                s = zero
                for blk in range(m):
                    s += row_terms[blk, r]
                yh = y[r] + (b[r] - s) * sigma
                y_hat[r] = yh
                if not last:
                    y[r] = (yh * two - y[r]) * w + anchor_y[r] * v
            # Each block: A^T y_hat's row-sum part, then the Halpern update of x and A^T y.
            for blk in numba.prange(m):
                base = blk * k
                for r in range(k):
                    j = base + r
                    s = aty_hat[j] + row_sums[blk, r] * y_hat[r]
                    aty_hat[j] = s
                    if not last:
                        aty[j] = (s * two - aty[j]) * w + anchor_aty[j] * v
                        x[j] = x_bar[j] * w + anchor_x[j] * v

    def _one_core_copy(fn):  # the same code under its own name: numba caches it in a file of its own
        copy = types.FunctionType(fn.__code__, fn.__globals__, "_steps_one_core", fn.__defaults__, fn.__closure__)
        copy.__qualname__ = "_steps_one_core"
        return copy

    # The same steps without OpenMP (prange runs as range), for a job given one core: a parallel
    # region of one thread in a pool of two still pays the pool's overhead on every step under
    # contention (two solves at once).
    _steps_one_core = numba.njit(cache=True)(_one_core_copy(_steps.py_func))


def apply_thread_policy() -> int:
    """Set this thread's numba thread count by :data:`thread_policy` (if any); return the count now set."""
    if thread_policy is not None:
        numba.set_num_threads(max(1, min(int(thread_policy()), numba.config.NUMBA_NUM_THREADS)))
    return int(numba.get_num_threads())


def _arguments(blocks, c, b, lo, hi, tau, sigma, weights, point, hats, anchor, row_terms) -> tuple:  # noqa: ANN001
    """Flatten the kernels' arguments."""
    return (
        blocks.row_sums, blocks.starts, blocks.left, blocks.right, blocks.left_val, blocks.right_val,
        c, b, lo, hi, np.float32(tau), np.float32(sigma), weights,
        *point, *hats, *anchor, row_terms,
    )  # fmt: skip


def steps(
    blocks: Blocks,
    c: np.ndarray,
    b: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    tau: np.float32,
    sigma: np.float32,
    weights: np.ndarray,
    point: tuple[np.ndarray, np.ndarray, np.ndarray],
    hats: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    anchor: tuple[np.ndarray, np.ndarray, np.ndarray],
    row_terms: np.ndarray,
) -> None:
    """Take ``len(weights)`` reflected Halpern steps in place (float32 arrays; ``weights``: each step's ``w``).

    ``point = (x, y, A^T y)`` moves by every step but the last, which leaves it at its start and
    ``hats = (x_hat, x_bar, y_hat, A^T y_hat)`` at its PDHG point (the caller measures the
    fixed-point error there and applies the last update). ``row_terms`` is ``(m, k)`` scratch.
    """
    args = _arguments(blocks, c, b, lo, hi, tau, sigma, weights, point, hats, anchor, row_terms)
    with _LOCK:
        kernel = _steps if apply_thread_policy() > 1 else _steps_one_core
        kernel(*args)


def warm_up() -> bool:
    """Compile both kernels now (all cores, one core), or load them from numba's cache; False without numba.

    Runs them on a two-entry LP with the positions the project's LPs have (uint16, fewer than 65,536
    records). The Docker image calls it at build time so that its first optimal LP does not compile.
    """
    if not AVAILABLE:
        return False
    a = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 2.0]], np.float32))
    blocks = blocks_of(a, 2, 1)
    vec = [np.zeros(n, np.float32) for n in (2, 3, 2, 2, 2, 3, 2, 2, 3, 2)]  # (x, y, A^T y), the hats, the anchor
    ones = np.ones(2, np.float32)
    args = _arguments(
        blocks, np.zeros(2, np.float32), np.r_[ones, 0.0].astype(np.float32), np.zeros(2, np.float32), ones,
        np.float32(0.1), np.float32(0.1), np.full(2, 0.5, np.float32),
        (vec[0], vec[1], vec[2]), (vec[3], vec[4], vec[5], vec[6]), (vec[7], vec[8], vec[9]),
        np.zeros((1, 2), np.float32),
    )  # fmt: skip
    with _LOCK:
        for kernel in (_steps, _steps_one_core):
            kernel(*args)
    return True
