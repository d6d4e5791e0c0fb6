"""Charts of the Lesson page (pure: no streamlit calls): plotly figures, and the Two places chart as SVG.

The page shows *Two places* as an SVG image (:func:`two_places_svg`, an inline data URI): the first
plotly chart on a page makes the browser load and compile plotly.js, a large part of the Lesson's first
screen (``bench/bench_lesson_ui.py`` measures it; docs/benchmarks.md). The plotly figure
(:func:`two_places`) is what the Download menu exports.
"""

from __future__ import annotations

from html import escape

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures.palette import OKABE_ITO
from app.model.lesson_numbers import PairCheck, times

__all__ = ["two_places", "two_places_svg", "two_places_alt", "A_COLOR", "B_COLOR"]

#: Place A and B as on the map: Okabe-Ito vermillion and blue (app/figures/palette.py).
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


def _two_places_data(check: PairCheck, row_a: np.ndarray, row_b: np.ndarray) -> tuple:
    """The outputs shown (likeliest from A first, at most 60), their log-ratios as drawn, the span, the excess."""
    pa, pb = np.asarray(row_a, dtype=float), np.asarray(row_b, dtype=float)
    order = np.lexsort((-pb, -pa))
    keep = order[(pa[order] > 0) | (pb[order] > 0)][:60]
    lr = check.log_ratio[keep]
    finite = np.isfinite(lr)
    span = max(check.allowed * 1.6, float(np.abs(lr[finite]).max()) * 1.1 if finite.any() else 0.0, 0.05)
    shown = np.where(finite, lr, np.sign(np.nan_to_num(lr, nan=0.0)) * span)
    outside = np.abs(np.nan_to_num(shown)) > check.allowed * (1 + 1e-9) - check.phase1
    return pa, pb, keep, lr, shown, span, outside


def two_places_svg(
    check: PairCheck, row_a: np.ndarray, row_b: np.ndarray, *, width: int = 480, height: int = 340
) -> str:
    """The Two places chart as inline SVG: the same content as :func:`two_places`, drawn with no library.

    Top: A's and B's report probabilities per output (likeliest from A first). Bottom: the log of their
    ratio against the dashed lines ±ε·d (dotted: what PAnDA's anchor upload leaves). Each bar has a
    tooltip (``<title>``); the SVG scales to its container's width and has a text alternative.
    """
    pa, pb, keep, lr, shown, span, outside = _two_places_data(check, row_a, row_b)
    n = max(int(keep.size), 1)
    left, right, top, gap, bottom = 48.0, 8.0, 22.0, 14.0, 22.0
    plot_w = width - left - right
    top_h = (height - top - gap - bottom) * 0.45
    low_h = (height - top - gap - bottom) - top_h
    y0_top, y0_low = top + top_h, top + top_h + gap + low_h / 2  # baselines: probability 0, ratio 1
    p_max = max(float(pa[keep].max()) if keep.size else 0.0, float(pb[keep].max()) if keep.size else 0.0, 1e-12)
    slot = plot_w / n
    bar = slot * 0.85 / 2
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="{escape(two_places_alt(check, keep.size))}" '
        f'style="font: 12px sans-serif">',
        f'<text x="{left}" y="12" fill="{A_COLOR}">■ from A</text>',
        f'<text x="{left + 80}" y="12" fill="{B_COLOR}">■ from B</text>',
        f'<text x="4" y="{top + top_h / 2}" transform="rotate(-90 10 {top + top_h / 2})" fill="#333">'
        "probability</text>",
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end" fill="#555">{100 * p_max:.0f}%</text>',
        f'<text x="{left - 4}" y="{y0_top}" text-anchor="end" fill="#555">0%</text>',
        f'<line x1="{left}" x2="{width - right}" y1="{y0_top}" y2="{y0_top}" stroke="#999"/>',
        f'<line x1="{left}" x2="{width - right}" y1="{y0_low}" y2="{y0_low}" stroke="#999"/>',
        f'<text x="4" y="{y0_low}" transform="rotate(-90 10 {y0_low})" fill="#333">ln(A / B)</text>',
    ]
    for i, j in enumerate(keep.tolist()):
        x = left + i * slot + slot * 0.075
        for k, (p, color, who) in enumerate(((pa[j], A_COLOR, "A"), (pb[j], B_COLOR, "B"))):
            h = top_h * p / p_max
            out.append(
                f'<rect x="{x + k * bar:.2f}" y="{y0_top - h:.2f}" width="{bar:.2f}" height="{h:.2f}" fill="{color}">'
                f"<title>output {j}: Pr[report | {who}] = {100 * p:.2f} %</title></rect>"
            )
        v = float(shown[i])
        h = (low_h / 2) * abs(v) / (span * 1.05)
        text = times(float(lr[i])) if np.isfinite(lr[i]) else "×∞"
        color = "#b00020" if outside[i] else "#7f7f7f"
        out.append(
            f'<rect x="{x:.2f}" y="{(y0_low - h if v > 0 else y0_low):.2f}" width="{2 * bar:.2f}" height="{h:.2f}" '
            f'fill="{color}"><title>output {j}: A/B likelihood {text}</title></rect>'
        )
    lines = [(check.allowed, "6 4", "#2ca02c")]
    if check.phase1 > 0:
        lines.append((check.allowed - check.phase1, "2 3", "#ff7f0e"))
    for value, dash, color in lines:
        for sign in (1, -1):
            y = y0_low - sign * (low_h / 2) * value / (span * 1.05)
            out.append(
                f'<line x1="{left}" x2="{width - right}" y1="{y:.2f}" y2="{y:.2f}" stroke="{color}" '
                f'stroke-dasharray="{dash}" stroke-width="1.5"/>'
            )
    y_label = y0_low - (low_h / 2) * check.allowed / (span * 1.05) - 4
    out.append(
        f'<text x="{width - right}" y="{y_label:.2f}" text-anchor="end" fill="#1d7a1d">'
        f"ε·d allows {escape(times(check.allowed))}</text>"
    )
    out.append(
        f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle" fill="#333">'
        "output (likeliest from A first)</text>"
    )
    out.append("</svg>")
    return "".join(out)


def two_places_alt(check: PairCheck, n_outputs: int) -> str:
    """The text alternative of the Two places chart (its image's ``alt``)."""
    return (
        f"Report probabilities from place A and place B for their {n_outputs} likeliest outputs, and the log of "
        f"their ratio per output against the allowance ε·d ({times(check.allowed)}); the largest ratio is "
        f"{times(check.worst) if np.isfinite(check.worst) else 'infinite'}."
    )
