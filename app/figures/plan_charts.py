"""The planner's pictures (pure: no streamlit calls): the search against eps, and the exposure map.

:func:`plan_figure` draws every eps the planner built, per mechanism, against the expected error (log eps axis),
with the tolerable error as a horizontal line, the least error any mechanism can reach as a dashed one, and the
planned eps of each mechanism as a large marker labelled on the chart (no legend to look up).

:func:`exposure_deck` colours every place by the attacker's expected error there under one planned mechanism
(dark = the attacker finds people there best), with the worst-off 10 % ringed in vermillion and a tooltip that
names the place and its two errors.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pydeck as pdk

import panda
from app.figures.maps import heat_color, map_deck, record_positions
from app.figures.palette import MECHANISM_COLORS, OKABE_ITO, hex_to_rgb
from app.model.plan_numbers import PLAN_METHODS, fmt_eps, worst_off
from panda.plan import MechanismPlan, PlanResult

__all__ = ["plan_figure", "exposure_colors", "exposure_deck", "EXPOSURE_LAYER"]

#: The exposure map's layer id (its places are pickable: the tooltip names them).
EXPOSURE_LAYER = "exposure"


def plan_figure(result: PlanResult, *, height: int = 380) -> go.Figure:
    """Expected error against eps for every built point of each mechanism's search, the target and the floor."""
    fig = go.Figure()
    planned = 0
    for plan in result.mechanisms:
        points = sorted((e.epsilon_per_km, e.loss_m) for e in plan.evaluations if math.isfinite(e.loss_m))
        if not points:
            continue
        name = PLAN_METHODS.get(plan.method, plan.method)
        color = MECHANISM_COLORS.get(plan.method, OKABE_ITO["black"])
        eps, loss = zip(*points, strict=True)
        fig.add_trace(
            go.Scatter(
                x=eps,
                y=loss,
                mode="lines+markers",
                name=name,
                line={"color": color, "width": 1.5},
                marker={"size": 5},
                hovertemplate=f"{name}<br>ε = %{{x:.3g}}/km<br>expected error %{{y:,.0f}} m<extra></extra>",
            )
        )
        if math.isfinite(plan.epsilon_per_km):
            fig.add_trace(
                go.Scatter(
                    x=[plan.epsilon_per_km],
                    y=[plan.loss_m],
                    mode="markers",
                    marker={"size": 14, "color": color, "line": {"color": "white", "width": 2}},
                    showlegend=False,
                    hovertemplate=f"planned: {name}<br>ε = %{{x:.3g}}/km<br>error %{{y:,.0f}} m<extra></extra>",
                )
            )
            # Labelled on the chart, one line each, stacked at the top: close answers never overlap.
            fig.add_vline(x=plan.epsilon_per_km, line={"color": color, "width": 1, "dash": "dot"})
            fig.add_annotation(
                x=math.log10(plan.epsilon_per_km),
                y=1.0 - 0.09 * planned,
                yref="paper",
                text=f"{name}: ε = {fmt_eps(plan.epsilon_per_km)}",
                showarrow=False,
                xanchor="right",
                font={"color": color},
                bgcolor="rgba(255,255,255,0.85)",
            )
            planned += 1
    fig.add_hline(
        y=result.target_loss_m,
        line={"color": OKABE_ITO["black"], "width": 1.5},
        annotation_text=f"tolerable error {result.target_loss_m:,.0f} m",
        annotation_position="top left",
    )
    if math.isfinite(result.reachable_m):
        fig.add_hline(
            y=result.reachable_m,
            line={"color": "#767676", "width": 1, "dash": "dash"},
            annotation_text=f"no mechanism below {result.reachable_m:,.0f} m (nearest output)",
            annotation_position="bottom left",
        )
    fig.update_layout(
        height=height,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        legend={"orientation": "h", "y": 1.08, "x": 0},
        xaxis={
            "type": "log",
            "title": "ε (per km; larger = less private)",
            "tickvals": [0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100],
            "automargin": True,
        },
        # The decision is made near the target: errors far above it (the smallest eps tried) leave the chart.
        yaxis={"title": "expected error (m)", "range": [0, _top_m(result)], "automargin": True},
    )
    return fig


def _top_m(result: PlanResult) -> float:
    """The error axis's top: room above the target and every planned point, not the whole search."""
    planned = [m.loss_m for m in result.mechanisms if math.isfinite(m.loss_m)]
    return 1.15 * max([2.5 * result.target_loss_m, 1.5 * result.reachable_m, *planned, 1.0])


def exposure_colors(plan: MechanismPlan) -> list[list[int]]:
    """Each place's RGBA colour on the exposure map: by the rank of the attacker's error there, the lowest darkest.

    By rank, not by value: a few far outliers would otherwise paint every other place the same dark blue.
    """
    if plan.risk is None:
        raise ValueError(f"The mechanism {plan.method!r} has no plan to map.")
    error = np.asarray(plan.risk.place_error_m, dtype=float)
    rank = np.empty(error.size)
    rank[np.argsort(error, kind="stable")] = np.arange(error.size) / max(error.size - 1, 1)
    return [heat_color(1.0 - r) for r in rank]


def exposure_deck(
    instance: panda.Instance,
    plan: MechanismPlan,
    labels: tuple[str, ...],
    roads: pdk.Layer | None = None,
    *,
    width_px: int = 420,
    height_px: int = 460,
) -> pdk.Deck:
    """Every place coloured by the attacker's expected error under ``plan`` (dark: found best), the worst-off ringed."""
    if plan.risk is None or plan.place_loss_m is None:
        raise ValueError(f"The mechanism {plan.method!r} has no plan to map.")
    error = np.asarray(plan.risk.place_error_m, dtype=float)
    report = np.asarray(plan.place_loss_m, dtype=float)
    flagged = worst_off(plan, instance.prior)
    colors = exposure_colors(plan)
    pos = record_positions(instance)
    data = [
        {
            "p": pos(x),
            "c": colors[x],
            "w": 2 if flagged[x] else 0,
            "tooltip": (
                f"{labels[x]}\nattacker's error {error[x]:,.0f} m · report's error {report[x]:,.0f} m"
                + ("\namong the worst-off 10 %" if flagged[x] else "")
            ),
        }
        for x in range(instance.n_records)
    ]
    layer = pdk.Layer(
        "ScatterplotLayer",
        data=data,
        id=EXPOSURE_LAYER,
        get_position="p",
        get_fill_color="c",
        get_radius=5,
        radius_units="'pixels'",
        stroked=True,
        get_line_color=[*hex_to_rgb(OKABE_ITO["vermillion"]), 255],
        get_line_width="w",
        line_width_units="'pixels'",
        pickable=True,
        auto_highlight=True,
    )
    return map_deck([layer] if roads is None else [roads, layer], instance, width_px=width_px, height_px=height_px)
