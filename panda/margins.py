"""The safety margin (section 3.4.2-3.4.3, Algorithms 1-2, Propositions 7-8).

For true records ``(p, q)`` the surrogate of ``p`` is ``s`` with probability
``v[p, s] = w[p, s] prod_{r closer to p than s} (1 - w[p, r])``. A surrogate pair ``(s, s')``, both
within gamma (eq. 26), keeps eps-mDP for ``(p, q)`` once the margin ``xi`` covers

    Delta(s, s') = E(s, s') - E(p, q),    E(a, b) = (eps - eps_bar[a, b]) d[a, b],

so the success probability ``h_{p,q}(xi) = sum_{Delta <= xi} v[p, s] v[q, s']`` is a step function and
``xi_{p,q}(t)`` = the smallest candidate Delta with ``h >= t``, or ``+inf`` when ``t`` is out of reach.

The server estimates the margin of an anchor pair ``(x, x')`` as the largest ``xi_{p,q}`` over the
``Gamma`` nearest records ``S_x x S_x'`` (eq. 29) at the target ``t = (1 - delta) / P_S`` of eq. (30),
where ``P_S`` (eq. 93) is the posterior probability that the true records lie in ``S_x x S_x'``.
When ``t > 1`` or ``h`` never reaches ``t``, no finite margin exists: the result says so.

Speed. A record pair whose target lies clearly above its whole success mass (the product of the two
records' surrogate masses) cannot reach it: its margin is ``inf``, or with the ``"second_largest"``
fallback the second-largest candidate Delta, which needs no sort. For that fallback the second-largest
candidate E of every pair of neighbourhood records is read off two small dense tables (the two largest
E of each surrogate against each neighbourhood, then of each neighbourhood pair), and E itself is
computed in closed form for surrogate pairs whose near sets do not meet. Record pairs close to their
target take the full search, chunk by chunk in the plain search's order, so every margin is
bit-identical to the plain search (``tests/panda/test_margins_identity.py`` checks it against a reference
copy of it).

This module is the search: which record pairs, in which chunks, and the plain search of a chunk. The
near lists, the ``E`` tables and the fast answers of a chunk are in :mod:`panda._margin_chunks`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from panda._margin_chunks import MAX_TABLE_ENTRIES as MAX_TABLE_ENTRIES
from panda._margin_chunks import (
    _answer_chunk,
    _energy,
    _EnergyTable,
    _GridPlan,
    _NearTable,
    _sorted_candidates,
    _TopTables,
    surrogate_probabilities,
)
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


def _clearly_unreached(target: np.ndarray, mass_pq: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Flag the queries whose ``target`` the search is certain to find out of reach.

    The search compares ``target`` with the segment total it accumulates in a running sum over a
    chunk (at most :data:`CHUNK_CANDIDATES` segments of total <= 1 each), so that total may differ from
    the true mass by up to about ``count * CHUNK_CANDIDATES`` units of 1.1e-16. Beyond that margin (and
    for ``target > 1`` or empty segments) the outcome does not depend on rounding.
    """
    tol = 2.3e-16 * (count + 2.0) * (CHUNK_CANDIDATES + 2.0) + 1e-12
    return (target > 1.0) | (count == 0) | (target > mass_pq * (1.0 + 1e-12) + tol)


def margin_for_records(
    model: SelectionModel,
    p: np.ndarray,
    q: np.ndarray,
    target: np.ndarray,
    *,
    fallback: str = "infinite",
    table: _NearTable | None = None,
    energy: _EnergyTable | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``xi_{p,q}(target)`` for record pairs (vectorised Algorithms 1-2).

    Each distinct record pair's candidates are built and sorted once, whatever the number of
    queries (targets) on it; the work is done in chunks of at most :data:`CHUNK_CANDIDATES`
    candidates (the running sums restart at each chunk). A chunk whose targets are all clearly out of
    reach with ``fallback="infinite"`` needs no candidates. Raises ``ValueError`` when more than
    :data:`MAX_MARGIN_CANDIDATES` would be needed.

    Parameters
    ----------
    model
        The selection model.
    p, q
        Record positions in X (element-wise pairs).
    target
        Success probability each pair must reach.
    fallback
        ``"infinite"`` or ``"second_largest"`` (the published code's value for an unreachable target).
    table, energy
        Precomputed near lists and ``E`` table (internal: :func:`safety_margins` shares them).

    Returns
    -------
    xi, reached
        ``xi`` is ``inf`` (or the second-largest candidate with ``fallback="second_largest"``) where
        ``reached`` is False.
    """
    p = np.asarray(p, dtype=np.int64)
    q = np.asarray(q, dtype=np.int64)
    target = np.asarray(target, dtype=float)
    if table is None:
        table = _NearTable(model, np.unique(np.concatenate([p, q])))
    return _search(model, table.rows(p), table.rows(q), target, fallback, table, energy)


def _search(
    model: SelectionModel,
    rows_p: np.ndarray,
    rows_q: np.ndarray,
    target: np.ndarray,
    fallback: str,
    table: _NearTable,
    energy: _EnergyTable | None,
    tops: _TopTables | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`margin_for_records` on rows of ``table`` (its records are sorted, so row order is record order)."""
    # Unique record pairs (xi is symmetric in (p, q)), in the order of (smaller, larger) record.
    n_rows = table.records.size
    key = np.minimum(rows_p, rows_q) * n_rows + np.maximum(rows_p, rows_q)
    if n_rows * n_rows <= 50_000_000:  # mark the pairs on a dense grid instead of sorting the queries
        seen = np.zeros(n_rows * n_rows, dtype=bool)
        seen[key] = True
        keys = np.flatnonzero(seen)
        rank = np.cumsum(seen, dtype=np.int64) - 1
        inverse = rank[key]
        del seen, rank
    else:
        keys, inverse = np.unique(key, return_inverse=True)
    rp, rq = keys // n_rows, keys % n_rows
    up, uq = table.records[rp], table.records[rq]
    counts = table.len[rp] * table.len[rq]
    total_work = float(counts.sum())
    if total_work > MAX_MARGIN_CANDIDATES:
        msg = (
            f"The safety-margin search would examine {total_work:.3g} surrogate-pair candidates (limit "
            f"{MAX_MARGIN_CANDIDATES:.0e}): gamma = {model.gamma_km * 1000:.0f} m puts about "
            f"{np.median(table.len):.0f} records within gamma of a typical record. Use a smaller gamma_km, "
            "fewer records or a smaller neighbourhood_size."
        )
        raise ValueError(msg)
    if energy is None:
        energy = _EnergyTable.maybe(model, table, total_work)
        tops = _TopTables.maybe(table, energy)
    xi = np.full(target.size, np.inf)
    reached = np.zeros(target.size, dtype=bool)
    # Chunks of about CHUNK_CANDIDATES candidates over the unique pairs (the former search's, unchanged).
    cum_counts = np.cumsum(counts)
    bounds = [0]
    while bounds[-1] < keys.size:
        start = bounds[-1]
        bounds.append(
            max(
                start + 1,
                int(np.searchsorted(cum_counts, cum_counts[start] - counts[start] + CHUNK_CANDIDATES, "right")),
            )
        )
    n_chunks = len(bounds) - 1
    chunk_of = np.repeat(np.arange(n_chunks, dtype=np.uint16 if n_chunks < 65_536 else np.int64), np.diff(bounds))
    q_chunk = chunk_of[inverse]
    q_order = np.argsort(q_chunk, kind="stable")
    q_bounds = np.concatenate([[0], np.cumsum(np.bincount(q_chunk, minlength=n_chunks))])
    if fallback == "infinite":
        clear = _clearly_unreached(target, table.mass[rp[inverse]] * table.mass[rq[inverse]], counts[inverse])
    todo = [
        c for c in range(n_chunks) if fallback != "infinite" or not clear[q_order[q_bounds[c] : q_bounds[c + 1]]].all()
    ]
    grid = None
    if energy is not None and tops is not None and todo:
        grid = _GridPlan(rp, rq, up, uq, counts, table, energy, tops, np.asarray(bounds))
    for c in todo:  # chunks left out: every target clearly unreachable, xi = inf and reached = False
        start, stop = bounds[c], bounds[c + 1]
        queries = q_order[q_bounds[c] : q_bounds[c + 1]]
        qseg, qt = inverse[queries] - start, target[queries]
        if energy is None:
            xi[queries], reached[queries] = _margin_unique(
                model, up[start:stop], uq[start:stop], qseg, qt, fallback, table
            )
            continue
        answer = None if grid is None else grid.chunk(start, stop, qseg, qt, fallback)
        if answer is None:
            e_pair = energy.lookup(up[start:stop], uq[start:stop])
            delta, weight = _sorted_candidates(rp[start:stop], rq[start:stop], e_pair, table, energy)
            answer = _answer_chunk(delta, weight, counts[start:stop], qseg, qt, fallback)
        xi[queries], reached[queries] = answer
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
    """Run the former search on one chunk (used when the ``E`` table would be too large)."""
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
        min_mass = table.mass[table.rows(nb.ravel())].reshape(nb.shape).min(axis=1)
        hopeless = min_mass[ia[todo]] * min_mass[ib[todo]] < target[todo]
        xi_hat[todo[hopeless]] = np.inf
        unreachable[todo[hopeless]] = True
        todo = todo[~hopeless]
    energy = None
    if todo.size:
        # Work bound: every query's candidates (distinct record pairs are fewer).
        len_sum = table.len[table.rows(nb)].sum(axis=1).astype(float)
        energy = _EnergyTable.maybe(model, table, float((len_sum[ia[todo]] * len_sum[ib[todo]]).sum()))
    tops = _TopTables.maybe(table, energy) if todo.size else None
    rows_nb = table.rows(nb)
    step = max(1, 5_000_000 // (g * g))  # queries per call; candidates are deduplicated inside
    for start in range(0, todo.size, step):
        chunk = todo[start : start + step]
        pp = np.repeat(rows_nb[ia[chunk]], g, axis=1).ravel()
        qq = np.tile(rows_nb[ib[chunk]], (1, g)).ravel()
        tt = np.repeat(np.minimum(target[chunk], 1.0), g * g)
        xi, reached = _search(model, pp, qq, tt, cfg.margin_fallback, table, energy, tops)
        xi = xi.reshape(chunk.size, g * g)
        ok = reached.reshape(chunk.size, g * g).all(axis=1)
        xi_hat[chunk] = xi.max(axis=1)
        unreachable[chunk] |= ~ok
        if cfg.margin_fallback != "infinite":
            fallback_used[chunk] = unreachable[chunk]
    return MarginResult(
        xi_hat=xi_hat, target=target, bayes_prob=bayes, unreachable=unreachable, fallback_used=fallback_used
    )
