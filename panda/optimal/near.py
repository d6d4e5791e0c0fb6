"""Every record's near records, for min-plus products over the pairs that can bind only."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import panda.optimal as _pkg
from panda._min_plus import chunk_min_plus


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
        if chunk_min_plus is not None and w.dtype == np.float64:  # compiled: the same bits, no (rows, D, M) array
            w = np.ascontiguousarray(w)
            out = np.empty_like(w)  # C order, as w now: one compiled signature (panda._min_plus.warm_up)
            _pkg.thread_map(lambda part: chunk_min_plus(*part, w, out), self.chunks)
            return out
        out = np.empty_like(w)

        def chunk(part: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
            rows, index, e = part
            with np.errstate(invalid="ignore"):
                out[rows] = np.fmin.reduce(e[:, :, None] + w[index], axis=1)

        _pkg.thread_map(chunk, self.chunks)
        return np.where(np.isnan(out), np.inf, out)

    def covers(self, ratio: float) -> bool:
        """Tell whether every pair beyond the threshold has ``exp(exponent) >= ratio``."""
        return bool(ratio > 0 and np.isfinite(ratio) and np.log(ratio) <= self.threshold)
