"""Learn: geo-indistinguishability, mDP, PmDP, PAnDA's two phases and how to read the views."""

from pathlib import Path

import streamlit as st

from app import charts, common, state
from app.params import to_config
from panda.anchors import resolve_gamma_km

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def text(name: str) -> None:
    """Show one of the long texts of assets/ (a missing file is a warning, not a crash)."""
    path = ASSETS / name
    try:
        st.markdown(path.read_text(encoding="utf-8"))
    except OSError as exc:
        st.warning(f"The text {name} is missing from {ASSETS} ({exc}).")


st.title("Learn")
params = common.current_params()
config = to_config(params)

text("learn_1_geoind.md")
with common.guarded("The ε figure"):
    st.plotly_chart(charts.mdp_allowance(params.epsilon_per_km), key="chart_allowance")

text("learn_2_pmdp.md")
text("learn_3_panda.md")

st.markdown("#### The selection probability with the sidebar's α, λ and γ")
with common.guarded("The selection-probability figure"):
    try:
        inst = state.instance(*params.instance_key)
        gamma = resolve_gamma_km(config, inst)
        d_max = inst.d_max_km
    except Exception as exc:  # no instance (e.g. K too large): fall back to 1 km
        st.caption(f"(The instance could not be built: {exc}; γ shown as 1 km.)")
        gamma, d_max = config.gamma_km or 1.0, 5.0
    st.plotly_chart(charts.decay_curves(config, gamma, d_max), key="chart_decay")
    st.caption(
        f"α = {config.alpha:g}, λ = {config.lambda_per_km:g}/km, γ = {gamma * 1000:,.0f} m "
        f"({'set in the sidebar' if params.gamma_km else 'automatic: the preset rule on this instance'}), "
        f"{params.preset} preset. The thick line is the decay the sidebar selects; beyond γ every record has the "
        "small constant probability given in the legend."
    )

text("learn_4_reading.md")
