"""The building blocks of the safety-margin search of :mod:`panda.margins`: near lists, E tables, chunk answers.

- :class:`_NearTable`: every record's surrogates within gamma and their probabilities ``v``
  (:func:`surrogate_probabilities`), flattened;
- :func:`_energy`, :class:`_EnergyTable`, :class:`_TopTables`: ``E(a, b) = (eps - eps_bar[a, b]) d[a, b]``
  on pairs, on every pair of surrogates (dense), and the two largest ``E`` of a surrogate against a
  neighbourhood;
- :func:`_sorted_candidates` and :func:`_answer_chunk`: Algorithm 2 on a chunk of segments sorted whole;
  :class:`_GridPlan`: the same answers with most segments left unsorted (see its docstring).

Every answer is bit-identical to the former search (``tests/panda/test_margins_identity.py``).
"""

from __future__ import annotations

import numpy as np

from panda.accounting import _ratio, phase1_cost_sparse
from panda.anchors import SelectionModel

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


def surrogate_probabilities(model: SelectionModel, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Surrogate distribution of a user at ``r`` over the records within gamma.

    Returns ``(positions, v)``, sorted by (distance, position). ``1 - v.sum()`` is the probability
    that no anchor within gamma is drawn (the surrogate is then beyond gamma, or the set is empty).
    """
    idx, _, w = model.near_sorted(r)
    before = np.concatenate([[1.0], np.cumprod(1.0 - w)[:-1]])
    return idx, w * before


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
        regular, counts = self.regular[sl], self.counts[sl]
        finite = np.isfinite(self.e_pair[sl])
        xi, ok, unresolved = self._answers_from_top(sl, qseg, target, finite)
        # Sorted: the segments off the grid, and those whose answer the top of the sorted order does not give.
        needs_sort = regular[qseg] & (unresolved | ~finite[qseg])
        sort_seg = ~regular
        sort_seg[qseg[needs_sort]] = True
        sorted_idx = np.flatnonzero(sort_seg)
        if counts[sorted_idx].sum() > _MAX_SORTED_SHARE * counts.sum():
            return None
        if fallback == "second_largest":
            miss = ~ok
            d_max, d_second = self.d_max[sl], self.d_second[sl]
            xi[miss] = np.where(counts[qseg[miss]] >= 2, d_second[qseg[miss]], d_max[qseg[miss]])
        sorted_delta, sorted_weight = _sorted_candidates(
            self.rp[sl][sorted_idx], self.rq[sl][sorted_idx], self.e_pair[sl][sorted_idx], self.table, self.energy
        )
        x_start = self._start_sums(sl, sorted_idx, sorted_weight)
        if x_start is None:
            return None
        # Sorted segments: Algorithm 2 from the exact running sum, as in the former search.
        mine = np.flatnonzero(sort_seg[qseg])
        if mine.size:
            row = np.searchsorted(sorted_idx, qseg[mine])
            xi[mine], ok[mine] = _answer_sorted(
                sorted_delta, sorted_weight, counts[sorted_idx], x_start[sorted_idx], row, target[mine], fallback
            )
        return xi, ok

    def _answers_from_top(self, sl, qseg, target, finite):
        """Answer the queries of regular segments from the segment top: ``(xi, reached, unresolved)``.

        ``unresolved`` flags the queries whose walk down from the top gave up (their segment is sorted).
        """
        m_sum, u = self.m_sum[sl], np.ldexp(1.0, self.expo[sl] - 52)
        seg_total = u[qseg] * m_sum[qseg]
        ok = (seg_total >= target) & (target <= 1.0)
        slack = m_sum[qseg] - np.ceil(target / u[qseg])
        m_top = np.rint(self.w_top[sl][qseg] * self.scale[sl][qseg])
        top_known = (m_top > slack) & ~self.ambiguous[sl][qseg]
        xi = np.full(qseg.size, np.inf)
        xi[ok] = self.d_max[sl][qseg[ok]]
        # Reached, but the top candidate's weight does not cover the slack: walk down from the top.
        walk = np.flatnonzero(self.regular[sl][qseg] & ok & ~top_known & finite[qseg])
        unresolved = np.zeros(qseg.size, dtype=bool)
        if walk.size:
            xi[walk], found = self._walk(sl, qseg[walk], slack[walk])
            unresolved[walk] = ~found
        return xi, ok, unresolved

    def _walk(self, sl, seg, slack):
        """Run :func:`_walk_from_top` once per distinct (segment, slack): ``(delta, found)`` per query."""
        order = np.lexsort((slack, seg))
        s_seg, s_slack = seg[order], slack[order]
        first = np.concatenate([[True], (np.diff(s_seg) != 0) | (np.diff(s_slack) != 0)])
        group = np.cumsum(first) - 1
        inv = np.empty(seg.size, dtype=np.int64)
        inv[order] = group
        seg_w = s_seg[first]
        found, value = _walk_from_top(
            self.rp[sl][seg_w],
            self.rq[sl][seg_w],
            self.e_pair[sl][seg_w],
            self.scale[sl][seg_w],
            s_slack[first],
            self.table,
            self.energy,
        )
        return value[inv], found[inv]

    def _start_sums(self, sl, sorted_idx, sorted_weight):
        """Return the exact running sum at every segment start of the chunk, or ``None`` if a run leaves its binade.

        Grid sums over each run of regular segments, the sorted segments' weights added one at a time.
        """
        regular, counts, m_sum, expo = self.regular[sl], self.counts[sl], self.m_sum[sl], self.expo[sl]
        u = np.ldexp(1.0, expo - 52)
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
        return x_start


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
