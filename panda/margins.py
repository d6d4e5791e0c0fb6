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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from panda.accounting import _ratio, phase1_cost_sparse
from panda.anchors import SelectionModel, _unit_vectors

#: Upper bound on the candidate surrogate pairs one margin search may examine (work and memory).
MAX_MARGIN_CANDIDATES = 3e8
#: Candidates handled at once (bounds the memory of a chunk to a few hundred MB).
CHUNK_CANDIDATES = 2_000_000
#: Largest number of float64 entries of the dense table of E over all surrogate pairs (``C^2``).
MAX_TABLE_ENTRIES = 4e7
#: Padded row widths of the per-segment sorts (segments of up to ``w`` candidates share width ``w``).
_WIDTHS = np.unique(np.concatenate([[1], 2 ** np.arange(31), 3 * 2 ** np.arange(30)]))
#: Padded candidates sorted at once (a few MB: the work stays in cache).
_SORT_BLOCK = 131_072
#: Entries gathered at once while building the top-two tables.
_TABLE_BLOCK = 4_000_000
#: A chunk whose segments that need their sorted order hold more than this share of its candidates is sorted whole.
_MAX_SORTED_SHARE = 0.3

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
        # Success mass of each record: sum_s v[r, s] (the same float sums as before).
        self.mass = np.zeros(records.size)
        np.add.at(self.mass, np.repeat(np.arange(records.size), self.len), self.v)

    def rows(self, records: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.records, records)


def _clearly_unreached(target: np.ndarray, mass_pq: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Flag the queries whose ``target`` the search is certain to find out of reach.

    The search compares ``target`` with the segment total it accumulates in a running sum over a
    chunk (at most :data:`CHUNK_CANDIDATES` segments of total <= 1 each), so that total may differ from
    the true mass by up to about ``count * CHUNK_CANDIDATES`` units of 1.1e-16. Beyond that margin (and
    for ``target > 1`` or empty segments) the outcome does not depend on rounding.
    """
    tol = 2.3e-16 * (count + 2.0) * (CHUNK_CANDIDATES + 2.0) + 1e-12
    return (target > 1.0) | (count == 0) | (target > mass_pq * (1.0 + 1e-12) + tol)


class _EnergyTable:
    """``E`` on every pair of the records ``cand`` (dense), with a lookup by positions in X.

    Rows and columns follow a Z-order curve over the map, so that the near list of a record, whose
    ``E`` values a segment reads, sits in a few cache lines of each row.
    """

    def __init__(self, model: SelectionModel, cand: np.ndarray):
        inst = model.instance
        slot = np.empty(cand.size, dtype=np.int64)
        slot[np.argsort(_z_order(inst.lon[cand], inst.lat[cand]), kind="stable")] = np.arange(cand.size)
        self.index = np.full(inst.n_records, -1, dtype=np.int64)
        self.index[cand] = slot
        self.e = _energy_all_pairs(model, cand, slot)

    @classmethod
    def maybe(cls, model: SelectionModel, table: _NearTable, work: float) -> _EnergyTable | None:
        """Build the table over all surrogates of ``table`` if it fits and costs less than ``work`` lookups."""
        cand = np.unique(table.pos)
        size = float(cand.size) ** 2
        if size > MAX_TABLE_ENTRIES or size > 4.0 * work:
            return None
        return cls(model, cand)

    def lookup(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``E(a[i], b[i])`` (bit-identical to :func:`_energy` on ``(min, max)``)."""
        return self.e[self.index[a], self.index[b]]


class _TopTables:
    """The two largest ``E(s, s')`` over ``s'`` in ``N(q)``, and where the largest sits.

    For every surrogate ``s`` (row of the ``E`` table) and neighbourhood record ``q`` (row of the near table).
    """

    def __init__(self, table: _NearTable, energy: _EnergyTable):
        n_c, n_r = energy.e.shape[0], table.records.size
        col = energy.index[table.pos]
        self.first = np.empty((n_c, n_r))
        self.second = np.empty((n_c, n_r))
        self.where = np.empty((n_c, n_r), dtype=np.int32)
        for length in np.unique(table.len):
            length = int(length)
            qs = np.flatnonzero(table.len == length)
            step = max(1, _TABLE_BLOCK // (n_c * max(length, 1)))
            for s in range(0, qs.size, step):
                blk = qs[s : s + step]
                if length == 0:
                    self.first[:, blk] = self.second[:, blk] = -np.inf
                    self.where[:, blk] = 0
                    continue
                idx = col[table.start[blk][:, None] + np.arange(length)]
                g = energy.e[:, idx.ravel()].reshape(n_c, blk.size, length)
                at = g.argmax(axis=2)[:, :, None]
                self.where[:, blk] = at[:, :, 0]
                self.first[:, blk] = np.take_along_axis(g, at, axis=2)[:, :, 0]
                np.put_along_axis(g, at, -np.inf, axis=2)
                self.second[:, blk] = g.max(axis=2)

    @classmethod
    def maybe(cls, table: _NearTable, energy: _EnergyTable | None) -> _TopTables | None:
        """Build the tables when the ``E`` table exists and they fit in :data:`MAX_TABLE_ENTRIES`."""
        if energy is None or 2.0 * energy.e.shape[0] * table.records.size > MAX_TABLE_ENTRIES:
            return None
        return cls(table, energy)


def _z_order(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Morton codes (16 bits per axis) of points, for a cache-friendly order of records."""

    def spread(v: np.ndarray) -> np.ndarray:
        v = (v | (v << np.uint64(8))) & np.uint64(0x00FF00FF)
        v = (v | (v << np.uint64(4))) & np.uint64(0x0F0F0F0F)
        v = (v | (v << np.uint64(2))) & np.uint64(0x33333333)
        return (v | (v << np.uint64(1))) & np.uint64(0x55555555)

    def grid(x: np.ndarray) -> np.ndarray:
        span = float(np.ptp(x)) if x.size else 0.0
        return ((x - x.min()) / (span or 1.0) * 65535).astype(np.uint64) if x.size else x.astype(np.uint64)

    return spread(grid(np.asarray(lon, dtype=float))) | (spread(grid(np.asarray(lat, dtype=float))) << np.uint64(1))


def _energy_all_pairs(model: SelectionModel, cand: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """Dense symmetric ``E`` on all pairs of the sorted records ``cand`` (row ``slot[i]`` for ``cand[i]``).

    Bit-identical to :func:`_energy`. For records whose near sets are disjoint and whose logit rows
    are non-negative, the sparse Phase-I sums of :func:`panda.accounting.phase1_cost_sparse` are sums
    of one row each, taken in the same order (a ``reduceat`` over the row's positive entries): they
    are computed once per record. Other pairs go through :func:`_energy` itself.
    """
    n = cand.size
    g = model.logit_near[cand].tocsr()
    g.sort_indices()
    rows = np.repeat(np.arange(n), np.diff(g.indptr))
    regular = np.ones(n, dtype=bool)
    regular[rows[g.data < 0]] = False
    keep = g.data > 0
    positive, row_of = g.data[keep], rows[keep]
    row_sum = np.zeros(n)
    if positive.size:
        nonempty = np.flatnonzero(np.bincount(row_of, minlength=n))
        row_sum[nonempty] = np.add.reduceat(positive, np.searchsorted(row_of, nonempty))
    support = g.copy()
    support.data = np.ones_like(support.data)
    overlap = (support @ support.T).tocoo()
    special = np.zeros((n, n), dtype=bool)
    special[overlap.row, overlap.col] = True
    special[~regular, :] = True
    special[:, ~regular] = True
    eps = model.config.epsilon_per_km
    out = np.zeros((n, n))
    step = max(1, 4_000_000 // max(n, 1))
    for s in range(0, n, step):
        i, j = np.nonzero(np.triu(np.ones((min(step, n - s), n), dtype=bool), k=s + 1))
        i = i + s
        a, b = cand[i], cand[j]
        d = model.instance.distances_km_pairs(a, b)
        dm = model.log1m_sum[a] - model.log1m_sum[b]
        s_max, s_min = dm + row_sum[i], dm - row_sum[j]
        eb = _ratio(np.maximum(s_max, -s_min), d)
        with np.errstate(invalid="ignore"):
            e = (eps - eb) * d
        e[np.isnan(e)] = -np.inf
        sp_ = special[i, j]
        if sp_.any():
            e[sp_] = _energy(model, a[sp_], b[sp_])
        out[slot[i], slot[j]] = e
        out[slot[j], slot[i]] = e
    return out


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


class _GridPlan:
    """Algorithm 2 on whole chunks without sorting most segments, with the former search's rounding.

    The former search adds every candidate weight, in sorted order, to one running float sum per chunk.
    While that sum stays inside one binade ``[2^e, 2^(e+1))`` every addition lands on the grid of spacing
    ``u = 2^(e-52)``: ``fl(x + w) = x + u rint(w / u)`` (barring exact half-way ties, which are detected),
    whatever the order. So a segment's contribution is ``u`` times an integer sum ``M`` (no sort), the
    running sum at every segment start is exact, and ``cum - x`` inside the segment is exact too.
    Segments whose sum crosses a binade (about one per power of two, plus the first of each chunk),
    has a tie, or whose answer needs more than the top of the sorted order, are sorted and summed
    exactly as before, from the exact running sum. The segment top (largest and second-largest Delta,
    and the weight of the last candidate in sorted order) comes from :class:`_TopTables`. Every step is
    checked; a chunk whose check fails is searched in full.
    """

    def __init__(self, rp, rq, up, uq, counts, table, energy, tops, bounds):
        self.rp, self.rq, self.counts, self.table, self.energy = rp, rq, counts, table, energy
        self.e_pair = energy.lookup(up, uq)
        # Approximate running sum at each segment start (its exact value differs by far less than `margin`).
        approx_total = table.mass[rp] * table.mass[rq]
        chunk = np.repeat(np.arange(bounds.size - 1), np.diff(bounds))
        before = np.cumsum(approx_total) - approx_total
        start_sum = before - before[bounds[:-1]][chunk]
        expo = np.floor(np.log2(np.maximum(start_sum, 1.0)))
        margin = np.ldexp(1.0, (expo - 20).astype(np.int64))
        self.regular = (
            (start_sum >= 1.0)
            & (start_sum - margin >= np.ldexp(1.0, expo.astype(np.int64)))
            & (start_sum + approx_total + margin < np.ldexp(1.0, (expo + 1).astype(np.int64)))
            & (counts > 0)
        )
        self.expo = expo.astype(np.int64)
        scale = np.where(self.regular, np.ldexp(1.0, 52 - self.expo), 0.0)
        self.m_sum, tie = _grid_sums(rp, rq, scale, table)
        self.regular &= ~tie
        self.scale = scale
        self.d_max, self.d_second, self.w_top, self.ambiguous = _segment_tops(rp, rq, self.e_pair, table, energy, tops)

    def chunk(self, start, stop, qseg, target, fallback):
        """Return ``(xi, reached)`` for the chunk's queries, or ``None`` when the chunk must be sorted whole."""
        sl = slice(start, stop)
        regular = self.regular[sl]
        counts, m_sum, expo = self.counts[sl], self.m_sum[sl], self.expo[sl]
        u = np.ldexp(1.0, expo - 52)
        d_max, d_second, ambiguous = self.d_max[sl], self.d_second[sl], self.ambiguous[sl]
        finite = np.isfinite(self.e_pair[sl])
        # Answers from the segment top (regular segments).
        q_reg = regular[qseg]
        seg_total = u[qseg] * m_sum[qseg]
        ok = (seg_total >= target) & (target <= 1.0)
        slack = m_sum[qseg] - np.ceil(target / u[qseg])
        m_top = np.rint(self.w_top[sl][qseg] * self.scale[sl][qseg])
        top_known = (m_top > slack) & ~ambiguous[qseg]
        xi = np.full(qseg.size, np.inf)
        xi[ok] = d_max[qseg[ok]]
        # Reached, but the top candidate's weight does not cover the slack: walk down from the top.
        walk = np.flatnonzero(q_reg & ok & ~top_known & finite[qseg])
        unresolved = np.zeros(qseg.size, dtype=bool)
        if walk.size:  # one walk per (segment, slack)
            order = np.lexsort((slack[walk], qseg[walk]))
            s_seg, s_slack = qseg[walk][order], slack[walk][order]
            first = np.concatenate([[True], (np.diff(s_seg) != 0) | (np.diff(s_slack) != 0)])
            group = np.cumsum(first) - 1
            inv = np.empty(walk.size, dtype=np.int64)
            inv[order] = group
            pairs = (s_seg[first], s_slack[first])
            seg_w = pairs[0]
            found, value = _walk_from_top(
                self.rp[sl][seg_w],
                self.rq[sl][seg_w],
                self.e_pair[sl][seg_w],
                self.scale[sl][seg_w],
                pairs[1],
                self.table,
                self.energy,
            )
            xi[walk] = value[inv]
            unresolved[walk] = ~found[inv]
        needs_sort = q_reg & (unresolved | ~finite[qseg])
        sort_seg = ~regular
        sort_seg[qseg[needs_sort]] = True
        sorted_idx = np.flatnonzero(sort_seg)
        if counts[sorted_idx].sum() > _MAX_SORTED_SHARE * counts.sum():
            return None
        if fallback == "second_largest":
            miss = ~ok
            xi[miss] = np.where(counts[qseg[miss]] >= 2, d_second[qseg[miss]], d_max[qseg[miss]])
        # Exact running sum at every segment start: grid sums over regular runs, sorted sums elsewhere.
        sorted_delta, sorted_weight = _sorted_candidates(
            self.rp[sl][sorted_idx], self.rq[sl][sorted_idx], self.e_pair[sl][sorted_idx], self.table, self.energy
        )
        offsets = np.concatenate([[0], np.cumsum(counts[sorted_idx])])
        x_start = np.empty(counts.size)
        x, prev = 0.0, 0
        crossing = np.flatnonzero(~regular)
        for k in [*crossing.tolist(), counts.size]:
            if k > prev:  # a run of regular segments: one binade, grid sums
                e = expo[prev]
                if np.any(expo[prev:k] != e) or x < np.ldexp(1.0, int(e)):
                    return None
                run = np.cumsum(m_sum[prev:k])
                x_start[prev:k] = x + u[prev] * (run - m_sum[prev:k])
                x = x + u[prev] * run[-1]
                if not x < np.ldexp(1.0, int(e) + 1):
                    return None
            if k == counts.size:
                break
            x_start[k] = x
            pos = np.searchsorted(sorted_idx, k)
            x = float(np.cumsum(np.concatenate([[x], sorted_weight[offsets[pos] : offsets[pos + 1]]]))[-1])
            prev = k + 1
        # Sorted segments: Algorithm 2 from the exact running sum, as in the former search.
        mine = np.flatnonzero(sort_seg[qseg])
        if mine.size:
            row = np.searchsorted(sorted_idx, qseg[mine])
            xi[mine], ok[mine] = _answer_sorted(
                sorted_delta, sorted_weight, counts[sorted_idx], x_start[sorted_idx], row, target[mine], fallback
            )
        return xi, ok


def _walk_from_top(
    rp: np.ndarray,
    rq: np.ndarray,
    e_pair: np.ndarray,
    scale: np.ndarray,
    slack: np.ndarray,
    table: _NearTable,
    energy: _EnergyTable,
    rounds: int = 6,
) -> tuple[np.ndarray, np.ndarray]:
    """Delta of the candidate where Algorithm 2 stops, found from the top of the sorted order.

    On the grid the running sum inside a segment is ``M`` minus the grid weights ``m`` of the candidates
    after the current one, so the search stops at the first candidate, going down from the largest
    ``(Delta, position)``, at which the grid weights seen so far exceed ``slack = M - ceil(target / u)``.
    Candidates with ``m = 0`` never count. Returns ``(found, delta)``; ``found`` is False when more than
    ``rounds`` candidates with ``m > 0`` would be needed (the segment is then sorted).
    """
    n = rp.size
    found = np.zeros(n, dtype=bool)
    value = np.full(n, np.nan)
    counts = table.len[rp] * table.len[rq]
    width_of = _WIDTHS[np.searchsorted(_WIDTHS, counts)]
    for w in np.unique(width_of[counts > 0]):
        j = np.flatnonzero(width_of == w)
        delta, weight, valid = _padded_candidates(rp[j], rq[j], e_pair[j], int(w), table, energy)
        m = np.rint(weight * scale[j][:, None])
        alive = valid & (m > 0)
        seen = np.zeros(j.size)
        need = slack[j]
        for _ in range(rounds):  # rows still walking: j, delta, m, alive, seen, need
            has = alive.any(axis=1)
            j, delta, m, alive, seen, need = j[has], delta[has], m[has], alive[has], seen[has], need[has]
            if not j.size:
                break
            r = np.arange(j.size)
            top = np.where(alive, delta, -np.inf).max(axis=1)
            last = int(w) - 1 - np.argmax((alive & (delta == top[:, None]))[:, ::-1], axis=1)
            seen += m[r, last]
            hit = seen > need
            value[j[hit]] = delta[r[hit], last[hit]]
            found[j[hit]] = True
            alive[r, last] = False
            keep = ~hit
            j, delta, m, alive, seen, need = j[keep], delta[keep], m[keep], alive[keep], seen[keep], need[keep]
    return found, value


def _padded_candidates(
    rp: np.ndarray, rq: np.ndarray, e_pair: np.ndarray, width: int, table: _NearTable, energy: _EnergyTable
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates of segments as rows of ``width`` (row-major ``N(p) x N(q)``): ``(delta, weight, valid)``."""
    lp, lq = table.len[rp], table.len[rq]
    col = energy.index[table.pos]
    t = np.arange(width)
    valid = t[None, :] < (lp * lq)[:, None]
    b = lq[:, None]
    i_p = np.minimum(((t[None, :] + 0.5) / b).astype(np.int64), lp[:, None] - 1)
    i_q = np.where(valid, t[None, :] - i_p * b, 0)
    i_p += table.start[rp][:, None]
    i_q += table.start[rq][:, None]
    delta = energy.e[col[i_p], col[i_q]]
    delta -= e_pair[:, None]
    return delta, table.v[i_p] * table.v[i_q], valid


def _answer_sorted(
    delta: np.ndarray,
    weight: np.ndarray,
    counts: np.ndarray,
    x_start: np.ndarray,
    row: np.ndarray,
    target: np.ndarray,
    fallback: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2 on sorted segments whose running sum starts at ``x_start`` (queries on segment ``row``).

    Every segment's sum is accumulated from its own start value, one addition at a time (the order of
    the former chunk-wide running sum), on rows padded with zeros (adding 0.0 changes nothing).
    """
    n, width = counts.size, int(counts.max()) if counts.size else 0
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    t = np.arange(width)
    valid = t[None, :] < counts[:, None]
    flat = np.where(valid, starts[:, None] + t[None, :], 0)
    rows = np.zeros((n, width + 1))
    rows[:, 0] = x_start
    rows[:, 1:] = np.where(valid, weight[flat] if weight.size else 0.0, 0.0)
    cum = np.add.accumulate(rows, axis=1)
    x_in = cum[:, 1:] - x_start[:, None]
    seg_total = np.where(counts > 0, x_in[np.arange(n), np.maximum(counts - 1, 0)] if width else 0.0, 0.0)
    lo = np.zeros(row.size, dtype=np.int64)
    hi = counts[row].copy()
    while True:  # first position with x_in >= target (x_in is non-decreasing)
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) // 2
        below = np.zeros(row.size, dtype=bool)
        below[active] = x_in[row[active], mid[active]] < target[active]
        lo = np.where(active & below, mid + 1, lo)
        hi = np.where(active & ~below, mid, hi)
    cnt = counts[row]
    ok = (lo < cnt) & (target <= seg_total[row] + 1e-15) & (target <= 1.0)
    xi = np.full(row.size, np.inf)
    xi[ok] = delta[starts[row[ok]] + lo[ok]]
    if fallback == "second_largest":
        miss = ~ok & (cnt > 0)
        last = starts[row[miss]] + cnt[miss] - 1
        xi[miss] = delta[np.where(cnt[miss] >= 2, last - 1, last)]
    return xi, ok


def _grid_sums(rp: np.ndarray, rq: np.ndarray, scale: np.ndarray, table: _NearTable) -> tuple[np.ndarray, np.ndarray]:
    """Return ``M = sum rint(w scale)`` per segment with ``scale > 0``, and whether it has a rounding tie.

    A tie (some ``w scale`` exactly half-way between two integers) makes the order matter.
    """
    lp, lq = table.len[rp], table.len[rq]
    m_sum = np.zeros(rp.size)
    tie = np.zeros(rp.size, dtype=bool)
    todo = np.flatnonzero(scale > 0)
    if not todo.size:
        return m_sum, tie
    width = int(table.len.max()) + 1
    shape = lp[todo] * width + lq[todo]
    order = np.argsort(shape, kind="stable")
    cuts = np.flatnonzero(np.diff(shape[order])) + 1
    for segs in np.split(todo[order], cuts):
        a, b = int(lp[segs[0]]), int(lq[segs[0]])
        step = max(1, _SORT_BLOCK // max(a * b, 1))
        for s in range(0, segs.size, step):
            j = segs[s : s + step]
            vp = table.v[table.start[rp[j]][:, None] + np.arange(a)] * scale[j][:, None]
            vq = table.v[table.start[rq[j]][:, None] + np.arange(b)]
            w = vp[:, :, None] * vq[:, None, :]  # = scale * fl(v_p v_q): scaling by 2^k is exact
            m = np.rint(w)
            tie[j] = (np.abs(w - m) == 0.5).any(axis=(1, 2))
            m_sum[j] = m.sum(axis=(1, 2))  # integers below 2^53: exact in any order
    return m_sum, tie


def _segment_tops(
    rp: np.ndarray, rq: np.ndarray, e_pair: np.ndarray, table: _NearTable, energy: _EnergyTable, tops: _TopTables
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return, per segment, the largest and second-largest Delta and the weight of the top candidate.

    The top candidate is the one with the largest ``E``; ``ambiguous`` flags segments where it might not
    be the last in sorted order (equal largest Deltas, or an ``E(p, q)`` that is not finite).
    """
    lp = table.len[rp]
    n = rp.size
    e1 = np.full(n, -np.inf)
    e2 = np.full(n, -np.inf)
    w_top = np.zeros(n)
    col = energy.index[table.pos]
    for a in np.unique(lp):
        a = int(a)
        if a == 0:
            continue
        j = np.flatnonzero(lp == a)
        rows = col[table.start[rp[j]][:, None] + np.arange(a)]
        q = rq[j][:, None]
        first = tops.first[rows, q]
        second = tops.second[rows, q]
        at = first.argmax(axis=1)
        r = np.arange(j.size)
        e1[j] = first[r, at]
        first[r, at] = -np.inf
        e2[j] = np.maximum(first.max(axis=1), second[r, at])
        iq = tops.where[rows[r, at], rq[j]]
        w_top[j] = table.v[table.start[rp[j]] + at] * table.v[table.start[rq[j]] + iq]
    with np.errstate(invalid="ignore"):
        d_max = e1 - e_pair
        d_second = e2 - e_pair
    finite = np.isfinite(e_pair)
    tied = np.flatnonzero((d_second == d_max) & finite)
    if tied.size:  # equal largest Deltas: the last of them in sorted order has the largest position
        w_top[tied] = _last_top_weight(rp[tied], rq[tied], e_pair[tied], d_max[tied], table, energy)
    return d_max, d_second, w_top, ~finite


def _last_top_weight(
    rp: np.ndarray,
    rq: np.ndarray,
    e_pair: np.ndarray,
    d_max: np.ndarray,
    table: _NearTable,
    energy: _EnergyTable,
) -> np.ndarray:
    """Weight of the last candidate with Delta ``d_max`` in each segment (the last in sorted order)."""
    counts = table.len[rp] * table.len[rq]
    out = np.zeros(rp.size)
    width_of = _WIDTHS[np.searchsorted(_WIDTHS, counts)]
    for w in np.unique(width_of[counts > 0]):
        j = np.flatnonzero(width_of == w)
        delta, weight, valid = _padded_candidates(rp[j], rq[j], e_pair[j], int(w), table, energy)
        last = int(w) - 1 - np.argmax(((delta == d_max[j][:, None]) & valid)[:, ::-1], axis=1)
        out[j] = weight[np.arange(j.size), last]
    return out


def _sorted_candidates(
    rp: np.ndarray, rq: np.ndarray, e_pair: np.ndarray, table: _NearTable, energy: _EnergyTable
) -> tuple[np.ndarray, np.ndarray]:
    """Candidates of consecutive segments, each sorted stably by Delta: flat ``(delta, weight)``.

    Segment ``j`` holds ``N(p) x N(q)`` in row-major order (``p, q`` the records of table rows
    ``rp[j], rq[j]``), with ``Delta = E(s, s') - E(p, q)`` and weight ``v[p, s] v[q, s']``. Segments
    are padded to a few widths and sorted row-wise by introsort; the rare rows with equal Deltas are
    sorted again stably, and rows whose ``E(p, q)`` is not finite (``+inf`` or ``nan`` Deltas) are sorted
    stably with ``nan`` padding. The result is exactly the order of a stable sort in each segment.
    """
    lp, lq = table.len[rp], table.len[rq]
    counts = lp * lq
    seg_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    total = int(counts.sum())
    delta_out = np.empty(total)
    weight_out = np.empty(total)
    col = energy.index[table.pos]  # near lists as rows of the E table
    exotic = ~np.isfinite(e_pair)
    width_of = _WIDTHS[np.searchsorted(_WIDTHS, counts)]
    for w in np.unique(width_of[counts > 0]):
        w = int(w)
        segs = np.flatnonzero(width_of == w)
        t = np.arange(w)
        step = max(1, _SORT_BLOCK // w)
        for s in range(0, segs.size, step):
            j = segs[s : s + step]
            n_j = counts[j][:, None]
            valid = t[None, :] < n_j
            b = lq[j][:, None]
            i_p = np.minimum(((t[None, :] + 0.5) / b).astype(np.int64), lp[j][:, None] - 1)
            i_q = np.where(valid, t[None, :] - i_p * b, 0)
            i_p += table.start[rp[j]][:, None]
            i_q += table.start[rq[j]][:, None]
            delta = energy.e[col[i_p], col[i_q]]
            delta -= e_pair[j][:, None]
            weight = table.v[i_p] * table.v[i_q]
            out = seg_start[j][:, None] + t[None, :]
            if w > 1:
                odd = exotic[j]
                delta[~valid] = np.inf
                o = np.argsort(delta, axis=1)
                d_sorted = np.take_along_axis(delta, o, axis=1)
                tied = (d_sorted[:, 1:] == d_sorted[:, :-1]) & valid[:, 1:]
                redo = np.flatnonzero(tied.any(axis=1) | odd)
                if redo.size:  # equal Deltas: the stable order (original position) decides
                    sub = delta[redo]
                    sub[~valid[redo]] = np.nan
                    o[redo] = np.argsort(sub, axis=1, kind="stable")
                    d_sorted[redo] = np.take_along_axis(sub, o[redo], axis=1)
                delta = d_sorted
                weight = np.take_along_axis(weight, o, axis=1)
            delta_out[out[valid]] = delta[valid]
            weight_out[out[valid]] = weight[valid]
    return delta_out, weight_out


def _answer_chunk(
    delta: np.ndarray,
    weight: np.ndarray,
    counts: np.ndarray,
    qseg: np.ndarray,
    target: np.ndarray,
    fallback: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2 on one chunk of sorted candidates: the running sum, then a bisection per query.

    The running sum spans the whole chunk, as in the former search, whose rounding it reproduces
    exactly; queries that share a segment and the chunk's single target are answered once.
    """
    total = delta.size
    seg_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    cum = np.cumsum(weight)
    cum0 = np.concatenate([[0.0], cum])
    seg_base = cum0[seg_start]
    seg_total = np.where(counts > 0, cum0[seg_start + counts] - seg_base, 0.0)
    if target.size and np.all(target == target[0]):  # every segment has a query: answer per segment
        useg, inv = np.arange(counts.size), qseg
        utarget = np.full(useg.size, target[0])
    else:
        useg, utarget, inv = qseg, target, np.arange(qseg.size)
    n_q = useg.size
    lo_i = seg_start[useg].copy()
    hi_i = lo_i + counts[useg]
    for _ in range(int(np.ceil(np.log2(counts.max() + 1))) + 1 if counts.size else 0):
        active = lo_i < hi_i
        if not active.any():
            break
        mid = (lo_i + hi_i) // 2
        below = np.zeros(n_q, dtype=bool)
        below[active] = cum[np.minimum(mid[active], total - 1)] - seg_base[useg[active]] < utarget[active]
        lo_i = np.where(active & below, mid + 1, lo_i)
        hi_i = np.where(active & ~below, mid, hi_i)
    n_below = lo_i - seg_start[useg]
    ok = (n_below < counts[useg]) & (utarget <= seg_total[useg] + 1e-15) & (utarget <= 1.0)
    x = np.full(n_q, np.inf)
    idx = seg_start[useg] + np.minimum(n_below, np.maximum(counts[useg] - 1, 0))
    x[ok] = delta[idx[ok]]
    if fallback == "second_largest":
        miss = ~ok & (counts[useg] > 0)
        last = seg_start[useg] + counts[useg] - 1
        second = np.where(counts[useg] >= 2, last - 1, last)
        x[miss] = delta[second[miss]]
    return x[inv], ok[inv]


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
