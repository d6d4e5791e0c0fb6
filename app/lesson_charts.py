"""plotly figures of the Lesson page (pure: no streamlit calls)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.lesson import PairCheck, times
from app.palette import OKABE_ITO

__all__ = ["two_places", "A_COLOR", "B_COLOR"]

#: Place A and B as on the map: Okabe-Ito vermillion and blue (app/palette.py).
A_COLOR = OKABE_ITO["vermillion"]
B_COLOR = OKABE_ITO["blue"]


def two_places(check: PairCheck, row_a: np.ndarray, row_b: np.ndarray, *, height: int = 340) -> go.Figure:
    """A's and B's report probabilities per output (top) and their log-ratio against ±eps*d (bottom).

    Outputs are ordered by A's probability (likeliest first) so the bars read left to right. An
    infinite log-ratio (one place never reports an output the other does) is drawn at the axis edge
    and labelled. For PAnDA the dotted lines show what is left of eps*d after the anchor upload.
    """
    pa, pb = np.asarray(row_a, dtype=float), np.asarray(row_b, dtype=float)
    order = np.lexsort((-pb, -pa))
    keep = order[(pa[order] > 0) | (pb[order] > 0)][:60]
    x = [f"{j}" for j in keep.tolist()]
    lr = check.log_ratio[keep]
    finite = np.isfinite(lr)
    span = max(check.allowed * 1.6, float(np.abs(lr[finite]).max()) * 1.1 if finite.any() else 0.0, 0.05)
    shown = np.where(finite, lr, np.sign(np.nan_to_num(lr, nan=0.0)) * span)
    outside = np.abs(np.nan_to_num(shown)) > check.allowed * (1 + 1e-9) - check.phase1
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.45, 0.55])
    fig.add_bar(
        x=x,
        y=pa[keep],
        name="from A",
        marker_color=A_COLOR,
        row=1,
        col=1,
        hovertemplate="output %{x}<br>Pr[report | A] = %{y:.2%}<extra></extra>",
    )
    fig.add_bar(
        x=x,
        y=pb[keep],
        name="from B",
        marker_color=B_COLOR,
        row=1,
        col=1,
        hovertemplate="output %{x}<br>Pr[report | B] = %{y:.2%}<extra></extra>",
    )
    text = [times(v) if np.isfinite(v) else "×∞" for v in lr.tolist()]
    fig.add_bar(
        x=x,
        y=shown,
        name="ln(A / B)",
        marker_color=np.where(outside, "#b00020", "#7f7f7f").tolist(),
        customdata=text,
        row=2,
        col=1,
        hovertemplate="output %{x}<br>A/B likelihood %{customdata}<extra></extra>",
        showlegend=False,
    )
    for sign in (1, -1):
        fig.add_hline(y=sign * check.allowed, line_dash="dash", line_color="#2ca02c", row=2, col=1)
        if check.phase1 > 0:
            fig.add_hline(y=sign * (check.allowed - check.phase1), line_dash="dot", line_color="#ff7f0e", row=2, col=1)
    fig.add_annotation(
        x=1,
        xref="x domain",
        y=check.allowed,
        yref="y2",
        text=f"ε·d allows {times(check.allowed)}",
        showarrow=False,
        xanchor="right",
        yanchor="bottom",
        font={"size": 11, "color": "#2ca02c"},
    )
    fig.update_yaxes(title_text="probability", tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text="ln(A / B)", range=[-span * 1.05, span * 1.05], row=2, col=1)
    fig.update_xaxes(title_text="output (likeliest from A first)", showticklabels=False, row=2, col=1)
    fig.update_layout(
        height=height,
        margin={"l": 10, "r": 10, "t": 10, "b": 30},
        barmode="group",
        legend={"orientation": "h", "y": 1.08, "x": 0},
        bargap=0.15,
    )
    return fig
