"""The privacy-utility curve: every mechanism on one instance over a grid of budgets, audited.

:func:`tradeoff_curve` builds each method at each eps of a log grid (:data:`DEFAULT_EPSILONS`) on
the same instance and measures, per point (one dict per (method, eps), keys :data:`CURVE_COLUMNS`):

``loss_m``
    Expected utility loss *over every place* under the instance's prior, metres:
    ``sum_x p_x sum_y cost[x, y] P[x, y]`` (:func:`panda.mechanisms.expected_loss_m`). For PAnDA
    ``P`` is its record-level *surrogate mixture* (:mod:`panda.mechanisms.panda_mech`): every record
    draws anchors, reports with the row of its nearest drawn anchor of the server's union ``A``
    (conditioned on drawing one), so the loss is over all records under the prior, like every other
    row, for the union ``A`` this seed's users produced. A record far from every anchor of ``A``
    reports through a distant anchor's row, so for PAnDA this is much larger than at its users.
``users_loss_m``, ``users_counted``
    The expected loss *at the users' true records* instead, metres, and how many users it averages
    over. For PAnDA it is the paper's measure, ``PandaResult.loss_expected_m``: each user reports
    with the row of the surrogate its own drawn anchors gave, expectation over Phase II (users
    whose anchor set is empty cannot report and are not counted); the Compare and PAnDA pages show
    this number. For the baselines: ``mean_n sum_y cost[u_n, y] P[u_n, y]`` over all users.
``adversary_error_m``
    The Bayes-optimal attacker's expected error, metres (:func:`panda.audit.adversary_error_m` with
    the instance's privacy metric, ``d_km * 1000``): it knows the prior and the matrix and guesses
    among the records. For PAnDA the attacker sees the output only, not the uploaded anchor set,
    so Phase I's leak is not in this number: it overstates PAnDA's privacy (more information can
    only lower the Bayes error). The audit below does count Phase I.
``audited``, ``audit_passed``, ``epsilon_min_per_km``, ``audit_kind``, ``audit_scope``
    Baselines: the exact eps-mDP audit of the matrix (:func:`panda.audit.audit_mechanism`), every
    record pair when ``K (K - 1) / 2 <= audit_sample_pairs``, else the users' pairs plus that many
    random pairs (``audit_scope`` says which). A matrix that is a sampled estimate
    (``details["estimated"]``: planar Laplace by sampling) is *not* audited: ``audited`` is False and
    ``audit_passed`` None (its zeros are sampling artefacts; the mechanism is eps-geo-indistinguishable
    by construction). PAnDA: the exact (eps, delta)-PmDP audit over the anchor draws with Phase I's
    exact cost counted (:func:`panda.audit_panda`, the users' pairs, as :func:`panda.compare.compare`
    does); it passes when no user pair's violation probability can exceed delta, counting draws
    without a row in ``z`` as violations (``pmdp_user_rate_over_delta`` and ``..._upper`` give the
    two ends). PAnDA's ``epsilon_min_per_km`` is ``nan``: PmDP has no single effective budget.
``lower_bound_m``
    For the optimal LP (``"lp"``) when it did not finish: the proven lower bound that
    :func:`panda.mechanisms.build_lp` reports on *every* eps-mDP mechanism over these outputs, with
    or without the LP's floor (its ``lower_bound_m``: weak duality from its last relaxation, the
    floor taken out), also when it returns its best audited mechanism (then ``loss_m`` is that
    mechanism's: the optimum lies between the two). ``nan`` when solved or when no round finished.
``floor_slack_m``
    For the optimal LP: the floor's cost bound ``eta * M * max cost`` (the LP's ``cost_bound_m``): a
    solved point's ``loss_m`` (a mechanism with every entry ``>= eta``) lies at most this above the
    optimum over every eps-mDP mechanism.
``status``, ``outcome``
    The builder's status, or why the point has none: ``outcome`` is ``"solved"``, ``"time limit"``,
    ``"failed"`` (an exception or a solver failure: the row carries it, nothing is raised) or
    ``"skipped"`` (not attempted: the method's time budget is spent, or a larger eps already hit the
    time limit for an LP baseline whose solves get harder as eps falls).

Time is bounded per point and per method: the optimal LP gets ``lp_time_limit_s`` per point (it is
usually run as a curve of its own), every other method with an LP (LP+CA, LP+EM, LP+BD, PAnDA's AnPO
LP) ``time_limit_s`` per point and ``method_budget_s`` in all. :data:`HARDER_AS_EPS_FALLS` methods
are computed from the largest eps down (their LPs are fastest there) and a time-limit stop skips the
smaller eps; the others from both ends of the grid inwards. With ``warm_lp=True`` the optimal LP is
solved from the middle of the grid outwards, each point warm from its solved neighbour
(:mod:`panda.optimal.warm`: the neighbour's rows, multipliers and repaired matrix as the start; the
certificate is the same as a cold solve's). It is off by default: it saves PDHG steps but not CPU
time (each warm step carries the neighbour's rows), and its dual-simplex points at large eps stop at
the floored gap where cold ones reach the exact optimum (a larger gap against every mechanism);
``bench/bench_curve_warm.py`` compares both. Solve times depend strongly on eps
(``bench/bench_tradeoff.py``; docs/benchmarks.md, "The privacy-utility curve"): LP+CA's and LP+EM's
grow as eps falls (and HiGHS may call LP+EM infeasible at large eps); PAnDA with a tiny gamma
(``preset("recommended")``) is slowest at middle eps; the optimal LP is hardest at small eps.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

import numpy as np

from panda.audit import adversary_error_m, audit_mechanism, audit_numbers, kept_audit_numbers
from panda.config import PandaConfig
from panda.instance import Instance
from panda.mechanisms import BASELINES
from panda.mechanisms.base import MechanismResult
from panda.optimal import OptimalResult

__all__ = [
    "CURVE_COLUMNS",
    "DEFAULT_EPSILONS",
    "DEFAULT_METHODS",
    "HARDER_AS_EPS_FALLS",
    "METHOD_LABELS",
    "curve_methods",
    "status_rows",
    "tradeoff_curve",
]

#: The default budget grid, 1/km: 8 points, roughly log-spaced (ratios 1.4-2.5) from 0.5/km (a
#: kilometre buys a factor e^0.5 = 1.6: almost no utility) to 50/km (100 m buys e^5: almost none of
#: privacy), with the paper's default 5/km on the grid.
DEFAULT_EPSILONS: tuple[float, ...] = (0.5, 1.0, 2.0, 3.5, 5.0, 10.0, 20.0, 50.0)

#: Readable names (charts, tables).
METHOD_LABELS: dict[str, str] = {
    "laplace": "Planar Laplace",
    "em": "EM",
    "em-br": "EM+BR",
    "lp-ca": "LP+CA",
    "lp-em": "LP+EM",
    "lp-bd": "LP+BD",
    "lp": "Optimal LP",
    "panda-e": "PAnDA-e",
    "panda-p": "PAnDA-p",
    "panda-l": "PAnDA-l",
}

#: The curve's default methods (the optimal LP is usually computed as a curve of its own).
DEFAULT_METHODS: tuple[str, ...] = ("laplace", "em", "em-br", "lp-ca", "lp-em", "panda-e")

#: LP baselines whose solve time grows as eps falls (bench/bench_tradeoff.py measures it): once a
#: point hits the time limit, the smaller eps are skipped. Not the optimal LP (a smaller eps can
#: still give a lower bound) nor PAnDA (with tiny gamma its AnPO LP is slowest at middle eps).
HARDER_AS_EPS_FALLS = frozenset({"lp-ca", "lp-em", "lp-bd"})

_PANDA_DECAYS = {"panda-e": "exponential", "panda-p": "power", "panda-l": "logistic"}

#: Keys of every row :func:`tradeoff_curve` returns (units in the names).
CURVE_COLUMNS: tuple[str, ...] = (
    "method",
    "label",
    "epsilon_per_km",
    "status",
    "outcome",
    "loss_m",
    "adversary_error_m",
    "users_loss_m",
    "users_counted",
    "audited",
    "audit_passed",
    "audit_kind",
    "audit_scope",
    "epsilon_min_per_km",
    "violation_rate",
    "pmdp_user_rate_over_delta",
    "pmdp_user_rate_over_delta_upper",
    "lower_bound_m",
    "floor_slack_m",
    "build_time_s",
    "time_s",
)


def curve_methods() -> tuple[str, ...]:
    """Every method name :func:`tradeoff_curve` accepts (the baselines, then PAnDA's three decays)."""
    return tuple(BASELINES) + tuple(_PANDA_DECAYS)


def _outcome(status: str) -> str:
    if status.startswith("solved"):  # "solved (paper's LP+BD: ...)" too
        return "solved"
    if status.startswith("skipped"):
        return "skipped"
    if status.startswith("busy"):  # not run: the dashboard's workers were taken (not a fault of the method)
        return "busy"
    if "time limit" in status.lower():
        return "time limit"
    return "failed"


def _empty_row(method: str, eps: float) -> dict:
    nan = float("nan")
    return {
        "method": method,
        "label": METHOD_LABELS.get(method, method),
        "epsilon_per_km": float(eps),
        "status": "",
        "outcome": "",
        "loss_m": nan,
        "adversary_error_m": nan,
        "users_loss_m": nan,
        "users_counted": 0,
        "audited": False,
        "audit_passed": None,
        "audit_kind": "",
        "audit_scope": "",
        "epsilon_min_per_km": nan,
        "violation_rate": nan,
        "pmdp_user_rate_over_delta": nan,
        "pmdp_user_rate_over_delta_upper": nan,
        "lower_bound_m": nan,
        "floor_slack_m": nan,
        "build_time_s": 0.0,
        "time_s": 0.0,
    }


def status_rows(method: str, epsilons_per_km: Sequence[float], status: str) -> list[dict]:
    """Rows without a measurement (e.g. the dashboard's worker job for ``method`` failed), one per eps."""
    rows = []
    for eps in sorted({float(e) for e in epsilons_per_km}):
        row = _empty_row(method, eps)
        row["status"] = str(status)
        row["outcome"] = _outcome(row["status"])
        rows.append(row)
    return rows


def _build(
    method: str, instance: Instance, eps: float, config: PandaConfig, seed: int | None, time_limit_s: float
) -> MechanismResult:
    from panda.compare import _build as compare_build  # the same construction as compare()

    return compare_build(method, instance, config.replace(epsilon_per_km=float(eps)), seed, float(time_limit_s))


def _measure(row: dict, method: str, instance: Instance, mech: MechanismResult, audit_sample_pairs: int, seed) -> None:
    """Fill the utility, attacker and audit columns of ``row`` from a built mechanism."""
    eps = mech.epsilon_per_km
    p = mech.matrix
    if p is None:
        return
    row["loss_m"] = float(mech.loss_m)
    row["adversary_error_m"] = float(adversary_error_m(p, instance.prior, instance.d_km * 1000.0))
    users = instance.users
    row["users_loss_m"] = float((instance.cost_m[users] * p[users]).sum(axis=1).mean())
    row["users_counted"] = int(users.size)
    if method in _PANDA_DECAYS:
        from panda.pmdp import audit_panda

        res = mech.details["panda"]
        # The paper's measure: at the users' true records, with the surrogates their own draws gave.
        row["users_loss_m"] = float(res.loss_expected_m)
        row["users_counted"] = int((np.asarray(res.surrogates) >= 0).sum())
        pm = audit_panda(res, instance, n_record_pairs=0)
        lo, hi = float(pm.user_rate_over_delta), float(pm.user_rate_over_delta_upper)
        row.update(
            audited=True,
            audit_passed=bool(hi == 0.0) if np.isfinite(hi) else None,
            audit_kind=f"exact (eps, delta)-PmDP over anchor draws, Phase I counted (delta = {res.config.delta:g})",
            audit_scope=f"{pm.user_pairs.shape[0]:,} user pairs",
            pmdp_user_rate_over_delta=lo,
            pmdp_user_rate_over_delta_upper=hi,
            violation_rate=lo,
        )
        return
    if mech.details.get("estimated"):
        row["audit_kind"] = "not audited: sampled estimate (eps-geo-indistinguishable by construction)"
        return
    k = instance.n_records
    numbers = kept_audit_numbers(mech, eps)  # every pair, audited when it was built (the optimal LP)
    if numbers is None:
        if k * (k - 1) // 2 <= audit_sample_pairs:
            aud = audit_mechanism(p, instance.d_km, eps)
        else:
            ui, uj = np.triu_indices(instance.n_users, k=1)
            pairs = (users[ui], users[uj])
            aud = audit_mechanism(p, instance.d_km, eps, pairs=pairs, sample_pairs=audit_sample_pairs, rng=seed)
        numbers = audit_numbers(aud, p)
    row.update(
        audited=True,
        audit_passed=numbers["passed"],
        audit_kind="exact eps-mDP audit of the matrix",
        audit_scope=numbers["scope"],
        epsilon_min_per_km=numbers["epsilon_min_per_km"],
        violation_rate=numbers["violation_rate"],
    )


def _point(
    method: str,
    instance: Instance,
    eps: float,
    config: PandaConfig,
    seed: int | None,
    time_limit_s: float,
    audit_sample_pairs: int,
    build: Callable[[], MechanismResult] | None = None,
) -> dict:
    row = _empty_row(method, eps)
    t0 = time.perf_counter()
    try:
        mech = _build(method, instance, eps, config, seed, time_limit_s) if build is None else build()
    except Exception as exc:  # a failing mechanism is a row, never an exception out of the curve
        row["status"] = f"failed: {type(exc).__name__}: {exc}"
        row["build_time_s"] = row["time_s"] = time.perf_counter() - t0
        row["outcome"] = "failed"
        return row
    row["status"] = str(mech.status)
    row["build_time_s"] = float(mech.build_time_s)
    if method == "lp":
        row["floor_slack_m"] = float(mech.details.get("cost_bound_m", float("nan")))
        if not mech.solved:
            # The proven bound on every eps-mDP mechanism (not the floored LP's own bound, which can
            # lie above the optimum), also when it returns its best audited matrix.
            bound = mech.details.get("lower_bound_m")
            row["lower_bound_m"] = float(bound) if bound is not None else float("nan")
    try:
        _measure(row, method, instance, mech, audit_sample_pairs, seed)
    except Exception as exc:  # the mechanism stands; say that its measurement failed
        row["audited"], row["audit_passed"] = False, None
        row["audit_kind"] = f"measurement failed: {type(exc).__name__}: {exc}"
    row["outcome"] = _outcome(row["status"])
    row["time_s"] = time.perf_counter() - t0
    return row


def _order(method: str, eps_grid: tuple[float, ...], *, warm_lp: bool = False) -> list[float]:
    """Return the order a method's points are computed in (it matters once its time budget is spent).

    :data:`HARDER_AS_EPS_FALLS`: from the largest eps down. The optimal LP solved warm (``warm_lp``):
    from the middle outwards (5, 3.5, 10, 2, 20, 1, 50, 0.5 on the default grid: the eps nearest the
    grid's geometric mean first, cold, then the next one below, the next above, ...), each point next
    to one already solved, its start. The others from the ends inwards (50, 0.5, 20, 1, ...): PAnDA
    with a tiny gamma solves fast at both ends and slowly in the middle.
    """
    down = sorted(eps_grid, reverse=True)
    if method in HARDER_AS_EPS_FALLS:
        return down
    if method == "lp" and warm_lp:
        up = down[::-1]
        logs = np.log(up)
        mid = int(np.argmin(np.abs(logs - logs.mean())))
        below, above = up[:mid][::-1], up[mid + 1 :]
        middle_out = [up[mid]]
        for i in range(max(len(below), len(above))):
            middle_out += [side[i] for side in (below, above) if i < len(side)]
        return middle_out
    out: list[float] = []
    lo, hi = 0, len(down) - 1
    while lo <= hi:
        out.append(down[lo])
        if hi != lo:
            out.append(down[hi])
        lo, hi = lo + 1, hi - 1
    return out


def _nearest_state(states: dict[float, OptimalResult], eps: float) -> OptimalResult | None:
    """Return the optimal LP's solver result at the solved eps nearest ``eps`` (log eps) with a matrix, or None."""
    held = [e for e, st in states.items() if st.matrix is not None]
    if not held:
        return None
    return states[min(held, key=lambda e: abs(np.log(e / eps)))]


def _build_lp_warm(
    instance: Instance, eps: float, config: PandaConfig, time_limit_s: float, warm: OptimalResult | None
) -> tuple[MechanismResult, OptimalResult | None]:
    from panda.compare import build_warm  # the same construction as compare(), the start passed on

    return build_warm("lp", instance, config.replace(epsilon_per_km=float(eps)), None, float(time_limit_s), warm)


def _lp_warm_builder(
    states: dict[float, OptimalResult], instance: Instance, eps: float, config: PandaConfig, time_limit_s: float
) -> Callable[[], MechanismResult]:
    """Return the optimal LP's build at ``eps``, warm from the nearest solved state (it files its own in ``states``)."""
    start = _nearest_state(states, eps)

    def build() -> MechanismResult:
        mech, state = _build_lp_warm(instance, eps, config, time_limit_s, start)
        if state is not None and state.matrix is not None:
            # Solved from the middle outwards, the next point's nearest is the smallest or the largest solved
            # eps: keep those two only (each state holds the last LP's rows and multipliers, large at a big K).
            states[eps] = state
            ends = {min(states), max(states)}
            for e in [e for e in states if e not in ends]:
                del states[e]
        return mech

    return build


def _check(methods: Sequence[str], epsilons: Sequence[float]) -> tuple[tuple[str, ...], tuple[float, ...]]:
    known = curve_methods()
    methods = tuple(methods)
    unknown = [m for m in methods if m not in known]
    if unknown:
        msg = f"The 'methods' parameter of tradeoff_curve must hold names from {known}. Got {unknown} instead."
        raise ValueError(msg)
    eps = []
    for e in epsilons:
        if (
            isinstance(e, bool)
            or not isinstance(e, (int, float, np.integer, np.floating))
            or not (np.isfinite(e) and e > 0)
        ):
            msg = f"The 'epsilons_per_km' parameter of tradeoff_curve must hold floats > 0. Got {e!r} instead."
            raise ValueError(msg)
        eps.append(float(e))
    return methods, tuple(sorted(set(eps)))


def tradeoff_curve(
    instance: Instance,
    methods: Sequence[str] = DEFAULT_METHODS,
    epsilons_per_km: Sequence[float] = DEFAULT_EPSILONS,
    *,
    panda_config: PandaConfig | None = None,
    seed: int | None = 0,
    lp_time_limit_s: float = 20.0,
    time_limit_s: float = 8.0,
    method_budget_s: float = 20.0,
    audit_sample_pairs: int = 20_000,
    progress: Callable[[str, float], None] | None = None,
    warm_lp: bool = False,
) -> list[dict]:
    """Build every method at every eps on one instance and measure loss, attacker error and audit.

    Parameters
    ----------
    instance
        The shared instance (same records, outputs, prior, users for every point).
    methods
        Names from :func:`curve_methods` (``"em"``, ``"lp"``, ``"panda-e"``, ...).
    epsilons_per_km
        The budgets, 1/km (sorted, duplicates dropped).
    panda_config
        PAnDA's settings (its ``epsilon_per_km`` and ``decay`` are set per point); default
        ``PandaConfig()``, the paper's preset.
    seed
        Seed of the randomised methods (PAnDA's anchor draws, LP+BD's clustering, sampled Laplace)
        and of the audit's pair sample.
    lp_time_limit_s
        HiGHS time limit of each optimal-LP (``"lp"``) point, seconds; an unsolved point reports
        its certified lower bound when a round of row generation finished.
    time_limit_s
        Time limit of each point of the other methods with an LP (LP+CA, LP+EM, LP+BD, PAnDA).
    method_budget_s
        Seconds one method (other than ``"lp"``) may spend over all its points; the remaining
        points are skipped (``outcome == "skipped"``). The curve's time is thus at most about
        ``len(methods) * method_budget_s`` plus the LP's ``len(eps) * lp_time_limit_s`` (and the
        audits, well under a second per point at K = 200).
    audit_sample_pairs
        Every record pair is audited when there are at most this many; else the users' pairs plus
        this many random pairs.
    progress
        ``progress(message, fraction)``, called before each point and once at the end.
    warm_lp
        The optimal LP's points from the middle of the grid outwards (:func:`_order`), each solve
        warm from the solved point nearest to it in ``log eps`` (:func:`panda.mechanisms.lp_full.build_lp_warm`, the
        solver's result carried, never kept in a row or in ``details``), the first cold. Every
        point is certified exactly as a cold one (audit, bound); only the speed changes: fewer PDHG
        steps over the whole curve, but not less CPU time, as a warm solve starts with more rows and
        its steps cost more (``bench/bench_curve_warm.py`` compares both). ``False`` (the default):
        every point cold, from the ends inwards. Other methods are unaffected.

    Returns
    -------
    list of dict
        One row per (method, eps), in the order of ``methods`` and increasing eps, with the keys of
        :data:`CURVE_COLUMNS` (see the module docstring for what each means).
    """
    methods, eps_grid = _check(methods, epsilons_per_km)
    config = panda_config if panda_config is not None else PandaConfig()
    if not isinstance(config, PandaConfig):
        msg = f"The 'panda_config' parameter of tradeoff_curve must be a PandaConfig or None. Got {config!r} instead."
        raise TypeError(msg)
    report = progress or (lambda message, fraction: None)
    n_total = max(len(methods) * len(eps_grid), 1)
    begun = itertools.count()  # the points begun so far, over all methods: the progress fraction

    def announce(message: str) -> None:
        report(message, next(begun) / n_total)

    rows: list[dict] = []
    for method in methods:
        by_eps = _method_points(
            method, instance, eps_grid, config, seed, announce, lp_time_limit_s=lp_time_limit_s,
            time_limit_s=time_limit_s, method_budget_s=method_budget_s, audit_sample_pairs=audit_sample_pairs,
            warm_lp=warm_lp,
        )  # fmt: skip
        rows.extend(by_eps[e] for e in eps_grid)
    report("done", 1.0)
    return rows


def _method_points(
    method: str,
    instance: Instance,
    eps_grid: tuple[float, ...],
    config: PandaConfig,
    seed: int | None,
    announce: Callable[[str], None],
    *,
    lp_time_limit_s: float,
    time_limit_s: float,
    method_budget_s: float,
    audit_sample_pairs: int,
    warm_lp: bool,
) -> dict[float, dict]:
    """Compute one method's points of :func:`tradeoff_curve`, in :func:`_order`; return its rows by eps.

    ``announce(message)`` is called as each point begins. The optimal LP gets ``lp_time_limit_s`` per point;
    the other methods ``time_limit_s`` per point while their ``method_budget_s`` lasts, the points after it
    are skipped, as are, for :data:`HARDER_AS_EPS_FALLS`, the eps below one that hit the time limit.
    """
    label = METHOD_LABELS.get(method, method)
    spent = 0.0
    stopped_at: float | None = None
    by_eps: dict[float, dict] = {}
    warm = method == "lp" and bool(warm_lp)
    states: dict[float, OptimalResult] = {}  # warm: the optimal LP's newest solver result with a matrix
    for eps in _order(method, eps_grid, warm_lp=warm):
        announce(f"{label}: ε = {eps:g} /km")
        if method == "lp":
            limit = float(lp_time_limit_s)
        else:
            limit = min(float(time_limit_s), float(method_budget_s) - spent)
        if stopped_at is not None:
            row = _empty_row(method, eps)
            row["status"] = (
                f"skipped: not attempted (ε = {stopped_at:g} /km already hit the {time_limit_s:g} s "
                f"time limit; {label} only gets slower as ε falls)"
            )
        elif limit <= 0:
            row = _empty_row(method, eps)
            row["status"] = f"skipped: not attempted ({label}'s time budget of {method_budget_s:g} s is spent)"
        elif warm:
            build = _lp_warm_builder(states, instance, eps, config, limit)
            row = _point(method, instance, eps, config, seed, limit, audit_sample_pairs, build)
            spent += row["time_s"]
        else:
            row = _point(method, instance, eps, config, seed, limit, audit_sample_pairs)
            spent += row["time_s"]
            if method != "lp" and limit < float(time_limit_s) and _outcome(row["status"]) == "time limit":
                row["status"] += f" (the last {limit:.1f} s of {label}'s {method_budget_s:g} s budget)"
            if method in HARDER_AS_EPS_FALLS and row["outcome"] == "time limit":
                stopped_at = eps
        row["outcome"] = _outcome(row["status"])
        by_eps[eps] = row
    return by_eps
