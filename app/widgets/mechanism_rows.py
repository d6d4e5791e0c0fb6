"""The Lesson's mechanism rows: what the page needs of the chosen mechanism at the chosen ε for places A and B.

Every input is an argument (:class:`LessonChoice`, a frozen value like ``Params``), so the page reads as a
description of the UI and this logic can be followed and tested on its own. The optimal LP ("lp") is live: a
first certified mechanism within :data:`LIVE_FIRST_S` (its solver's time limit; an interactive job), then a
background solve to a 0.5 % gap (at most :data:`LIVE_LIMIT_S`) whose job the session keeps
(``lesson_lp_jobs``); the page reruns itself when that is done (:func:`pending_lp_job`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import streamlit as st

import panda
from app import page_jobs, state
from app.model import lesson_numbers
from app.model.panda_numbers import fmt_m, surrogate_rows
from app.model.params import Params, to_config
from app.server import result_store
from panda.execution import JobError

__all__ = [
    "LessonChoice",
    "MechanismRows",
    "mechanism_rows",
    "options_for",
    "pending_lp_job",
    "LP_TIME_LIMIT_S",
    "LP_ROWS_KEYS",
    "LIVE_FIRST_S",
    "LIVE_LIMIT_S",
    "LIVE_FULL_OPTIONS",
]

#: Time limit of one LP-based mechanism build on the Lesson, seconds (the page says when it is hit).
LP_TIME_LIMIT_S = 20.0
#: LP + EM and LP on cells: solved by row generation (bench/bench_lesson_mechanisms.py times them).
LP_ROWS_KEYS = ("lp-em", "lp-ca")
#: The optimal LP's first certified mechanism: short, so that it follows the choice within a few seconds
#: (docs/benchmarks.md); its background solve has LIVE_LIMIT_S.
LIVE_FIRST_S = 1.5
LIVE_LIMIT_S = 120.0
LIVE_FULL_OPTIONS = (("time_limit_s", LIVE_LIMIT_S),)


@dataclass(frozen=True)
class LessonChoice:
    """The Lesson's choice: the view, the mechanism, ε (1/km) and the two places (record indices)."""

    params: Params
    mechanism: str
    epsilon_per_km: float
    place_a: int
    place_b: int


@dataclass
class MechanismRows:
    """What the page needs of one mechanism: A's and B's report rows, the matrix if it has one, numbers.

    ``shown_a``/``shown_b`` are the places the rows belong to (PAnDA shows its nearest users instead);
    ``phase1`` is PAnDA's Phase I cost of that pair; ``estimated``: the rows are a sampled estimate, from which no
    exact verdict may be drawn.
    """

    shown_a: int
    shown_b: int
    matrix: np.ndarray | None = None
    row_a: np.ndarray | None = None
    row_b: np.ndarray | None = None
    phase1: float = 0.0
    problem: str | None = None
    note: str | None = None
    numbers: dict = field(default_factory=dict)
    estimated: bool = False
    #: The optimal LP's background solve is done while the page still shows the first mechanism: the page offers
    #: it (:func:`show_the_optimum`) rather than changing its numbers by itself.
    optimum_ready: bool = False


def _lp_jobs() -> dict:
    return st.session_state.setdefault("lesson_lp_jobs", {})


def pending_lp_job(params: Params, epsilon_per_km: float) -> page_jobs.Job | None:
    """The background solve of the optimal LP for this view and ε, if one was started in this session."""
    return (st.session_state.get("lesson_lp_jobs") or {}).get((params.instance_key, epsilon_per_km))


def _start_lp_job(params: Params, eps: float) -> bool:
    """The optimal LP's full solve in the background (once per view and ε; identical jobs are shared).

    Returns whether it has failed: then the page says so, and that is its last word (``lesson_lp_settled``).
    Otherwise the page says the optimum is on its way, and a job that is done by the end of this run (a cache
    hit finishes at once, and no watcher is drawn for a finished job) gets a rerun there.
    """
    jobs = _lp_jobs()
    key = (params.instance_key, eps)
    if key not in jobs:
        jobs[key] = page_jobs.start(state.baseline, params.instance_key, "lp", eps, LIVE_FULL_OPTIONS)
    job = jobs[key]
    st.session_state.lesson_lp_settled = job.done() and not lp_full_done(job)
    return st.session_state.lesson_lp_settled


def show_the_optimum(params: Params, epsilon_per_km: float) -> None:
    """The lecturer asked for the finished optimum of this view and ε (a button's callback)."""
    st.session_state.setdefault("lesson_lp_accepted", set()).add((params.instance_key, float(epsilon_per_km)))


def lp_full_done(job: page_jobs.Job | None) -> bool:
    """Whether the background solve ``job`` finished with a mechanism (a failed one: the first stays, and says so)."""
    if job is None or not job.done():
        return False
    try:
        job.result()
        return True
    except Exception:  # noqa: BLE001 (the background solve failed: the first mechanism stays, and the note says so)
        return False


def _lp_options(params: Params, eps: float) -> tuple:
    """The optimal LP's options for this run.

    Its first certified mechanism (LIVE_FIRST_S), or the background solve's once that is done and the page was
    asked to show it (:func:`show_the_optimum`; cached, so at once), or at once when the result store already
    holds the optimum (another session or server solved it, or the lecture was prepared): this process's cache
    of the first mechanism must not hide it.
    """
    job = pending_lp_job(params, eps)
    # No number changes by itself: the finished solve replaces the first mechanism only when asked for.
    if lp_full_done(job) and (params.instance_key, float(eps)) in st.session_state.get("lesson_lp_accepted", ()):
        return LIVE_FULL_OPTIONS
    if job is None and state.kept_mechanism(params.instance_key, "lp", eps, LIVE_FULL_OPTIONS):
        return LIVE_FULL_OPTIONS
    return (("time_limit_s", LIVE_FIRST_S),)


def options_for(params: Params, mechanism: str, eps: float) -> tuple:
    """The build options the Lesson uses for ``mechanism`` (time limits of the LP-based ones)."""
    if mechanism == "lp":
        return _lp_options(params, eps)
    return (("time_limit_s", LP_TIME_LIMIT_S),) if mechanism.startswith("lp") else ()


def _lp_rows_note(key: str, label: str, details: dict) -> str:
    """What LP + EM and LP on cells show: their linear program's optimum, solved by adding the constraints it needs."""
    rg = details.get("row_generation")
    how = ""
    if isinstance(rg, dict) and rg.get("rounds") and details.get("lp_rows_full"):
        how = (
            f" (solved in {len(rg['rounds'])} rounds that add only the constraints the last solution broke: "
            f"the last held {int(rg['rounds'][-1]['rows']):,} of its {int(details['lp_rows_full']):,})"
        )
    if key == "lp-ca":
        return (
            f"{label}: the optimum of its linear program on {details.get('n_cells', '?')} cells{how}. Its promise "
            "holds between the cells' places; between two places of neighbouring cells it can fail: *Geo-ind.* "
            "checks every pair."
        )
    return (
        f"{label}: the optimum of its linear program{how}, made exactly ε-geo-indistinguishable (the solver's "
        "rounding removed) and checked for every pair."
    )


def _wait_words(key: str) -> str:
    if key == "lp":
        return " (a first certified mechanism in seconds; it improves in the background)"
    if key in LP_ROWS_KEYS:
        return (
            f" (seconds: its linear program grows only where it must; at most {LP_TIME_LIMIT_S:.0f} s, "
            "then an exact audit)"
        )
    return f" (at most {LP_TIME_LIMIT_S:.0f} s: its time limit, then an exact audit)" if key.startswith("lp") else ""


def _no_matrix_problem(choice: LessonChoice, mech: object, options: tuple, n_places: int) -> str:
    """Why a baseline has no matrix here, in words (and, for the optimal LP, what is on its way or proven)."""
    key, eps, params = choice.mechanism, choice.epsilon_per_km, choice.params
    label = lesson_numbers.MECHANISMS[key][0]
    status = mech.status
    if key == "lp" and options != LIVE_FULL_OPTIONS:
        if _start_lp_job(params, eps):
            return (
                f"**{label}: no certified mechanism within {LIVE_FIRST_S:g} s on {n_places} places, and the "
                "background solve could not finish here** (the server is busy or the job was stopped). Try fewer "
                "places K in the sidebar, or another mechanism."
            )
        return (
            f"**{label}: computing the optimum in the background** (no certified mechanism within "
            f"{LIVE_FIRST_S:g} s on {n_places} places). The page updates by itself when it is ready."
        )
    if not status.startswith("unsolved"):
        return f"**{label} could not be built at ε = {eps:g}/km.** The solver reported: {status}."
    problem = (
        f"**{label} did not finish within {LP_TIME_LIMIT_S:.0f} s** on {n_places} places (a dense city makes the "
        "linear program large). Try fewer places K in the sidebar, or another mechanism."
    )
    details = mech.details if isinstance(mech.details, dict) else {}
    # build_lp's bound on every eps-mDP mechanism (not the floored LP's own, which can exceed it).
    bound = details.get("lower_bound_m") if key == "lp" else None
    if bound is not None and math.isfinite(float(bound)):
        problem += (
            f" What is proven so far: no mechanism can have an average error (over all places) below "
            f"{fmt_m(float(bound))}."
        )
    return problem


def _solved_note(choice: LessonChoice, mech: object, options: tuple) -> str | None:
    """What the page says of a built baseline: the optimal LP's certificate, a row-generation LP's optimum."""
    key, eps, params = choice.mechanism, choice.epsilon_per_km, choice.params
    label = lesson_numbers.MECHANISMS[key][0]
    details = mech.details if isinstance(mech.details, dict) else {}
    note = None
    # lower_bound_m and gap: against every eps-mDP mechanism, with or without the LP's floor.
    gap, upper, lower = details.get("gap"), details.get("upper_bound_m"), details.get("lower_bound_m")
    finite = all(v is not None and math.isfinite(float(v)) for v in (gap, upper, lower))
    if key == "lp" and not mech.solved and finite:
        # The certified optimal LP stopped at its time limit: a feasible mechanism with a proven gap.
        note = (
            f"{label}: not proven optimal within {float(dict(options).get('time_limit_s', LP_TIME_LIMIT_S)):.0f} s. "
            "Shown: the best mechanism found, exactly "
            f"ε-geo-indistinguishable, average error {fmt_m(float(upper))}; no mechanism can go below "
            f"{fmt_m(float(lower))} (gap {100 * float(gap):.1f} %)."
        )
    elif key == "lp" and finite:
        note = (
            f"{label}: optimal (gap ≤ {max(100 * float(gap), 0.01):.2f} %): average error {fmt_m(float(upper))}, and "
            f"no mechanism can go below {fmt_m(float(lower))}."
        )
    if key in LP_ROWS_KEYS and mech.solved:
        note = _lp_rows_note(key, label, details)
    if details.get("prepared"):
        note = (note + " " if note else "") + "Prepared before the lecture (python -m panda prepare)."
    if key == "lp" and options != LIVE_FULL_OPTIONS and not result_store.keepable("lp", mech):
        failed = _start_lp_job(params, eps)
        then = (
            "The background solve could not finish here (the server is busy or the job was stopped), so this "
            "mechanism stays."
            if failed
            else "**Improving in the background** to a gap of 0.5 %: when it is done, a button here offers it "
            "(the numbers never change by themselves)."
        )
        if finite:
            note = (
                f"{label}: a first certified mechanism, average error {fmt_m(float(upper))}; no mechanism can go "
                f"below {fmt_m(float(lower))} (gap {100 * float(gap):.1f} %). {then}"
            )
    return note


def _baseline_rows(choice: LessonChoice, n_places: int) -> MechanismRows:
    key, eps, params = choice.mechanism, choice.epsilon_per_km, choice.params
    out = MechanismRows(choice.place_a, choice.place_b)
    options = options_for(params, key, eps)
    if key == "lp":
        st.session_state.lesson_lp_settled = True  # nothing is on its way unless _start_lp_job says otherwise
    label = lesson_numbers.MECHANISMS[key][0]
    queue_note = st.empty()

    def on_progress(phase: str, _fraction: float) -> None:
        if phase.startswith("busy:"):  # the executor's place in the class's queue
            queue_note.caption(f"⏳ {phase}: the server computes for the whole class, in turn.")

    try:
        with st.spinner(f"Building {label} at ε = {eps:g}/km{_wait_words(key)} ..."):
            args = (params.instance_key, key, eps, options)
            mech = page_jobs.call_with_progress(state.baseline, *args, _numbers=True, on_progress=on_progress)
            out.numbers = page_jobs.call_with_progress(state.mechanism_numbers, *args, on_progress=on_progress)
    except JobError as exc:
        out.problem = f"**{label} could not be built here:** {exc}."
        return out
    finally:
        queue_note.empty()
    if mech.matrix is None:
        out.problem = _no_matrix_problem(choice, mech, options, n_places)
        return out
    out.matrix = mech.matrix
    out.row_a, out.row_b = mech.matrix[choice.place_a], mech.matrix[choice.place_b]
    out.note = _solved_note(choice, mech, options)
    out.optimum_ready = key == "lp" and options != LIVE_FULL_OPTIONS and lp_full_done(pending_lp_job(params, eps))
    if out.optimum_ready:  # nothing more to wait for: the page offers it, and does not rerun itself
        st.session_state.lesson_lp_settled = True
        out.note = f"{label}: **the optimum is ready.** The numbers shown are still the first mechanism's."
    out.estimated = bool(isinstance(mech.details, dict) and mech.details.get("estimated"))
    return out


def _panda_rows(choice: LessonChoice, inst: panda.Instance) -> MechanismRows:
    key, eps, params = choice.mechanism, choice.epsilon_per_km, choice.params
    a, b = choice.place_a, choice.place_b
    out = MechanismRows(a, b)
    config = to_config(params.replace(decay=lesson_numbers.PANDA_KEYS[key]))
    items = state.config_items(config)
    try:
        with st.spinner(f"Running {lesson_numbers.MECHANISMS[key][0]} at ε = {eps:g}/km ..."):
            res = state.panda_result(params.instance_key, items, params.seed)
    except Exception as exc:  # noqa: BLE001
        out.problem = f"**PAnDA could not run on this view.** {exc}"
        return out
    rows = surrogate_rows(res)
    ok = np.flatnonzero(rows >= 0)
    if res.z is None or ok.size < 2:
        out.problem = (
            f"**PAnDA released no usable report distributions here** ({ok.size} of {res.user_records.size} users "
            "have one). Open the PAnDA page for the reasons."
        )
        return out
    users = res.user_records[ok]
    near = [int(ok[np.argmin(inst.distances_km(np.array([x]), users)[0])]) for x in (a, b)]
    if near[0] == near[1]:
        near[1] = int(ok[np.argsort(inst.distances_km(np.array([a]), users)[0])[1]])
    ua, ub = (int(res.user_records[n]) for n in near)
    out.shown_a, out.shown_b = ua, ub
    out.row_a, out.row_b = res.z[rows[near[0]]], res.z[rows[near[1]]]
    out.phase1 = state.phase1_pair_cost(params.instance_key, items, params.seed, ua, ub)
    if (ua, ub) != (a, b):
        out.note = (
            f"PAnDA only has report distributions for its {res.user_records.size} users (anchors drawn for them): "
            f"showing the users at place {ua} (for A) and place {ub} (for B), the nearest to your places."
        )
    out.numbers = {
        "audited": True,
        "passed": res.user_pair_violation_rate == 0,
        "violation_rate": res.user_pair_violation_rate,
        "panda": True,
    }
    return out


def mechanism_rows(choice: LessonChoice, inst: panda.Instance) -> MechanismRows:
    """The chosen mechanism's rows for places A and B on the view's instance (a spinner while it is built)."""
    if choice.mechanism in lesson_numbers.PANDA_KEYS:
        return _panda_rows(choice, inst)
    return _baseline_rows(choice, inst.n_records)
