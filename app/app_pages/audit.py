"""Audit: the realised privacy check, pair by pair (users and constrained anchor pairs)."""

import numpy as np
import pandas as pd
import streamlit as st

from app import state
from app.figures import charts
from app.model import panda_numbers
from app.widgets import current_view

#: Record pairs sampled by the exact PmDP audit (besides every user pair).
N_RECORD_PAIRS = 1000
#: Rows shown in the anchor-pair table (the worst first); the download holds all of them.
MAX_TABLE_ROWS = 2000

st.title("Audit")
st.caption(
    "For two users at records x and x′ (d km apart), ε-mDP allows their released distributions to differ by a "
    "log-ratio of at most ε·d. PAnDA spends ε̄·d of it on uploading the anchor sets (Phase I), so the released "
    "rows may differ by at most (ε − ε̄)·d. This page checks that, pair by pair."
)
params = current_view.current_params()
view = current_view.load_view(params)
if view is None:
    st.stop()
r, inst = view.result, view.instance

st.subheader("Exact (ε, δ)-PmDP audit")
st.caption(
    "PAnDA promises that, for any two true records, the chance over the users' random anchor draws that their "
    "released rows break ε-mDP (Phase-I cost counted) is at most δ. This audit computes that chance exactly for "
    "every user pair and for a random sample of record pairs. Draws that leave a record without any anchor of "
    "the union have no row to audit: they are counted as 'unaudited' (the upper end of the range)."
)
try:
    import panda.pmdp  # noqa: F401
except ImportError as exc:
    st.info("The exact PmDP audit is not available in this installation.")
    st.caption(f"Details: {exc}")
else:
    with current_view.guarded("The PmDP audit"):
        if r.z is None:
            st.info("No perturbation matrix (the LP did not finish): nothing to audit.")
        else:
            with st.spinner("Auditing over the anchor draws ..."):
                pm = state.pmdp_audit(params.instance_key, state.config_items(view.config), params.seed, N_RECORD_PAIRS)
            delta = r.config.delta
            c = st.columns(4)
            c[0].metric(
                "User pairs over δ",
                panda_numbers.fmt_pct_range(pm.user_rate_over_delta, pm.user_rate_over_delta_upper),
                help=f"Share of user pairs whose exact violation probability exceeds δ = {delta:g} (lower end: "
                "unaudited draws counted as fine; upper end: counted as violating). A correct run has 0 %.",
            )
            c[1].metric(
                "Mean P(violation)",
                f"{pm.mean_user_p_violation:.3g}",
                help="Average over the user pairs of the exact probability (over the anchor draws) of an ε-mDP "
                "violation.",
            )
            c[2].metric(
                "Record pairs over δ",
                panda_numbers.fmt_pct(pm.record_rate_over_delta),
                help=f"Share of {pm.record_pairs.shape[0]:,} pairs of secret records, drawn uniformly (not only the "
                "users'), whose exact violation probability exceeds δ.",
            )
            c[3].metric(
                "Phase I over budget",
                f"{pm.phase1_over_budget_user_pairs:,}",
                help="User pairs whose Phase-I cost alone exceeds ε (ε̄ > ε): no Phase II can make them compliant.",
            )
            with current_view.guarded("The PmDP histogram"):
                st.plotly_chart(
                    charts.violation_probability_histogram(pm.user_p_violation, pm.record_p_violation, delta),
                    key="chart_pmdp",
                )

st.subheader("User pairs: the realised check")
pairs = panda_numbers.user_pairs(r, inst)
if pairs.size == 0:
    st.info("Fewer than two users have a surrogate (or the LP has no solution): there is no user pair to check.")
else:
    excess = pairs.excess
    finite = excess[np.isfinite(excess)]
    c = st.columns(4)
    c[0].metric("User pairs checked", f"{pairs.size:,}", help="Pairs of users who both have a surrogate.")
    c[1].metric("Violating ε-mDP", f"{int(pairs.violated.sum()):,}", help="Actual log-ratio above the allowance.")
    c[2].metric("Violation rate", panda_numbers.fmt_pct(pairs.violated.mean()))
    c[3].metric(
        "Largest excess",
        f"{finite.max():.2f} nats" if finite.size else "—",
        help="Actual minus allowed max ln-ratio; e^excess is how many times likelier an output can be than allowed.",
    )
    left, right = st.columns([2, 3], gap="medium")
    with left, current_view.guarded("The histogram"):
        st.plotly_chart(charts.excess_histogram(excess, pairs.violated), key="chart_excess")
    with right:
        order = np.argsort(-np.where(np.isfinite(excess), excess, np.inf))
        table = pd.DataFrame(
            {
                "user n": pairs.n[order],
                "user m": pairs.m[order],
                "distance (m)": 1000 * pairs.d_km[order],
                "Phase-I cost ε̄ (1/km)": pairs.eps_bar_per_km[order],
                "allowed (ε−ε̄)·d": pairs.allowed[order],
                "actual max ln-ratio": pairs.actual[order],
                "excess (nats)": excess[order],
                "violated": pairs.violated[order],
            }
        )
        st.dataframe(
            table,
            hide_index=True,
            height=330,
            width="stretch",
            column_config={
                "distance (m)": st.column_config.NumberColumn(format="%.0f"),
                "Phase-I cost ε̄ (1/km)": st.column_config.NumberColumn(format="%.2f"),
                "allowed (ε−ε̄)·d": st.column_config.NumberColumn(format="%.3f"),
                "actual max ln-ratio": st.column_config.NumberColumn(format="%.3f"),
                "excess (nats)": st.column_config.NumberColumn(format="%.3f"),
            },
        )
    st.caption(
        "A negative allowance means Phase I alone already leaks more than ε·d for that pair: even identical rows "
        "(actual 0) violate ε-mDP, and no Phase II can repair it."
    )

st.subheader("Constrained anchor pairs")
n_pairs = int(r.pair_i.size)
if n_pairs == 0:
    st.info("No anchor pair is constrained (fewer than two anchors, or none within the constraint radius).")
else:
    union = r.anchor_union
    eps_d = r.config.epsilon_per_km * r.pair_d_km
    order = np.argsort(r.pair_exponent)[:MAX_TABLE_ROWS]
    table = pd.DataFrame(
        {
            "anchor a": union[r.pair_i[order]],
            "anchor b": union[r.pair_j[order]],
            "distance (m)": 1000 * r.pair_d_km[order],
            "budget ε·d": eps_d[order],
            "Phase I ε̄·d": (r.pair_eps_bar_per_km * r.pair_d_km)[order],
            "margin ξ": r.pair_xi[order],
            "Phase II exponent B": r.pair_exponent[order],
            "over budget": r.pair_over_budget[order],
            "target unreachable": r.pair_unreachable[order],
        }
    )
    st.caption(
        f"{n_pairs:,} pairs; {int(r.pair_over_budget.sum()):,} over budget (B < 0: rows forced identical), "
        f"{int(r.pair_unreachable.sum()):,} with the target 1 − δ out of reach, "
        f"{int((~np.isfinite(r.pair_xi)).sum()):,} with an infinite margin. "
        + (f"Showing the {MAX_TABLE_ROWS:,} with the smallest B." if n_pairs > MAX_TABLE_ROWS else "Smallest B first.")
    )
    st.dataframe(
        table,
        hide_index=True,
        height=320,
        width="stretch",
        column_config={
            "distance (m)": st.column_config.NumberColumn(format="%.0f"),
            "budget ε·d": st.column_config.NumberColumn(format="%.3f", help="The pair's whole budget, nats."),
            "Phase I ε̄·d": st.column_config.NumberColumn(format="%.3f", help="What uploading anchor sets leaks, nats."),
            "margin ξ": st.column_config.NumberColumn(format="%.3f", help="Safety margin, nats (inf: none exists)."),
            "Phase II exponent B": st.column_config.NumberColumn(
                format="%.3f", help="(ε − ε̄)·d − ξ: the room left for the LP, nats; < 0 is over budget."
            ),
        },
    )
