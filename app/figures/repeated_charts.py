"""Repeated reports as a plotly figure and a sentence (pure: no streamlit calls).

:func:`repeated_figure` draws, against the number of reports k from the same place, the Bayes-optimal
attacker's expected error (metres) for each mechanism, from :func:`panda.repeated.attacker_error_vs_k`:

* independent reports: markers and lines, with error bars of ``n_stderr`` standard errors (2 by
  default, about a 95 % interval; k >= 2 are Monte Carlo estimates; k = 1 is exact and has none);
* the re-send defence (the device repeats its first report): a dashed flat line in the same colour
  at the exact one-report error.

:func:`budget_sentence` spells out what k reports cost under sequential composition, at 200 m as
the Lesson says it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from app.figures.palette import OKABE_ITO
from app.model.lesson_numbers import times
from app.model.panda_numbers import fmt_m
from panda.repeated import MAX_REPORTS, RepeatedReports

__all__ = ["PALETTE", "budget_sentence", "error_sentence", "repeated_figure"]

#: One colour per mechanism, in the order given, when no colours are passed: Okabe-Ito, told apart under
#: the common colour-vision deficiencies (see app/figures/palette.py; its yellow is too light for a line).
PALETTE = tuple(v for k, v in OKABE_ITO.items() if k != "yellow")
#: The distance the sentence speaks of, metres (the Lesson's "from another place 200 m away").
MARK_M = 200.0


def _add_resent_key(fig: go.Figure) -> None:
    """One legend entry for every dashed re-sent line (each mechanism's own is left out of the legend)."""
    fig.add_scatter(
        x=[None],
        y=[None],
        mode="lines",
        name="dashed: the first report re-sent",
        line={"color": "#6b6b6b", "width": 2, "dash": "dash"},
        legendgroup="key",
        hoverinfo="skip",
    )


def repeated_figure(
    results: Sequence[RepeatedReports],
    *,
    labels: Sequence[str],
    height: int = 380,
    n_stderr: float = 2.0,
    colors: Sequence[str] | None = None,
) -> go.Figure:
    """The attacker's expected error (m) against the number of reports k, one colour per mechanism.

    Parameters
    ----------
    results
        One :class:`panda.repeated.RepeatedReports` per mechanism.
    labels
        The mechanisms' readable names, in the same order.
    height
        Figure height, pixels.
    n_stderr
        Half-length of the error bars in standard errors (2: about a 95 % interval).
    colors
        One colour per mechanism (e.g. ``app.figures.palette.MECHANISM_COLORS``, as the curve uses); ``None``:
        :data:`PALETTE` in order.

    Returns
    -------
    plotly.graph_objects.Figure
        Two traces per mechanism, in order: independent reports (``name`` = the label, error bars
        ``n_stderr * stderr_m``), then the re-send defence (dashed, ``name`` = label + ", re-sent").
    """
    results = list(results)
    labels = list(labels)
    if isinstance(n_stderr, bool) or not isinstance(n_stderr, (int, float)) or not 0 <= n_stderr <= 10:
        msg = f"The 'n_stderr' parameter of repeated_figure must be a number from 0 to 10. Got {n_stderr!r} instead."
        raise ValueError(msg)
    if colors is not None and len(colors) != len(results):
        msg = f"repeated_figure needs one colour per result. Got {len(colors)} colours for {len(results)} results."
        raise ValueError(msg)
    if not results or len(labels) != len(results):
        msg = (
            "repeated_figure needs one label per result and at least one result. "
            f"Got {len(results)} results and {len(labels)} labels instead."
        )
        raise ValueError(msg)
    fig = go.Figure()
    top = 0.0
    for i, (res, label) in enumerate(zip(results, labels, strict=True)):
        color = colors[i] if colors is not None else PALETTE[i % len(PALETTE)]
        ks = list(res.ks)
        bars = [n_stderr * s for s in res.stderr_m]
        how = [
            "exact" if e else f"estimate ± {b:,.1f} m, {n_stderr:g} standard error{'' if n_stderr == 1 else 's'}"
            for e, b in zip(res.exact, bars, strict=True)
        ]
        fig.add_scatter(
            x=ks,
            y=list(res.error_m),
            mode="lines+markers",
            name=label,
            legendgroup=label,
            line={"color": color, "width": 2},
            marker={"color": color, "size": 7},
            error_y={"type": "data", "array": bars, "visible": True, "color": color, "thickness": 1.2},
            customdata=how,
            hovertemplate=(
                f"{label}<br>%{{x}} independent report(s)<br>attacker's error %{{y:,.0f}} m (%{{customdata}})"
                "<extra></extra>"
            ),
        )
        fig.add_scatter(
            x=ks,
            y=list(res.defence_error_m),
            mode="lines",
            name=f"{label}, re-sent",
            legendgroup=label,
            showlegend=False,  # one key entry says what dashed means (8 entries scrolled over half the chart)
            line={"color": color, "width": 2, "dash": "dash"},
            hovertemplate=(
                f"{label}, the first report re-sent<br>%{{x}} report(s)<br>attacker's error %{{y:,.0f}} m (exact)"
                "<extra></extra>"
            ),
        )
        top = max(
            top,
            max(e + b for e, b in zip(res.error_m, bars, strict=True)),
            max(res.defence_error_m),
        )
    _add_resent_key(fig)
    k_max = max(max(r.ks) for r in results)
    fig.update_layout(
        height=int(height),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        hovermode="closest",
    )
    fig.update_xaxes(
        title_text="reports from the same place (k)", range=[0.5, k_max + 0.5], dtick=1 if k_max <= 10 else 2
    )
    fig.update_yaxes(title_text="attacker's expected error (m)", range=[0.0, max(top, 1.0) * 1.08], rangemode="tozero")
    return fig


def budget_sentence(k: int, epsilon_per_km: float) -> str:
    """A markdown sentence: what k independent reports cost (``k * eps``) and what that allows at 200 m.

    ``"10 reports at ε = 5/km cost 10 × 5 = **50/km**: together they may be up to e^10 = **×22,026**
    likelier from one place than from another 200 m away (one report: e^1 = ×2.72). Re-sending the
    first report keeps the cost at 5/km."``
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_REPORTS:
        msg = f"The 'k' parameter of budget_sentence must be a whole number from 1 to {MAX_REPORTS}. Got {k!r} instead."
        raise ValueError(msg)
    if isinstance(epsilon_per_km, bool) or not isinstance(epsilon_per_km, (int, float)):
        bad = True
    else:
        bad = not (math.isfinite(epsilon_per_km) and epsilon_per_km > 0)
    if bad:
        msg = f"The 'epsilon_per_km' parameter of budget_sentence must be a number > 0. Got {epsilon_per_km!r} instead."
        raise ValueError(msg)
    eps = float(epsilon_per_km)
    total = k * eps
    d_km = MARK_M / 1000.0
    one, all_k = eps * d_km, total * d_km
    where = f"from one place than from another {MARK_M:,.0f} m away"
    if k == 1:
        return (
            f"1 report at ε = {eps:,g}/km costs **{eps:,g}/km**: it may be up to {_power(one)} = **{_factor(one)}** "
            f"likelier {where}."
        )
    return (
        f"{k} reports at ε = {eps:,g}/km cost {k} × {eps:,g} = **{total:,g}/km**: together they may be up to "
        f"{_power(all_k)} = **{_factor(all_k)}** likelier {where} (one report: {_power(one)} = {_factor(one)}). "
        f"Re-sending the first report keeps the cost at {eps:,g}/km."
    )


def error_sentence(label: str, shown: RepeatedReports, k: int, epsilon_per_km: float) -> str:
    """A markdown sentence: the attacker's error after k reports of ``shown``, against one report and the re-send.

    At k = 1 there is nothing to compare yet: one report costs ε, and the sentence says to move k.
    """
    i = shown.ks.index(k)
    eps = float(epsilon_per_km)
    spread = f" (± {fmt_m(2 * shown.stderr_m[i])})" if not shown.exact[i] else ""
    if k == 1:
        return (
            f"**{label}:** after one report the attacker's average error is **{fmt_m(shown.error_m[i])}**{spread}, "
            f"for a budget of ε = {eps:g}/km. Move k to see what more reports from the same place give away, and "
            "what re-sending the first one keeps."
        )
    return (
        f"**{label}:** after {k} independent reports the attacker's average error is "
        f"**{fmt_m(shown.error_m[i])}**{spread}, against {fmt_m(shown.single_report_error_m)} after one. "
        f"Re-sending the first report instead keeps it at {fmt_m(shown.defence_error_m[i])}, for a budget of "
        f"ε = {eps:g}/km, not {k * eps:g}/km."
    )


def _power(log_ratio: float) -> str:
    return f"e^{log_ratio:,.4g}"


def _factor(log_ratio: float) -> str:
    """``times`` (the Lesson's wording) up to e^700; beyond, a power of ten (``×10^1,737``)."""
    if log_ratio <= 700.0:
        return times(log_ratio)
    return f"×10^{log_ratio / math.log(10.0):,.0f}"
