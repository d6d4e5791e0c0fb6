"""The exact Phase-I privacy cost eps_bar (Proposition 3).

For records ``a, b`` let ``l_in(x) = ln w[a,x] - ln w[b,x]`` and ``l_out(x) = ln(1-w[a,x]) -
ln(1-w[b,x])``. The log-likelihood ratio of an anchor set ``A`` is ``sum_{x in A} l_in(x) +
sum_{x not in A} l_out(x)``; the worst set takes ``max(l_in, l_out)`` for every ``x`` (or ``min``, for
the other direction), so

    eps_bar[a, b] = max(S_max, -S_min) / d[a, b],
    S_max = sum_x max(l_in, l_out),  S_min = sum_x min(l_in, l_out),

summed over *all* of X. Writing ``max(l_in, l_out) = l_out + relu(G_a(x) - G_b(x))`` with
``G = logit(w)`` shows that only records within gamma of ``a`` or ``b`` contribute beyond the
closed-form sums of ``ln(1 - w)``, which is how :func:`phase1_cost_sparse` stays ``O(near)`` per pair.
"""

from __future__ import annotations

import numpy as np

from panda.anchors import SelectionModel

__all__ = ["phase1_cost", "phase1_cost_sparse", "log_likelihood_sums"]


def log_likelihood_sums(w_a: np.ndarray, w_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(S_max, S_min)`` for rows of selection probabilities ``w_a``, ``w_b`` (shape ``(P, K)``)."""
    l_in = np.log(w_a) - np.log(w_b)
    l_out = np.log1p(-w_a) - np.log1p(-w_b)
    return np.maximum(l_in, l_out).sum(axis=-1), np.minimum(l_in, l_out).sum(axis=-1)


def _ratio(s: np.ndarray, d: np.ndarray) -> np.ndarray:
    out = np.zeros_like(s, dtype=float)
    pos = d > 0
    out[pos] = s[pos] / d[pos]
    out[~pos & (s > 1e-12)] = np.inf  # distinct records at distance 0 that Phase I tells apart
    return out


def phase1_cost(w: np.ndarray, d_km: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Exact Phase-I cost eps_bar (1/km) for record pairs, from dense ``w`` (Proposition 3).

    Parameters
    ----------
    w
        ``(K, K)`` selection probabilities, ``w[x_n, x]`` (values in (0, 1)).
    d_km
        ``(K, K)`` privacy distances, km.
    pairs
        ``(P, 2)`` record positions ``(a, b)``.

    Returns
    -------
    numpy.ndarray
        ``(P,)`` eps_bar in 1/km; 0 for ``a == b``; ``inf`` for distinct records at distance 0 that
        Phase I distinguishes.
    """
    w = np.asarray(w, dtype=float)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        msg = f"The 'w' parameter of phase1_cost must be a square (K, K) array. Got shape {w.shape} instead."
        raise ValueError(msg)
    if not np.all((w > 0) & (w < 1)):
        msg = "The 'w' parameter of phase1_cost must hold probabilities strictly inside (0, 1) (Criterion 1)."
        raise ValueError(msg)
    out = np.empty(pairs.shape[0])
    step = max(1, 2_000_000 // w.shape[1])
    for s in range(0, pairs.shape[0], step):
        a, b = pairs[s : s + step, 0], pairs[s : s + step, 1]
        s_max, s_min = log_likelihood_sums(w[a], w[b])
        out[s : s + step] = _ratio(np.maximum(s_max, -s_min), np.asarray(d_km)[a, b])
    return out


def phase1_cost_sparse(
    model: SelectionModel, a: np.ndarray, b: np.ndarray, d_km: np.ndarray | None = None
) -> np.ndarray:
    """Exact eps_bar (1/km) for pairs ``(a[i], b[i])`` of positions in X, from the near structure.

    Equal to :func:`phase1_cost` on the dense ``w`` (tested), at ``O(|near(a)| + |near(b)|)`` per pair.
    """
    a = np.asarray(a, dtype=np.int64).ravel()
    b = np.asarray(b, dtype=np.int64).ravel()
    if d_km is None:
        d_km = model.instance.distances_km_pairs(a, b)
    g = model.logit_near
    out = np.empty(a.size)
    step = 200_000
    for s in range(0, a.size, step):
        aa, bb = a[s : s + step], b[s : s + step]
        diff = (g[aa] - g[bb]).tocsr()
        pos = np.asarray(diff.maximum(0).sum(axis=1)).ravel()
        neg = np.asarray((-diff).maximum(0).sum(axis=1)).ravel()
        dm = model.log1m_sum[aa] - model.log1m_sum[bb]
        s_max, s_min = dm + pos, dm - neg
        out[s : s + step] = _ratio(np.maximum(s_max, -s_min), np.asarray(d_km)[s : s + step])
    out[a == b] = 0.0
    return out
