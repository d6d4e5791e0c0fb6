"""The optimal eps-mDP mechanism with a certificate: an exactly feasible mechanism and a proven bound.

The LP (Bordenabe et al. 2014) over records ``x`` (K) and outputs ``y`` (M)::

    minimise   sum_{x, y} cost[x, y] z[x, y]
    subject to sum_y z[x, y] = 1                              for every x        (row sums)
               z[s, y] <= exp(eps d(s, x)) z[x, y]            for every s != x, y (pair rows)
               eta <= z[x, y] <= 1

With the floor ``eta > 0`` a pair with ``exp(eps d) eta >= 1`` holds by the bounds and is never
written. :func:`solve_optimal` never claims more than it can prove. Whatever the solver does, the
answer carries

* an **upper bound**: the objective of a matrix that is *exactly* eps-mDP and row-stochastic,
  made so by :func:`exact_repair` (the min-plus closure or the envelope of the relaxation's
  solution, or the envelope of its sources, the entries with negative ``cost - u``; rows
  balanced through entries that can move alone, and if needed a mix with the uniform
  mechanism; every step keeps or restores exact feasibility), and
* a **lower bound**: the weak-duality value of *any* multipliers, ``u`` for the row sums and
  ``lam >= 0`` for any subset of pair rows (:func:`dual_bound`)::

      L(u, lam) = sum_x u_x + sum_{x, y} min(eta rc[x, y], rc[x, y]),
      rc = cost - u + sum of lam over the rows where (x, y) is the left end
                    - sum of exp(eps d) lam over the rows where (x, y) is the right end.

  Pair rows left out simply have ``lam = 0``: the bound holds for the whole LP, however few rows
  the multipliers come from. With ``eta`` replaced by 0 it also bounds the LP without the floor.

Algorithm (chosen by measurement, see docs/benchmarks.md): row generation per right entry.
Start from the rows that make every output's own record a source (``z[y, y] <= a z[x, y]``),
solve, and for every right entry ``(x, y)`` add the row of the left end ``s`` that violates
``z[s, y] <= exp(eps d(s, x)) z[x, y]`` most (beyond 1e-9, rows already in the LP are never added
again), at most ``batch * K * M`` rows per round ranked by relative violation, warm dual simplex
with Devex pricing. The lower bound is computed after every round, the upper bound whenever its
repair has cost at most half the solving time so far (and always at the end; the repair and the
separation look only at pairs within the floor radius, :class:`_Near`); the loop stops when
the gap reaches ``gap``, when no row is violated, or at the time limit.

``method="pdhg"`` replaces the LP solves by restarted PDHG (:mod:`panda.pdhg`, Halpern's scheme:
:data:`PDHG_SCHEME`), warm from round to round, for dense instances (many pairs within the floor
radius; ``build_lp``'s ``start="auto"`` picks it there): every PDHG dual point is a bound by the
formula above, and after a certified round the best pair multipliers for its row-sum multipliers
(:func:`best_pair_multipliers`) give a stronger one. Rounds end by steps, so a run is reproducible
up to where its deadline falls. Its points are approximate, so a row is added only when violated
by more than :data:`PDHG_SEPARATION_REL` (relative), and the run never counts as exact without
reaching ``gap``.

The package, one job a file (the names above are all importable from :mod:`panda.optimal`):

* :mod:`panda.optimal.driver`: :func:`solve_optimal` (checks, setup, the simplex loop, the result);
* :mod:`panda.optimal.steps`: the rounds' steps (a HiGHS round of the simplex loop, the PDHG rounds);
* :mod:`panda.optimal.separation`: the violated pair rows (:func:`separate_right`) and their matrices;
* :mod:`panda.optimal.repair`: the exact repair (:func:`exact_repair`);
* :mod:`panda.optimal.bound`: the lower bounds, floored and floor-free (:func:`dual_bound`,
  :func:`best_pair_multipliers`);
* :mod:`panda.optimal.warm`: the warm start from a solve at another eps (``solve_optimal(warm=...)``)
  and :func:`solve_ladder` (a curve's eps, each warm from the nearest solved one);
* :mod:`panda.optimal.near`: the near lists (:class:`_Near`); :mod:`panda.optimal.result`: :class:`OptimalResult`.

The tuning constants below, the public functions the modules call one another by, and ``pdhg``,
``build_highs``, ``_min_plus`` and ``thread_map`` are looked up in this package's namespace when
used, so setting ``panda.optimal.NAME`` (tests, bench/bench_optimal_variants.py) takes effect as it
did on the single module. (The private helpers are called directly.)
"""

from __future__ import annotations

from panda.lp import _min_plus as _min_plus
from panda.lp import build_highs as build_highs
from panda.pdhg import pdhg as pdhg
from panda.threads import thread_map as thread_map

__all__ = [
    "METHODS",
    "OptimalResult",
    "best_pair_multipliers",
    "dual_bound",
    "exact_repair",
    "pdhg_round_steps",
    "separate_right",
    "solve_ladder",
    "solve_optimal",
]

#: Solvers for the rounds: warm dual simplex with Devex pricing, interior point without crossover, or
#: restarted PDHG warm-started from round to round (:mod:`panda.pdhg`).
METHODS = ("simplex", "ipm", "pdhg")

#: ``method="pdhg"``: a pair row is added when its left end exceeds the right end's allowance by
#: more than this share (the PDHG point is approximate: smaller violations are its noise), and the
#: least number of PDHG steps between two separations (a round has ``2 K`` steps by default, at
#: least these and at most :data:`PDHG_ROUND_STEPS_MAX`: :func:`pdhg_round_steps`). Rounds end by
#: steps, not seconds, so a run's rounds do not depend on the machine's speed of the moment.
PDHG_SEPARATION_REL = 1e-2
PDHG_ROUND_STEPS = 1024
#: ``method="pdhg"``: the most steps of a round by default (:func:`pdhg_round_steps`; ``None``: no cap,
#: ``2 K`` at every K). Capped because on large instances most of a long round's steps settle an LP whose
#: rows the next separation changes anyway: shorter, more frequent rounds reach the gap sooner, with the
#: same certificates (``bench/bench_optimal.py --round-steps-max N`` measures this; docs/benchmarks.md,
#: "Rome at scale").
PDHG_ROUND_STEPS_MAX: int | None = 1280

#: ``method="pdhg"``: the scheme of :func:`panda.pdhg.pdhg` for the rounds. Restarted reflected
#: Halpern PDHG rather than PDLP's adaptive step: in the warm-started rounds it ends with smaller gaps
#: in the same time, at every size and budget compared (``bench/bench_pdhg_schemes.py``;
#: docs/benchmarks.md).
PDHG_SCHEME = "halpern"

#: ``method="pdhg"``: after a round, a pair row with multiplier 0 whose left end lies below its
#: allowance by more than this share (relative, at PDHG's point) leaves the LP, once: it comes back
#: when found violated, and then stays. ``None``: rows never leave. Most rows end a run with
#: multiplier 0, and a step's time grows with the rows, so dropping slack rows makes every step
#: cheaper. A smaller threshold churns (the same rows out and in again), a larger one keeps too many
#: (``bench/bench_optimal_variants.py constant PDHG_DROP_SLACK ...`` compares values).
PDHG_DROP_SLACK: float | None = 0.5

#: ``method="pdhg"``: between rounds, the certificate (best pair multipliers and an exact repair)
#: gets at most this share of the time spent in rounds; the last round is always certified.
CERTIFICATE_SHARE = 0.25

#: ``method="pdhg"``: the last round's certificate may run this share of the time limit past the deadline;
#: then the outputs whose pair multipliers (:func:`best_pair_multipliers`) are not solved yet keep PDHG's own
#: (a weaker bound, as valid). Without a grace a short run (the Lesson's first solve) ends with many outputs
#: on PDHG's weaker multipliers and a much larger gap; a little extra time buys most of the bound, a longer
#: grace only delays the answer (``bench/bench_worker_lp.py`` measures the dashboard's solve).
CERTIFICATE_GRACE = 0.5

#: ``method="pdhg"``: what the certificate after a round is expected to cost before one was measured
#: (then the measured cost replaces it): seconds per pair row for the multipliers, and per entry of the
#: matrix for the exact repair. The round before the deadline is the last (certified) when this does not
#: fit after it; PDHG's own run is cut only by the repair's share until the multipliers were measured
#: (a prior guess for both would cut a short run's only round to a few steps and leave its gap large).
TAIL_PER_ROW_S, TAIL_PER_ENTRY_S = 5e-6, 1e-6

#: ``method="pdhg"``: the bound of PDHG's dual point is computed every this many steps.
_BOUND_EVERY_STEPS = 512

#: ``method="pdhg"``: a round adding fewer rows than this share of the LP's pair rows doubles the
#: next rounds' steps, up to this many times ``round_steps``. The growth is kept small because with the
#: compiled steps shorter rounds pay: separating often beats letting an LP settle
#: (``bench/bench_optimal_variants.py constant _MAX_GROWTH ...`` compares values; docs/benchmarks.md).
_GROW_BELOW, _MAX_GROWTH = 0.05, 2

#: ``method="pdhg"``: no round starts when less than this share of the last round's time is left
#: before the deadline (after the certificate's share); the last round is certified instead.
_LAST_ROUND_MIN = 0.25

#: :func:`exact_repair` with a cost: a row's excess is drained from its costliest movable entries
#: first (a deficit filled on its cheapest), not pro rata. Any split within the entries' room keeps
#: every pair row (the room is computed before any move), so this only lowers the cost of the repaired
#: matrix (``bench/bench_optimal_variants.py constant REPAIR_BY_COST ...`` compares both).
REPAIR_BY_COST = True

#: ``solve_optimal(warm=...)``: the earlier run's multipliers are scaled by ``eps_from / eps``
#: (``"inverse"``), its square root (``"sqrt"``) or not at all (``"none"``) before they start PDHG's
#: dual (:mod:`panda.optimal.warm`; any multipliers give a valid bound: only the speed depends on it).
WARM_DUAL_SCALE = "none"

#: A left-out pair row counts as violated when ``z[s, y] - a z[x, y]`` exceeds this (absolute).
SEPARATION_TOL = 1e-9

#: The gap a run that ends with no violated row may show and still count as solved (rounding: the
#: repair moves entries by about HiGHS's tolerances).
EXACT_GAP = 1e-6

#: Row-sum deficits below this are treated as rounding by :func:`exact_repair`.
_SUM_TOL = 1e-12

# The modules below read the constants and imports above through this package when called.
# isort: off
from panda.optimal.result import OptimalResult  # noqa: E402
from panda.optimal.near import _Near as _Near  # noqa: E402
from panda.optimal.repair import (  # noqa: E402
    _balance as _balance,
    _closure as _closure,
    _envelope as _envelope,
    _greedy_take as _greedy_take,
    _source_envelope as _source_envelope,
    _uniform_mix_weight as _uniform_mix_weight,
    exact_repair,
)
from panda.optimal.bound import best_pair_multipliers, dual_bound  # noqa: E402
from panda.optimal.separation import _new_rows as _new_rows, _pair_matrix as _pair_matrix, separate_right  # noqa: E402
from panda.optimal.steps import _pdhg_rounds as _pdhg_rounds, pdhg_round_steps  # noqa: E402
from panda.optimal.warm import WarmStart as WarmStart, solve_ladder  # noqa: E402
from panda.optimal.driver import solve_optimal  # noqa: E402
# isort: on
