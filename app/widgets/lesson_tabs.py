"""The Lesson's tabs beyond *Two places*: k reports, the prior (background knowledge), the trade-off curve.

Each tab is one function of explicit arguments (the view's Params, the mechanism, ε); the figures it draws go
into the page's Download menu through ``exports``.
"""

from __future__ import annotations

import streamlit as st

from app import page_jobs, state
from app.figures import curve_charts, repeated_charts
from app.figures.palette import MECHANISM_COLORS
from app.model import lesson_numbers
from app.model.panda_numbers import fmt_m
from app.model.params import PRIOR_OPTIONS, RANGES, Params, to_config
from app.widgets.mechanism_rows import options_for

__all__ = ["curve_tab", "repeated_tab", "background_tab", "CURVE_LP_LIMIT_S"]

#: The optimal LP's time limit per point of the curve, seconds.
CURVE_LP_LIMIT_S = 20.0


def _curve_clicked() -> None:
    """A click on a point of the curve sets epsilon (the sidebar's and the page's)."""
    ss = st.session_state
    sel = (ss.get("lesson_curve") or {}).get("selection") or {}
    for point in sel.get("points") or []:
        data = point.get("customdata") if isinstance(point, dict) else None
        value = data[0] if isinstance(data, (list, tuple)) and data else data
        try:
            value = float(value)
        except (TypeError, ValueError):
            continue
        low, high = RANGES["epsilon_per_km"]
        if low <= value <= high:
            ss.w_epsilon_per_km = ss.lesson_epsilon_per_km = value
            return


def curve_tab(params: Params, mech_key: str, eps: float, exports: dict) -> None:
    """The privacy-utility curve of every mechanism on this instance (background, cached for all sessions).

    The figure goes into ``exports`` (the Download menu's figures of this run).
    """
    from panda.tradeoff import DEFAULT_EPSILONS, DEFAULT_METHODS

    with_lp = st.toggle(
        "Add the optimal mechanism (slow: up to about 3 minutes the first time)",
        key="lesson_curve_lp",
        help=f"The optimal LP at each ε, {CURVE_LP_LIMIT_S:.0f} s per point; where it does not finish in time, the "
        "curve shows the lower bound it proved (no mechanism can do better).",
    )
    methods = tuple(DEFAULT_METHODS) + (("lp",) if with_lp else ())
    if mech_key in lesson_numbers.PANDA_KEYS and mech_key not in methods:
        methods += (mech_key,)
    panda_items = state.config_items(to_config(params))
    bar = st.empty()
    job = page_jobs.start_tradeoff_curve(
        params.instance_key, methods, tuple(DEFAULT_EPSILONS), panda_items, params.seed, CURVE_LP_LIMIT_S
    )

    def on_progress(message: str, fraction: float) -> None:
        bar.progress(min(max(fraction, 0.0), 1.0), text=f"Computing the curve: {message} ...")

    rows = job.result(on_progress)
    bar.empty()
    labels = {k: v[0] for k, v in lesson_numbers.MECHANISMS.items()}
    # The shown mechanism and planar Laplace (and the optimum, when asked for) drawn and named; the rest one
    # legend click away; a log axis when an outlier would flatten the others.
    shown = {mech_key, "laplace"} | ({"lp"} if with_lp else set())
    log_y = curve_charts.wide_range(rows, shown)
    fig = curve_charts.tradeoff_figure(rows, eps, metric="both", height=640, labels=labels, shown=shown, log_y=log_y)
    # A narrow column: the legend goes under the panels, the panels get the width. y = -0.1 touched the
    # axis title "ε (1/km)" on a 390-px phone (the tick labels and title take about 55 px of the 640).
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.14, "x": 0, "font": {"size": 11}})
    exports["tradeoff-curve"] = fig
    st.plotly_chart(fig, key="lesson_curve", on_select=_curve_clicked, selection_mode="points")
    st.caption(
        "Each point is one mechanism built at that ε on these places. Top: the average error of a report "
        f"({params.loss_label}); "
        "bottom: the best attacker's average error. Filled: the exact check passed; hollow: it failed. "
        + ("The error axes are logarithmic (the lines span more than ×10). " if log_y else "")
        + "Other mechanisms: click their names in the legend. **Click a point to move ε there.**"
    )
    for note in curve_charts.tradeoff_notes(rows, labels=labels):
        st.caption(note)


def repeated_tab(params: Params, mech_key: str, eps: float, exports: dict) -> None:
    """What k reports from one place give away, for every mechanism with a matrix, and the re-send defence."""
    low, high = RANGES["n_reports"]
    k = int(
        st.slider(
            "Reports from the same place, k",
            int(low),
            int(high),
            key="lesson_k",
            help="A phone that reports its place every five minutes sends many independent reports from one place. "
            "The attacker combines them (it multiplies their likelihoods). The map's *Attacker* view then shows "
            "its belief after these k reports.",
        )
    )
    st.markdown(repeated_charts.budget_sentence(k, eps))
    names = list(lesson_numbers.REPEATED_MECHANISMS)
    if mech_key in lesson_numbers.BASELINE_KEYS and mech_key not in names:
        names.append(mech_key)
    with st.spinner("The attacker's error after 1 to 20 reports ..."):
        results = state.repeated_reports(
            params.instance_key, tuple((n, options_for(params, n, eps)) for n in names), eps, params.seed
        )
    if not results:
        st.info("No mechanism has a full matrix on this view yet: try another ε or fewer places K.")
        return
    labels = [lesson_numbers.MECHANISMS[name][0] for name, _ in results]
    colors = [MECHANISM_COLORS[name] for name, _ in results]  # the curve's colours, told apart by colour-blind eyes
    fig = repeated_charts.repeated_figure([r for _, r in results], labels=labels, height=380, colors=colors)
    fig.add_vline(x=k, line_dash="dot", line_color="grey")
    exports["many-reports"] = fig
    st.plotly_chart(fig, key="lesson_repeated")
    shown = dict(results).get(mech_key)
    if shown is not None:
        st.markdown(repeated_charts.error_sentence(lesson_numbers.MECHANISMS[mech_key][0], shown, k, eps))
    elif mech_key in lesson_numbers.PANDA_KEYS:
        st.caption("PAnDA has report distributions only for its users, not for every place: it is not on this chart.")
    n_seq = max((r.n_sequences for _, r in results), default=0)
    st.caption(
        "The best attacker knows the mechanism and the prior. One report: exact. More reports: averaged over "
        f"{n_seq:,} sampled places and report sequences (error bars: ± 2 standard errors; every k uses the same "
        "sequences). Dashed: the re-send defence (the phone repeats the report it already made for this place, "
        "as Location Guard does), which teaches the attacker nothing new. The cost grows linearly with k, with the "
        "sampled sequences and with K² (one guess per place), not with the outputs M."
    )


def background_tab(params: Params, mech_key: str, eps: float, guarantee_holds: bool) -> None:
    """The same mechanism at the same ε against an attacker with and without background knowledge.

    ``guarantee_holds``: the exact check of the shown mechanism passed (it does not read the prior).
    """
    if mech_key in lesson_numbers.PANDA_KEYS:
        st.info(
            "PAnDA has report distributions only for its users, not a mechanism for every place: pick another "
            "mechanism to compare the attacker with and without background knowledge."
        )
        return
    with st.spinner("The attacker under each prior ..."):
        bg = state.background_errors(params.instance_key, mech_key, eps, options_for(params, mech_key, eps))
    if bg is None:
        st.info("This mechanism has no full matrix on this view: pick another one, or another ε.")
        return
    label = PRIOR_OPTIONS.get(bg["peaked_name"], "Your uploaded places")
    view_prior = PRIOR_OPTIONS.get(params.prior, "your uploaded places").split(":")[0].lower()
    # The tab's people follow a peaked prior even when the view's is uniform: say which, before any number.
    st.markdown(
        f"**This tab assumes people go where *{label.lower()}* says**"
        + (
            f", not the view's prior (*{view_prior}*) that the other numbers use."
            if bg["peaked_name"] != params.prior
            else " (the view's prior)."
        )
    )
    c1, c2 = st.columns(2)
    c1.metric(
        "Naive attacker",
        fmt_m(bg["uniform_m"]),
        help=f"It knows the mechanism, but not where people go: it believes every place equally likely, while "
        f"people follow {label.lower()}.",
    )
    c2.metric(
        "Informed attacker",
        fmt_m(bg["peaked_m"]),
        delta=f"{bg['peaked_m'] - bg['uniform_m']:+,.0f} m",
        delta_color="inverse",
        help=f"It knows the mechanism and where people go (background knowledge): {label}.",
    )
    holds = "✓ holds" if guarantee_holds else "gives the same verdict"
    st.markdown(
        f"People here go where *{label.lower()}* says (the busiest tenth of the places holds "
        f"{100 * bg['top_decile_share']:.0f} % of them). **Same mechanism, same ε = {eps:g}/km, same guarantee** "
        f"(the exact check {holds}: it does not read the prior), yet the informed attacker, who knows where "
        "people go, guesses "
        f"**{fmt_m(bg['uniform_m'] - bg['peaked_m'])} closer** on average. Geo-indistinguishability bounds how much "
        "*one report* changes the odds between two places; what the attacker knew before still counts."
    )
    st.caption(
        "Change the prior of the whole view (the optimising mechanisms weigh places by it too) under *Prior* in the "
        "sidebar, or upload your own places there."
    )
