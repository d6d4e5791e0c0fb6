"""Reference copy of panda/margins.py as of commit 32100d1 (before the fast margin search), for tests only.

The regression test ``tests/panda/test_margins_identity.py`` checks that the shipped search returns
bit-identical margins and the same flags as this code. Do not edit it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from panda.accounting import phase1_cost_sparse
from panda.anchors import SelectionModel, _unit_vectors

#: Upper bound on the candidate surrogate pairs one margin search may examine (work and memory).
MAX_MARGIN_CANDIDATES = 3e8
#: Candidates handled at once (bounds the memory of a chunk to a few hundred MB).
CHUNK_CANDIDATES = 2_000_000

__all__ = [
    "MAX_MARGIN_CANDIDATES",
    "MarginResult",
    "surrogate_probabilities",
    "margin_for_records",
    "safety_margins",
    "nearest_records",
]


def surrogate_probabilities(model: SelectionModel, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Surrogate distribution of a user at ``r`` over the records within gamma.

    Returns ``(positions, v)``, sorted by (distance, position). ``1 - v.sum()`` is the probability
    that no anchor within gamma is drawn (the surrogate is then beyond gamma, or the set is empty).
    """
    idx, _, w = model.near_sorted(r)
    before = np.concatenate([[1.0], np.cumprod(1.0 - w)[:-1]])
    return idx, w * before


def nearest_records(model: SelectionModel, anchors: np.ndarray, k: int) -> np.ndarray:
    """``(len(anchors), k)`` positions of the ``k`` nearest records of each anchor (itself first)."""
    inst = model.instance
    k = min(k, inst.n_records)
    anchors = np.asarray(anchors)
    if inst.metric == "road":
        d = inst.d_km[anchors]
        part = np.argpartition(d, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(d, part, axis=1), axis=1, kind="stable")
        return np.take_along_axis(part, order, axis=1)
    tree = cKDTree(_unit_vectors(inst.lon, inst.lat))
    _, idx = tree.query(_unit_vectors(inst.lon[anchors], inst.lat[anchors]), k=k)
    return np.asarray(idx).reshape(len(anchors), k)


@dataclass(frozen=True)
class MarginResult:
    """Safety margins for anchor pairs.

    Attributes
    ----------
    xi_hat
        ``(P,)`` margins (same unit as ``eps * d``: nats); ``inf`` where no finite margin exists.
    target
        ``(P,)`` the success probability each pair must reach, ``(1 - delta) / P_S`` (eq. 30).
    bayes_prob
        ``(P,)`` ``P_S``: probability that the true records lie in the anchors' neighbourhoods (eq. 93).
    unreachable
        ``(P,)`` True where the target cannot be met (``target > 1`` or ``h`` stays below it).
    fallback_used
        ``(P,)`` True where ``margin_fallback="second_largest"`` replaced an infinite margin.
    """

    xi_hat: np.ndarray
    target: np.ndarray
    bayes_prob: np.ndarray
    unreachable: np.ndarray
    fallback_used: np.ndarray


class _NearTable:
    """Flattened near lists (positions, v) of a set of records, for vectorised candidate building."""

    def __init__(self, model: SelectionModel, records: np.ndarray):
        self.records = np.unique(np.asarray(records, dtype=np.int64))
        records = self.records
        pos, vals, starts, lens = [], [], [], []
        offset = 0
        for r in records:
            idx, v = surrogate_probabilities(model, int(r))
            pos.append(idx)
            vals.append(v)
            starts.append(offset)
            lens.append(idx.size)
            offset += idx.size
        self.pos = np.concatenate(pos) if pos else np.zeros(0, dtype=np.int64)
        self.v = np.concatenate(vals) if vals else np.zeros(0)
        self.start = np.asarray(starts, dtype=np.int64)
        self.len = np.asarray(lens, dtype=np.int64)

    def rows(self, records: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.records, records)


def _segment_order(value: np.ndarray, counts: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """Permutation sorting ``value`` stably inside each contiguous segment (``counts``, ``seg_start``).

    Equal to ``np.lexsort((value, seg))`` for contiguous segments, without a global sort: segments are
    grouped by size (powers of two), padded with NaN (NaN sorts last, after any real NaN, since the
    sort is stable) and each bucket is sorted row-wise. Sorting rows of ~1,000 candidates is much
    cheaper than two global stable sorts of millions.
    """
    order = np.arange(value.size)
    multi = np.flatnonzero(counts > 1)
    if not multi.size:
        return order
    width = np.ceil(np.log2(counts[multi])).astype(np.int64)
    for w in np.unique(width):
        segs = multi[width == w]
        cols = np.arange(1 << int(w))
        idx = seg_start[segs, None] + cols[None, :]
        valid = cols[None, :] < counts[segs, None]
        vals = np.where(valid, value[np.where(valid, idx, 0)], np.nan)
        o = np.argsort(vals, axis=1, kind="stable")
        order[idx[valid]] = np.take_along_axis(idx, o, axis=1)[valid]
    return order


def _energy(model: SelectionModel, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """E(a, b) = (eps - eps_bar[a, b]) d[a, b] (0 for a == b)."""
    eps = model.config.epsilon_per_km
    d = model.instance.distances_km_pairs(a, b)
    eb = phase1_cost_sparse(model, a, b, d)
    with np.errstate(invalid="ignore"):
        e = (eps - eb) * d
    e[a == b] = 0.0
    e[np.isnan(e)] = -np.inf  # distinct records at distance 0 told apart by Phase I
    return e


def margin_for_records(
    model: SelectionModel,
    p: np.ndarray,
    q: np.ndarray,
    target: np.ndarray,
    *,
    fallback: str = "infinite",
    table: _NearTable | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``xi_{p,q}(target)`` for record pairs (vectorised Algorithms 1-2).

    Each distinct record pair's candidates are built and sorted once, whatever the number of
    queries (targets) on it; the work is done in chunks of at most :data:`CHUNK_CANDIDATES`
    candidates. Raises ``ValueError`` when more than :data:`MAX_MARGIN_CANDIDATES` would be needed.

    Returns ``(xi, reached)``; ``xi`` is ``inf`` (or the second-largest candidate with
    ``fallback="second_largest"``) where ``reached`` is False.
    """
    p = np.asarray(p, dtype=np.int64)
    q = np.asarray(q, dtype=np.int64)
    target = np.asarray(target, dtype=float)
    # Unique record pairs (xi is symmetric in (p, q)).
    lo, hi = np.minimum(p, q), np.maximum(p, q)
    k = model.instance.n_records
    keys, inverse = np.unique(lo * k + hi, return_inverse=True)
    up, uq = keys // k, keys % k
    if table is None:
        table = _NearTable(model, np.unique(np.concatenate([up, uq])))
    counts = table.len[table.rows(up)] * table.len[table.rows(uq)]
    total_work = float(counts.sum())
    if total_work > MAX_MARGIN_CANDIDATES:
        msg = (
            f"The safety-margin search would examine {total_work:.3g} surrogate-pair candidates (limit "
            f"{MAX_MARGIN_CANDIDATES:.0e}): gamma = {model.gamma_km * 1000:.0f} m puts about "
            f"{np.median(table.len):.0f} records within gamma of a typical record. Use a smaller gamma_km, "
            "fewer records or a smaller neighbourhood_size."
        )
        raise ValueError(msg)
    xi = np.full(p.size, np.inf)
    reached = np.zeros(p.size, dtype=bool)
    q_order = np.argsort(inverse, kind="stable")
    q_sorted = inverse[q_order]
    cum_counts = np.cumsum(counts)
    start = 0
    while start < keys.size:
        stop = max(
            start + 1, int(np.searchsorted(cum_counts, cum_counts[start] - counts[start] + CHUNK_CANDIDATES, "right"))
        )
        lo_q, hi_q = np.searchsorted(q_sorted, [start, stop])
        queries = q_order[lo_q:hi_q]
        x, r = _margin_unique(
            model, up[start:stop], uq[start:stop], inverse[queries] - start, target[queries], fallback, table
        )
        xi[queries], reached[queries] = x, r
        start = stop
    return xi, reached


def _margin_unique(
    model: SelectionModel,
    up: np.ndarray,
    uq: np.ndarray,
    inverse: np.ndarray,
    target: np.ndarray,
    fallback: str,
    table: _NearTable,
) -> tuple[np.ndarray, np.ndarray]:
    k = model.instance.n_records
    rp, rq = table.rows(up), table.rows(uq)
    counts = table.len[rp] * table.len[rq]
    n_u = up.size
    seg_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    total = int(counts.sum())
    seg = np.repeat(np.arange(n_u), counts)
    local = np.arange(total) - seg_start[seg]
    lq = table.len[rq][seg]
    ip, iq = local // lq, local % lq
    s = table.pos[table.start[rp][seg] + ip]
    s2 = table.pos[table.start[rq][seg] + iq]
    weight = table.v[table.start[rp][seg] + ip] * table.v[table.start[rq][seg] + iq]
    # E on unique candidate pairs.
    c_lo, c_hi = np.minimum(s, s2), np.maximum(s, s2)
    ckeys, cinv = np.unique(c_lo * k + c_hi, return_inverse=True)
    e_cand = _energy(model, ckeys // k, ckeys % k)[cinv]
    e_pair = _energy(model, up, uq)
    delta = e_cand - e_pair[seg]
    # Sort candidates inside each segment (segments are contiguous blocks; singletons need no sort).
    o = _segment_order(delta, counts, seg_start)
    delta, weight = delta[o], weight[o]
    cum = np.cumsum(weight)
    seg_base = np.concatenate([[0.0], cum])[seg_start]
    cum_in = cum - seg_base[seg]
    seg_total = np.where(counts > 0, np.concatenate([[0.0], cum])[seg_start + counts] - seg_base, 0.0)
    # For each query (pair, target): the first candidate of its segment with cum >= target, by a
    # vectorised bisection over the (sorted) cumulative sums of its segment.
    qseg = inverse
    n_q = qseg.size
    lo_i = seg_start[qseg].copy()
    hi_i = lo_i + counts[qseg]
    for _ in range(int(np.ceil(np.log2(counts.max() + 1))) + 1 if counts.size else 0):
        active = lo_i < hi_i
        if not active.any():
            break
        mid = (lo_i + hi_i) // 2
        below = np.zeros(n_q, dtype=bool)
        below[active] = cum_in[np.minimum(mid[active], total - 1)] < target[active]
        lo_i = np.where(active & below, mid + 1, lo_i)
        hi_i = np.where(active & ~below, mid, hi_i)
    n_below = lo_i - seg_start[qseg]
    reached = (n_below < counts[qseg]) & (target <= seg_total[qseg] + 1e-15) & (target <= 1.0)
    xi = np.full(n_q, np.inf)
    idx = seg_start[qseg] + np.minimum(n_below, np.maximum(counts[qseg] - 1, 0))
    xi[reached] = delta[idx[reached]]
    if fallback == "second_largest":
        miss = ~reached & (counts[qseg] > 0)
        last = seg_start[qseg] + counts[qseg] - 1
        second = np.where(counts[qseg] >= 2, last - 1, last)
        xi[miss] = delta[second[miss]]
    return xi, reached


def safety_margins(model: SelectionModel, x: np.ndarray, x2: np.ndarray) -> MarginResult:
    """Estimated margins xi_hat (eq. 29-30) for anchor pairs ``(x[i], x2[i])`` (positions in X)."""
    cfg = model.config
    x = np.asarray(x, dtype=np.int64)
    x2 = np.asarray(x2, dtype=np.int64)
    n_pairs = x.size
    anchors = np.unique(np.concatenate([x, x2]))
    nb = nearest_records(model, anchors, cfg.neighbourhood_size)  # (A, G)
    where = {int(a): i for i, a in enumerate(anchors)}
    # Bayes: P(X_n in S_x | x in A_n) = sum_{u in S_x} p_u w[u, x] / sum_u p_u w[u, x]
    inst = model.instance
    w_s = np.full(nb.shape, model.far)
    for i, a in enumerate(anchors):
        near_idx, _, near_w = model.near_sorted(int(a))
        lookup = dict(zip(near_idx.tolist(), near_w.tolist(), strict=True))
        w_s[i] = [lookup.get(int(u), model.far) for u in nb[i]]
    p_anchor = (inst.prior[nb] * w_s).sum(axis=1) / model.prior_colsum[anchors]
    ia = np.fromiter((where[int(a)] for a in x), dtype=np.int64, count=n_pairs)
    ib = np.fromiter((where[int(a)] for a in x2), dtype=np.int64, count=n_pairs)
    bayes = p_anchor[ia] * p_anchor[ib] if cfg.bayes_adjustment else np.ones(n_pairs)
    target = (1.0 - cfg.delta) / bayes
    xi_hat = np.full(n_pairs, -np.inf)
    unreachable = target > 1.0
    fallback_used = np.zeros(n_pairs, dtype=bool)
    if cfg.margin_fallback == "infinite":
        todo = np.flatnonzero(~unreachable)
        xi_hat[unreachable] = np.inf
    else:
        todo = np.arange(n_pairs)
    g = nb.shape[1]
    table = _NearTable(model, np.unique(nb))
    if cfg.margin_fallback == "infinite" and todo.size:
        # h never exceeds (sum_s v[p, s]) (sum_s' v[q, s']): if the neighbourhoods' smallest masses
        # cannot reach the target, some (p, q) is unreachable and xi_hat is infinite. No search needed.
        mass = np.zeros(table.records.size)
        np.add.at(mass, np.repeat(np.arange(table.records.size), table.len), table.v)
        min_mass = mass[table.rows(nb.ravel())].reshape(nb.shape).min(axis=1)
        hopeless = min_mass[ia[todo]] * min_mass[ib[todo]] < target[todo]
        xi_hat[todo[hopeless]] = np.inf
        unreachable[todo[hopeless]] = True
        todo = todo[~hopeless]
    step = max(1, 5_000_000 // (g * g))  # queries per call; candidates are deduplicated inside
    for start in range(0, todo.size, step):
        chunk = todo[start : start + step]
        pp = np.repeat(nb[ia[chunk]], g, axis=1).ravel()
        qq = np.tile(nb[ib[chunk]], (1, g)).ravel()
        tt = np.repeat(np.minimum(target[chunk], 1.0), g * g)
        xi, reached = margin_for_records(model, pp, qq, tt, fallback=cfg.margin_fallback, table=table)
        xi = xi.reshape(chunk.size, g * g)
        ok = reached.reshape(chunk.size, g * g).all(axis=1)
        xi_hat[chunk] = xi.max(axis=1)
        unreachable[chunk] |= ~ok
        if cfg.margin_fallback != "infinite":
            fallback_used[chunk] = unreachable[chunk]
    return MarginResult(
        xi_hat=xi_hat, target=target, bayes_prob=bayes, unreachable=unreachable, fallback_used=fallback_used
    )
