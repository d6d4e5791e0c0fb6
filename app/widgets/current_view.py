"""What every page needs: the current view, its computation (with progress), readable messages."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

import panda
from app import page_jobs, state
from app.model.messages import plain_error, short_status
from app.model.panda_numbers import fmt_m, fmt_pct, fmt_s
from app.model.params import Params, to_config
from panda.execution import CRASH_MESSAGE, MEMORY_MESSAGE, JobBusy, JobClusterLost, JobError, JobTimeout
from panda.instance import InstanceTooLargeError

#: What to change when a setting is too heavy (in plain words).
HEAVY_HINT = (
    "A large threshold distance γ (or a small decay rate λ) makes many records 'near' each other, and the "
    "safety margins then grow with the square of that; many records K or 'all pairs' with the paper or "
    "recommended preset make the LP large. Try γ = auto, a larger λ, a smaller Γ, fewer records, or the "
    "artifact preset."
)

#: What to do when the computation stopped for a reason of the cluster's, not of the setting's.
RETRY_HINT = "Try again in a moment: the server computes for the whole class, and a stopped worker is replaced."


def job_failure(exc: JobError) -> tuple[str, str]:
    """The headline and hint for a failed job: too heavy (its time or memory limit), or a cluster's
    failure (a worker killed twice, the cluster restarted, no free worker in time) that a retry may fix."""
    if isinstance(exc, (JobBusy, JobClusterLost)):
        return "The computation did not complete.", RETRY_HINT
    if isinstance(exc, JobTimeout) or str(exc).startswith(MEMORY_MESSAGE):
        return "This setting is too heavy for the dashboard.", HEAVY_HINT
    if str(exc) == CRASH_MESSAGE:
        return "The computation's process died.", f"{RETRY_HINT} If it happens again: {HEAVY_HINT}"
    return "The computation did not complete.", RETRY_HINT


__all__ = [
    "View",
    "current_params",
    "load_view",
    "start_lower_bound",
    "finish_lower_bound",
    "lower_bound",
    "show_messages",
    "show_lower_bound_note",
    "show_metrics",
    "fill_bound_metrics",
    "guarded",
    "show_error",
    "valid_user",
    "metric_texts",
    "bound_texts",
]


def valid_user(value: object, n_users: int) -> int | None:
    """The selected user as an index in ``range(n_users)``, or None when ``value`` is not one.

    Accepts what the session may hold: an int (or numpy int), or an option's label "User 7" (a widget
    value sent back by the browser is its label).
    """
    if isinstance(value, str):
        digits = value.removeprefix("User").strip().split(" ")[0]
        value = int(digits) if digits.isdigit() else None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return None
    return int(value) if 0 <= value < n_users else None


def show_error(headline: str, error: BaseException | str, hint: str = "") -> None:
    """An error box in plain words (what happened, what to do); the original text as a last "Details" line."""
    plain, details = plain_error(error)
    st.error(f"**{headline}** {plain}" + (f"\n\n{hint}" if hint else ""))
    if details:
        st.caption(f"Details: {details}")


@dataclass(frozen=True)
class View:
    """One computed view: the parameters, the network, the instance, the config and PAnDA's result."""

    params: Params
    net: panda.RoadNetwork
    instance: panda.Instance
    config: panda.PandaConfig
    result: panda.PandaResult


def current_params() -> Params:
    """The view the sidebar holds (set by streamlit_app.py before the page runs)."""
    return st.session_state.get("params") or Params()


def load_view(params: Params) -> View | None:
    """Network, instance and PAnDA result of a view (cached); errors are shown, never raised."""
    try:
        net = state.network(params.source)
        with st.spinner("Drawing records, outputs and users ..."):  # shown only if it takes more than 0.5 s
            inst = state.instance(*params.instance_key)
    except InstanceTooLargeError as exc:  # its sentence says what to choose instead: no hint of ours
        show_error("This view is too large for the dashboard.", exc)
        return None
    except Exception as exc:
        show_error(
            "Could not prepare the problem instance.",
            exc,
            "Try fewer records (K), users or outputs, or another road network.",
        )
        return None
    config = to_config(params)
    slot = st.empty()

    def on_progress(phase: str, fraction: float) -> None:
        slot.progress(min(max(fraction, 0.0), 1.0), text=f"Running PAnDA: {phase} ...")

    try:
        result = page_jobs.call_with_progress(
            state.panda_result, params.instance_key, state.config_items(config), params.seed, on_progress=on_progress
        )
    except JobError as exc:
        slot.empty()
        headline, hint = job_failure(exc)
        show_error(headline, exc, hint)
        return None
    except Exception as exc:
        slot.empty()
        show_error(
            "PAnDA could not run on this view.",
            exc,
            "Try the artifact preset, a smaller constraint radius, or fewer records.",
        )
        return None
    slot.empty()
    return View(params, net, inst, config, result)


def start_lower_bound(view: View) -> page_jobs.Job | None:
    """Start the Relaxed AnPO lower bound of a view in the background (None when switched off)."""
    p = view.params
    if not p.lower_bound:
        return None
    return page_jobs.start(
        state.lower_bound, p.instance_key, state.config_items(view.config), p.seed, p.lp_time_limit_s
    )


def finish_lower_bound(job: page_jobs.Job | None) -> dict | None:
    """The lower bound of :func:`start_lower_bound` (waits for it); failures become a status, never raise."""
    if job is None:
        return None
    try:
        return job.result()
    except Exception as exc:
        plain, details = plain_error(exc)
        return {"status": "failed", "reason": plain, "details": details, "objective_m": float("nan"), "time_s": 0.0}


def lower_bound(view: View) -> dict | None:
    """The Relaxed AnPO lower bound of a view (or None when switched off); never raises."""
    return finish_lower_bound(start_lower_bound(view))


def _lb_note(bound: dict | None) -> str:
    if bound is None:
        return "not computed (switched off)"
    status = bound.get("status", "")
    if status == "too large":
        return f"not computed: too large for the dashboard ({bound.get('rows', 0):,} LP rows)"
    if status == "Time limit reached":
        return "the LP reached its time limit before it was solved"
    if status == "failed":
        return f"could not be computed. {bound.get('reason', '')}".rstrip()
    word, detail = short_status(status)
    return f"not solved ({detail or word})"


def _lb_short(bound: dict | None) -> str:
    """Why there is no lower bound, in a few words (the metric's small line under "—")."""
    if bound is None:
        return "switched off"
    return {"too large": "too large", "Time limit reached": "time limit", "no anchors": "no anchors"}.get(
        bound.get("status", ""), "not solved"
    )


def show_messages(view: View) -> DeltaGenerator:
    """Plain-words warnings about what the result means; returns a slot for the lower bound's note."""
    r = view.result
    n_pairs = int(r.pair_i.size)
    if r.z is None or r.lp_status != "Optimal":
        st.warning(
            f"**The AnPO LP did not finish optimally** (status: {r.lp_status}). "
            + ("No perturbation matrix is available, so nothing can be sampled. " if r.z is None else "")
            + "Try the artifact preset, a smaller LP constraint radius or fewer records."
        )
    if r.empty_anchor_users.size:
        k = int(r.empty_anchor_users.size)
        st.warning(
            f"**{k} of {r.user_records.size} users drew no anchor at all.** They cannot report anything "
            "(grey on the map) and are left out of the losses and checks. A larger α or smaller λ makes "
            "empty anchor sets rarer."
        )
    if n_pairs and r.pair_unreachable.any():
        k = int(r.pair_unreachable.sum())
        fallback = (
            "used the second-largest margin instead (the published code's choice)"
            if (r.config.margin_fallback == "second_largest")
            else "has no finite safety margin; its rows were made identical"
        )
        st.warning(
            f"**The success target 1 − δ = {1 - r.config.delta:.9g} is out of reach for {k:,} of {n_pairs:,} "
            f"anchor pairs.** The anchors' random draws alone fail more often than δ allows (for example, a "
            f"user ends up with no anchor with a probability far above δ), so no margin can promise it. "
            f"Each such pair {fallback}. A larger δ makes the target reachable."
        )
    if r.lp_info.get("row_groups") == 1 and r.anchor_union.size > 1:
        rate = r.user_pair_violation_rate
        measured = (
            f"here {fmt_pct(rate)} of the user pairs violate ε-mDP for that reason alone"
            if math.isfinite(rate)
            else "the user-pair violation rate measures it"
        )
        st.info(
            "**Every anchor got the same output distribution** (the LP collapsed all rows into one). The reported "
            "location then tells nothing about where a user is, and carries no location information either (the "
            "utility of a blind guess). **This is not perfect privacy:** in Phase I each user uploads their anchor "
            f"set, and that upload leaks how close two users are: {measured}. This happens when the Phase-I cost "
            "and the safety margins use up the whole budget ε·d of every pair."
        )
    elif n_pairs and r.pair_over_budget.any():
        k = int(r.pair_over_budget.sum())
        st.info(
            f"**{k:,} of {n_pairs:,} constrained anchor pairs are over budget:** Phase I (ε̄·d) plus the safety "
            "margin already exceed ε·d, so Phase II cannot give them any room; their rows are forced identical."
        )
    return st.empty()


def show_lower_bound_note(slot: DeltaGenerator, bound: dict | None) -> None:
    """Say why the lower bound is missing (nothing when it was solved)."""
    if bound is not None and bound.get("status") not in ("Optimal", "no anchors"):
        slot.info(f"**Lower bound:** {_lb_note(bound)}. The approximation ratio is not available.")


#: The longest metric value (characters) that fits a row of five metrics at 1280 x 720 with the
#: sidebar open; anything longer goes into the metric's small line or its help.
MAX_METRIC_CHARS = 8


@dataclass(frozen=True)
class MetricText:
    """One metric: its label, a short value, a small grey line under it (context), its help."""

    label: str
    value: str
    note: str
    help: str


def _times(x: float) -> str:
    """A multiple, short: '0.35 ×', '15.5 ×', '1,234 ×', '—'."""
    if not math.isfinite(x):
        return "—"
    return (f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:,.0f}") + " ×"


def metric_texts(r: panda.PandaResult) -> dict[str, MetricText]:
    """The Explore metrics that come from the PAnDA run alone (the lower bound's: :func:`bound_texts`)."""
    n_users = int(r.user_records.size)
    n_ok = int((r.surrogates >= 0).sum())
    n_pairs = int(r.pair_i.size)
    n_user_pairs = n_ok * (n_ok - 1) // 2
    phase1 = _median_finite(r.pair_eps_bar_per_km / r.config.epsilon_per_km) if n_pairs else float("nan")
    k = int(r.instance_summary.get("n_records", 0)) if isinstance(r.instance_summary, dict) else 0
    word, detail = short_status(r.lp_status)
    lp_value = "Optimal" if r.lp_status == "Optimal" else (word.capitalize() if word != "—" else "—")
    if n_ok == 0 or not math.isfinite(r.loss_expected_m):
        loss_value, loss_note = "—", "no user can report"
    else:
        loss_value = fmt_m(r.loss_expected_m)
        loss_note = (
            f"all {n_users} users"
            if n_ok == n_users
            else (f"only {n_ok} of {n_users} users" if 2 * n_ok < n_users else f"{n_ok} of {n_users} users")
        )
    rate = r.user_pair_violation_rate
    return {
        "anchors": MetricText(
            "Anchor union |A|",
            f"{r.n_anchors:,}",
            f"of {k:,} records" if k else "records",
            "Records that at least one user picked as an anchor: the rows of the LP.",
        ),
        "empty": MetricText(
            "Empty anchor sets",
            f"{r.empty_anchor_users.size:,}",
            f"of {n_users} users",
            "Users with no anchor: they cannot report a location, and the losses and checks leave them out.",
        ),
        "lp": MetricText(
            "LP status",
            lp_value,
            detail or ("solved" if r.lp_status == "Optimal" else ""),
            f"HiGHS status of the AnPO LP (Phase II): {r.lp_status}.",
        ),
        "loss": MetricText(
            "Utility loss at users",
            loss_value,
            loss_note,
            "Expected road-distance error (metres) of the reported locations at the users' true records, "
            f"averaged over the users who can report (those with an anchor): {n_ok} of {n_users}.",
        ),
        "violation": MetricText(
            "Violation rate",
            fmt_pct(rate),
            f"of {n_user_pairs:,} user pairs" if math.isfinite(rate) else "fewer than 2 users report",
            "Share of user pairs whose released distributions break ε-mDP once Phase I's cost is counted "
            "(pairs of users who can both report).",
        ),
        "over": MetricText(
            "Over-budget pairs",
            f"{int(r.pair_over_budget.sum()):,}",
            f"of {n_pairs:,} anchor pairs",
            "Constrained anchor pairs for which Phase I plus the safety margin already exceed ε·d: "
            "their rows are forced identical.",
        ),
        "phase1": MetricText(
            "Phase-I spend",
            _times(phase1),
            "of ε·d, median pair" if math.isfinite(phase1) else "no constrained pair",
            "Median share of a pair's budget ε·d that the anchor upload alone leaks (ε̄/ε), over the constrained "
            "anchor pairs; above 1 × is over budget. "
            f"Finite safety margins: {r.budget_split.get('n_finite', 0):,} of {n_pairs:,} pairs.",
        ),
    }


def bound_texts(r: panda.PandaResult, bound: dict | None, *, pending: bool = False) -> dict[str, MetricText]:
    """Lower bound, approximation ratio and total time (or '…' while the bound is being solved)."""
    lb = float("nan") if not bound else float(bound.get("objective_m", float("nan")))
    ratio = r.lp_objective_m / lb if math.isfinite(lb) and lb > 0 and math.isfinite(r.lp_objective_m) else float("nan")
    if pending:
        lb_value, lb_note, ratio_value, ratio_note = "…", "solving the LP", "…", "waiting for the bound"
    else:
        lb_value, lb_note = (fmt_m(lb), "over the anchors") if math.isfinite(lb) else ("—", _lb_short(bound))
        ratio_value, ratio_note = (f"{ratio:.2f}", "1 is optimal") if math.isfinite(ratio) else ("—", "no lower bound")
    total = r.timings_s.get("total", float("nan"))
    with_bound = bool(bound and bound.get("time_s"))
    if with_bound:
        total += bound["time_s"]  # type: ignore[index]
    return {
        "bound": MetricText(
            "Relaxed lower bound",
            lb_value,
            lb_note,
            "Relaxed AnPO optimum (metres, over anchors): no mechanism on these anchors does better. "
            f"Status: {_lb_note(bound) if not pending else 'being solved'}.",
        ),
        "ratio": MetricText(
            "Approximation ratio",
            ratio_value,
            ratio_note,
            "AnPO objective divided by the lower bound (both over anchors); 1 is optimal.",
        ),
        "time": MetricText(
            "Time",
            fmt_s(total),
            "PAnDA + bound" if with_bound else "PAnDA run",
            "Wall time of this run (PAnDA plus the lower bound).",
        ),
    }


def _metric(slot: DeltaGenerator, m: MetricText) -> None:
    slot.metric(m.label, m.value, m.note or None, delta_color="off", delta_arrow="off", help=m.help)


def show_metrics(view: View) -> dict[str, DeltaGenerator]:
    """The Explore metrics, two rows of five; the lower-bound ones are slots for :func:`fill_bound_metrics`."""
    m = metric_texts(view.result)
    row1 = st.columns(5)
    for col, key in zip(row1[:4], ("anchors", "empty", "lp", "loss"), strict=True):
        _metric(col, m[key])
    slots = {"bound": row1[4].empty()}
    row2 = st.columns(5)
    slots["ratio"] = row2[0].empty()
    for col, key in zip(row2[1:4], ("violation", "over", "phase1"), strict=True):
        _metric(col, m[key])
    slots["time"] = row2[4].empty()
    fill_bound_metrics(slots, view, None, pending=view.params.lower_bound)
    return slots


def fill_bound_metrics(
    slots: dict[str, DeltaGenerator], view: View, bound: dict | None, *, pending: bool = False
) -> None:
    """Lower bound, approximation ratio and total time (or '…' while the bound runs)."""
    for key, text in bound_texts(view.result, bound, pending=pending).items():
        _metric(slots[key], text)


def _median_finite(values) -> float:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else float("nan")


def guarded(title: str):
    """Context manager: show any exception of a page section as st.error, keep the page alive."""
    return _Guard(title)


class _Guard:
    def __init__(self, title: str) -> None:
        self.title = title

    def __enter__(self) -> _Guard:
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        show_error(f"{self.title} could not be shown.", exc, "The rest of the page still works.")
        return True
