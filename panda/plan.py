"""The eps planner: the most private budget at which each mechanism still meets a tolerable error.

Given an instance and the expected error people can live with, ``T`` metres under the instance's loss (what
:func:`panda.mechanisms.expected_loss_m` computes, ``sum_x p_x sum_y cost[x, y] P[x, y]``), :func:`plan` finds for
each mechanism the smallest eps (per km) whose expected loss is at most ``T``, and there the Bayes attacker's
expected error (:func:`panda.audit.adversary_error_m`) and the risk numbers of :mod:`panda.risk`.

**The grid.** Every answer is a point of one log-spaced grid: ``epsilons_per_km`` when given, else
:func:`epsilon_grid` (neighbours at most ``tolerance`` apart, 1.05 by default). Mechanisms shown monotone
(:func:`monotonicity`) are searched by **bisection** (binary search on the grid's indices, i.e. in ``log eps``,
about ``log2(n)`` builds): exactly the smallest grid point meeting ``T`` when the loss is monotone. The others by
an **ascending scan**: every ``stride``-th point (ratio about :data:`SCAN_RATIO`), then the points between the
last coarse point that failed and the first that met; with ``epsilons_per_km`` given the stride is 1 and the
answer is exactly the smallest grid point meeting ``T``, monotone or not (with the default grid a dip below ``T``
between two earlier coarse points is not excluded: ``MechanismPlan.search`` says so).

**Where monotonicity holds** (docs/planner.md has the arguments at length):

* optimal LP (``"lp"``): the constraints ``z[x, y] <= exp(eps d(x, x')) z[x', y]`` loosen as eps grows, so the
  feasible set grows and the optimum is non-increasing. The bisection is *certified*: the solver
  (:func:`panda.mechanisms.lp_full.build_lp_warm`) proves a lower bound on every eps-mDP mechanism over the
  instance's outputs (``details["lower_bound_m"]``); above ``T`` at ``eps_low``, no eps-mDP mechanism meets ``T``
  there nor, by monotonicity, at any smaller eps. Its audited mechanism meeting ``T`` at ``eps_high`` is the
  witness: the bracket ``[eps_low, eps_high]`` (grid neighbours) holds the true threshold.
* exponential mechanism (``"em"``), fixed outputs: a row's expected cost has derivative ``-Cov_eps(c, d) / 2`` in
  eps; when the loss is a non-decreasing function of the privacy distance along every row (outputs at equal
  distance averaged: EM weighs them alike) the covariance is >= 0, and ``1000 Var(d)`` (minus a variance in the
  derivative) when the loss is the distance itself (``"straight"`` loss with ``"haversine"``, ``"road"`` with
  ``"road"``). :func:`monotonicity` checks the condition on the instance; the ``"task"`` loss breaks it.
* planar Laplace: an exact matrix (quadrature; the ``"sampled"`` estimate would be monotone only up to sampling
  error), but its noise at eps is the noise at 1 scaled by 1/eps, so its loss falls with eps only when each
  place's ring average of the snapped cost grows with the radius: not so for a general loss (the task loss rises
  with eps in places), not proven for the straight one. Scanned, as are EM+BR, LP+CA, LP+EM and LP+BD (no proof).
* PAnDA is left out: its random anchors make its loss depend on the draw (not monotone in eps), and it is
  (eps, delta)-PmDP, not eps-mDP: its eps is not the budget the others are planned on.

**Speed.** With ``warm=True`` each optimal-LP step starts from the solver state at the bracket end nearest in
``log eps`` (:mod:`panda.optimal.warm`; the certificate does not depend on the start). The solver cannot be told
to stop once its bounds decide ``bound > T`` or ``loss <= T`` (it stops at a relative gap or its time limit), so
each step climbs a ladder of gap targets (:data:`LP_GAPS`: 5 %, 0.5 %, the optimum), each rung warm from the
last, and stops at the first rung that decides. A step still undecided (``T`` within the floor's cost of the
optimum, or a time limit) ends the bisection with a wider bracket, said in ``note``.

``reports_per_day`` ``k``: the per-day budget is ``k eps`` (sequential composition); :func:`panda.risk.day_risk`
gives the attacker after ``k`` reports (sampled, with its standard error) and under the re-send defence.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from panda.audit import adversary_error_m, audit_mechanism, audit_numbers, kept_audit_numbers
from panda.instance import Instance
from panda.mechanisms import BASELINES
from panda.mechanisms.base import MechanismResult
from panda.optimal import OptimalResult
from panda.repeated import DEFAULT_N_SEQUENCES, RepeatedReports
from panda.risk import DEFAULT_RADII_M, MAX_DAY_REPORTS, RiskReport, day_risk, risk_report

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_RANGE_PER_KM",
    "DEFAULT_TOLERANCE",
    "LP_GAPS",
    "SCAN_RATIO",
    "Evaluation",
    "MechanismPlan",
    "PlanResult",
    "epsilon_grid",
    "monotonicity",
    "plan",
]

#: Mechanisms planned by default: the two classic ones and the optimal LP (the others' LPs cost seconds a point).
DEFAULT_METHODS: tuple[str, ...] = ("em", "laplace", "lp")
#: The budgets searched by default, per km: from 0.1 (a kilometre buys a factor e^0.1) to 100 (10 m buys e).
DEFAULT_RANGE_PER_KM: tuple[float, float] = (0.1, 100.0)
#: Largest ratio between grid neighbours by default: the certified bracket's width.
DEFAULT_TOLERANCE = 1.05
#: Ratio of the ascending scan's first, coarse pass (its stride on the default grid).
SCAN_RATIO = 1.25
#: The optimal LP's gap targets per bisection step, loosest first (0: to the optimum, dual simplex).
LP_GAPS: tuple[float, ...] = (0.05, 0.005, 0.0)
_PANDA_WHY = (
    "PAnDA is not planned: its anchors are drawn at random, so its loss is not monotone in eps (it depends on the "
    "draw), and it is (eps, delta)-PmDP, not eps-mDP, so its eps is not the budget the others are planned on"
)


@dataclass(frozen=True)
class Evaluation:
    """One eps the search built a mechanism at.

    ``verdict``: ``"met"`` (loss <= target), ``"not met"``, ``"impossible"`` (optimal LP: its proven bound on every
    eps-mDP mechanism exceeds the target), ``"undecided"`` (optimal LP: the target lies between its bound and its
    audited mechanism's loss) or ``"failed"`` (no matrix: ``status`` says why). ``loss_m``: the built mechanism's
    expected loss (the optimal LP's audited one), metres; ``lower_bound_m``: the optimal LP's bound (else ``nan``);
    ``gap_target``: the optimal LP's last gap target; ``solves``: builds at this eps.
    """

    epsilon_per_km: float
    verdict: str
    loss_m: float
    lower_bound_m: float
    status: str
    time_s: float
    gap_target: float = float("nan")
    solves: int = 1


@dataclass(frozen=True)
class MechanismPlan:
    """The plan of one mechanism (see :func:`plan`).

    ``outcome``: ``"met"``, ``"met at the smallest eps"`` (the threshold may lie below the grid),
    ``"not met in range"``, ``"impossible in range"`` (optimal LP: certified at the largest eps, hence at all),
    ``"undecided"`` (optimal LP: see ``note``). ``epsilon_per_km``: the planned eps (``nan`` if none);
    ``epsilon_day_per_km``: ``k eps``. ``epsilon_low_per_km``: the grid neighbour below, which fails (optimal LP:
    certified impossible at and below it; ``lower_bound_at_low_m`` is the bound there). ``loss_m``,
    ``adversary_error_m``, ``risk``, ``day``: the mechanism at the planned eps. ``meets_attacker_floor``: the
    attacker's error there is at least the floor (``None`` without a floor or a plan). ``place_loss_m``: ``(K,)``
    the expected loss of a report at each place at the planned eps, metres (``None`` without a plan); its
    prior-weighted mean is ``loss_m``. ``audit_passed``, ``audit_violation_rate``: the exact eps-mDP audit of the
    planned matrix over every pair of places (:func:`panda.audit.audit_mechanism`; ``None`` and ``nan`` without a
    plan).
    """

    method: str
    outcome: str
    epsilon_per_km: float
    epsilon_day_per_km: float
    epsilon_low_per_km: float
    lower_bound_at_low_m: float
    loss_m: float
    adversary_error_m: float
    meets_attacker_floor: bool | None
    monotone: bool
    monotone_reason: str
    search: str
    risk: RiskReport | None
    day: RepeatedReports | None
    evaluations: tuple[Evaluation, ...]
    time_s: float
    note: str = ""
    place_loss_m: np.ndarray | None = None
    audit_passed: bool | None = None
    audit_violation_rate: float = float("nan")

    def summary(self) -> dict:
        """Plain data for JSON output (no per-place arrays)."""
        arrays = ("risk", "day", "evaluations", "place_loss_m")
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in arrays}
        out["risk"] = None if self.risk is None else self.risk.summary()
        out["day"] = None if self.day is None else self.day.summary()
        out["evaluations"] = [vars(e) for e in self.evaluations]
        return out


@dataclass(frozen=True)
class PlanResult:
    """Outcome of :func:`plan`: the inputs and one :class:`MechanismPlan` per mechanism, in the order asked.

    ``reachable_m``: the least expected loss any mechanism over the instance's outputs can have (each place
    reported as its cheapest output: ``sum_x p_x min_y cost[x, y]``), metres; a target below it cannot be met
    at any eps.
    """

    target_loss_m: float
    loss: str
    reports_per_day: int
    attacker_floor_m: float | None
    grid_per_km: tuple[float, ...]
    warm: bool
    mechanisms: tuple[MechanismPlan, ...]
    time_s: float
    reachable_m: float = float("nan")

    def of(self, method: str) -> MechanismPlan:
        """Return the plan of ``method`` (KeyError if it was not planned)."""
        return {m.method: m for m in self.mechanisms}[method]

    def summary(self) -> dict:
        """Plain data for JSON output."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "mechanisms"}
        return out | {"grid_per_km": list(self.grid_per_km), "mechanisms": [m.summary() for m in self.mechanisms]}


def epsilon_grid(low_per_km: float, high_per_km: float, tolerance: float = DEFAULT_TOLERANCE) -> tuple[float, ...]:
    """Return the log-spaced grid from ``low`` to ``high`` (both in) with neighbours at most ``tolerance`` apart."""
    n = int(math.ceil(math.log(high_per_km / low_per_km) / math.log(tolerance) - 1e-12)) + 1
    return tuple(float(e) for e in np.geomspace(low_per_km, high_per_km, max(n, 2)))


def _em_cost_follows_distance(instance: Instance) -> bool:
    """Check that along every row the loss (averaged over outputs at equal distance) never falls as d grows."""
    from panda.mechanisms._common import output_distances_km

    d = output_distances_km(instance)
    c = instance.cost_m
    slack = 1e-9 * max(float(np.abs(c).max(initial=0.0)), 1.0)
    for x in range(d.shape[0]):
        order = np.argsort(d[x], kind="stable")
        dx, cx = d[x, order], c[x, order]
        starts = np.flatnonzero(np.r_[True, np.diff(dx) > 1e-12 * max(float(dx[-1]), 1.0)])
        means = np.add.reduceat(cx, starts) / np.diff(np.r_[starts, dx.size])
        if (np.diff(means) < -slack).any():
            return False
    return True


def monotonicity(method: str, instance: Instance) -> tuple[bool, str]:
    """Return whether ``method``'s expected loss is shown non-increasing in eps on ``instance``, and why (not)."""
    if method == "lp":
        return True, "proven: the eps-mDP feasible set grows with eps, so the optimum never rises"
    if method == "em":
        if _em_cost_follows_distance(instance):
            return True, (
                "proven for this instance: the loss is a non-decreasing function of the privacy distance along every "
                "row, so each row's expected cost has derivative -Cov(cost, d)/2 <= 0 in eps"
            )
        return False, (
            "not on this instance: the loss is not a non-decreasing function of the privacy distance along every row "
            "(e.g. the task loss), so EM's loss can rise with eps"
        )
    if method == "laplace":
        return False, (
            "not proven: exact matrix (quadrature, not sampled), but the snapped cost's ring average need not grow "
            "with the noise radius for a general loss"
        )
    return False, "not proven: the mechanism's construction depends on eps in ways that need not lower the loss"


def _check_number(value: object, name: str, *, low: float, strict: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        msg = f"The '{name}' parameter of plan must be a number. Got {value!r} instead."
        raise ValueError(msg)
    v = float(value)
    if not math.isfinite(v) or v < low or (strict and v == low):
        sign = ">" if strict else ">="
        raise ValueError(f"The '{name}' parameter of plan must be a finite number {sign} {low:g}. Got {value!r}.")
    return v


def _check_grid(
    epsilons_per_km: Sequence[float] | None, epsilon_range_per_km: Sequence[float], tolerance: float
) -> tuple[tuple[float, ...], int]:
    """Return the grid and the scan's stride (1 for a grid given, else about :data:`SCAN_RATIO`)."""
    if epsilons_per_km is not None:
        grid = sorted({_check_number(e, "epsilons_per_km", low=0.0, strict=True) for e in epsilons_per_km})
        if not grid:
            raise ValueError("The 'epsilons_per_km' parameter of plan must hold at least one budget.")
        return tuple(grid), 1
    tol = _check_number(tolerance, "tolerance", low=1.0, strict=True)
    if len(epsilon_range_per_km) != 2:
        raise ValueError("The 'epsilon_range_per_km' parameter of plan must be (low, high), per km.")
    lo, hi = (_check_number(e, "epsilon_range_per_km", low=0.0, strict=True) for e in epsilon_range_per_km)
    if not lo < hi:
        msg = f"The 'epsilon_range_per_km' parameter of plan must have low < high. Got {epsilon_range_per_km!r}."
        raise ValueError(msg)
    grid = epsilon_grid(lo, hi, tol)
    ratio = grid[1] / grid[0]
    return grid, max(1, int(math.log(SCAN_RATIO) / math.log(ratio) + 1e-9))


def _check_methods(methods: Sequence[str]) -> tuple[str, ...]:
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    for m in methods:
        if isinstance(m, str) and m.startswith("panda"):
            raise ValueError(f"The 'methods' parameter of plan got {m!r}: {_PANDA_WHY}.")
        if m not in BASELINES:
            msg = f"The 'methods' parameter of plan must hold names from {tuple(BASELINES)}. Got {m!r} instead."
            raise ValueError(msg)
    if not methods:
        raise ValueError("The 'methods' parameter of plan must name at least one mechanism.")
    return methods


def _check_k(reports_per_day: object) -> int:
    k = _check_number(reports_per_day, "reports_per_day", low=1.0, strict=False)
    if not isinstance(reports_per_day, (int, np.integer)) or k > MAX_DAY_REPORTS:
        msg = f"The 'reports_per_day' parameter of plan must be a whole number from 1 to {MAX_DAY_REPORTS}."
        raise ValueError(f"{msg} Got {reports_per_day!r} instead.")
    return int(k)


def _check_gaps(lp_gaps: Sequence[float]) -> tuple[float, ...]:
    gaps = tuple(_check_number(g, "lp_gaps", low=0.0, strict=False) for g in lp_gaps)
    if not gaps or any(g >= 1.0 for g in gaps) or list(gaps) != sorted(gaps, reverse=True):
        msg = f"The 'lp_gaps' parameter of plan must be gap targets in [0, 1), loosest first. Got {lp_gaps!r}."
        raise ValueError(msg)
    return gaps


class _Search:
    """One mechanism's search over the grid: the evaluations made and the mechanism at the best point met."""

    def __init__(self, grid: tuple[float, ...], decide: Callable[[int], tuple[Evaluation, MechanismResult | None]]):
        self.grid, self.decide = grid, decide
        self.evaluations: list[Evaluation] = []
        self.verdicts: dict[int, Evaluation] = {}
        self.best: tuple[int, MechanismResult] | None = None

    def at(self, i: int) -> str:
        ev, mech = self.decide(i)
        self.evaluations.append(ev)
        self.verdicts[i] = ev
        if ev.verdict == "met" and mech is not None and (self.best is None or i < self.best[0]):
            self.best = (i, mech)
        return ev.verdict

    def bisect(self) -> tuple[int, int, int | None]:
        """Binary search: ``(lo, hi, stuck)``, fails at ``lo`` (-1: none seen), met at ``hi`` (n: none), ``stuck``."""
        lo, hi = -1, len(self.grid)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            verdict = self.at(mid)
            if verdict == "met":
                hi = mid
            elif verdict in ("not met", "impossible"):
                lo = mid
            else:
                return lo, hi, mid
        return lo, hi, None

    def scan(self, stride: int) -> tuple[int, int, int | None]:
        """Ascending scan, coarse then fine: ``(lo, hi, None)`` as :meth:`bisect` (``hi`` the first point met)."""
        n = len(self.grid)
        coarse = list(range(0, n, stride)) + ([n - 1] if (n - 1) % stride else [])
        prev = -1
        for c in coarse:
            if self.at(c) == "met":
                for j in range(prev + 1, c):
                    if self.at(j) == "met":
                        return j - 1, j, None
                return c - 1, c, None
            prev = c
        return n - 1, n, None


def _baseline_decider(
    method: str, instance: Instance, grid: tuple[float, ...], target: float, seed: int | None, time_limit_s: float
) -> Callable[[int], tuple[Evaluation, MechanismResult | None]]:
    from panda.compare import _build  # the construction compare() and tradeoff_curve() use
    from panda.config import PandaConfig

    config = PandaConfig()

    def decide(i: int) -> tuple[Evaluation, MechanismResult | None]:
        t0 = time.perf_counter()
        try:
            mech = _build(method, instance, config.replace(epsilon_per_km=grid[i]), seed, time_limit_s)
        except Exception as exc:  # a failing build is an evaluation, never an exception out of the plan
            return Evaluation(grid[i], "failed", math.nan, math.nan, f"failed: {exc}", time.perf_counter() - t0), None
        if mech.matrix is None:
            verdict = "failed"
        else:
            verdict = "met" if mech.loss_m <= target else "not met"
        ev = Evaluation(grid[i], verdict, float(mech.loss_m), math.nan, str(mech.status), time.perf_counter() - t0)
        return ev, mech

    return decide


def _lp_decider(
    instance: Instance,
    grid: tuple[float, ...],
    target: float,
    *,
    warm: bool,
    gaps: tuple[float, ...],
    time_limit_s: float,
) -> Callable[[int], tuple[Evaluation, MechanismResult | None]]:
    """Make the certified decision at a grid point: a ladder of gap targets, warm from the nearest state kept."""
    from panda.mechanisms.lp_full import build_lp_warm

    states: dict[int, OptimalResult] = {}  # solver states at the bracket's ends (the next step's nearest)

    def decide(i: int) -> tuple[Evaluation, MechanismResult | None]:
        t0 = time.perf_counter()
        eps = grid[i]
        start = states[min(states, key=lambda j: abs(j - i))] if warm and states else None
        lower, best, verdict, state, solves, g, status = -math.inf, None, "undecided", None, 0, math.nan, ""
        for g in gaps:
            try:
                mech, new = build_lp_warm(instance, eps, gap=g, time_limit_s=time_limit_s, warm=start)
            except Exception as exc:  # a solver failure is an evaluation ("failed"), never an exception out of the plan
                verdict, status = "failed", f"failed: {type(exc).__name__}: {exc}"
                break
            solves += 1
            if new is not None and new.matrix is not None:
                state = new
            bound = float(mech.details.get("lower_bound_m", math.nan))
            lower = max(lower, bound) if math.isfinite(bound) else lower
            audited = mech.matrix is not None and mech.details.get("audit_passed") is True
            if audited and (best is None or mech.loss_m < best.loss_m):
                best = mech
            if lower > target:
                verdict = "impossible"
                break
            if best is not None and best.loss_m <= target:
                verdict = "met"
                break
            start = state if warm else None  # the next rung from this one's rows, matrix and multipliers
        if state is not None and verdict in ("met", "impossible"):
            # Keep the states of the bracket's two ends only: the next midpoint lies between them.
            states.update({i: state})
            for j in [j for j in states if j != i and (j < i) == (verdict == "impossible")]:
                del states[j]
        loss = float(best.loss_m) if best is not None else math.nan
        if verdict != "failed":
            status = best.status if best is not None else "no audited mechanism"
        ev = Evaluation(eps, verdict, loss, lower if math.isfinite(lower) else math.nan, status,
                        time.perf_counter() - t0, g, solves)  # fmt: skip
        return ev, best if verdict == "met" else None

    return decide


def _outcome(method: str, search: _Search, lo: int, hi: int, stuck: int | None) -> tuple[str, str]:
    """Return the outcome and a note from the search's end state."""
    n = len(search.grid)
    if stuck is not None:
        ev = search.verdicts[stuck]
        why = (
            f"the target lies between the proven bound {ev.lower_bound_m:,.1f} m and the audited loss "
            f"{ev.loss_m:,.1f} m at {ev.epsilon_per_km:.4g} /km ({ev.status})"
            if ev.verdict == "undecided"
            else f"the build at {ev.epsilon_per_km:.4g} /km failed ({ev.status})"
        )
        if hi < n:
            return "met", f"bisection stopped early: {why}; the bracket is wider than the tolerance"
        return "undecided", f"bisection stopped: {why}"
    if hi >= n:
        if method == "lp" and search.verdicts.get(n - 1) and search.verdicts[n - 1].verdict == "impossible":
            return "impossible in range", "no eps-mDP mechanism over these outputs meets the target at the largest eps"
        return "not met in range", "the target is not met at any eps searched"
    if hi == 0:
        return "met at the smallest eps", "met at the grid's smallest eps: the threshold may lie below the grid"
    failed = [e for e in search.evaluations if e.verdict == "failed"]
    note = f"{len(failed)} build(s) failed and count as not met" if failed else ""
    return "met", note


def _plan_method(
    method: str,
    instance: Instance,
    grid: tuple[float, ...],
    stride: int,
    target: float,
    *,
    k: int,
    floor: float | None,
    options: dict,
) -> MechanismPlan:
    """Search one mechanism's eps and measure it there (see :func:`plan`)."""
    t0 = time.perf_counter()
    mono, why = monotonicity(method, instance)
    if method == "lp":
        decide = _lp_decider(instance, grid, target, warm=options["warm"], gaps=options["lp_gaps"],
                             time_limit_s=options["lp_time_limit_s"])  # fmt: skip
    else:
        decide = _baseline_decider(method, instance, grid, target, options["seed"], options["time_limit_s"])
    search = _Search(grid, decide)
    if mono:
        lo, hi, stuck = search.bisect()
        how = "bisection in log eps (certified bounds)" if method == "lp" else "bisection in log eps"
    else:
        lo, hi, stuck = search.scan(stride)
        how = "ascending scan of every grid point" if stride == 1 else (
            f"ascending scan, every {stride}th grid point then the points below the first met "
            "(a dip below the target between earlier coarse points is not excluded)"
        )  # fmt: skip
    outcome, note = _outcome(method, search, lo, hi, stuck)
    nan, low = math.nan, search.verdicts.get(lo)
    eps = grid[hi] if hi < len(grid) else nan
    mech = search.best[1] if search.best is not None and hi < len(grid) else None
    risk, day, adv, place_loss, audit = None, None, nan, None, None
    if mech is not None:
        audit = kept_audit_numbers(mech, eps) or audit_numbers(audit_mechanism(mech.matrix, instance.d_km, eps),
                                                               mech.matrix)  # fmt: skip
        place_loss = np.einsum("xy,xy->x", mech.matrix, instance.cost_m)
        d_m = instance.d_km * 1000.0
        adv = float(adversary_error_m(mech.matrix, instance.prior, d_m))
        risk = risk_report(mech.matrix, instance.prior, d_m, radii_m=options["radii_m"])
        day = day_risk(mech.matrix, instance.prior, d_m, k, epsilon_per_km=eps,
                       n_sequences=options["n_sequences"], rng=options["seed"])  # fmt: skip
    return MechanismPlan(
        method=method,
        outcome=outcome,
        epsilon_per_km=eps,
        epsilon_day_per_km=k * eps,
        epsilon_low_per_km=low.epsilon_per_km if low is not None else nan,
        lower_bound_at_low_m=low.lower_bound_m if low is not None else nan,
        loss_m=float(mech.loss_m) if mech is not None else nan,
        adversary_error_m=adv,
        meets_attacker_floor=None if floor is None or mech is None else bool(adv >= floor),
        monotone=mono,
        monotone_reason=why,
        search=how,
        risk=risk,
        day=day,
        evaluations=tuple(search.evaluations),
        time_s=time.perf_counter() - t0,
        note=note,
        place_loss_m=place_loss,
        audit_passed=None if audit is None else bool(audit["passed"]),
        audit_violation_rate=nan if audit is None else float(audit["violation_rate"]),
    )


def plan(
    instance: Instance,
    target_loss_m: float,
    *,
    methods: Sequence[str] = DEFAULT_METHODS,
    reports_per_day: int = 1,
    attacker_floor_m: float | None = None,
    epsilon_range_per_km: Sequence[float] = DEFAULT_RANGE_PER_KM,
    tolerance: float = DEFAULT_TOLERANCE,
    epsilons_per_km: Sequence[float] | None = None,
    warm: bool = True,
    lp_gaps: Sequence[float] = LP_GAPS,
    lp_time_limit_s: float = 120.0,
    time_limit_s: float = 60.0,
    radii_m: Sequence[float] = DEFAULT_RADII_M,
    n_sequences: int = DEFAULT_N_SEQUENCES,
    seed: int | None = 0,
    progress: Callable[[str], None] | None = None,
) -> PlanResult:
    """Find, per mechanism, the smallest eps (per km) whose expected loss is at most ``target_loss_m``.

    See the module docstring for the grid, the searches and where monotonicity holds.

    Parameters
    ----------
    instance
        The problem instance (prior, loss ``cost_m``, privacy distances ``d_km``).
    target_loss_m
        The tolerable expected error, metres, under the instance's loss (finite, >= 0).
    methods
        Names from :data:`panda.mechanisms.BASELINES` (PAnDA is refused, with the reason).
    reports_per_day
        ``k``, reports per person per day (1 to :data:`panda.risk.MAX_DAY_REPORTS`): the per-day budget is ``k eps``
        and the day's attacker is measured (sampled when ``k >= 2``).
    attacker_floor_m
        The least error the attacker should be left with, metres (``None``: no floor); each plan says whether its
        attacker's error at the planned eps reaches it (``meets_attacker_floor``).
    epsilon_range_per_km, tolerance
        The default grid (:func:`epsilon_grid`): its ends and the largest ratio between neighbours (> 1).
    epsilons_per_km
        A grid of one's own instead (sorted, duplicates dropped): every answer is then the smallest point of it
        meeting the target (a monotone search on a monotone loss, every point ascending otherwise).
    warm
        The optimal LP's bisection steps and gap rungs start from the nearest solver state (``False``: all cold).
    lp_gaps
        The optimal LP's gap targets per step, loosest first (:data:`LP_GAPS`).
    lp_time_limit_s, time_limit_s
        Seconds per optimal-LP solve, and per build of the other LP mechanisms.
    radii_m, n_sequences, seed
        The risk report's radii (metres), the day estimate's sampled days, and the seed of the randomised builds
        and of that sample.
    progress
        ``progress(message)`` before each mechanism.

    Returns
    -------
    PlanResult
        The inputs and one :class:`MechanismPlan` per mechanism. Targets not met in range, met at the smallest eps
        or left undecided are outcomes of the plans, not exceptions.

    Raises
    ------
    ValueError
        On a bad argument: a negative or NaN target, ``k < 1``, an empty or non-positive grid, a PAnDA method, ...
    """
    t0 = time.perf_counter()
    if not isinstance(instance, Instance):
        raise ValueError(f"The 'instance' parameter of plan must be an Instance. Got {type(instance).__name__}.")
    target = _check_number(target_loss_m, "target_loss_m", low=0.0, strict=False)
    k = _check_k(reports_per_day)
    floor = None if attacker_floor_m is None else _check_number(attacker_floor_m, "attacker_floor_m", low=0.0,
                                                                 strict=False)  # fmt: skip
    names = _check_methods(methods)
    grid, stride = _check_grid(epsilons_per_km, epsilon_range_per_km, tolerance)
    options = {
        "warm": bool(warm),
        "lp_gaps": _check_gaps(lp_gaps),
        "lp_time_limit_s": _check_number(lp_time_limit_s, "lp_time_limit_s", low=0.0, strict=True),
        "time_limit_s": _check_number(time_limit_s, "time_limit_s", low=0.0, strict=True),
        "radii_m": tuple(radii_m),
        "n_sequences": n_sequences,
        "seed": seed,
    }
    plans = []
    for method in names:
        if progress is not None:
            progress(f"planning {method}")
        plans.append(_plan_method(method, instance, grid, stride, target, k=k, floor=floor, options=options))
    return PlanResult(
        target_loss_m=target,
        loss=instance.loss,
        reports_per_day=k,
        attacker_floor_m=floor,
        grid_per_km=grid,
        warm=bool(warm),
        mechanisms=tuple(plans),
        time_s=time.perf_counter() - t0,
        reachable_m=float(instance.prior @ instance.cost_m.min(axis=1)),
    )
