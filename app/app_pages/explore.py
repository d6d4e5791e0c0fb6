"""Explore: PAnDA on the map, its numbers, and where its privacy budget goes."""

import numpy as np
import streamlit as st

from app import state
from app.figures import charts, maps
from app.model import export_files, panda_numbers
from app.model.messages import plain
from app.model.page_links import CHART_TABS as CHART_TAB_IDS
from app.model.page_links import DEFAULT_LAYER_IDS, LAYER_IDS
from app.model.params import DECAY_LABELS
from app.widgets import current_view, sidebar

DELTA_SWEEP = (1e-9, 1e-7, 1e-5, 1e-3, 1e-2, 0.1, 0.3)
#: The delta sweep reruns PAnDA len(DELTA_SWEEP) times: only when one run takes at most this long (s).
MAX_SWEEP_RUN_S = 2.0
CHART_TABS = list(CHART_TAB_IDS.values())
CHART_HEIGHT = 470

st.title("PAnDA")
st.markdown(
    "**PAnDA in one paragraph.** Each user first uploads a random set of *anchor* places drawn near their true "
    "place (Phase I), then reports an output drawn from a distribution the server optimised over those anchors "
    "(Phase II). The catch: the anchor upload itself can tell nearby places apart by more than ε allows. This page "
    "counts it exactly on the view in the sidebar (the *violation rate*); the *paper* preset shows the paper's own "
    "settings. Every number here is measured on that view, never assumed."
)
params = current_view.current_params()
view = current_view.load_view(params)
if view is None:
    st.stop()
r, inst, net = view.result, view.instance, view.net
st.caption(
    f"**{plain(net.name)}** · K = {inst.n_records:,} secret records · N = {inst.n_users} users · "
    f"{inst.n_outputs} outputs · "
    f"{DECAY_LABELS[params.decay]} · {params.preset} preset · ε = {r.config.epsilon_per_km:g}/km · "
    f"δ = {r.config.delta:g} · α = {r.config.alpha:g} · λ = {r.config.lambda_per_km:g}/km · "
    f"γ = {r.gamma_km * 1000:,.0f} m · loss: {params.loss_label}"
)
# The lower bound starts now in a worker thread; the page renders meanwhile.
bound_job = current_view.start_lower_bound(view)
st.markdown(panda_numbers.verdict(r))
metric_slots = current_view.show_metrics(view)
with st.expander("Why? What stands behind these numbers"):
    note_slot = current_view.show_messages(view)

# The page's own state (also in the link: app.model.page_links.PAGE_QUERY), validated against this run. Every
# option label below is fixed (never computed from the run): the browser sends a selectbox's value
# back as its label, and a label that changed with the run would come back as a stale string.
ss = st.session_state
n_users = int(r.user_records.size)
if current_view.valid_user(ss.get("sel_user"), n_users) is None:  # first visit, fewer users now, or a bad value
    ss.sel_user = int(np.argmax([a.size for a in r.anchor_sets])) if n_users else 0  # the most anchors
else:
    ss.sel_user = current_view.valid_user(ss.sel_user, n_users)
if not isinstance(ss.get("layers"), list) or not set(ss.layers) <= set(LAYER_IDS):
    ss.layers = list(DEFAULT_LAYER_IDS)
if ss.get("chart_tab") not in CHART_TABS:
    ss.chart_tab = ss.get("explore_tab_memory") if ss.get("explore_tab_memory") in CHART_TABS else CHART_TABS[0]
sidebar.write_query(params)  # the corrected values into the link at once

left, right = st.columns([3, 2], gap="medium")
with left:
    layers = st.pills(
        "Map layers",
        options=list(maps.LAYERS),
        selection_mode="multi",
        format_func=maps.LAYERS.get,
        key="layers",
        persist_state="session",
        wrap=True,
        help="Click to show or hide a layer. Hover any point or line for its numbers.",
    )
    pick, about = st.columns([1, 2], vertical_alignment="bottom")
    sel = pick.selectbox(
        "Selected user",
        range(n_users),
        key="sel_user",
        persist_state="session",
        format_func=lambda n: f"User {n}",
        help="The user whose anchors and output distribution the map shows.",
    )
    sel = current_view.valid_user(sel, n_users) or 0
    n_anchor = int(r.anchor_sets[sel].size) if n_users else 0
    about.caption(
        f"User {sel}: {n_anchor} anchor{'s' if n_anchor != 1 else ''}"
        + ("" if n_anchor else " (cannot report)")
        + f" · the most anchors: user {int(np.argmax([a.size for a in r.anchor_sets]))}"
        if n_users
        else "No users."
    )
    with current_view.guarded("The map"):
        pairs = panda_numbers.user_pairs(r, inst) if "violations" in (layers or []) else None
        segments, n_segments = state.road_segments(params.source)
        deck = maps.build_deck(
            net, inst, r, layers=tuple(layers or ()), selected_user=int(sel), pairs=pairs, segments=segments
        )
        st.pydeck_chart(deck, height=560)
        thinned = (
            f" ({len(segments):,} of the {n_segments:,} road segments drawn, evenly thinned)"
            if len(segments) < n_segments
            else ""
        )
        st.caption(
            "Blue dots: secret records · orange: users (red: selected, grey: no anchor) · purple rings: the selected "
            "user's anchors (bigger ring: its surrogate) · green lines: user → surrogate · yellow→navy discs: the "
            "selected user's output distribution (bigger, darker = likelier) · yellow→navy lines: user pairs that "
            f"violate ε-mDP (darker = larger excess).{thinned}  \nMap data {net.attribution}"
        )

with right:
    # Only the open tab draws its chart (and runs its computation): a tab switch is a fast rerun.
    tabs = st.tabs(CHART_TABS, key="chart_tab", on_change="rerun")
    ss.explore_tab_memory = ss.get("chart_tab")  # the tab widget forgets its value on another page
    tab_of = dict(zip(CHART_TABS, tabs, strict=True))
    utility_slot = tab_of["Utility vs bound"].empty()
    time_slot = tab_of["Time per phase"].empty()
    if tab_of["Budget split"].open is not False:
        with tab_of["Budget split"], current_view.guarded("The budget split"):
            shares = panda_numbers.budget_shares(r)
            st.plotly_chart(charts.budget_split(shares, height=CHART_HEIGHT), key="chart_budget")
            st.caption(charts.budget_note(shares))
    if tab_of["Violations vs δ"].open:
        with tab_of["Violations vs δ"], current_view.guarded("The δ sweep"):
            deltas = tuple(sorted(set(DELTA_SWEEP) | {params.delta}))
            run_s = r.timings_s.get("total", 0.0)
            if run_s > MAX_SWEEP_RUN_S:
                st.info(
                    f"**Not computed here:** one PAnDA run takes {run_s:.1f} s on this view and the sweep would "
                    f"rerun it {len(deltas)} times. Move δ in the sidebar to see one point at a time."
                )
            else:
                with st.spinner(f"Running PAnDA at {len(deltas)} values of δ ..."):
                    sweep_items = state.config_items(view.config.replace(delta=1e-7))
                    rows = state.delta_sweep(params.instance_key, sweep_items, params.seed, deltas)
                st.plotly_chart(charts.violation_vs_delta(rows, params.delta, height=CHART_HEIGHT), key="chart_delta")
                st.caption("Each point is a full PAnDA run at that δ (same anchors); the grey line is the promise.")

bound = None
with current_view.guarded("The lower bound"):
    if tab_of["Utility vs bound"].open:
        with utility_slot.container(), st.spinner("Solving the Relaxed AnPO lower bound ..."):
            bound = current_view.finish_lower_bound(bound_job)
    else:
        bound = current_view.finish_lower_bound(bound_job)
    current_view.fill_bound_metrics(metric_slots, view, bound)
    current_view.show_lower_bound_note(note_slot, bound)
    if tab_of["Utility vs bound"].open:
        utility_slot.plotly_chart(charts.utility(r, bound, height=CHART_HEIGHT), key="chart_utility")
if tab_of["Time per phase"].open:
    with current_view.guarded("The timing chart"):
        extra = {"relaxed_lp": bound["time_s"]} if bound and bound.get("time_s") else None
        time_slot.plotly_chart(charts.timings(r.timings_s, extra, height=CHART_HEIGHT), key="chart_time")

st.subheader("Export")
e1, e2, e3 = st.columns(3)
e1.download_button(
    "Configuration (JSON)",
    export_files.config_json(params, view.config),
    file_name="panda_config.json",
    mime="application/json",
    on_click="ignore",
    icon=":material/settings:",
    help="The view's parameters (also its link's query string) and the full PandaConfig.",
)
e2.download_button(
    "Result summary (JSON)",
    export_files.summary_json(r, bound),
    file_name="panda_summary.json",
    mime="application/json",
    on_click="ignore",
    icon=":material/summarize:",
    help="Sizes, losses in metres, lower bound, budget split, counts, timings. Numbers that are not "
    "available or not finite are written as null.",
)
e3.download_button(
    "Perturbation matrix (CSV)",
    lambda: export_files.matrix_csv(r, inst),
    file_name="panda_matrix.csv",
    mime="text/csv",
    on_click="ignore",
    icon=":material/table:",
    help="Pr[output | anchor]: one row per anchor record (its record number, lon and lat), one column per output "
    "(its name gives the output's number, record, lon and lat; degrees). A plain CSV table; rows sum to 1. "
    "Map data (c) OpenStreetMap contributors, ODbL.",
    disabled=r.z is None,
)
