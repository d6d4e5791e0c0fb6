"""Phase I: anchor selection probabilities (Table 1, eq. 15), anchor draws (eq. 11), surrogates.

The selection probability of record ``x`` for a user at ``x_n`` is ``w = h(d(x_n, x))`` for
``d < gamma`` and a constant *far value* beyond. Because the far value is one constant, everything
PAnDA needs from ``w`` is determined by the near part (pairs closer than gamma) plus that constant:
:class:`SelectionModel` keeps only the near part, as sparse matrices, so nothing is ``K x K``.

Tie rule for surrogates: among anchors at the same distance, the one with the smaller position in
X wins (records are sorted by ``(distance, position)``); ``v`` follows the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.spatial import cKDTree

from panda.config import PandaConfig, artifact_gamma_divisor
from panda.instance import Instance
from panda.network import EARTH_RADIUS_KM

__all__ = [
    "selection_probabilities",
    "decay_function",
    "far_value",
    "resolve_gamma_km",
    "SelectionModel",
    "sample_anchor_sets",
    "surrogates",
]


def decay_function(d_km: np.ndarray, config: PandaConfig) -> np.ndarray:
    """h(d) of Table 1 (``selection_form="paper"``) or of the published code (``"artifact"``)."""
    d = np.asarray(d_km, dtype=float)
    a, lam = config.alpha, config.lambda_per_km
    art = config.selection_form == "artifact"
    if config.decay == "exponential":
        return a * np.exp(-(0.4 if art else 1.0) * lam * d)
    if config.decay == "power":
        return a / (1.0 + (0.75 if art else 1.0) * d**lam)
    # logistic: 2 alpha / (1 + e^{lambda d}) equals alpha at d = 0
    with np.errstate(over="ignore"):
        return 2.0 * a / (1.0 + np.exp((0.8 if art else 1.0) * lam * d))


def far_value(config: PandaConfig, gamma_km: float) -> float:
    """Return the selection probability of every record at distance >= gamma."""
    if config.far_rule == "h_gamma":
        return float(decay_function(np.array(gamma_km), config))
    if config.far_rule == "floor":
        return float(config.far_floor)
    a, lam, g = config.alpha, config.lambda_per_km, gamma_km
    if config.decay == "exponential":
        return float(a * min(np.exp(-40.0 * lam * g), 1e-4))
    if config.decay == "power":
        return float(a * min(1.0 / (1.0 + np.exp(10.0) * (g + 1.0) ** (10.0 * lam)), 1e-4))
    with np.errstate(over="ignore"):
        return float(a * min(2.0 / (1.0 + np.exp(40.0 * lam * g)), 1e-4))


def resolve_gamma_km(config: PandaConfig, instance: Instance) -> float:
    """Gamma in km: the configured value, or d_max divided by the configured (or artifact) divisor."""
    if config.gamma_km is not None:
        return float(config.gamma_km)
    div = config.gamma_divisor
    if div is None:
        div = artifact_gamma_divisor(instance.n_records, config.decay)
    return instance.d_max_km / float(div)


def selection_probabilities(d_km: np.ndarray, config: PandaConfig, *, gamma_km: float) -> np.ndarray:
    """Return the selection probabilities ``w`` (eq. 15) for distances ``d_km`` (any shape).

    ``w = h(d)`` for ``d < gamma`` and :func:`far_value` beyond. Every value lies in (0, 1).
    """
    d = np.asarray(d_km, dtype=float)
    if not (gamma_km > 0):
        msg = f"The 'gamma_km' parameter of selection_probabilities must be a float > 0. Got {gamma_km!r} instead."
        raise ValueError(msg)
    w = np.where(d < gamma_km, decay_function(d, config), far_value(config, gamma_km))
    # Keep every probability strictly inside (0, 1): eq. (11) needs both ln w and ln(1 - w).
    return np.clip(w, np.finfo(float).tiny, 1.0 - 1e-15)


def _unit_vectors(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    lo, la = np.radians(lon), np.radians(lat)
    return np.column_stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)])


@dataclass(frozen=True, eq=False)
class SelectionModel:
    """The near part of ``w`` for a whole instance, and what PAnDA derives from it.

    Attributes
    ----------
    gamma_km, far
        The threshold and the constant selection probability beyond it.
    near_d
        ``K x K`` sparse (CSR) distances in km of the pairs closer than gamma (the diagonal is
        stored explicitly as 0 via ``near_mask``).
    near_w
        Same sparsity: ``w`` of the near pairs.
    log1m_sum
        ``(K,)`` ``sum_x ln(1 - w[r, x])`` over all of X (exact: near part plus the far constant).
    prior_colsum
        ``(K,)`` ``sum_u p_u w[u, x]`` (the Bayes denominator of eq. 93).
    logit_near
        Same sparsity as ``near_w``: ``logit(w) - logit(far)`` (zero beyond gamma).
    """

    instance: Instance
    config: PandaConfig
    gamma_km: float
    far: float
    near_d: sp.csr_matrix
    near_w: sp.csr_matrix
    log1m_sum: np.ndarray
    prior_colsum: np.ndarray
    logit_near: sp.csr_matrix

    @classmethod
    def build(cls, instance: Instance, config: PandaConfig, *, gamma_km: float | None = None) -> SelectionModel:
        """Compute the near structure (KD-tree on the sphere for haversine; the matrix for road)."""
        g = resolve_gamma_km(config, instance) if gamma_km is None else float(gamma_km)
        k = instance.n_records
        rows, cols, dist = _pairs_within(instance, g)
        w_near = selection_probabilities(dist, config, gamma_km=g)
        far = far_value(config, g)
        # Store distance + tiny so the zero diagonal survives sparse storage; subtract when reading.
        near_d = sp.csr_matrix((dist + 1e-300, (rows, cols)), shape=(k, k))
        near_w = sp.csr_matrix((w_near, (rows, cols)), shape=(k, k))
        near_d.sort_indices()
        near_w.sort_indices()
        counts = np.diff(near_w.indptr)
        log1m_near = np.asarray(sp.csr_matrix((np.log1p(-w_near), (rows, cols)), shape=(k, k)).sum(axis=1)).ravel()
        log1m_sum = log1m_near + (k - counts) * np.log1p(-far)
        p = instance.prior
        # sum_u p_u w[u, x] = sum_{u near x} p_u (w - far) + far  (w symmetric in u, x)
        pw = np.asarray(near_w.T @ p).ravel()
        p_near = np.asarray(sp.csr_matrix((np.ones_like(w_near), (rows, cols)), shape=(k, k)).T @ p).ravel()
        prior_colsum = pw + far * (1.0 - p_near)
        logit = np.log(near_w.data) - np.log1p(-near_w.data) - (np.log(far) - np.log1p(-far))
        logit_near = sp.csr_matrix((logit, near_w.indices, near_w.indptr), shape=near_w.shape)
        return cls(instance, config, g, far, near_d, near_w, log1m_sum, prior_colsum, logit_near)

    def rows_w(self, rows: np.ndarray) -> np.ndarray:
        """Dense ``len(rows) x K`` selection probabilities (for N users, never for all K)."""
        rows = np.asarray(rows)
        out = np.full((rows.size, self.instance.n_records), self.far)
        sub = self.near_w[rows].tocoo()
        out[sub.row, sub.col] = sub.data
        return out

    def near_sorted(self, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Near records of ``r`` sorted by (distance, position): (positions, distances km, w)."""
        lo, hi = self.near_d.indptr[r], self.near_d.indptr[r + 1]
        idx = self.near_d.indices[lo:hi]
        dist = self.near_d.data[lo:hi] - 1e-300
        w = self.near_w.data[lo:hi]
        order = np.lexsort((idx, dist))
        return idx[order], dist[order], w[order]


def _pairs_within(instance: Instance, radius_km: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All ordered pairs of records (including (r, r)) at privacy distance < radius_km."""
    k = instance.n_records
    if instance.metric == "road":
        d = instance.d_km
        rows, cols = np.nonzero(d < radius_km)
        return rows, cols, d[rows, cols]
    xyz = _unit_vectors(instance.lon, instance.lat)
    tree = cKDTree(xyz)
    chord = 2.0 * np.sin(min(radius_km / EARTH_RADIUS_KM, np.pi) / 2.0) * (1.0 + 1e-9) + 1e-12
    pairs = tree.query_pairs(chord, output_type="ndarray")
    rows = np.concatenate([pairs[:, 0], pairs[:, 1], np.arange(k)])
    cols = np.concatenate([pairs[:, 1], pairs[:, 0], np.arange(k)])
    dist = instance.distances_km_pairs(rows, cols)
    keep = dist < radius_km
    return rows[keep], cols[keep], dist[keep]


def sample_anchor_sets(
    model: SelectionModel, user_records: np.ndarray, *, rng: np.random.Generator
) -> list[np.ndarray]:
    """Each user's anchor set: an independent Bernoulli(w) draw per record of X (eq. 11).

    Returns one sorted array of positions in X per user (possibly empty).
    """
    sets = []
    for r in np.asarray(user_records):
        w = model.rows_w(np.array([r]))[0]
        sets.append(np.flatnonzero(rng.random(w.size) < w))
    return sets


def surrogates(instance: Instance, user_records: np.ndarray, anchor_sets: list[np.ndarray]) -> np.ndarray:
    """Each user's surrogate: the nearest own anchor (ties: smaller position); -1 for an empty set."""
    out = np.full(len(anchor_sets), -1, dtype=np.int64)
    for n, (r, anchors) in enumerate(zip(np.asarray(user_records), anchor_sets, strict=True)):
        if anchors.size == 0:
            continue
        d = instance.distances_km(np.array([r]), anchors)[0]
        order = np.lexsort((anchors, d))
        out[n] = anchors[order[0]]
    return out
