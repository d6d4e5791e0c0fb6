"""The optimal mechanism (Bordenabe, Chatzikokolakis and Palamidessi, CCS 2014) over all of X.

The LP::

    minimise   sum_{x, y} p_x cost[x, y] z[x, y]
    subject to sum_y z[x, y] = 1                                   for every record x
               z[x, y] <= exp(eps d(x, x')) z[x', y]               for every ordered pair, every y
               eta <= z[x, y] <= 1

With the floor ``eta > 0`` every pair with ``exp(eps d) eta >= 1`` holds by the bounds alone
(``z[x, y] <= 1 <= exp(eps d) eta <= exp(eps d) z[x', y]``) and is left out exactly: only pairs
closer than ``ln(1 / eta) / eps`` km are written. The floor costs at most
``eta * M * max cost`` (metres) against the LP without it (``cost_bound_m`` in ``details``), so a
lower bound on the floored LP is *not* a lower bound on every eps-mDP mechanism: ``details``
reports the one that is as ``lower_bound_m`` (:func:`bound_without_floor`).

A greedy ``t``-spanner (``spanner_dilation = t > 1``) shrinks the pairs further: constraints only
on spanner edges, with exponent ``eps d / t``. For a pair ``(x, x')`` the spanner holds a path of
length ``<= t d(x, x')``; multiplying the edge constraints along it gives a ratio of at most
``exp(eps / t * t d) = exp(eps d)``: still eps-mDP, at some utility cost. Only pairs closer than
``ln(1 / eta) / eps`` need a path (the rest hold by the floor), so only those are spanned.

:func:`build_lp` solves it by default with :func:`panda.optimal.solve_optimal` (``method="certified"``):
row generation per right entry, each round by restarted Halpern PDHG with compiled block steps on
dense instances or by HiGHS's warm dual simplex on sparse ones; a weak-duality lower bound after
every round, and an exact repair (:func:`panda.optimal.exact_repair`) that makes the relaxation's
point exactly eps-mDP, the upper bound; the returned matrix is audited over every pair. The earlier
path, ``method="exact"`` (:func:`panda.lp.solve_mdp_lp`, needed for a spanner or ``eta = 0``), trusts
HiGHS's optimum: HiGHS accepts constraint violations up to its feasibility tolerance (absolute 1e-7:
several percent on an entry near the floor), so its solution is passed through
:func:`panda.mechanisms.repair_mdp`, which makes it exactly eps-mDP at a utility change of the
tolerance's size (``details["repair"]``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from panda.audit import audit_mechanism, audit_numbers
from panda.instance import Instance
from panda.lp import SOLVERS, solve_mdp_lp
from panda.mechanisms._common import check_positive, finish, output_distances_km, repair_mdp, unsolved_status
from panda.mechanisms.base import MechanismResult, check_epsilon
from panda.mechanisms.em import em_matrix
from panda.optimal import OptimalResult, solve_optimal

__all__ = ["build_lp", "build_lp_warm", "mdp_pairs", "greedy_spanner", "check_eta", "bound_without_floor", "LP_METHODS"]


def check_eta(eta: object, m: int, where: str) -> float:
    """Validate the floor ``eta`` in ``[0, 1/M)``."""
    if isinstance(eta, bool) or not isinstance(eta, (int, float, np.floating)) or not (0 <= float(eta) < 1.0 / m):
        msg = f"The 'eta' parameter of {where} must be a float in [0, 1/M) = [0, {1.0 / m:.3g}). Got {eta!r} instead."
        raise ValueError(msg)
    return float(eta)


def bound_without_floor(floored_bound: float, cost: np.ndarray, eta: float) -> float:
    """Turn a lower bound on the floored LP into one on every eps-mDP mechanism over the same outputs.

    Parameters
    ----------
    floored_bound
        A lower bound ``L`` on the optimum ``P_eta`` of the LP over *all* record pairs with every
        entry ``>= eta`` (not a spanner's restriction: its optimum is not below ``P_eta``).
    cost
        ``(K, M)`` objective coefficients, ``prior[x] * cost_m[x, y]``.
    eta
        The floor, ``0 <= eta < 1 / M``.

    Returns
    -------
    float
        ``(L - eta S) / (1 - M eta)`` with ``S = sum(cost)``: at most the optimum ``P_0`` over every
        eps-mDP mechanism with outputs ``Y`` (no floor).

    Notes
    -----
    Let ``z`` be any eps-mDP mechanism (rows sum to 1, ``z >= 0``) and ``theta = M eta < 1``. The
    mix with the uniform mechanism ``z' = (1 - theta) z + theta / M`` has rows summing to 1, every
    entry ``>= theta / M = eta``, and keeps every pair row: ``z'[x, y] = (1 - theta) z[x, y] + eta
    <= (1 - theta) e^{eps d} z[x', y] + eta <= e^{eps d} z'[x', y]`` as ``e^{eps d} >= 1``. So ``z'``
    is feasible for the floored LP and ``L <= P_eta <= cost . z' = (1 - theta) cost . z + eta S``;
    at the optimal ``z``, ``P_0 >= (L - eta S) / (1 - M eta)``. Since ``S <= M max cost_m`` and
    ``P_0 >= 0``, this is at least ``L - cost_bound_m`` (``eta M max cost_m``): the floored LP's
    optimum lies at most the floor's cost bound above ``P_0``, and can lie above it (issue 28:
    Liechtenstein, K = 22, 1.5/km, floored bound 423.149 m against the optimum 423.095 m).
    """
    c = np.asarray(cost, dtype=float)
    m = c.shape[1]
    return float((float(floored_bound) - eta * float(c.sum())) / (1.0 - m * eta))


def greedy_spanner(
    d_km: np.ndarray, dilation: float, *, max_length_km: float = np.inf
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy ``t``-spanner of the pairs closer than ``max_length_km``.

    Pairs are scanned by increasing distance; a pair becomes an edge when the spanner's current
    shortest path between its ends is longer than ``t d``. Afterwards every pair closer than
    ``max_length_km`` has a spanner path of length ``<= t d``. The spanner distances are kept in a
    ``K x K`` array. With a finite ``max_length_km = R`` only paths shorter than ``t R`` are ever
    asked for, so a new edge ``(u, v)`` updates only the block of records whose spanner path to
    ``u`` or ``v`` is already shorter than ``t R - d(u, v)``: entries shorter than ``t R`` stay
    exact (by induction over the edges), and early on, when most records are not yet connected, the
    blocks are small: the same edges as a full update for a fraction of its work, the more so the
    larger K. Without a cap, every finite entry is updated.

    Returns
    -------
    i, j
        The undirected edges (``i < j``).
    """
    d = np.asarray(d_km, dtype=float)
    k = d.shape[0]
    ii, jj = np.triu_indices(k, 1)
    dd = d[ii, jj]
    keep = dd < max_length_km
    ii, jj, dd = ii[keep], jj[keep], dd[keep]
    order = np.argsort(dd, kind="stable")
    span = np.full((k, k), np.inf)
    np.fill_diagonal(span, 0.0)
    limit = dilation * max_length_km
    edges_i: list[int] = []
    edges_j: list[int] = []
    for u, v, w in zip(ii[order].tolist(), jj[order].tolist(), dd[order].tolist(), strict=True):
        if span[u, v] <= dilation * w:
            continue
        edges_i.append(u)
        edges_j.append(v)
        # New paths a ... u - v ... b through the edge, in either direction, shorter than the limit:
        # only the ends already that close to u or v (those entries are exact, by induction).
        su, sv = span[u], span[v]  # span is symmetric: rows are the distances to u and to v
        idx = np.flatnonzero((np.minimum(su, sv) + w) < limit)
        su, sv = su[idx], sv[idx]
        via = np.minimum(su[:, None] + w + sv[None, :], sv[:, None] + w + su[None, :])
        block = np.ix_(idx, idx)
        span[block] = np.minimum(span[block], via)
    return np.asarray(edges_i, dtype=np.int64), np.asarray(edges_j, dtype=np.int64)


def mdp_pairs(
    d_km: np.ndarray,
    epsilon_per_km: float,
    *,
    eta: float,
    spanner_dilation: float | None = None,
    neighbour_radius_km: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Ordered record pairs and exponents of an eps-mDP LP, the floor-implied ones left out.

    Parameters
    ----------
    d_km
        ``(K, K)`` privacy distances, km.
    epsilon_per_km
        The budget.
    eta
        The floor on every entry; pairs with ``exponent >= ln(1 / eta)`` are implied and left out.
    spanner_dilation
        ``t > 1``: only edges of a greedy ``t``-spanner, exponent ``eps d / t``.
    neighbour_radius_km
        Constrain only pairs closer than this (the published artifact's 0.8 km rule). This does
        NOT give eps-mDP between farther records; for reproduction only.

    Returns
    -------
    pairs_i, pairs_j, exponent, info
        ``info`` counts ``n_pairs_total`` (ordered pairs the guarantee covers), ``n_pairs_implied``
        (left out: implied by the floor) and ``n_pairs`` (handed to the LP).
    """
    d = np.asarray(d_km, dtype=float)
    k = d.shape[0]
    eps = float(epsilon_per_km)
    cutoff_exp = -np.log(eta) if eta > 0 else np.inf  # exponents >= this are implied by the floor
    n_total = k * (k - 1)
    info: dict = {"n_pairs_total": n_total}
    if spanner_dilation is not None:
        t = float(spanner_dilation)
        # Pairs with eps d >= cutoff hold by the floor; only nearer ones need a spanner path.
        ei, ej = greedy_spanner(d, t, max_length_km=cutoff_exp / eps)
        if neighbour_radius_km is not None:
            near = d[ei, ej] < neighbour_radius_km
            ei, ej = ei[near], ej[near]
        pi = np.concatenate([ei, ej])
        pj = np.concatenate([ej, ei])
        b = eps * d[pi, pj] / t
        implied = b >= cutoff_exp
        pi, pj, b = pi[~implied], pj[~implied], b[~implied]
        info.update(
            n_spanner_edges=int(ei.size),
            spanner_dilation=t,
            n_pairs=int(pi.size),
            n_pairs_implied=int(n_total - pi.size) if neighbour_radius_km is None else None,
        )
        return pi, pj, b, info
    limit = cutoff_exp / eps
    if neighbour_radius_km is not None:
        limit = min(limit, float(neighbour_radius_km))
    parts_i, parts_j = [], []
    step = max(1, 4_000_000 // max(k, 1))
    for s in range(0, k, step):
        block = d[s : s + step]
        r, c = np.nonzero(block < limit)
        r = r + s
        off = r != c
        parts_i.append(r[off])
        parts_j.append(c[off])
    pi = np.concatenate(parts_i) if parts_i else np.zeros(0, dtype=np.int64)
    pj = np.concatenate(parts_j) if parts_j else np.zeros(0, dtype=np.int64)
    b = eps * d[pi, pj]
    info.update(
        n_pairs=int(pi.size),
        n_pairs_implied=int(n_total - pi.size) if neighbour_radius_km is None else None,
    )
    if neighbour_radius_km is not None:
        info["n_pairs_dropped_by_radius"] = int(n_total - pi.size)
    return pi.astype(np.int64), pj.astype(np.int64), b, info


#: Ways :func:`build_lp` can solve the LP.
LP_METHODS = ("certified", "exact")

#: First LP (and solver) of the certified method: chosen by the instance's density, the outputs' own
#: records as sources (dual simplex), or a greedy spanner (PDHG).
LP_STARTS = ("auto", "outputs", "spanner")

#: ``start="auto"`` picks the spanner and PDHG when records have at least this many others within
#: the floor radius ln(1/eta)/eps on average. Dense instances have many pair rows: warm dual simplex
#: slows down as its LP grows, while a PDHG step's cost grows only in proportion to the rows, so PDHG
#: reaches the gap sooner there; on sparse instances the LP stays small and dual simplex wins. The
#: threshold lies between the densest instance where dual simplex was faster and the sparsest where
#: PDHG was (``bench/bench_optimal.py --methods spanner outputs`` times both starts;
#: docs/benchmarks.md, "Optimal LP: dual simplex or PDHG").
AUTO_PDHG_NEIGHBOURS = 25

#: (There is no cap on the records: PDHG reaches the gap on the largest instances too,
#: docs/benchmarks.md, "Rome at scale".)

#: ``start="auto"`` picks PDHG only for a gap target at least this large: PDHG iterates in single
#: precision and stops at a gap; a tighter target (``gap=0``: until no row is violated) needs dual
#: simplex's vertices.
AUTO_PDHG_MIN_GAP = 1e-3

#: ``start="spanner"``: the spanner's dilation, and how far from an output (as a share of the floor
#: radius ln(1/eta)/eps) a record may be to be a left end of its rows (measured, docs/benchmarks.md).
SPANNER_START_DILATION = 1.25
SPANNER_START_REACH = 0.72

#: Certified method: at most this share of ``K * M`` new pair rows a round, by start (measured,
#: docs/benchmarks.md): small batches keep warm dual simplex fast; PDHG takes what it finds.
SIMPLEX_BATCH = 0.1
PDHG_BATCH = 1.0


def build_lp(
    instance: Instance,
    epsilon_per_km: float,
    *,
    eta: float = 1e-6,
    spanner_dilation: float | None = None,
    time_limit_s: float = 1800.0,
    solver: str = "simplex",
    row_generation: bool = True,
    gap: float = 0.005,
    method: str | None = None,
    batch: float | None = None,
    start: str = "auto",
    warm: OptimalResult | None = None,
) -> MechanismResult:
    """Build the optimal eps-mDP mechanism over all of X (Bordenabe et al. 2014), with a certificate.

    By default (``method="certified"``, :func:`panda.optimal.solve_optimal`): row generation per right entry, each round
    solved by restarted Halpern PDHG with numba's compiled block steps on dense instances or by HiGHS's warm dual
    simplex on sparse ones (``start``); the answer is an exactly eps-mDP matrix (an exact repair of a relaxation's
    point, audited over every pair: the upper bound) and a weak-duality lower bound (see Notes).

    Parameters
    ----------
    instance
        The problem instance.
    epsilon_per_km
        Privacy budget, 1/km.
    eta
        Floor on every entry; makes far pairs implied (left out exactly). ``0`` writes every pair.
    spanner_dilation
        ``t > 1``: constrain only a greedy ``t``-spanner's edges with exponent ``eps d / t`` (still eps-mDP, fewer
        constraints, some utility lost). ``None``: all pairs.
    time_limit_s
        Wall-time budget. The certified method returns its best certified mechanism and both bounds when it runs out;
        the exact method returns no matrix.
    solver
        HiGHS solver of the ``"exact"`` method (``"simplex"``, ``"ipm"``, ...). The certified method ignores it: its
        rounds run on PDHG or on HiGHS's warm dual simplex, as ``start`` says.
    row_generation
        ``"exact"`` method only: constraint generation (:func:`panda.lp.solve_mdp_lp`) or, with ``False``, every pair
        row at once.
    gap
        Certified method: stop once ``(upper - lower) / upper <= gap``; the status is ``"solved"`` only then. ``0`` runs
        until no pair row is violated.
    method
        ``"certified"`` (:func:`panda.optimal.solve_optimal`: row generation per right entry, an exactly audited
        mechanism and a proven lower bound after every round) or ``"exact"`` (the earlier row generation of
        :func:`panda.lp.solve_mdp_lp`, no bound until it finishes). ``None`` picks ``"certified"`` unless a spanner,
        ``eta = 0`` or ``row_generation=False`` asks for the exact one.
    batch
        Certified method: at most ``batch * K * M`` pair rows added per round (``None``: 0.1 for the simplex rounds of
        ``start="outputs"``, 1.0 for the PDHG rounds of ``"spanner"``).
    start
        Certified method, the first LP and the solver. ``"auto"`` (the default): ``"spanner"`` when the records have on
        average at least :data:`AUTO_PDHG_NEIGHBOURS` others within the floor radius ``ln(1/eta) / eps`` (dense: many
        pair rows) and ``gap`` is at least :data:`AUTO_PDHG_MIN_GAP`, else ``"outputs"``. ``"outputs"``: each output's
        own record is the left end of a row to every record, then warm dual simplex rounds (exact, and fast while the LP
        stays small). ``"spanner"``: the pair rows of a greedy 1.25-spanner at every output, for left ends within 0.72
        of the floor radius of it, solved by restarted PDHG (:mod:`panda.pdhg`) from the exponential mechanism, warm
        from round to round, violated rows added (and slack rows dropped) after every round of
        :func:`~panda.optimal.pdhg_round_steps` steps (more once few rows come in). Every PDHG dual point is a proven
        bound and every certified primal point is repaired exactly, so it certifies dense instances far sooner than dual
        simplex, whose LP grows with their many pair rows (its steps compiled on every core, :mod:`panda._pdhg_blocks`;
        ``bench/bench_optimal.py`` measures both; docs/benchmarks.md).
    warm
        Certified method: a solve of the same instance at another eps to start from (:mod:`panda.optimal.warm`;
        :func:`build_lp_warm` returns it beside the mechanism), or ``None`` (cold, the default). Only the speed changes:
        the answer is certified (audit, bound) exactly as a cold one's. ``details["warm"]`` then holds the start's facts
        (the eps it came from, the rows carried, its first bounds).

    Notes
    -----
    ``details`` always has

    * ``upper_bound_m``: the loss of the returned, exactly eps-mDP matrix (``nan`` without one);
    * ``lower_bound_m``: a proven lower bound on the loss of *every* eps-mDP mechanism over these outputs, with or
      without the floor: the claim "no mechanism can do better". Certified method: the larger of the weak-duality bound
      without the floor (``lower_bound_no_floor_m``, the same multipliers with ``eta`` taken as 0) and
      :func:`bound_without_floor` of the floored LP's bound. Exact method: :func:`bound_without_floor` of the floored
      LP's optimum (HiGHS, exact up to its tolerances) or of the last finished round's; ``nan`` with a spanner (its LP
      is a restriction: its optimum is no bound on the full LP's);
    * ``lower_bound_floored_lp_m``: the bound on the LP actually solved (the floor ``eta``; with a spanner, its
      restriction). It can exceed the optimum over every mechanism by up to the floor's cost (``cost_bound_m``); never
      show it as a bound on every mechanism;
    * ``gap``: ``(upper_bound_m - lower_bound_m) / upper_bound_m``, against every mechanism, and ``gap_floored_lp``
      against the floored LP's bound. The status ``"solved"`` means the floored LP reached the gap target
      (``gap_floored_lp <= gap``, or no violated row left); ``gap`` can be larger by the floor's cost;
    * ``certificate``: how each bound was obtained.
    """
    return _build_lp(
        instance, epsilon_per_km, eta=eta, spanner_dilation=spanner_dilation, time_limit_s=time_limit_s,
        solver=solver, row_generation=row_generation, gap=gap, method=method, batch=batch, start=start, warm=warm,
    )[0]  # fmt: skip


def _build_lp(
    instance: Instance,
    epsilon_per_km: float,
    *,
    eta: float = 1e-6,
    spanner_dilation: float | None = None,
    time_limit_s: float = 1800.0,
    solver: str = "simplex",
    row_generation: bool = True,
    gap: float = 0.005,
    method: str | None = None,
    batch: float | None = None,
    start: str = "auto",
    warm: OptimalResult | None = None,
) -> tuple[MechanismResult, OptimalResult | None]:
    """:func:`build_lp`, returning the certified solver's result too (``None`` for the exact method)."""
    eps = check_epsilon(epsilon_per_km, "build_lp")
    eta = check_eta(eta, instance.n_outputs, "build_lp")
    if spanner_dilation is not None:
        check_positive(spanner_dilation, "spanner_dilation", "build_lp", low=1.0)
    check_positive(time_limit_s, "time_limit_s", "build_lp")
    if solver not in SOLVERS:
        msg = f"The 'solver' parameter of build_lp must be one of {SOLVERS}. Got {solver!r} instead."
        raise ValueError(msg)
    if isinstance(gap, bool) or not isinstance(gap, (int, float, np.floating)) or not (0.0 <= float(gap) < 1.0):
        msg = f"The 'gap' parameter of build_lp must be a float in [0, 1). Got {gap!r} instead."
        raise ValueError(msg)
    if method is not None and method not in LP_METHODS:
        msg = f"The 'method' parameter of build_lp must be one of {LP_METHODS} or None. Got {method!r} instead."
        raise ValueError(msg)
    if start not in LP_STARTS:
        msg = f"The 'start' parameter of build_lp must be one of {LP_STARTS}. Got {start!r} instead."
        raise ValueError(msg)
    if method is None:
        exact_needed = spanner_dilation is not None or eta == 0.0 or not row_generation
        method = "exact" if exact_needed else "certified"
    if method == "certified" and (spanner_dilation is not None or eta == 0.0):
        msg = (
            "The 'certified' method of build_lp solves the LP over all pairs with a floor eta > 0; "
            "use method='exact' for a spanner or eta = 0."
        )
        raise ValueError(msg)
    if method == "certified":
        return _build_certified(
            instance, eps, eta=eta, time_limit_s=time_limit_s, gap=float(gap), batch=batch, start=start, warm=warm
        )
    if warm is not None:
        msg = "The 'warm' parameter of build_lp needs the 'certified' method (eta > 0, no spanner). Got method='exact'."
        raise ValueError(msg)
    mech = _build_exact(
        instance,
        eps,
        eta=eta,
        spanner_dilation=spanner_dilation,
        time_limit_s=time_limit_s,
        solver=solver,
        row_generation=row_generation,
    )
    return mech, None


def build_lp_warm(
    instance: Instance, epsilon_per_km: float, *, warm: OptimalResult | None = None, **kwargs: Any
) -> tuple[MechanismResult, OptimalResult | None]:
    """Build as :func:`build_lp` does and return the solver's result beside the mechanism (a later warm start).

    The :class:`panda.optimal.OptimalResult` (matrix, last pair rows, multipliers, PDHG state: what
    :mod:`panda.optimal.warm` reads) is kept out of the mechanism's ``details`` on purpose: those are
    stored whole with the mechanism (``app/result_store.put_mechanism``), and the state is large (the
    last LP's rows and multipliers). Pass it as ``warm=`` to the next eps of the same instance. ``None``
    for the ``"exact"`` method (no warm start there). ``kwargs``: :func:`build_lp`'s.
    """
    return _build_lp(instance, epsilon_per_km, warm=warm, **kwargs)


def spanner_seed_rows(instance: Instance, eps: float, eta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair rows ``(s, x, y)`` of ``start="spanner"``.

    Both directions of every greedy-spanner edge shorter than the floor radius ``ln(1/eta)/eps``,
    at every output ``y`` whose utility cost from the left end ``s`` is at most
    ``SPANNER_START_REACH`` times that radius: the optimum's sources (the left ends of its binding
    rows) are the entries with the smallest cost, and rows from far entries rarely bind.
    """
    radius = float(np.log(1.0 / eta) / eps)
    i, j = greedy_spanner(instance.d_km, SPANNER_START_DILATION, max_length_km=radius)
    s, x = np.r_[i, j], np.r_[j, i]
    row, y = np.nonzero(instance.cost_m[s] <= SPANNER_START_REACH * radius * 1000.0)  # (rows, M), metres
    return s[row], x[row], y


def mean_floor_neighbours(d_km: np.ndarray, eps: float, eta: float) -> float:
    """How many other records lie within the floor radius ``ln(1/eta) / eps`` of a record, on average."""
    k = d_km.shape[0]
    return float(((np.asarray(d_km) < np.log(1.0 / eta) / eps).sum() - k) / max(k, 1))


def auto_start(neighbours: float, gap: float) -> str:
    """``start="auto"``: ``"spanner"`` (PDHG) on dense instances, else ``"outputs"`` (dual simplex).

    Dense: at least :data:`AUTO_PDHG_NEIGHBOURS` records within the floor radius on average; and
    the gap target must be at least :data:`AUTO_PDHG_MIN_GAP` (an exact optimum needs dual simplex).
    """
    return "spanner" if neighbours >= AUTO_PDHG_NEIGHBOURS and gap >= AUTO_PDHG_MIN_GAP else "outputs"


def _build_certified(
    instance: Instance,
    eps: float,
    *,
    eta: float,
    time_limit_s: float,
    gap: float,
    batch: float | None,
    start: str,
    warm: OptimalResult | None = None,
) -> tuple[MechanismResult, OptimalResult]:
    """Build the certified optimal mechanism (:func:`panda.optimal.solve_optimal`), and return the solver's result."""
    t0 = time.perf_counter()
    cost = instance.prior[:, None] * instance.cost_m
    neighbours = mean_floor_neighbours(instance.d_km, eps, eta)
    if start == "auto":
        start = auto_start(neighbours, gap)
    res = _solve_certified(
        instance, cost, eps, eta=eta, time_limit_s=time_limit_s, gap=gap, batch=batch, start=start, warm=warm, t0=t0
    )
    lower, honest_gap = _bound_on_every_mechanism(res, cost, eta)
    details = _certified_details(instance, eps, eta, gap, res, lower, honest_gap, start, neighbours)
    if warm is not None:  # the start's facts (small); the state itself is returned, never kept in details
        details["warm"] = dict(res.info.get("warm") or {})
    if res.matrix is not None:
        # The certificate's upper half, checked independently: every pair, exactly.
        audit = audit_mechanism(res.matrix, instance.d_km, eps)
        details.update(audit_passed=audit.passed, audit_epsilon_min_per_km=audit.epsilon_min_per_km)
        details["exact_audit"] = audit_numbers(audit, res.matrix)  # mechanism_numbers reuses it
        if not audit.passed:
            status = f"failed: the repaired matrix breaks eps-mDP on {audit.n_violations} pairs (a bug; report it)"
            return finish("lp", eps, instance, None, status, t0, details), res
    if res.solved and res.matrix is not None:
        return finish("lp", eps, instance, res.matrix, "solved", t0, details), res
    status = _unsolved_certified_status(res, lower, honest_gap, time.perf_counter() - t0)
    return finish("lp", eps, instance, res.matrix, status, t0, details), res


def _solve_certified(
    instance: Instance,
    cost: np.ndarray,
    eps: float,
    *,
    eta: float,
    time_limit_s: float,
    gap: float,
    batch: float | None,
    start: str,
    warm: OptimalResult | None,
    t0: float,
) -> OptimalResult:
    """Run :func:`panda.optimal.solve_optimal` from ``start`` (``"spanner"``: PDHG; else dual simplex), within budget.

    ``t0`` is when the build began: the spanner's construction counts against ``time_limit_s``.
    """

    def solve(time_limit: float, **options: Any) -> OptimalResult:
        if warm is not None:  # (a cold solve gets no warm argument at all)
            options["warm"] = warm
        return solve_optimal(cost, instance.d_km, eps, eta=eta, gap=gap, time_limit_s=time_limit, **options)

    if start == "spanner":
        # Restarted PDHG from the exponential mechanism (its rows' costs start the row-sum multipliers).
        start_matrix = em_matrix(output_distances_km(instance), eps)
        seed_rows = spanner_seed_rows(instance, eps, eta)
        return solve(
            # The spanner counts against the budget (it takes a noticeable share on large K).
            max(time_limit_s - (time.perf_counter() - t0), 0.0),
            method="pdhg",
            seed_rows=seed_rows,
            start_matrix=start_matrix,
            batch=PDHG_BATCH if batch is None else batch,
        )
    return solve(time_limit_s, seed_sources=instance.outputs, batch=SIMPLEX_BATCH if batch is None else batch)


def _finite(value: float) -> float:
    """Return ``value`` as a float, ``nan`` for an infinite one (no bound of that kind yet)."""
    return float(value) if np.isfinite(value) else float("nan")


def _bound_on_every_mechanism(res: OptimalResult, cost: np.ndarray, eta: float) -> tuple[float, float]:
    """Return the lower bound on every eps-mDP mechanism (with or without the floor) and the gap to it.

    The bound is the floor-free dual bound, or the floored LP's bound less the floor's cost
    (:func:`bound_without_floor`), whichever is larger; ``nan`` when there is none (nor a gap).
    """
    candidates = [v for v in (res.lower_bound_no_floor, res.lower_bound) if np.isfinite(v)]
    if np.isfinite(res.lower_bound):
        candidates[-1] = bound_without_floor(res.lower_bound, cost, eta)
    lower = max(candidates) if candidates else float("nan")
    upper = _finite(res.upper_bound)
    honest_gap = (upper - lower) / upper if np.isfinite(upper) and np.isfinite(lower) and upper > 0 else float("nan")
    return lower, honest_gap


def _certified_details(
    instance: Instance,
    eps: float,
    eta: float,
    gap: float,
    res: OptimalResult,
    lower: float,
    honest_gap: float,
    start: str,
    neighbours: float,
) -> dict:
    """Write the certified build's ``details``: pair counts, both bounds and how they were obtained, the rounds."""
    k = instance.n_records
    n_pairs = int(((eps * instance.d_km < -np.log(eta)) & ~np.eye(k, dtype=bool)).sum())
    repair = dict(res.info.get("repair", {}))
    return {
        "method": "certified",
        "n_pairs_total": k * (k - 1),
        "n_pairs": n_pairs,
        "n_pairs_implied": k * (k - 1) - n_pairs,
        "eta": eta,
        "cost_bound_m": float(eta * instance.n_outputs * instance.cost_m.max()),
        "objective_m": _finite(res.upper_bound),
        "upper_bound_m": _finite(res.upper_bound),
        "lower_bound_m": lower,
        "lower_bound_no_floor_m": _finite(res.lower_bound_no_floor),
        "lower_bound_floored_lp_m": _finite(res.lower_bound),
        "gap": honest_gap,
        "gap_floored_lp": _finite(res.gap),
        "gap_target": gap,
        "stop_reason": res.reason,
        "certificate": {
            "upper": "loss of the returned matrix, exactly eps-mDP after an exact repair "
            f"({repair.get('kind', 'none')}; largest log-ratio excess before it "
            f"{repair.get('max_log_excess_before', 0.0):.2g})",
            "lower": "weak duality: row-sum duals and pair-row duals (>= 0) of the last relaxation, "
            "sum(u) + sum(min(eta rc, rc)) over every entry (rows not in the LP have multiplier 0) bounds the "
            "floored LP (lower_bound_floored_lp_m); lower_bound_m, on every eps-mDP mechanism over these outputs, "
            "is the larger of sum(u) + sum(min(rc, 0)) (no floor) and (floored bound - eta sum(cost)) / (1 - M eta)",
        },
        "repair": repair,
        "lp_rows": res.rounds[-1]["rows"] if res.rounds else 0,
        "lp_status": res.rounds[-1]["status"] if res.rounds else "not run",
        "lp_time_s": float(sum(r["solve_s"] for r in res.rounds)),
        "solver": "restarted PDHG, warm between rounds" if start == "spanner" else "simplex (warm, Devex)",
        "start": start,
        "mean_floor_neighbours": neighbours,
        "row_generation": {
            "rounds": res.rounds,
            "n_rounds": len(res.rounds),
            "lower_bound": _finite(res.lower_bound),
            "n_pair_rows": res.info.get("n_pair_rows"),
            "batch": res.info.get("batch"),
        },
    }


def _unsolved_certified_status(res: OptimalResult, lower: float, honest_gap: float, elapsed: float) -> str:
    """Return the status line of a certified build stopped before its gap target (with or without a matrix)."""
    if res.matrix is None:
        bound = f"; loss >= {lower:.1f} m" if np.isfinite(lower) else ""
        why = "time limit" if res.reason == "time limit" else res.reason
        return f"unsolved: {why} after {elapsed:.1f} s{bound}"
    where = "at time limit" if res.reason == "time limit" else f"({res.reason})"
    return (
        f"unsolved: gap {100 * honest_gap:.1f} % {where} after {elapsed:.1f} s "
        f"(loss {res.upper_bound:.1f} m, bound {lower:.1f} m)"
        if np.isfinite(honest_gap)
        else f"unsolved: no bound {where} after {elapsed:.1f} s (loss {res.upper_bound:.1f} m)"
    )


def _build_exact(
    instance: Instance,
    eps: float,
    *,
    eta: float,
    spanner_dilation: float | None,
    time_limit_s: float,
    solver: str,
    row_generation: bool,
) -> MechanismResult:
    """Build the mechanism by the earlier exact path (:func:`panda.lp.solve_mdp_lp`), no matrix unless solved."""
    t0 = time.perf_counter()
    pi, pj, b, info = mdp_pairs(instance.d_km, eps, eta=eta, spanner_dilation=spanner_dilation)
    remaining = time_limit_s - (time.perf_counter() - t0)
    if remaining <= 0:
        return finish("lp", eps, instance, None, f"unsolved: time limit after {time_limit_s:.1f} s", t0, info)
    cost = instance.prior[:, None] * instance.cost_m
    # First round of row generation: pair rows only where an entry can sit above the floor, i.e.
    # the output is closer than ln(1 / eta) / eps (an EM-shaped row decays like exp(-eps d)).
    near_output = output_distances_km(instance) < -np.log(eta) / eps if eta > 0 else None
    res = solve_mdp_lp(
        cost,
        pi,
        pj,
        b,
        eta=eta,
        time_limit_s=remaining,
        solver=solver,
        row_generation=row_generation,
        initial_entries=near_output,
    )
    details = {
        **info,
        "eta": eta,
        "cost_bound_m": float(eta * instance.n_outputs * instance.cost_m.max()),
        "n_pairs_kept": res.n_pairs_kept,
        "n_groups": res.n_groups,
        "lp_rows": res.lp.n_rows,
        "lp_cols": res.lp.n_cols,
        "lp_status": res.lp.status,
        "lp_time_s": res.lp.time_s,
        "solver": solver,
        "objective_m": res.objective,
        "method": "exact",
    }
    if "row_generation" in res.extra:
        details["row_generation"] = res.extra["row_generation"]

    def every_mechanism(floored: float) -> float:
        """Return a bound on every eps-mDP mechanism from one on the LP solved (none from a spanner restriction)."""
        if spanner_dilation is not None or not np.isfinite(floored):
            return float("nan")
        return bound_without_floor(floored, cost, eta)

    if not res.success or res.z is None:
        # Every round is a relaxation of the floored LP: its optimum bounds the LP's from below.
        floored = float(details.get("row_generation", {}).get("lower_bound", float("nan")))
        bound = every_mechanism(floored)
        details.update(lower_bound_m=bound, lower_bound_floored_lp_m=floored)
        details.update(upper_bound_m=float("nan"), gap=float("nan"), gap_floored_lp=float("nan"))
        status = unsolved_status(res.lp.status, time.perf_counter() - t0)
        if np.isfinite(bound):
            status += f"; loss >= {bound:.1f} m (last finished round)"
        return finish("lp", eps, instance, None, status, t0, details)
    matrix, details["repair"] = repair_mdp(res.z, instance.d_km, eps)
    loss = float((cost * matrix).sum())
    floored = min(float(res.lp.objective), loss)  # the floored LP's optimum (HiGHS tolerances)
    lower = every_mechanism(floored)
    details.update(
        upper_bound_m=loss,
        lower_bound_m=lower,
        lower_bound_floored_lp_m=floored,
        gap=max(loss - lower, 0.0) / loss if loss > 0 and np.isfinite(lower) else (0.0 if loss == 0 else float("nan")),
        gap_floored_lp=max(loss - floored, 0.0) / loss if loss > 0 else 0.0,
        certificate={
            "upper": "loss of the returned matrix, exactly eps-mDP after repair_mdp",
            "lower": "optimum reported by HiGHS for the floored LP (exact up to its tolerances): "
            "lower_bound_floored_lp_m; lower_bound_m, on every eps-mDP mechanism over these outputs, is "
            "(it - eta sum(cost)) / (1 - M eta) (nan with a spanner: its LP is a restriction, no bound)",
        },
    )
    return finish("lp", eps, instance, matrix, "solved", t0, details)
