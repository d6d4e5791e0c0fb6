"""plotly figure builders (pure: no streamlit calls; each returns a ``go.Figure``)."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

import panda
from app.figures.learn_charts import fmt_chance, fmt_times
from panda.anchors import far_value, selection_probabilities

__all__ = [
    "budget_split",
    "budget_note",
    "violation_vs_delta",
    "utility",
    "timings",
    "decay_curves",
    "compare_bars",
    "excess_histogram",
    "mdp_allowance",
    "violation_probability_histogram",
    "class_rounds",
]

_MARGIN = {"l": 10, "r": 10, "t": 50, "b": 10}
PALETTE = {"phase1": "#636efa", "margin": "#ef553b", "phase2": "#00cc96", "bound": "#ab63fa", "grey": "#9aa0a6"}


def _layout(fig: go.Figure, title: str, height: int = 300) -> go.Figure:
    fig.update_layout(title={"text": title, "font": {"size": 14}}, height=height, margin=_MARGIN, showlegend=False)
    return fig


def budget_split(shares: dict, *, height: int = 320) -> go.Figure:
    """Median share of eps*d per constrained anchor pair spent on Phase I, the margin, and left for Phase II.

    ``shares`` comes from :func:`app.model.panda_numbers.budget_shares`; error bars span the quartiles; the dashed
    line at 1 is the whole budget. The axis turns logarithmic when a share exceeds 3 (over-budget runs
    spend many times eps*d); a share <= 0 on that axis, or a missing one, has no bar and says why.
    """
    names = ["Phase I (ε̄·d)", "Safety margin ξ", "Phase II (rest)"]
    keys = ["phase1", "margin", "phase2"]
    med = [shares[k]["median"] for k in keys]
    finite = [v for v in med if math.isfinite(v)]
    log = bool(finite) and max(finite) > 3.0
    ys: list[float | None] = []
    err_hi, err_lo, notes = [], [], []
    for k, v in zip(keys, med, strict=True):
        q1, q3 = shares[k]["q1"], shares[k]["q3"]
        if not math.isfinite(v) or (v <= 0 and (log or k == "phase2")):
            ys.append(None)
            err_hi.append(0.0)
            err_lo.append(0.0)
            if not math.isfinite(v):
                notes.append("n/a: infinite margins" if k != "phase1" else "n/a")
            else:
                notes.append("none left:<br>over budget" if k == "phase2" else "0")
            continue
        ys.append(v)
        notes.append("")
        err_hi.append(max(q3 - v, 0.0))
        err_lo.append(max(min(v - q1, 0.999 * v) if log else v - q1, 0.0))
    fig = go.Figure(
        go.Bar(
            x=names,
            y=ys,
            error_y={"type": "data", "array": err_hi, "arrayminus": err_lo, "visible": True, "color": "#444"},
            marker_color=[PALETTE[k] for k in keys],
            text=[f"{v:.2f}" if v is not None else "" for v in ys],
            textposition="inside",
            insidetextanchor="start",
            textfont={"color": "white"},
            customdata=[[shares[k]["q1"], shares[k]["q3"], shares[k]["n"]] for k in keys],
            hovertemplate="%{x}: median %{y:.3f} × ε·d<br>quartiles %{customdata[0]:.3f} to %{customdata[1]:.3f}"
            "<br>%{customdata[2]:,} pairs<extra></extra>",
        )
    )
    positive = [v for v in ys if v is not None and v > 0]
    top = max([(y or 0.0) + e for y, e in zip(ys, err_hi, strict=True)] + [1.2])
    if log:
        low = min([0.5] + [v * 0.5 for v in positive])
        hi = top * 1.5
        ticks = [m * 10.0**e for e in range(-3, 7) for m in (1, 2, 5) if low <= m * 10.0**e <= hi]
        fig.update_yaxes(type="log", range=[math.log10(low), math.log10(hi)], title_text="share of ε·d (log scale)")
        base = math.log10(1.1)  # notes sit just above the budget line
    else:
        hi = top * 1.15
        step = 0.25 if hi <= 1.6 else 0.5
        ticks = [k * step for k in range(int(hi / step) + 1)]
        fig.update_yaxes(range=[0.0, hi], title_text="share of ε·d")
        base = 0.0
    fig.update_yaxes(tickvals=ticks, ticktext=["1 = ε·d" if t == 1 else f"{t:g}" for t in ticks])
    fig.add_hline(y=1.0, line_dash="dash", line_color=PALETTE["grey"])
    for name, note in zip(names, notes, strict=True):
        if note:
            fig.add_annotation(x=name, y=base, yanchor="bottom", text=note, showarrow=False, font={"size": 11})
    # Two short lines: the Explore page's right column is about 310 px wide at 1280 with the sidebar open.
    title = "Privacy budget split per anchor pair<br><span style='font-size:12px'>median and quartiles</span>"
    return _layout(fig, title, height=height)


def budget_note(shares: dict) -> str:
    """One line of counts to go with :func:`budget_split` (honest about what the bars leave out)."""
    n = shares["n_pairs"]
    parts = [f"{shares['n_over_budget']:,} of {n:,} constrained pairs over budget"]
    if shares["n_phase1_over"]:
        parts.append(f"{shares['n_phase1_over']:,} spend ≥ ε·d in Phase I alone")
    if shares["n_infinite_margin"]:
        parts.append(
            f"{shares['n_infinite_margin']:,} have an infinite margin (left out of the margin and Phase II bars)"
        )
    elif shares["n_unreachable"]:
        parts.append(f"{shares['n_unreachable']:,} have an unreachable target (a fallback margin is used)")
    return "; ".join(parts) + "."


def violation_vs_delta(rows: list[dict], current_delta: float, *, height: int = 330) -> go.Figure:
    """User-pair violation rate and flagged anchor pairs against delta (log axis), with the target y = delta."""
    deltas = [r["delta"] for r in rows]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=deltas,
            y=[r["violation_rate"] for r in rows],
            mode="lines+markers",
            name="user pairs violating ε-mDP",
            hovertemplate="δ = %{x:.0e}<br>violation rate %{y:.1%}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=deltas,
            y=[r["over_budget_share"] for r in rows],
            mode="lines+markers",
            name="anchor pairs over budget",
            line={"dash": "dot"},
            hovertemplate="δ = %{x:.0e}<br>over budget %{y:.1%}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=deltas,
            y=[r["unreachable_share"] for r in rows],
            mode="lines+markers",
            name="anchor pairs with target 1−δ unreachable",
            line={"dash": "dash"},
            hovertemplate="δ = %{x:.0e}<br>unreachable %{y:.1%}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=deltas,
            y=deltas,
            mode="lines",
            name="target: violation rate ≤ δ",
            line={"color": PALETTE["grey"], "width": 1},
            hovertemplate="δ = %{x:.0e}<extra>target</extra>",
        )
    )
    fig.add_vline(x=current_delta, line_dash="dash", line_color=PALETTE["bound"])
    # On a log axis an annotation's x is log10 of the value (add_vline's own annotation lands elsewhere).
    fig.add_annotation(
        x=math.log10(current_delta),
        y=1.04,
        yref="y",
        text=f"current δ = {current_delta:g}",
        showarrow=False,
        xanchor="left",
        xshift=4,
        font={"size": 11, "color": PALETTE["bound"]},
    )
    fig.update_xaxes(type="log", title_text="δ (allowed failure probability)", exponentformat="power")
    fig.update_yaxes(title_text="share", range=[-0.03, 1.05], tickformat=".0%")
    _layout(fig, "Violations vs δ", height=height)
    fig.update_layout(showlegend=True, legend={"orientation": "h", "y": -0.35, "font": {"size": 10}})
    fig.update_layout(margin={**_MARGIN, "b": 10})
    return fig


def utility(result: panda.PandaResult, bound: dict | None, *, height: int = 330) -> go.Figure:
    """PAnDA's utility loss (m) against the Relaxed AnPO lower bound (or why it is missing)."""
    names = [
        "Expected loss<br>at users",
        "Sampled loss<br>at users",
        "AnPO objective<br>(anchors)",
        "Lower bound<br>(Relaxed AnPO)",
    ]
    lb = float("nan") if not bound else bound.get("objective_m", float("nan"))
    values = [result.loss_expected_m, result.loss_sampled_m, result.lp_objective_m, lb]
    colors = [PALETTE["phase1"], "#19d3f3", PALETTE["phase2"], PALETTE["bound"]]
    text = [f"{v:,.0f} m" if math.isfinite(v) else "" for v in values]
    if not math.isfinite(lb):
        text[3] = "not computed" if not bound else str(bound.get("status", "not computed"))
    fig = go.Figure(
        go.Bar(
            x=names,
            y=[v if math.isfinite(v) else 0.0 for v in values],
            marker_color=colors,
            text=text,
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{x}: %{y:,.0f} m<extra></extra>",
        )
    )
    fig.update_yaxes(title_text="metres", rangemode="tozero")
    top = max([v for v in values if math.isfinite(v)] or [1.0])
    fig.update_yaxes(range=[0, top * 1.2])
    return _layout(fig, "Utility loss vs lower bound (m)", height=height)


def timings(timings_s: dict, extra: dict | None = None, *, height: int = 330) -> go.Figure:
    """Wall time per phase (s), longest on top."""
    items = [(k, v) for k, v in timings_s.items() if k != "total"]
    items += list((extra or {}).items())
    items.sort(key=lambda kv: kv[1])
    labels = {
        "selection_model": "selection probabilities",
        "anchors": "anchor draws",
        "phase1_cost": "Phase-I cost ε̄",
        "margins": "safety margins ξ",
        "anpo_lp": "AnPO LP",
        "relaxed_lp": "Relaxed AnPO LP",
        "phase2": "Phase II + check",
    }
    fig = go.Figure(
        go.Bar(
            y=[labels.get(k, k) for k, _ in items],
            x=[v for _, v in items],
            orientation="h",
            marker_color=PALETTE["phase1"],
            text=[f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s" for _, v in items],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:.3f} s<extra></extra>",
        )
    )
    total = sum(v for _, v in items)
    fig.update_xaxes(title_text="seconds", range=[0, max([v for _, v in items] or [1.0]) * 1.35])
    return _layout(fig, f"Time per phase (total {total:.2f} s)", height=height)


#: Decay name of PandaConfig -> plain words (the decay charts' legend).
_DECAY_WORDS = {"exponential": "exponential", "power": "power law", "logistic": "logistic"}


def decay_curves(config: panda.PandaConfig, gamma_km: float, d_max_km: float) -> go.Figure:
    """Chance that a place becomes an anchor against its distance from the user (metres).

    The decay ``config`` uses is drawn thick, on top, with ``meta="chosen"``; the other two decays
    (same alpha, lambda, gamma, far rule and selection form) thin and dotted for comparison. Gamma
    is a dashed vertical line, annotated with the constant chance beyond it; the chance at 0 m
    (alpha) is marked. The distance axis runs to ``max(4 gamma, 500 m)``, cut at the map's largest
    distance ``d_max_km`` (but never before ``1.5 gamma``).
    """
    upper = max(4.0 * gamma_km, 0.5)
    if d_max_km > 0:
        upper = min(upper, max(d_max_km, 1.5 * gamma_km))
    # Points just before and at gamma make the step there vertical.
    d = np.unique(np.concatenate([np.linspace(0.0, upper, 400), [gamma_km * (1.0 - 1e-9), gamma_km]]))
    fig = go.Figure()
    colors = {"exponential": "#1f5fbf", "power": "#d62728", "logistic": "#2ca02c"}
    order = [k for k in _DECAY_WORDS if k != config.decay] + [config.decay]
    for decay in order:
        cfg = config.replace(decay=decay)
        w = selection_probabilities(d, cfg, gamma_km=gamma_km)
        chosen = decay == config.decay
        label = _DECAY_WORDS[decay] + (" (your choice)" if chosen else "")
        fig.add_trace(
            go.Scatter(
                x=d * 1000.0,
                y=w,
                mode="lines",
                name=label,
                meta="chosen" if chosen else "other",
                opacity=1.0 if chosen else 0.55,
                line={"color": colors[decay], "width": 4 if chosen else 1.5, "dash": "solid" if chosen else "dot"},
                hovertemplate=f"{_DECAY_WORDS[decay]}<br>%{{x:,.0f}} m away: chance %{{y:.2%}}<extra></extra>",
            )
        )
    far = far_value(config, gamma_km)
    fig.add_vline(x=gamma_km * 1000.0, line_dash="dash", line_color="#444")
    fig.add_annotation(
        x=gamma_km * 1000.0,
        y=0.45,
        yref="paper",
        text=f"<b>γ = {gamma_km * 1000:,.0f} m</b><br>beyond it, every place:<br>chance {fmt_chance(far)}",
        showarrow=False,
        xanchor="left",
        yanchor="middle",
        xshift=6,
        align="left",
        bgcolor="rgba(255,255,255,0.8)",
    )
    at0 = float(selection_probabilities(np.array([0.0]), config, gamma_km=gamma_km)[0])
    fig.add_trace(
        go.Scatter(
            x=[0.0],
            y=[at0],
            mode="markers",
            marker={"color": colors[config.decay], "size": 10},
            name=f"α = {fmt_chance(at0)} at 0 m",
            hovertemplate="0 m (the user's own place): chance %{y:.2%}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="distance from the user's true place (m)", tickformat=",.0f", range=[0, upper * 1000])
    fig.update_yaxes(title_text="chance of becoming an anchor", tickformat=".0%", range=[0, 1.04])
    _layout(fig, "Phase I: the chance that a place becomes one of the user's anchors", height=380)
    fig.update_layout(showlegend=True, legend={"orientation": "h", "y": -0.22, "x": 0})
    return fig


def compare_bars(rows: list[dict]) -> go.Figure:
    """Four panels: utility loss (m), violation rate, adversary error (m), time (s) per method."""
    panels = [
        ("loss_m", "Utility loss at users (m) ↓", "%{y:,.0f} m"),
        ("violation_rate", "User pairs violating ε-mDP ↓", "%{y:.1%}"),
        ("adversary_error_m", "Adversary error (m) ↑", "%{y:,.0f} m"),
        ("time_s", "Time (s) ↓", "%{y:.2f} s"),
    ]
    fig = make_subplots(rows=2, cols=2, subplot_titles=[p[1] for p in panels], vertical_spacing=0.18)
    names = [r["method"] for r in rows]
    colors = ["#ef553b" if n.startswith("PAnDA") else "#636efa" for n in names]
    for k, (key, _, fmt) in enumerate(panels):
        values = [r.get(key, float("nan")) for r in rows]
        fig.add_trace(
            go.Bar(
                x=names,
                y=[v if v is not None and math.isfinite(v) else 0.0 for v in values],
                marker_color=colors,
                text=["n/a" if v is None or not math.isfinite(v) else "" for v in values],
                textposition="outside",
                hovertemplate=f"%{{x}}: {fmt}<extra></extra>",
            ),
            row=k // 2 + 1,
            col=k % 2 + 1,
        )
    fig.update_yaxes(tickformat=".0%", row=1, col=2, range=[0, 1.05])
    fig.update_layout(height=560, margin=_MARGIN, showlegend=False)
    return fig


def excess_histogram(excess: np.ndarray, violated: np.ndarray) -> go.Figure:
    """Histogram of actual minus allowed log-ratio over user pairs (nats); > 0 violates."""
    e = np.asarray(excess, dtype=float)
    finite = np.isfinite(e)
    fig = go.Figure()
    fig.add_trace(go.Histogram(x=e[finite & ~violated], name="satisfied", marker_color=PALETTE["phase2"], nbinsx=40))
    fig.add_trace(go.Histogram(x=e[finite & violated], name="violated", marker_color=PALETTE["margin"], nbinsx=40))
    fig.add_vline(x=0.0, line_dash="dash", line_color=PALETTE["grey"])
    fig.update_layout(barmode="overlay")
    fig.update_traces(opacity=0.8)
    fig.update_xaxes(title_text="actual − allowed max ln-ratio (nats); > 0 violates")
    fig.update_yaxes(title_text="user pairs")
    _layout(fig, "How far each user pair is from its allowance", height=330)
    fig.update_layout(
        showlegend=True, legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"}
    )
    return fig


def mdp_allowance(
    epsilon_per_km: float,
    max_m: float = 1000.0,
    *,
    others: tuple[float, ...] = (1.0, 5.0, 10.0),
    mark_m: float = 200.0,
) -> go.Figure:
    """How many times likelier a report may be from one place than from another d metres away: e^(eps d).

    The current ``epsilon_per_km`` is the thick line (``meta="chosen"``) with the point at
    ``mark_m`` labelled; the budgets in ``others`` are thin grey lines labelled at their right end.
    The factor axis is logarithmic, its ticks written as factors.
    """
    eps_now = float(epsilon_per_km)
    d_m = np.linspace(0.0, max_m, 300)
    fig = go.Figure()
    top = math.exp(max([eps_now, *others]) * max_m / 1000.0)
    for eps in sorted({float(e) for e in others} - {eps_now}):
        y = np.exp(eps * d_m / 1000.0)
        fig.add_trace(
            go.Scatter(
                x=d_m,
                y=y,
                mode="lines",
                name=f"ε = {eps:g} per km",
                meta="other",
                line={"width": 1.5, "color": PALETTE["grey"]},
                hovertemplate=f"ε = {eps:g} per km<br>%{{x:,.0f}} m apart: at most %{{y:,.3g}} times<extra></extra>",
            )
        )
        fig.add_annotation(
            x=d_m[-1], y=math.log10(y[-1]), text=f"ε = {eps:g} per km", showarrow=False, xanchor="left", xshift=4
        )
    y_now = np.exp(eps_now * d_m / 1000.0)
    fig.add_trace(
        go.Scatter(
            x=d_m,
            y=y_now,
            mode="lines",
            name=f"ε = {eps_now:g} per km (sidebar)",
            meta="chosen",
            line={"width": 4, "color": "#1f5fbf"},
            hovertemplate=f"ε = {eps_now:g} per km<br>%{{x:,.0f}} m apart: at most %{{y:,.3g}} times<extra></extra>",
        )
    )
    fig.add_annotation(
        x=d_m[-1],
        y=math.log10(y_now[-1]),
        text=f"<b>ε = {eps_now:g} per km</b><br>(sidebar)",
        showarrow=False,
        xanchor="left",
        xshift=4,
        font={"color": "#1f5fbf"},
    )
    mark = math.exp(eps_now * mark_m / 1000.0)
    fig.add_trace(
        go.Scatter(
            x=[mark_m],
            y=[mark],
            mode="markers",
            marker={"size": 11, "color": "#1f5fbf"},
            name="marked point",
            hoverinfo="skip",
        )
    )
    fig.add_annotation(
        x=mark_m,
        y=math.log10(mark),
        text=f"{mark_m:,.0f} m apart: at most {fmt_times(mark)}",
        showarrow=True,
        arrowhead=2,
        ax=-10,
        ay=-45,
        bgcolor="rgba(255,255,255,0.85)",
    )
    decades = math.log10(top)
    steps = (1, 2, 5) if decades <= 4 else (1,)
    every = max(1, math.ceil(decades / 8))
    ticks = [m * 10.0**e for e in range(0, int(decades) + 2, every) for m in steps if m * 10.0**e <= top * 1.5]
    fig.update_yaxes(
        type="log",
        title_text="a report at most … times likelier",
        tickvals=ticks,
        ticktext=[f"{t:,.0f} ×" if t < 1e6 else f"{t:.0e} ×" for t in ticks],
        range=[-0.05, math.log10(top) * 1.05 + 0.05],
    )
    fig.update_xaxes(title_text="distance between the two places (m)", tickformat=",.0f", range=[0, max_m])
    _layout(fig, "The promise: how much likelier a report may be from one place than from another", height=360)
    fig.update_layout(margin={**_MARGIN, "r": 110})
    return fig


def violation_probability_histogram(user_p: np.ndarray, record_p: np.ndarray, delta: float) -> go.Figure:
    """Distribution of the exact per-pair violation probabilities (log scale) against delta.

    Probabilities below 1e-12 (including 0) are drawn in the leftmost bin.
    """
    floor = -12.0

    def logs(p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=float)
        with np.errstate(divide="ignore"):
            return np.maximum(np.log10(np.clip(p, 0.0, 1.0)), floor)

    fig = go.Figure()
    bins = {"start": floor - 0.25, "end": 0.25, "size": 0.5}
    fig.add_trace(
        go.Histogram(
            x=logs(user_p),
            name="user pairs",
            xbins=bins,
            histnorm="percent",
            marker_color=PALETTE["margin"],
            hovertemplate="%{y:.1f} % of user pairs<extra></extra>",
        )
    )
    fig.add_trace(
        go.Histogram(
            x=logs(record_p),
            name="sampled record pairs",
            xbins=bins,
            histnorm="percent",
            marker_color=PALETTE["phase1"],
            hovertemplate="%{y:.1f} % of record pairs<extra></extra>",
        )
    )
    x_delta = max(math.log10(delta), floor) if delta > 0 else floor
    fig.add_vline(x=x_delta, line_dash="dash", line_color=PALETTE["grey"])
    fig.add_annotation(x=x_delta, y=1.0, yref="paper", text=f"δ = {delta:g}", showarrow=False, xanchor="left", xshift=4)
    ticks = list(range(int(floor), 1, 2))
    fig.update_xaxes(
        title_text="probability over the anchor draws of an ε-mDP violation (log scale; leftmost: ≤ 1e-12)",
        tickvals=ticks,
        ticktext=["≤1e-12" if t == floor else ("1" if t == 0 else f"1e{t}") for t in ticks],
        range=[floor - 0.5, 0.5],
    )
    fig.update_layout(barmode="overlay")
    fig.update_traces(opacity=0.75)
    fig.update_yaxes(title_text="% of pairs")
    _layout(fig, "Exact violation probability per pair (PmDP promises ≤ δ)", height=320)
    fig.update_layout(
        showlegend=True, legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"}
    )
    return fig


def _number(value: object) -> float | None:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def class_rounds(rows: list[dict], colors: dict[str, str], *, height: int = 260) -> go.Figure:
    """The class's median error and the Bayes attacker's against ε, one point per revealed round.

    The ε axis is logarithmic with the rounds' own ε values as its only ticks (one round: one tick), and each
    line joins only the rounds that have its number (a round revealed without guesses has a Bayes error but
    no class median: the class's line goes past it instead of breaking).
    """
    rows = sorted(rows, key=lambda r: float(r["epsilon_per_km"]))
    fig = go.Figure()
    series = (
        ("class_median_m", "Class (median)", {"color": colors.get("class", "#000"), "size": 10}),
        ("bayes_expected_m", "Bayes attacker", {"color": colors.get("bayes", "#555"), "size": 10, "symbol": "diamond"}),
    )
    for key, name, marker in series:
        pts = [(float(r["epsilon_per_km"]), _number(r.get(key))) for r in rows]
        pts = [(x, y) for x, y in pts if y is not None]
        fig.add_scatter(
            x=[x for x, _ in pts],
            y=[y for _, y in pts],
            mode="markers+lines",
            name=name,
            marker=marker,
            hovertemplate="ε = %{x:g}/km: %{y:,.0f} m<extra>" + name + "</extra>",
        )
    eps = sorted({float(r["epsilon_per_km"]) for r in rows if float(r["epsilon_per_km"]) > 0})
    xaxis: dict = {"title": {"text": "ε (1/km)"}, "type": "log"}
    if eps:
        lo, hi = math.log10(eps[0]), math.log10(eps[-1])
        pad = max(0.12 * (hi - lo), 0.25)
        xaxis |= {
            "tickmode": "array",
            "tickvals": eps,
            "ticktext": [f"{e:g}" for e in eps],
            "range": [lo - pad, hi + pad],
            "minor": {"showgrid": False, "ticks": ""},
        }
    fig.update_layout(
        height=height,
        margin={"l": 10, "r": 10, "t": 10, "b": 10},
        xaxis=xaxis,
        yaxis_title="error (m)",
        yaxis_rangemode="tozero",
        legend={"orientation": "h", "y": -0.35},
    )
    return fig
