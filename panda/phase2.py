"""Phase II: each user perturbs with the row of its surrogate (nearest own anchor)."""

from __future__ import annotations

import numpy as np

__all__ = ["sample_outputs", "pair_log_ratio"]


def sample_outputs(z: np.ndarray, surrogate_rows: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
    """Sample one output (position in Y) per user from ``z[surrogate_rows]``; -1 where the row is -1."""
    rows = np.asarray(surrogate_rows)
    out = np.full(rows.size, -1, dtype=np.int64)
    ok = rows >= 0
    if ok.any():
        probs = z[rows[ok]]
        cdf = np.cumsum(probs, axis=1)
        u = rng.random(int(ok.sum())) * cdf[:, -1]
        out[ok] = np.minimum((cdf < u[:, None]).sum(axis=1), z.shape[1] - 1)
    return out


def pair_log_ratio(z_a: np.ndarray, z_b: np.ndarray) -> np.ndarray:
    """``max_y |ln z_a[y] - ln z_b[y]|`` row-wise (``inf`` where one row has a zero the other has not)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        la, lb = np.log(z_a), np.log(z_b)
        diff = np.abs(la - lb)
    both_zero = (z_a == 0) & (z_b == 0)
    diff[both_zero] = 0.0
    return diff.max(axis=-1)
