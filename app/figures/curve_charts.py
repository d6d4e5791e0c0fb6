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
  mechanism's loss joined to the bound by a dotted line (these traces: :mod:`app.figures.curve_bounds`);
  an unsolved point without a bound shows nothing and the figure says so in a note;
* a dashed vertical line at the current eps;
* every point's ``customdata[0]`` is its eps (1/km): a click handler (``st.plotly_chart(...,
  on_select="rerun", selection_mode="points")``) reads ``point["customdata"][0]`` and sets eps.

:func:`tradeoff_notes` returns the sentences a page shows under the figure (what did not finish,
the LP's bounds, what the attacker's error leaves out for PAnDA).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures.curve_bounds import (
    BOUND_LABEL_FONT,
    BOUND_LABEL_GAP,
    BOUND_LABEL_LINE_HEIGHT,
    BOUND_LABEL_NAME,
    BOUND_LABEL_PAD,
    BOUND_LABEL_TOP_ROWS,
    add_lp_bound,
    bound_label_height,
    bound_label_layout,
    is_finite_number,
)
from app.figures.palette import MECHANISM_COLORS
from app.model.panda_numbers import fmt_m
from panda.tradeoff import METHOD_LABELS

__all__ = [
    "LABELS",
    "COLORS",
    "METRICS",
    "PANDA_SCOPES",
    "BOUND_LABEL_FONT",
    "BOUND_LABEL_LINE_HEIGHT",
    "BOUND_LABEL_PAD",
    "BOUND_LABEL_GAP",
    "BOUND_LABEL_TOP_ROWS",
    "BOUND_LABEL_NAME",
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
#: The ``name`` of the annotations that label a shown line at its right end.
DIRECT_LABEL_NAME = "line label"


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
    if str(row.get("method", "")).startswith("panda") and is_finite_number(row.get("pmdp_user_rate_over_delta_upper")):
        text += f" ({100 * row['pmdp_user_rate_over_delta_upper']:.0f} % of user pairs may exceed δ)"
    elif is_finite_number(row.get("epsilon_min_per_km")):
        text += f" (smallest ε it meets: {row['epsilon_min_per_km']:.3g} /km)"
    return text


def _hover(row: Mapping, label: str, word: str, value: float, others: Sequence[tuple[str, object]]) -> str:
    lines = [f"<b>{label}</b>", f"ε = {row['epsilon_per_km']:g} /km", f"{word}: {fmt_m(value)}"]
    for other_word, other_value in others:
        if is_finite_number(other_value):
            lines.append(f"{other_word}: {fmt_m(float(other_value))}")
    lines.append(_audit_text(row))
    if is_finite_number(row.get("build_time_s")):
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
                if r.get("outcome", "solved") == "solved" and is_finite_number(value):
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
            tint = color if scope in (None, "users") else _lighter(color)  # PAnDA's two loss lines told apart
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines+markers",
                    name=name,
                    legendgroup=method if scope is None else f"{method}: {scope}",
                    showlegend=show_legend,
                    connectgaps=False,
                    line={"color": tint, "width": 2, "dash": dash},
                    marker={"symbol": symbols, "size": 10, "color": tint, "line": {"color": tint, "width": 2}},
                    customdata=custom,
                    hovertext=hover,
                    hovertemplate="%{hovertext}<extra></extra>",
                    meta=meta,
                ),
                **where,
            )
        if method == "lp" and metric == "loss":
            add_lp_bound(fig, pts, label, color, where, show_legend)


def _lighter(color: str, share: float = 0.45) -> str:
    """``color`` (hex) mixed with ``share`` of white."""
    rgb = [int(color.lstrip("#")[i : i + 2], 16) for i in (0, 2, 4)]
    return "#" + "".join(f"{round(c + (255 - c) * share):02x}" for c in rgb)


def wide_range(rows: Sequence[Mapping], methods: Collection[str], ratio: float = 10.0) -> bool:
    """Whether the values of ``methods``' lines span more than ``ratio`` (then a log axis keeps them readable)."""
    keys = {METRICS[m][0] for m in METRICS} | {key for key, _, _ in PANDA_SCOPES.values()}
    values = [
        float(r[k])
        for r in rows
        if r.get("method") in methods and r.get("outcome", "solved") == "solved"
        for k in keys
        if is_finite_number(r.get(k)) and float(r[k]) > 0
    ]
    return bool(values) and max(values) / min(values) > ratio


def _show_only(fig: go.Figure, shown: Collection[str]) -> None:
    """Lines of ``shown`` drawn and labelled at their right end; the others one legend click away."""
    for trace in fig.data:
        meta = trace.meta or {}
        if meta.get("kind") == "key" or "method" not in meta:
            continue
        if meta["method"] not in shown:
            trace.visible = "legendonly"
            continue
        points = [(x, y) for x, y in zip(trace.x, trace.y, strict=True) if y is not None and math.isfinite(y)]
        if not points or meta.get("kind"):
            continue
        x, y = points[-1]
        fig.add_annotation(
            x=math.log10(x) if fig.layout[_axis_name(trace.xaxis or "x")].type == "log" else x,
            y=math.log10(y) if fig.layout[_axis_name(trace.yaxis or "y")].type == "log" else y,
            xref=trace.xaxis or "x",
            yref=trace.yaxis or "y",
            text=trace.name,
            showarrow=False,
            xanchor="right",
            yanchor="bottom",
            yshift=6,
            font={"color": trace.line.color, "size": 12},
            name=DIRECT_LABEL_NAME,
        )


def _axis_name(ref: str) -> str:
    """``"y2"`` -> ``"yaxis2"`` (a trace's axis reference to the layout's key)."""
    return ref[0] + "axis" + ref[1:]


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
        if r.get("method") == "lp" and r.get("outcome") != "solved" and not is_finite_number(r.get("lower_bound_m"))
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
    shown: Collection[str] | None = None,
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
    shown
        The mechanisms drawn (each line labelled by name at its right end); the others are in the legend, one
        click away (``trace.visible == "legendonly"``). ``None``: every line drawn, none labelled.

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
    stacked = metric == "both"
    panels = ["loss", "attacker"] if stacked else [metric]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08) if stacked else go.Figure()
    groups, labels = _by_method(rows), dict(labels or {})
    for i, m in enumerate(panels):
        _add_metric(fig, groups, m, labels, row=(i + 1) if stacked else None, show_legend=i == 0)
    _add_key(fig, _loss_audit_states(rows), {"row": 1, "col": 1} if stacked else {})
    _style_axes(fig, panels, sorted({float(r["epsilon_per_km"]) for r in rows}), log_y=log_y, stacked=stacked)
    if current_eps is not None and is_finite_number(float(current_eps)) and float(current_eps) > 0:
        _add_current_eps(fig, float(current_eps), stacked=stacked)
    note = _missing_lp_note(rows)
    if note:
        _add_note(fig, note, stacked=stacked)
    if shown is not None:
        _show_only(fig, set(shown))
    fig.update_layout(
        height=height,
        margin={"l": 10, "r": 10, "t": 30, "b": 60 if note else 10},
        legend={"font": {"size": 11}, "groupclick": "toggleitem"},
        hovermode="closest",
        clickmode="event+select",
    )
    return fig


def _loss_audit_states(rows: Sequence[Mapping]) -> set[str]:
    """The audit states of the loss panel's points (the legend key explains those only)."""
    loss_key = METRICS["loss"][0]
    return {
        _audit_state(r) for r in rows if r.get("outcome", "solved") == "solved" and is_finite_number(r.get(loss_key))
    }


def _style_axes(fig: go.Figure, panels: list[str], eps_values: list[float], *, log_y: bool, stacked: bool) -> None:
    """Each panel's y axis titled with its metric; a log eps axis ticked at the curve's eps, titled at the bottom."""
    axis = {
        "type": "log",
        "tickvals": eps_values,
        "ticktext": [f"{e:g}" for e in eps_values],
        "showgrid": True,
    }
    # A log axis in metres labelled 1-2-5 in full ("200 m", "1 km"), not plotly's bare minor digits ("5" for 5 km).
    metres = [k * 10.0**e for e in range(0, 6) for k in (1, 2, 5)]
    log_ticks = {"tickvals": metres, "ticktext": [f"{v / 1000:g} km" if v >= 1000 else f"{v:g} m" for v in metres]}
    for i, m in enumerate(panels):
        kwargs = {"row": i + 1, "col": 1} if stacked else {}
        y_axis = {"type": "log", **log_ticks} if log_y else {"type": "linear"}
        title = METRICS[m][1].replace(" (m)", "") if log_y else METRICS[m][1]  # the log ticks carry their unit
        fig.update_yaxes(title_text=title, rangemode="tozero", **y_axis, **kwargs)
        last = i == len(panels) - 1
        fig.update_xaxes(axis, title_text="ε (1/km)" if last else None, **kwargs)


def _add_current_eps(fig: go.Figure, eps: float, *, stacked: bool) -> None:
    """A dashed vertical line at the view's eps, across both panels when stacked."""
    fig.add_vline(
        x=eps,
        line_dash="dash",
        line_color="#444",
        line_width=1.5,
        layer="below",  # under the markers and their labels (above, it would cross out a label at this ε)
        label={
            "text": f"ε = {eps:g}",
            "textposition": "end",
            "textangle": 0,
            "xanchor": "left",
            "font": {"size": 11},
        },
        **({"row": "all", "col": 1} if stacked else {}),
    )


def _add_note(fig: go.Figure, note: str, *, stacked: bool) -> None:
    """A grey sentence under the figure (the update_layout of tradeoff_figure leaves room for it)."""
    fig.add_annotation(
        text=note,
        xref="paper",
        yref="paper",
        x=0.0,
        y=-0.1 if stacked else -0.2,
        showarrow=False,
        xanchor="left",
        font={"size": 11, "color": _GREY},
    )


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
        r
        for r in pts
        if r.get("outcome") == "solved" and is_finite_number(r.get(users_key)) and is_finite_number(r.get(every_key))
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
            bounds = [r for r in pts if r.get("outcome") != "solved" and is_finite_number(r.get("lower_bound_m"))]
            if bounds:
                text = ", ".join(
                    f"{fmt_m(float(r['lower_bound_m']))} at ε = {float(r['epsilon_per_km']):g}" for r in bounds
                )
                found = [r for r in bounds if is_finite_number(r.get("loss_m"))]
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
