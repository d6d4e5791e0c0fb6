"""The eps planner for the dashboard: :func:`panda.plan.plan` as a long job on a worker, kept once for every session.

A plan of the default view (K = 500) with planar Laplace and EM is a few seconds of one worker; with the optimal
LP it is minutes (a certified solve per bisection step), so the LP is planned only when asked for, under a time
limit per solve. The answer is cached by its inputs: a second visitor, or the link reopened, gets it at once.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from app import job_owner, state
from panda import jobs
from panda.execution import LOW
from panda.plan import PlanResult

__all__ = ["PLAN_LP_LIMIT_S", "planned"]

#: The optimal LP's time limit per solve on the page (seconds); a step it leaves undecided says so.
PLAN_LP_LIMIT_S = 60.0
#: The other LP-free mechanisms' limit per build (seconds).
PLAN_BUILD_LIMIT_S = 20.0


def _timeout_s(methods: tuple[str, ...]) -> float:
    """The worker's hard stop for a plan: generous room over the library's own limits (about 9 steps, 3 rungs)."""
    lp = 9 * 3 * (PLAN_LP_LIMIT_S + 5.0) if "lp" in methods else 0.0
    return 300.0 + lp


@st.cache_data(max_entries=16, show_spinner=False)
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
    options = (("lp_time_limit_s", PLAN_LP_LIMIT_S), ("time_limit_s", PLAN_BUILD_LIMIT_S), ("seed", 0))
    return state.panda_worker().run(
        jobs.plan_job,
        inst,
        float(target_loss_m),
        tuple(methods),
        int(reports_per_day),
        None if attacker_floor_m is None else float(attacker_floor_m),
        options,
        timeout_s=_timeout_s(tuple(methods)),
        priority=LOW,
        progress=_progress,
        **job_owner.of_this_run(),
    )
