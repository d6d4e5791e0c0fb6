"""The eps planner for the dashboard: :func:`panda.plan.plan` as a long job on a worker, its answer kept in the result
store (app/server/result_store.py) for every session and across restarts.

Planar Laplace and EM are planned in seconds; the optimal LP needs a certified solve per bisection step (its times:
docs/planner.md), so it is planned only when asked for, under a time limit per solve. A plan is kept by its inputs: a second visitor, the link reopened, or a lecture's
preparation gets it at once. A plan whose optimal LP stopped at its time limit ("undecided") is not kept: another
try may decide it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app import job_owner, state
from app.server import result_store
from panda import jobs
from panda.execution import LOW
from panda.plan import PlanResult
from panda.plan_record import plan_from_record, plan_record

__all__ = ["PLAN_LP_LIMIT_S", "PLAN_BUILD_LIMIT_S", "plan_key_inputs", "planned"]

log = logging.getLogger(__name__)

#: The optimal LP's time limit per solve on the page (seconds); a step it leaves undecided says so.
PLAN_LP_LIMIT_S = 60.0
#: The other mechanisms' limit per build (seconds).
PLAN_BUILD_LIMIT_S = 20.0
#: The library's settings the page plans with (its store key holds them).
PLAN_OPTIONS = (("lp_time_limit_s", PLAN_LP_LIMIT_S), ("time_limit_s", PLAN_BUILD_LIMIT_S), ("seed", 0))


def _timeout_s(methods: tuple[str, ...]) -> float:
    """The worker's hard stop for a plan: generous room over the library's own limits (about 9 steps, 3 rungs)."""
    lp = 9 * 3 * (PLAN_LP_LIMIT_S + 5.0) if "lp" in methods else 0.0
    return 300.0 + lp


def plan_key_inputs(
    store_key: tuple, target_loss_m: float, methods: tuple, reports_per_day: int, attacker_floor_m: float | None
) -> list:
    """The result store's inputs of a plan (the view's store key, the question, the page's settings)."""
    floor = None if attacker_floor_m is None else float(attacker_floor_m)
    return [list(store_key), float(target_loss_m), list(methods), int(reports_per_day), floor, list(PLAN_OPTIONS)]


def planned(
    instance_key: tuple,
    target_loss_m: float,
    methods: tuple[str, ...],
    reports_per_day: int,
    attacker_floor_m: float | None,
    _progress: Callable[[str, float], None] | None = None,
) -> PlanResult:
    """The plan of a view's instance (``Params.instance_key``) for a tolerable error; raises JobError on failure."""
    inst = state.instance(*instance_key)
    store_key = result_store.store_key(instance_key, lambda: state.network(str(instance_key[0])))
    inputs = plan_key_inputs(store_key, target_loss_m, methods, reports_per_day, attacker_floor_m)
    kept = result_store.get_value("plan", inputs)
    if kept is not None:
        try:
            return plan_from_record(kept[0], kept[1], n_places=inst.n_records)
        except ValueError as exc:  # a stored record that is no plan: computed again, and kept in its place
            log.warning("result store: refused a stored plan (%s): planning again", exc)
    result = state.panda_worker().run(
        jobs.plan_job,
        inst,
        float(target_loss_m),
        tuple(methods),
        int(reports_per_day),
        None if attacker_floor_m is None else float(attacker_floor_m),
        PLAN_OPTIONS,
        timeout_s=_timeout_s(tuple(methods)),
        priority=LOW,
        progress=_progress,
        **job_owner.of_this_run(),
    )
    if all(m.outcome != "undecided" for m in result.mechanisms):
        result_store.put_value("plan", inputs, *plan_record(result))
    return result
