"""The privacy-utility curve as a plotly figure (pure: no streamlit calls), from panda.tradeoff rows.

:func:`tradeoff_figure` draws, against eps on a log axis, the expected loss (m) or the Bayes-optimal
attacker's error (m), or both as two stacked panels sharing the eps axis (``metric="both"``):

* one line with markers per mechanism (readable names: :data:`LABELS`), broken where a point has
  no value (not solved, failed, skipped);
* two loss lines per PAnDA variant, labelled: "PAnDA-e at its users" (solid: ``users_loss_m``, its
  expected loss at the users' true places with the anchors they drew, the paper's measure and the
  number the Compare and PAnDA pages show) and "PAnDA-e over every place" (dashed: ``loss_m``, the
  loss of its surrogate mixture over every record under the prior, as for the baselines); its
  attacker line is the mixture's, so it is the dashed "over every place" one
  (:data:`PANDA_SCOPES`, ``trace.meta["scope"]``);
* the marker says what the exact audit found: filled circle = passed, hollow circle = failed,
  filled diamond = not audited (a sampled estimate, e.g. planar Laplace by sampling); a grey key
  in the legend explains the three;
* where the optimal LP did not solve in time, its proven lower bound on every eps-mDP mechanism over
  these outputs (weak duality from its last relaxation with the LP's floor taken out: ``lower_bound_m``
  of :func:`panda.mechanisms.build_lp`, never the floored LP's own bound) as hollow up-pointing
  triangles on a wide translucent band joining neighbouring bounds (loss panel only), their labels
  "▲ ε = E: LP ≥ B m" stacked in one column at the panel's top right, a fixed number of pixels apart
  (:func:`bound_label_layout`: never overlapping, whatever the figure's size), and, where it
  returned an audited mechanism all the same, a down-pointing triangle at that
  mechanism's loss joined to the bound by a dotted line; an unsolved point without a bound shows
  nothing and the figure says so in a note;
* a dashed vertical line at the current eps;
* every point's ``customdata[0]`` is its eps (1/km): a click handler (``st.plotly_chart(...,
  on_select="rerun", selection_mode="points")``) reads ``point["customdata"][0]`` and sets eps.

:func:`tradeoff_notes` returns the sentences a page shows under the figure (what did not finish,
the LP's bounds, what the attacker's error leaves out for PAnDA).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures.palette import MECHANISM_COLORS
from app.model.panda_numbers import fmt_m
from panda.tradeoff import METHOD_LABELS

__all__ = [
    "LABELS",
    "COLORS",
    "METRICS",
    "PANDA_SCOPES",
    "bound_label_height",
    "bound_label_layout",
    "tradeoff_figure",
    "tradeoff_notes",
]

#: Readable mechanism names.
LABELS: dict[str, str] = dict(METHOD_LABELS)
#: One colour per mechanism: Okabe-Ito, distinct with colour-vision deficiencies (app/figures/palette.py).
COLORS: dict[str, str] = dict(MECHANISM_COLORS)
#: metric -> (row key, axis title, word in hover text).
METRICS: dict[str, tuple[str, str, str]] = {
    "loss": ("loss_m", "expected loss (m)", "expected loss"),
    "attacker": ("adversary_error_m", "attacker's error (m)", "attacker's error"),
}
#: PAnDA's two losses: scope -> (row key, suffix of the line's name, line dash).
PANDA_SCOPES: dict[str, tuple[str, str, str]] = {
    "users": ("users_loss_m", "at its users", "solid"),
    "every place": ("loss_m", "over every place", "dash"),
}
_SYMBOL = {"passed": "circle", "failed": "circle-open", "not audited": "diamond"}
_KEY_TEXT = {
    "passed": "exact audit passed",
    "failed": "exact audit failed",
    "not audited": "not audited (sampled estimate)",
}
_GREY = "#6b6b6b"


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _audit_state(row: Mapping) -> str:
    if not row.get("audited"):
        return "not audited"
    return "passed" if row.get("audit_passed") else "failed"


def _audit_text(row: Mapping) -> str:
    state = _audit_state(row)
    if state == "not audited":
        return str(row.get("audit_kind") or "not audited")
    kind = "PmDP audit (Phase I counted)" if str(row.get("method", "")).startswith("panda") else "exact ε-mDP audit"
    text = f"{kind}: {state}"
    if str(row.get("method", "")).startswith("panda") and _finite(row.get("pmdp_user_rate_over_delta_upper")):
        text += f" ({100 * row['pmdp_user_rate_over_delta_upper']:.0f} % of user pairs may exceed δ)"
    elif _finite(row.get("epsilon_min_per_km")):
        text += f" (smallest ε it meets: {row['epsilon_min_per_km']:.3g} /km)"
    return text


def _hover(row: Mapping, label: str, word: str, value: float, others: Sequence[tuple[str, object]]) -> str:
    lines = [f"<b>{label}</b>", f"ε = {row['epsilon_per_km']:g} /km", f"{word}: {fmt_m(value)}"]
    for other_word, other_value in others:
        if _finite(other_value):
            lines.append(f"{other_word}: {fmt_m(float(other_value))}")
    lines.append(_audit_text(row))
    if _finite(row.get("build_time_s")):
        lines.append(f"built in {row['build_time_s']:.2f} s")
    if str(row.get("method", "")).startswith("panda") and word == "attacker's error":
        lines.append("the attacker sees the report only, not the uploaded anchors")
    lines.append("click to set ε")
    return "<br>".join(lines)


def _by_method(rows: Sequence[Mapping]) -> dict[str, list[Mapping]]:
    out: dict[str, list[Mapping]] = {}
    for row in rows:
        out.setdefault(str(row["method"]), []).append(row)
    for method in out:
        out[method].sort(key=lambda r: float(r["epsilon_per_km"]))
    return out


def _users_word(row: Mapping) -> str:
    n = row.get("users_counted")
    who = f"its {int(n)} users" if isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0 else "its users"
    return f"expected loss at {who} (the paper's measure)"


def _lines_of(method: str, metric: str) -> list[tuple[str | None, str, str]]:
    """The lines one mechanism gets in a panel: (scope, row key, line dash).

    One line per mechanism, except PAnDA's two losses (:data:`PANDA_SCOPES`); PAnDA's attacker
    error is its surrogate mixture's, over every place.
    """
    if not method.startswith("panda"):
        return [(None, METRICS[metric][0], "solid")]
    if metric == "attacker":
        return [("every place", METRICS["attacker"][0], PANDA_SCOPES["every place"][2])]
    return [(scope, key, dash) for scope, (key, _, dash) in PANDA_SCOPES.items()]


def _point_hover(row: Mapping, name: str, metric: str, scope: str | None, value: float) -> str:
    """The hover text of one point: its value, the mechanism's other numbers, the audit."""
    loss_key, _, loss_word = METRICS["loss"]
    att_key, _, att_word = METRICS["attacker"]
    if scope is None:
        word, others = (loss_word, [(att_word, row.get(att_key))])
        if metric == "attacker":
            word, others = (att_word, [(loss_word, row.get(loss_key))])
        return _hover(row, name, word, value, others)
    users = (_users_word(row), row.get(PANDA_SCOPES["users"][0]))
    every = ("expected loss over every place (prior-weighted)", row.get(PANDA_SCOPES["every place"][0]))
    attacker = (att_word, row.get(att_key))
    if metric == "attacker":
        return _hover(row, name, att_word, value, [users, every])
    if scope == "users":
        return _hover(row, name, users[0], value, [every, attacker])
    return _hover(row, name, every[0], value, [users, attacker])


def _add_metric(
    fig: go.Figure,
    groups: dict[str, list[Mapping]],
    metric: str,
    labels: Mapping[str, str],
    *,
    row: int | None,
    show_legend: bool,
) -> None:
    where = {"row": row, "col": 1} if row is not None else {}
    for method, pts in groups.items():
        label = labels.get(method, LABELS.get(method, method))
        color = COLORS.get(method, _GREY)
        for scope, key, dash in _lines_of(method, metric):
            name = label if scope is None else f"{label} {PANDA_SCOPES[scope][1]}"
            xs, ys, symbols, hover, custom = [], [], [], [], []
            for r in pts:
                value = r.get(key)
                xs.append(float(r["epsilon_per_km"]))
                custom.append([float(r["epsilon_per_km"]), method])
                if r.get("outcome", "solved") == "solved" and _finite(value):
                    ys.append(float(value))
                    symbols.append(_SYMBOL[_audit_state(r)])
                    hover.append(_point_hover(r, name, metric, scope, float(value)))
                else:
                    ys.append(None)
                    symbols.append("circle")
                    hover.append("")
            meta = {"method": method, "metric": metric}
            if scope is not None:
                meta["scope"] = scope
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines+markers",
                    name=name,
                    legendgroup=method if scope is None else f"{method}: {scope}",
                    showlegend=show_legend,
                    connectgaps=False,
                    line={"color": color, "width": 2, "dash": dash},
                    marker={"symbol": symbols, "size": 10, "color": color, "line": {"color": color, "width": 2}},
                    customdata=custom,
                    hovertext=hover,
                    hovertemplate="%{hovertext}<extra></extra>",
                    meta=meta,
                ),
                **where,
            )
        if method == "lp" and metric == "loss":
            _add_lp_bound(fig, pts, label, color, where, show_legend)


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


def _add_lp_bound(fig: go.Figure, pts: list[Mapping], label: str, color: str, where: dict, show_legend: bool) -> None:
    """The optimal LP's proven lower bounds (on every ε-mDP mechanism) where it did not solve: a band, labelled ▲."""
    xs, ys, text, hover, custom = [], [], [], [], []
    for r in pts:
        bound = r.get("lower_bound_m")
        if r.get("outcome") == "solved" or not _finite(bound):
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
            f"<b>{label}</b>: not solved in {limit:.0f} s" if _finite(limit) else f"<b>{label}</b>: not solved",
            f"ε = {r['epsilon_per_km']:g} /km",
            f"no mechanism can do better than {fmt_m(float(bound))}",
            "(proven by weak duality from the LP's last relaxation,",
            "for every ε-geo-indistinguishable mechanism over these outputs)",
        ]
        best = r.get("loss_m", float("nan"))
        if _finite(best):
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
        if r.get("outcome") == "solved" or not (_finite(bound) and _finite(best)):
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


def _add_key(fig: go.Figure, states: set[str], where: dict) -> None:
    """Grey legend entries explaining the three marker looks (only those present)."""
    for state in ("passed", "failed", "not audited"):
        if state not in states:
            continue
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=_KEY_TEXT[state],
                legendgroup="key",
                showlegend=True,
                marker={"symbol": _SYMBOL[state], "size": 10, "color": _GREY, "line": {"color": _GREY, "width": 2}},
                hoverinfo="skip",
                meta={"kind": "key"},
            ),
            **where,
        )


def _missing_lp_note(rows: Sequence[Mapping]) -> str:
    missing = [
        r
        for r in rows
        if r.get("method") == "lp" and r.get("outcome") != "solved" and not _finite(r.get("lower_bound_m"))
    ]
    if not missing:
        return ""
    eps = ", ".join(f"{float(r['epsilon_per_km']):g}" for r in sorted(missing, key=lambda r: r["epsilon_per_km"]))
    return f"Optimal LP at ε = {eps} /km: not solved and no bound yet (no round finished in time)."


def tradeoff_figure(
    rows: Sequence[Mapping],
    current_eps: float | None,
    *,
    metric: str = "loss",
    height: int = 380,
    labels: Mapping[str, str] | None = None,
    log_y: bool = False,
) -> go.Figure:
    """The privacy-utility curve of :func:`panda.tradeoff.tradeoff_curve` rows.

    Parameters
    ----------
    rows
        Rows of :func:`panda.tradeoff.tradeoff_curve` (dicts with ``method``, ``epsilon_per_km``,
        ``outcome``, ``loss_m``, ``adversary_error_m``, ``audited``, ``audit_passed``,
        ``lower_bound_m``, ...).
    current_eps
        The view's eps (1/km): a dashed vertical line; ``None`` draws none.
    metric
        ``"loss"`` (expected loss, m), ``"attacker"`` (the Bayes-optimal attacker's error, m) or
        ``"both"`` (loss on top, attacker below, one shared log eps axis; the figure is then
        ``height`` tall in all, two panels).
    height
        Figure height, pixels.
    labels
        Mechanism names overriding :data:`LABELS` (e.g. the lesson's short labels).
    log_y
        Logarithmic y axes (losses from ~20 m to ~2 km on one chart).

    Returns
    -------
    go.Figure
        One line trace per mechanism and panel (``trace.meta["method"]``; PAnDA's loss panel has two,
        "<label> at its users" and "<label> over every place", ``trace.meta["scope"]`` ``"users"``
        and ``"every place"``, and its attacker line is the latter's), plus the LP's lower bound
        trace where needed (``meta["kind"] == "lower bound"``) and the legend key traces
        (``meta["kind"] == "key"``); every point's ``customdata[0]`` is its eps.
    """
    if metric not in ("loss", "attacker", "both"):
        msg = f"The 'metric' parameter of tradeoff_figure must be 'loss', 'attacker' or 'both'. Got {metric!r} instead."
        raise ValueError(msg)
    labels = dict(labels or {})
    groups = _by_method(rows)
    panels = ["loss", "attacker"] if metric == "both" else [metric]
    if metric == "both":
        fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    else:
        fig = go.Figure()
    for i, m in enumerate(panels):
        _add_metric(fig, groups, m, labels, row=(i + 1) if metric == "both" else None, show_legend=i == 0)
    states = {
        _audit_state(r) for r in rows if r.get("outcome", "solved") == "solved" and _finite(r.get(METRICS["loss"][0]))
    }
    _add_key(fig, states, {"row": 1, "col": 1} if metric == "both" else {})
    eps_values = sorted({float(r["epsilon_per_km"]) for r in rows})
    axis = {
        "type": "log",
        "tickvals": eps_values,
        "ticktext": [f"{e:g}" for e in eps_values],
        "showgrid": True,
    }
    for i, m in enumerate(panels):
        kwargs = {"row": i + 1, "col": 1} if metric == "both" else {}
        fig.update_yaxes(title_text=METRICS[m][1], type="log" if log_y else "linear", rangemode="tozero", **kwargs)
        last = i == len(panels) - 1
        fig.update_xaxes(axis, title_text="ε (1/km)" if last else None, **kwargs)
    if current_eps is not None and _finite(float(current_eps)) and float(current_eps) > 0:
        fig.add_vline(
            x=float(current_eps),
            line_dash="dash",
            line_color="#444",
            line_width=1.5,
            layer="below",  # under the markers and their labels (above, it would cross out a label at this ε)
            label={
                "text": f"ε = {float(current_eps):g}",
                "textposition": "end",
                "textangle": 0,
                "xanchor": "left",
                "font": {"size": 11},
            },
            **({"row": "all", "col": 1} if metric == "both" else {}),
        )
    note = _missing_lp_note(rows)
    if note:
        fig.add_annotation(
            text=note,
            xref="paper",
            yref="paper",
            x=0.0,
            y=-0.2 if metric != "both" else -0.1,
            showarrow=False,
            xanchor="left",
            font={"size": 11, "color": _GREY},
        )
    fig.update_layout(
        height=height,
        margin={"l": 10, "r": 10, "t": 30, "b": 60 if note else 10},
        legend={"font": {"size": 11}, "groupclick": "toggleitem"},
        hovermode="closest",
        clickmode="event+select",
    )
    return fig


def _span_m(values: Sequence[float]) -> str:
    """'257 m at every ε' for values within 1 % of each other, else '180 m to 257 m'."""
    lo, hi = min(values), max(values)
    if hi <= lo * 1.01:
        return fmt_m(lo) + (" at every ε" if len(values) > 1 else "")
    return f"{fmt_m(lo)} to {fmt_m(hi)}"


def _panda_scope_note(pts: Sequence[Mapping], label: str) -> str:
    """The sentence saying why PAnDA's two loss lines differ, with their measured values ('' if none)."""
    users_key, every_key = PANDA_SCOPES["users"][0], PANDA_SCOPES["every place"][0]
    solved = [
        r for r in pts if r.get("outcome") == "solved" and _finite(r.get(users_key)) and _finite(r.get(every_key))
    ]
    if not solved:
        return ""
    users = [float(r[users_key]) for r in solved]
    every = [float(r[every_key]) for r in solved]
    return (
        f"{label} at its users ({_span_m(users)}) is its expected loss at its users' own places with the anchors "
        "they drew (the paper's measure, the number Compare and the PAnDA page show), while "
        f"{label} over every place ({_span_m(every)}) is the loss if every place on the map reported through the "
        "anchors those users uploaded, weighted by how likely each place is: a place far from all of them "
        "reports through a distant anchor, hence the gap."
    )


def tradeoff_notes(rows: Sequence[Mapping], labels: Mapping[str, str] | None = None) -> list[str]:
    """Plain sentences for under the figure: what did not finish, the LP's bounds, the caveats."""
    labels = dict(labels or {})
    notes: list[str] = []
    for method, pts in _by_method(rows).items():
        label = labels.get(method, LABELS.get(method, method))
        by_outcome: dict[str, list[str]] = {}
        for r in pts:
            outcome = str(r.get("outcome", ""))
            if outcome != "solved":
                by_outcome.setdefault(outcome, []).append(f"{float(r['epsilon_per_km']):g}")
        words = {
            "time limit": "hit its time limit",
            "failed": "failed",
            "skipped": "not attempted (time budget, or a larger ε already hit the limit)",
        }
        parts = [f"{words.get(k, k)} at ε = {', '.join(v)}" for k, v in by_outcome.items()]
        if parts:
            notes.append(f"{label}: " + "; ".join(parts) + ".")
        if method == "lp":
            bounds = [r for r in pts if r.get("outcome") != "solved" and _finite(r.get("lower_bound_m"))]
            if bounds:
                text = ", ".join(
                    f"{fmt_m(float(r['lower_bound_m']))} at ε = {float(r['epsilon_per_km']):g}" for r in bounds
                )
                found = [r for r in bounds if _finite(r.get("loss_m"))]
                notes.append(
                    f"{label} not solved within its time limit where marked ▲: no mechanism can do better than {text} "
                    "(proven by its last relaxation, for every ε-geo-indistinguishable mechanism over these outputs)"
                    + (
                        "; ▼ marks the best exactly audited mechanism it found, so the optimum lies between the two."
                        if found
                        else "."
                    )
                )
            missing = _missing_lp_note(pts)
            if missing:
                notes.append(missing)
        scopes = _panda_scope_note(pts, label) if method.startswith("panda") else ""
        if scopes:
            notes.append(scopes)
        if method.startswith("panda") and any(r.get("outcome") == "solved" for r in pts):
            notes.append(
                f"{label}: its audit is the exact PmDP audit (Phase I's privacy cost counted); its attacker's error "
                "assumes the attacker sees the report only, not the uploaded anchor set, so it overstates privacy."
            )
        if any(r.get("outcome") == "solved" and not r.get("audited") for r in pts):
            notes.append(f"{label}: not audited (a sampled estimate of the matrix: the audit would test the sampling).")
    return notes
