"""The optimal LP's proven lower bounds on the privacy-utility curve (pure plotly: no streamlit calls).

:func:`app.figures.curve_charts.tradeoff_figure` calls :func:`add_lp_bound` with the LP's rows of the loss
panel. Where the LP did not solve in time, its proven lower bound on every eps-mDP mechanism over these
outputs (``lower_bound_m``) is drawn as hollow up-pointing triangles on a wide translucent band joining
neighbouring bounds, their labels "▲ ε = E: LP ≥ B m" stacked in one column at the panel's top right
(:func:`bound_label_layout`); where it returned an audited mechanism all the same, a down-pointing
triangle at that mechanism's loss is joined to the bound by a dotted line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from app.model.panda_numbers import fmt_m

__all__ = [
    "BOUND_LABEL_FONT",
    "BOUND_LABEL_LINE_HEIGHT",
    "BOUND_LABEL_PAD",
    "BOUND_LABEL_GAP",
    "BOUND_LABEL_TOP_ROWS",
    "BOUND_LABEL_NAME",
    "add_lp_bound",
    "bound_label_height",
    "bound_label_layout",
    "is_finite_number",
]

#: The lower-bound labels' font size (px), the line height plotly gives a line of text (in font sizes:
#: its ``LINE_SPACING``), the padding inside each label's box (px), the least gap between two boxes (px),
#: and the rows kept free at the top of the panel (none: the current eps line's label sits above the panel).
BOUND_LABEL_FONT = 11
BOUND_LABEL_LINE_HEIGHT = 1.3
BOUND_LABEL_PAD = 1
BOUND_LABEL_GAP = 2
BOUND_LABEL_TOP_ROWS = 0
#: The annotations' ``name``: how tests and exports find the labels.
BOUND_LABEL_NAME = "lp-bound-label"


def is_finite_number(value: object) -> bool:
    """Whether a row's value is a finite number (not None, not a bool, not nan)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: Two labelled bounds closer than this on the log eps axis (decades) have their labels pushed apart.
_LABEL_CLOSE_DECADES = 0.2


def _bound_label_positions(xs: list[float], ys: list[float | None]) -> list[str]:
    """Where each lower-bound label would sit around its triangle (plotly ``textposition``).

    The trace keeps them, but its text is not drawn: beside their triangles the labels would overlap
    in a narrow column (whatever side each takes, plotly does not move text apart); they are a column
    of annotations instead (:func:`bound_label_layout`).

    Centred under it, except the leftmost's (centred, it ran off the plot's left edge), and except
    two neighbours closer than :data:`_LABEL_CLOSE_DECADES` on the log axis (3.5 and 5/km on the
    curve's grid, whose labels overlapped at 1280 px): the left one's label goes to its left, the
    right one's to its right.
    """
    labelled = [i for i, y in enumerate(ys) if y is not None]
    positions = ["bottom center"] * len(ys)
    if labelled:
        positions[labelled[0]] = "bottom right"
    for left, right in zip(labelled, labelled[1:], strict=False):
        if math.log10(xs[right] / xs[left]) < _LABEL_CLOSE_DECADES:
            if left != labelled[0]:
                positions[left] = "bottom left"
            positions[right] = "bottom right"
    return positions


def add_lp_bound(fig: go.Figure, pts: list[Mapping], label: str, color: str, where: dict, show_legend: bool) -> None:
    """The optimal LP's proven lower bounds (on every ε-mDP mechanism) where it did not solve: a band, labelled ▲."""
    xs, ys, text, hover, custom = [], [], [], [], []
    for r in pts:
        bound = r.get("lower_bound_m")
        if r.get("outcome") == "solved" or not is_finite_number(bound):
            xs.append(float(r["epsilon_per_km"]))
            ys.append(None)
            text.append("")
            hover.append("")
            custom.append([float(r["epsilon_per_km"]), "lp-bound"])
            continue
        limit = r.get("time_s", float("nan"))
        xs.append(float(r["epsilon_per_km"]))
        ys.append(float(bound))
        text.append(f"LP ≥ {fmt_m(float(bound))}")
        lines = [
            f"<b>{label}</b>: not solved in {limit:.0f} s"
            if is_finite_number(limit)
            else f"<b>{label}</b>: not solved",
            f"ε = {r['epsilon_per_km']:g} /km",
            f"no mechanism can do better than {fmt_m(float(bound))}",
            "(proven by weak duality from the LP's last relaxation,",
            "for every ε-geo-indistinguishable mechanism over these outputs)",
        ]
        best = r.get("loss_m", float("nan"))
        if is_finite_number(best):
            lines.append(f"best exactly audited mechanism found: {fmt_m(float(best))} (▼)")
        lines.append("click to set ε")
        hover.append("<br>".join(lines))
        custom.append([float(r["epsilon_per_km"]), "lp-bound"])
    if not any(y is not None for y in ys):
        return
    # A wide translucent band joining neighbouring bounds (the optimum lies on or above it) ...
    band = {"color": "rgba(17, 17, 17, 0.18)", "width": 14}
    _lp_line(fig, xs, ys, f"{label}: lower bound band", band, "lower bound band", where)
    # ... and opaque up-pointing triangles that carry the hover text and eps. Their labels are not drawn
    # beside them (plotly places a marker's text with no regard for its neighbours': they overlapped in
    # the Lesson's narrow column) but stacked in one column of annotations (bound_label_layout).
    positions = _bound_label_positions(xs, ys)
    _lp_markers(
        fig,
        xs,
        ys,
        f"{label} not solved: ▲ lower bound",
        "triangle-up",
        color,
        "lower bound",
        where,
        showlegend=show_legend,
        text=text,
        textposition=positions,
        textfont={"size": BOUND_LABEL_FONT, "color": color},
        cliponaxis=False,
        customdata=custom,
        hovertext=hover,
    )
    labels = [(x, t) for x, t in zip(xs, text, strict=True) if t]
    _add_bound_labels(fig, [f"▲ ε = {x:g}: {t}" for x, t in labels], color, where)
    _add_lp_found(fig, pts, label, color, where, show_legend)


def bound_label_height(font_size: float = BOUND_LABEL_FONT, pad: float = BOUND_LABEL_PAD) -> float:
    """Height (px) of one label's box: one line of text of ``font_size`` px, ``pad`` px inside each edge."""
    return font_size * BOUND_LABEL_LINE_HEIGHT + 2 * pad


def bound_label_layout(n: int, font_size: float = BOUND_LABEL_FONT) -> list[float]:
    """The vertical offsets (px, downwards negative) of ``n`` lower-bound labels from their common anchor.

    Every label is anchored at the same point (the loss panel's top right corner, ``yanchor="top"``) and
    moved down by its offset, so label ``i``'s box spans ``[offset_i - h, offset_i]`` with ``h`` =
    :func:`bound_label_height`. Consecutive offsets differ by ``h +`` :data:`BOUND_LABEL_GAP`: the boxes
    are disjoint, in pixels, whatever the figure's width and height (no data coordinate is involved).
    The column starts :data:`BOUND_LABEL_GAP` below the panel's top, after :data:`BOUND_LABEL_TOP_ROWS`
    free rows.
    """
    pitch = bound_label_height(font_size) + BOUND_LABEL_GAP
    return [-BOUND_LABEL_GAP - (BOUND_LABEL_TOP_ROWS + i) * pitch for i in range(n)]


def _add_bound_labels(fig: go.Figure, texts: list[str], color: str, where: dict) -> None:
    """The lower bounds' labels as one column of annotations at the loss panel's top right (bound_label_layout)."""
    axis = "" if where.get("row", 1) == 1 else str(where["row"])
    for text, shift in zip(texts, bound_label_layout(len(texts)), strict=True):
        fig.add_annotation(
            name=BOUND_LABEL_NAME,
            text=text,
            xref=f"x{axis} domain",
            yref=f"y{axis} domain",
            x=1.0,
            y=1.0,
            xanchor="right",
            yanchor="top",
            yshift=shift,
            showarrow=False,
            align="right",
            font={"size": BOUND_LABEL_FONT, "color": color},
            bgcolor="rgba(255, 255, 255, 0.85)",  # readable over the lines it may cover
            borderpad=BOUND_LABEL_PAD,
            borderwidth=0,
        )


def _add_lp_found(fig: go.Figure, pts: list[Mapping], label: str, color: str, where: dict, show_legend: bool) -> None:
    """Where the LP did not solve but returned an audited mechanism: a down-pointing triangle at its
    loss, joined to the bound below by a thin line (the optimum lies on that segment)."""
    seg_x: list[float | None] = []
    seg_y: list[float | None] = []
    xs, ys, hover, custom = [], [], [], []
    for r in pts:
        bound, best = r.get("lower_bound_m"), r.get("loss_m")
        if r.get("outcome") == "solved" or not (is_finite_number(bound) and is_finite_number(best)):
            continue
        e = float(r["epsilon_per_km"])
        seg_x += [e, e, None]
        seg_y += [float(bound), float(best), None]
        xs.append(e)
        ys.append(float(best))
        custom.append([e, "lp-found"])
        hover.append(
            f"<b>{label}</b>: not solved in time<br>ε = {e:g} /km<br>best exactly audited mechanism found: "
            f"{fmt_m(float(best))}<br>the optimum lies between {fmt_m(float(bound))} and {fmt_m(float(best))}"
            "<br>click to set ε"
        )
    if not xs:
        return
    dotted = {"color": color, "width": 1, "dash": "dot"}
    _lp_line(fig, seg_x, seg_y, f"{label}: certified interval", dotted, "certified interval", where)
    _lp_markers(
        fig,
        xs,
        ys,
        f"{label} not solved: ▼ best mechanism found",
        "triangle-down",
        color,
        "best found",
        where,
        showlegend=show_legend,
        customdata=custom,
        hovertext=hover,
    )


def _lp_line(fig: go.Figure, x: list, y: list, name: str, line: dict, kind: str, where: dict) -> None:
    """A hover-less line of the optimal LP's bounds (no legend entry)."""
    fig.add_trace(
        go.Scatter(
            x=x,
            y=y,
            mode="lines",
            name=name,
            legendgroup="lp",
            showlegend=False,
            connectgaps=False,
            line=line,
            hoverinfo="skip",
            meta={"method": "lp", "metric": "loss", "kind": kind},
        ),
        **where,
    )


def _lp_markers(
    fig: go.Figure, x: list, y: list, name: str, symbol: str, color: str, kind: str, where: dict, **extra: Any
) -> None:
    """Hollow triangles of the optimal LP's bounds, carrying the hover text and eps (``extra``: the
    trace's ``customdata``, ``hovertext``, ``showlegend`` and text options; the text is kept as data,
    not drawn: the labels are annotations, :func:`bound_label_layout`)."""
    fig.add_trace(
        go.Scatter(
            x=x,
            y=y,
            mode="markers",
            name=name,
            legendgroup="lp",
            marker={"symbol": symbol, "size": 13, "color": "white", "line": {"color": color, "width": 2}},
            hovertemplate="%{hovertext}<extra></extra>",
            meta={"method": "lp", "metric": "loss", "kind": kind},
            **extra,
        ),
        **where,
    )
