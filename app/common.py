"""What every page needs: the current view, its computation (with progress), readable messages."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

import panda
from app import state
from app.analysis import fmt_m, fmt_pct, fmt_s
from app.params import Params, to_config
from app.worker import WorkerError

#: What to change when a setting is too heavy (in plain words).
HEAVY_HINT = (
    "A large threshold distance γ (or a small decay rate λ) makes many records 'near' each other, and the "
    "safety margins then grow with the square of that; many records K or 'all pairs' with the paper or "
    "recommended preset make the LP large. Try γ = auto, a larger λ, a smaller Γ, fewer records, or the "
    "artifact preset."
)

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
]


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
    except Exception as exc:
        st.error(
            f"**Could not prepare the problem instance:** {exc}\n\n"
            "Try fewer records (K), users or outputs, or another road network."
        )
        return None
    config = to_config(params)
    slot = st.empty()

    def on_progress(phase: str, fraction: float) -> None:
        slot.progress(min(max(fraction, 0.0), 1.0), text=f"Running PAnDA: {phase} ...")

    try:
        result = state.call_with_progress(
            state.panda_result, params.instance_key, state.config_items(config), params.seed, on_progress=on_progress
        )
    except WorkerError as exc:
        slot.empty()
        st.error(f"**This setting is too heavy for the dashboard:** {exc}.\n\n{HEAVY_HINT}")
        return None
    except Exception as exc:
        slot.empty()
        st.error(
            f"**PAnDA could not run on this view** ({type(exc).__name__}: {exc}).\n\n"
            "Try the artifact preset, a smaller constraint radius, or fewer records."
        )
        return None
    slot.empty()
    return View(params, net, inst, config, result)


def start_lower_bound(view: View) -> state.Job | None:
    """Start the Relaxed AnPO lower bound of a view in the background (None when switched off)."""
    p = view.params
    if not p.lower_bound:
        return None
    return state.start(state.lower_bound, p.instance_key, state.config_items(view.config), p.seed, p.lp_time_limit_s)


def finish_lower_bound(job: state.Job | None) -> dict | None:
    """The lower bound of :func:`start_lower_bound` (waits for it); failures become a status, never raise."""
    if job is None:
        return None
    try:
        return job.result()
    except Exception as exc:
        return {"status": f"failed: {type(exc).__name__}: {exc}", "objective_m": float("nan"), "time_s": 0.0, "rows": 0}


def lower_bound(view: View) -> dict | None:
    """The Relaxed AnPO lower bound of a view (or None when switched off); never raises."""
    return finish_lower_bound(start_lower_bound(view))


def _lb_note(bound: dict | None) -> str:
    if bound is None:
        return "not computed (switched off)"
    status = bound.get("status", "")
    if status == "too large":
        return f"not computed: too large for the dashboard ({bound['rows']:,} LP rows)"
    if status == "Time limit reached":
        return "time limit reached"
    return status


def _lb_short(bound: dict | None) -> str:
    if bound is None:
        return "off"
    return {"too large": "too large", "Time limit reached": "time limit", "no anchors": "—"}.get(
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
        st.info(
            "**Every anchor got the same output distribution** (the LP collapsed all rows into one). "
            "Every user then reports from the same distribution wherever they are: the output reveals "
            "nothing about the location (perfect privacy) and carries no location information either "
            "(utility of a blind guess). This happens when the Phase-I cost and the margins use up the "
            "whole budget ε·d of every pair."
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


def show_metrics(view: View) -> dict[str, DeltaGenerator]:
    """The Explore metrics, two rows of five; the lower-bound ones are slots for :func:`fill_bound_metrics`."""
    r = view.result
    n_pairs = int(r.pair_i.size)
    shares = r.budget_split
    phase1_median = _median_finite(r.pair_eps_bar_per_km / r.config.epsilon_per_km) if n_pairs else float("nan")
    row1 = st.columns(5)
    row1[0].metric(
        "Anchor union |A|",
        f"{r.n_anchors:,}",
        help="Records that at least one user picked as an anchor: the rows of the LP.",
    )
    row1[1].metric(
        "Empty anchor sets",
        f"{r.empty_anchor_users.size} of {r.user_records.size}",
        help="Users with no anchor: they cannot report a location.",
    )
    row1[2].metric("LP status", r.lp_status, help="HiGHS status of the AnPO LP (Phase II).")
    row1[3].metric(
        "Utility loss at users",
        fmt_m(r.loss_expected_m),
        help="Expected road-distance error (metres) of the reported locations at the users' true records.",
    )
    slots = {"bound": row1[4].empty()}
    row2 = st.columns(5)
    slots["ratio"] = row2[0].empty()
    row2[1].metric(
        "User-pair violation rate",
        fmt_pct(r.user_pair_violation_rate),
        help="Share of user pairs whose released distributions break ε-mDP once Phase I's cost is counted.",
    )
    row2[2].metric(
        "Over-budget anchor pairs",
        f"{int(r.pair_over_budget.sum()):,} of {n_pairs:,}",
        help="Constrained anchor pairs for which Phase I plus the safety margin already exceed ε·d.",
    )
    row2[3].metric(
        "Phase-I spend (median)",
        f"{phase1_median:.2f} × ε·d" if math.isfinite(phase1_median) else "—",
        help="Median share of a pair's budget ε·d that the anchor upload alone leaks (ε̄/ε); above 1 is over budget. "
        f"Finite safety margins: {shares.get('n_finite', 0):,} of {n_pairs:,} pairs.",
    )
    slots["time"] = row2[4].empty()
    fill_bound_metrics(slots, view, None, pending=view.params.lower_bound)
    return slots


def fill_bound_metrics(
    slots: dict[str, DeltaGenerator], view: View, bound: dict | None, *, pending: bool = False
) -> None:
    """Lower bound, approximation ratio and total time (or 'computing ...' while the bound runs)."""
    r = view.result
    lb = float("nan") if not bound else float(bound.get("objective_m", float("nan")))
    ratio = r.lp_objective_m / lb if math.isfinite(lb) and lb > 0 and math.isfinite(r.lp_objective_m) else float("nan")
    lb_text = "computing ..." if pending else (fmt_m(lb) if math.isfinite(lb) else _lb_short(bound))
    slots["bound"].metric(
        "Relaxed lower bound",
        lb_text,
        help="Relaxed AnPO optimum (metres, over anchors): no mechanism on these anchors does better.",
    )
    slots["ratio"].metric(
        "Approximation ratio",
        "computing ..." if pending else (f"{ratio:.2f}" if math.isfinite(ratio) else "—"),
        help="AnPO objective divided by the lower bound (both over anchors); 1 is optimal.",
    )
    total = r.timings_s.get("total", float("nan"))
    if bound and bound.get("time_s"):
        total += bound["time_s"]
    slots["time"].metric("Time", fmt_s(total), help="Wall time of this run (PAnDA plus the lower bound), seconds.")


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
        st.error(
            f"**{self.title} could not be shown** ({type(exc).__name__}: {exc}). The rest of the page still works."
        )
        return True
