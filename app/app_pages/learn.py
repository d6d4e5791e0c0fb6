"""Learn: geo-indistinguishability for students, in five short sections, then a researchers' expander.

The main text (assets/learn_*.md and the captions here) is plain words with units; equation
numbers, preset internals and script names live only in the "For researchers" expander. Every
section is wrapped in ``current_view.guarded``: a failing figure is a message, never a traceback.
"""

from pathlib import Path

import numpy as np
import streamlit as st

from app import state
from app.figures import charts, learn_charts
from app.model.params import to_config
from app.widgets import current_view
from panda.anchors import resolve_gamma_km

ASSETS = Path(__file__).resolve().parents[2] / "assets"
#: Pairs of places drawn for the Phase-I figure.
N_PAIRS = 150


def text(name: str) -> None:
    """Show one of the texts of assets/ (a missing file is a warning, not a crash)."""
    path = ASSETS / name
    try:
        st.markdown(path.read_text(encoding="utf-8"))
    except OSError as exc:
        st.warning(f"The text {name} is missing from {ASSETS} ({exc}).")


def view_instance(params):
    """The view's instance and gamma (km), or ``(None, gamma or 1 km)`` with a caption when it cannot be built."""
    config = to_config(params)
    try:
        inst = state.instance(*params.instance_key)
    except Exception as exc:  # e.g. too many places for this network: the figures fall back
        st.caption(f"(This view's places could not be drawn: {exc}. The figure assumes γ = 1,000 m.)")
        return None, config.gamma_km or 1.0
    return inst, resolve_gamma_km(config, inst)


st.title("Learn")
st.caption(
    "Geo-indistinguishability and PAnDA in five short sections. The figures follow the sidebar: "
    "change ε, the decay, α, λ or γ there and watch them move."
)
params = current_view.current_params()
eps = params.epsilon_per_km

with current_view.guarded("Section 1 (the promise)"):
    text("learn_1_promise.md")
    st.markdown(f"**With the sidebar's ε = {eps:g} per km:** {learn_charts.allowance_sentence(eps)}.")
    st.plotly_chart(charts.mdp_allowance(eps), key="chart_allowance")
    st.caption(
        "Each line is one privacy budget: read off how many times likelier a report may be from one place "
        "than from another at that distance (the vertical axis grows tenfold per step). Steeper = weaker promise."
    )

with current_view.guarded("Section 2 (mechanisms and the trade-off)"):
    text("learn_2_mechanisms.md")
    st.plotly_chart(learn_charts.tradeoff_figure(eps), key="chart_tradeoff")
    s = learn_charts.street()
    em_error = learn_charts.report_error_m(learn_charts.street_em(eps, s), s)
    opt_error = learn_charts.report_error_m(learn_charts.street_optimal(eps), s)
    st.caption(
        f"A straight street of {s.positions_m.size} places, {s.positions_m[1]:,.0f} m apart "
        f"({s.positions_m[-1] / 1000:g} km), every place equally likely. Solid: how far the report is from the "
        f"true place, on average (the utility loss). Dashed: how far the attacker's best guess is (the privacy). "
        f"At ε = {eps:g} per km the exponential mechanism's reports are {em_error:,.0f} m off on average, the "
        f"optimal mechanism's {opt_error:,.0f} m. Planar Laplace's noise alone moves a point "
        f"{learn_charts.laplace_mean_m(eps):,.0f} m on average."
    )

with current_view.guarded("Section 3 (the attacker)"):
    text("learn_3_attacker.md")
    st.plotly_chart(learn_charts.posterior_figure(eps), key="chart_posterior")
    b = learn_charts.street_belief(eps)
    guess = (
        "its best guess is the reported place itself"
        if b["guess"] == b["report"]
        else f"its best guess is {b['guess_m']:,.0f} m, not the reported {b['report_m']:,.0f} m (more of the "
        "street lies that way)"
    )
    st.caption(
        f"The same street; the exponential mechanism with ε = {eps:g} per km reported {b['report_m']:,.0f} m. "
        f"Before the report every place had {learn_charts.fmt_chance(1 / b['n_places'])}; afterwards the "
        f"attacker gives the reported place {learn_charts.fmt_chance(b['report_belief'])} and the places within "
        f"100 m of it {learn_charts.fmt_chance(b['within_100m'])}. {guess.capitalize()}, and it is "
        f"{b['guess_error_m']:,.0f} m off on average."
    )

with current_view.guarded("Section 4 (PAnDA)"):
    text("learn_4_panda.md")
    config = to_config(params)
    inst, gamma_km = view_instance(params)
    d_max = inst.d_max_km if inst is not None else 5.0
    st.plotly_chart(charts.decay_curves(config, gamma_km, d_max), key="chart_decay")
    mean_anchors = None
    if inst is not None:
        mean_anchors = learn_charts.mean_anchor_count(inst.distances_km(inst.users), config, gamma_km)
    st.caption(
        learn_charts.decay_caption(
            config,
            gamma_km,
            gamma_automatic=params.gamma_km is None,
            mean_anchors=mean_anchors,
            n_records=inst.n_records if inst is not None else None,
        )
    )
    text("learn_4_leak.md")
    if inst is not None:
        a, b_, d_km = learn_charts.sample_pairs(inst, n_pairs=N_PAIRS, seed=params.seed)
        spend = learn_charts.phase1_spend(inst, config, gamma_km, a, b_)
        d_m = np.asarray(d_km) * 1000.0
        st.plotly_chart(learn_charts.phase1_figure(d_m, spend, eps), key="chart_phase1")
        st.caption(
            f"{d_m.size} pairs of places, drawn at random on this map; the sidebar's settings "
            f"(preset {params.preset}). "
            f"Each dot: what the most telling anchor upload reveals about the two places, as a multiple of their whole "
            f"allowance ε × d (above the dashed line, that upload alone tells them apart more than the promise "
            f"allows). {learn_charts.phase1_caption(d_m, spend)}"
        )
    st.markdown(
        "The sidebar's third preset, *recommended*, uses a 50 m threshold and a 1-in-10 failure probability: "
        "it kept within δ on two of the four built-in cities but not on the other two. Check yours on the "
        "**Audit** page."
    )

with current_view.guarded("Section 5 (reading the dashboard)"):
    text("learn_5_reading.md")

with st.expander("For researchers: equations, presets, scripts and sources"):
    text("learn_researchers.md")
