"""Lesson (the first screen): geo-indistinguishability working, one mechanism at a time, on a real city.

Pick a place on the map, pick a mechanism, move ε: the map shows where the place's reports land, the
"Two places" tab shows why a second place nearby is indistinguishable, the curve shows the
privacy-utility trade-off of every mechanism, and the attacker mode shows what one report reveals.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import streamlit as st

import panda
from app import state
from app.figures import curve_charts, lesson_charts, lesson_maps, maps, repeated_charts
from app.figures.palette import MECHANISM_COLORS
from app.model import export_files, lesson_numbers
from app.model.panda_numbers import fmt_m, fmt_pct, surrogate_rows
from app.model.params import LESSON_TABS, PRIOR_OPTIONS, RANGES, to_config
from app.server import result_store
from app.widgets import current_view, export_menu
from panda.execution import JobError
from panda.repeated import posterior_after

#: Time limit of one LP-based mechanism build on this page, seconds (the page says when it is hit).
LP_TIME_LIMIT_S = 20.0
#: LP + EM and LP on cells: solved by row generation, seconds on the default view (bench/bench_lesson_mechanisms.py).
LP_ROWS_KEYS = ("lp-em", "lp-ca")
#: The optimal LP live: a first certified mechanism within LIVE_FIRST_S (its solver's time limit; an interactive
#: job, app/state.py), then a background solve to a 0.5 % gap (at most LIVE_LIMIT_S); the page reruns itself when
#: that is done. Short, so that the first mechanism follows the choice within a few seconds (docs/benchmarks.md).
LIVE_FIRST_S = 1.5
LIVE_LIMIT_S = 120.0
LIVE_FULL_OPTIONS = (("time_limit_s", LIVE_LIMIT_S),)
MAP_HEIGHT = 540
#: The map's width (px) the initial view fits the city into: the left column at 1280 px with and without the sidebar.
MAP_WIDTH, MAP_WIDTH_PRESENTING = 480, 700
#: The optimal LP's time limit per point of the curve, seconds.
CURVE_LP_LIMIT_S = 20.0
N_SAMPLES = 10
#: The mechanisms on the repeated-reports chart (besides the one shown): the fast ones with a full matrix.
REPEATED_MECHANISMS = ("laplace", "em", "em-br")
#: Figures of this run, for the Download menu (filled as the page draws them).
exports: dict = {}

ss = st.session_state
params = current_view.current_params()
presenting = bool(ss.get("present"))

# ---------------------------------------------------------------------------------------------
# The instance
try:
    net = state.network(params.source)
    with st.spinner("Drawing places and outputs ..."):
        inst = state.instance(*params.instance_key)
except Exception as exc:  # noqa: BLE001 (never a traceback in the page)
    st.error(
        "**The places for this lesson could not be prepared.** Try fewer places (K) or outputs in the sidebar, "
        f"or another city.\n\nDetails: {exc}"
    )
    st.stop()
K = inst.n_records


def _valid_place(key: str, default: int) -> None:
    value = ss.get(key)
    if not isinstance(value, (int, np.integer)) or not (0 <= int(value) < K):
        ss[key] = int(default)


_valid_place("lesson_a", lesson_numbers.default_place(inst))
_valid_place("lesson_b", lesson_numbers.second_place(inst, int(ss.lesson_a)))
if ss.lesson_b == ss.lesson_a:
    ss.lesson_b = lesson_numbers.second_place(inst, int(ss.lesson_a))
if ss.get("lesson_mech") not in lesson_numbers.MECHANISMS:
    ss.lesson_mech = "laplace"
if ss.get("lesson_mode") not in lesson_maps.MODES:
    ss.lesson_mode = "reports"
if ss.get("lesson_click") not in ("A", "B"):
    ss.lesson_click = "A"
# The page's ε slider mirrors the sidebar's (one value: Params.epsilon_per_km).
if ss.get("lesson_eps") != ss.get("w_eps", params.epsilon_per_km):
    ss.lesson_eps = float(ss.get("w_eps", params.epsilon_per_km))


def _eps_changed() -> None:
    ss.w_eps = float(ss.lesson_eps)


def _a_changed() -> None:
    """B follows A (a place about 300 m away) until someone picks B."""
    if not ss.get("lesson_b_picked"):
        ss.lesson_b = lesson_numbers.second_place(inst, int(ss.lesson_a))


def _b_changed() -> None:
    ss.lesson_b_picked = True


def _map_clicked() -> None:
    sel = (ss.get("lesson_map") or {}).get("selection") or {}
    objects = sel.get("objects") or {}
    for layer in (lesson_maps.PLACE_LAYER, "belief"):
        for obj in objects.get(layer) or []:
            if isinstance(obj, dict) and "x" in obj and 0 <= int(obj["x"]) < K:
                if ss.get("lesson_click", "A") == "A":
                    ss.lesson_a = int(obj["x"])
                    _a_changed()
                else:
                    ss.lesson_b = int(obj["x"])
                    _b_changed()
                return


# ---------------------------------------------------------------------------------------------
# Header and controls (right column); the map fills the left column, above the fold at 1280x720.
place_name = panda.CITIES[net.name][1].split(":")[0] if net.name in panda.CITIES else net.name
# The page's h1, at an h4's size (app/figures/style.py): headings then go in order.
with st.container(key="lesson_title"):
    st.markdown(f"# Geo-indistinguishability on the roads of {place_name}")
if not presenting:
    st.caption(
        "**Start here:** ① move **ε** and watch where place A's reports land · ② switch mechanisms and read "
        "*Two places* · ③ *k reports*: what many reports give away · ④ *Prior*: what the attacker knew before · "
        "⑤ *Curve*: privacy against error for every mechanism · ⑥ then PAnDA: why its published setup leaks."
    )
left, right = st.columns([3, 2], gap="medium")
with right:
    c1, c2 = st.columns([1, 1], vertical_alignment="bottom")
    mech_key = c1.selectbox(
        "Mechanism",
        list(lesson_numbers.MECHANISMS),
        key="lesson_mech",
        persist_state="session",
        format_func=lambda k: lesson_numbers.MECHANISMS[k][0],
        help="\n".join(f"- **{label}**: {text}" for label, text in lesson_numbers.MECHANISMS.values()),
    )
    eps = c2.slider(
        "ε (1/km)",
        *RANGES["epsilon_per_km"],
        step=0.5,
        key="lesson_eps",
        on_change=_eps_changed,
        help="The privacy budget, the same as the sidebar's. Smaller ε: reports spread further, places blur together.",
    )
    place_label = lambda x: f"Place {x}"  # noqa: E731 (stable labels: the pinned streamlit keys a selectbox by label)
    c3, c4 = st.columns(2)
    c3.selectbox(
        "Place A (orange)",
        range(K),
        key="lesson_a",
        persist_state="session",
        format_func=place_label,
        on_change=_a_changed,
        help="Or click a place on the map.",
    )
    c4.selectbox(
        "Place B (blue)",
        range(K),
        key="lesson_b",
        persist_state="session",
        format_func=place_label,
        on_change=_b_changed,
        help="The place A is compared with (until you pick one: a place about 300 m from A).",
    )
    eps = float(eps)
    a, b = int(ss.lesson_a), int(ss.lesson_b)
    d_ab_km = float(inst.distances_km_pairs(np.array([a]), np.array([b]))[0])
    st.caption(
        f"**ε = {eps:g}/km means:** a report may be at most {lesson_numbers.times(eps * 0.2)} likelier from one "
        f"place than from another 200 m away ({lesson_numbers.times(eps)} at 1 km). "
        f"A and B are {fmt_m(1000 * d_ab_km)} apart: "
        f"{lesson_numbers.times(eps * d_ab_km)} allowed."
    )


# ---------------------------------------------------------------------------------------------
# The mechanism's rows
class _Rows:
    """What the page needs of one mechanism: A's and B's report rows, the matrix if it has one, numbers."""

    def __init__(self) -> None:
        self.matrix: np.ndarray | None = None
        self.row_a: np.ndarray | None = None
        self.row_b: np.ndarray | None = None
        self.shown_a, self.shown_b = a, b
        self.phase1 = 0.0
        self.problem: str | None = None
        self.note: str | None = None
        self.numbers: dict = {}
        self.estimated = False  # a sampled estimate: no exact verdict may be drawn from it


def _start_lp_job() -> bool:
    """The optimal LP's full solve in the background (once per view and ε; identical jobs are shared).

    Returns whether it has failed: then the page says so, and that is its last word (``lesson_lp_settled``).
    Otherwise the page says the optimum is on its way, and a job that is done by the end of this run (a cache
    hit finishes at once, and no watcher is drawn for a finished job) gets a rerun there."""
    jobs = ss.setdefault("lesson_lp_jobs", {})
    key = (params.instance_key, eps)
    if key not in jobs:
        jobs[key] = state.start(state.baseline, params.instance_key, "lp", eps, LIVE_FULL_OPTIONS)
    job = jobs[key]
    ss.lesson_lp_settled = job.done() and not _lp_full_done(job)
    return ss.lesson_lp_settled


def _lp_full_done(job) -> bool:
    """Whether the background solve ``job`` finished with a mechanism (a failed one: the first stays, and says so)."""
    if job is None or not job.done():
        return False
    try:
        job.result()
        return True
    except Exception:  # noqa: BLE001 (the background solve failed: the first mechanism stays, and the note says so)
        return False


def _lp_options() -> tuple:
    """The optimal LP's options for this run: its first certified mechanism (LIVE_FIRST_S), or the background
    solve's once that is done (cached, so at once), or at once when the result store already holds the optimum
    (another session or server solved it, or the lecture was prepared): this process's cache of the first
    mechanism must not hide it."""
    job = (ss.get("lesson_lp_jobs") or {}).get((params.instance_key, eps))
    if _lp_full_done(job):
        return LIVE_FULL_OPTIONS
    if job is None and state.kept_mechanism(params.instance_key, "lp", eps, LIVE_FULL_OPTIONS):
        return LIVE_FULL_OPTIONS
    return (("time_limit_s", LIVE_FIRST_S),)


def _options(key: str) -> tuple:
    if key == "lp":
        return _lp_options()
    return (("time_limit_s", LP_TIME_LIMIT_S),) if key.startswith("lp") else ()


def _lp_rows_note(key: str, label: str, details: dict) -> str:
    """What LP + EM and LP on cells show: their linear program's optimum, solved by adding the constraints it needs."""
    rg = details.get("row_generation")
    how = ""
    if isinstance(rg, dict) and rg.get("rounds") and details.get("lp_rows_full"):
        how = (
            f" (solved in {len(rg['rounds'])} rounds that add only the constraints the last solution broke: "
            f"the last held {int(rg['rounds'][-1]['rows']):,} of its {int(details['lp_rows_full']):,})"
        )
    if key == "lp-ca":
        return (
            f"{label}: the optimum of its linear program on {details.get('n_cells', '?')} cells{how}. Its promise "
            "holds between the cells' places; between two places of neighbouring cells it can fail: *Geo-ind.* "
            "checks every pair."
        )
    return (
        f"{label}: the optimum of its linear program{how}, made exactly ε-geo-indistinguishable (the solver's "
        "rounding removed) and checked for every pair."
    )


def _baseline_rows(key: str) -> _Rows:
    out = _Rows()
    options: tuple = _options(key)
    if key == "lp":
        ss.lesson_lp_settled = True  # nothing is on its way unless _start_lp_job says otherwise
    label = lesson_numbers.MECHANISMS[key][0]
    wait = f" (at most {LP_TIME_LIMIT_S:.0f} s: its time limit, then an exact audit)" if key.startswith("lp") else ""
    if key in LP_ROWS_KEYS:
        wait = (
            f" (seconds: its linear program grows only where it must; at most {LP_TIME_LIMIT_S:.0f} s, "
            "then an exact audit)"
        )
    if key == "lp":
        wait = " (a first certified mechanism in seconds; it improves in the background)"
    queue_note = st.empty()

    def on_progress(phase: str, _fraction: float) -> None:
        if phase.startswith("busy:"):  # the executor's place in the class's queue
            queue_note.caption(f"⏳ {phase}: the server computes for the whole class, in turn.")

    try:
        with st.spinner(f"Building {label} at ε = {eps:g}/km{wait} ..."):
            args = (params.instance_key, key, eps, options)
            mech = state.call_with_progress(state.baseline, *args, _numbers=True, on_progress=on_progress)
            out.numbers = state.call_with_progress(state.mechanism_numbers, *args, on_progress=on_progress)
    except JobError as exc:
        out.problem = f"**{label} could not be built here:** {exc}."
        return out
    finally:
        queue_note.empty()
    if mech.matrix is None:
        status = mech.status
        if key == "lp" and options != LIVE_FULL_OPTIONS:
            if _start_lp_job():
                out.problem = (
                    f"**{label}: no certified mechanism within {LIVE_FIRST_S:g} s on {K} places, and the background "
                    "solve could not finish here** (the server is busy or the job was stopped). Try fewer places K in "
                    "the sidebar, or another mechanism."
                )
                return out
            out.problem = (
                f"**{label}: computing the optimum in the background** (no certified mechanism within "
                f"{LIVE_FIRST_S:g} s on {K} places). The page updates by itself when it is ready."
            )
            return out
        if status.startswith("unsolved"):
            out.problem = (
                f"**{label} did not finish within {LP_TIME_LIMIT_S:.0f} s** on {K} places (a dense city makes the "
                "linear program large). Try fewer places K in the sidebar, or another mechanism."
            )
            details = mech.details if isinstance(mech.details, dict) else {}
            # build_lp's bound on every eps-mDP mechanism (not the floored LP's own, which can exceed it).
            bound = details.get("lower_bound_m") if key == "lp" else None
            if bound is not None and math.isfinite(float(bound)):
                out.problem += (
                    f" What is proven so far: no mechanism can have an average error (over all places) below "
                    f"{fmt_m(float(bound))}."
                )
        else:
            out.problem = f"**{label} could not be built at ε = {eps:g}/km.** The solver reported: {status}."
        return out
    out.matrix = mech.matrix
    out.row_a, out.row_b = mech.matrix[a], mech.matrix[b]
    details = mech.details if isinstance(mech.details, dict) else {}
    # lower_bound_m and gap: against every eps-mDP mechanism, with or without the LP's floor.
    gap, upper, lower = details.get("gap"), details.get("upper_bound_m"), details.get("lower_bound_m")
    finite = all(v is not None and math.isfinite(float(v)) for v in (gap, upper, lower))
    if key == "lp" and not mech.solved and finite:
        # The certified optimal LP stopped at its time limit: a feasible mechanism with a proven gap.
        out.note = (
            f"{label}: not proven optimal within {float(dict(options).get('time_limit_s', LP_TIME_LIMIT_S)):.0f} s. "
            "Shown: the best mechanism found, exactly "
            f"ε-geo-indistinguishable, average error {fmt_m(float(upper))}; no mechanism can go below "
            f"{fmt_m(float(lower))} (gap {100 * float(gap):.1f} %)."
        )
    elif key == "lp" and finite:
        out.note = (
            f"{label}: optimal (gap ≤ {max(100 * float(gap), 0.01):.2f} %): average error {fmt_m(float(upper))}, and "
            f"no mechanism can go below {fmt_m(float(lower))}."
        )
    if key in LP_ROWS_KEYS and mech.solved:
        out.note = _lp_rows_note(key, label, details)
    if details.get("prepared"):
        out.note = (out.note + " " if out.note else "") + "Prepared before the lecture (python -m panda prepare)."
    if key == "lp" and options != LIVE_FULL_OPTIONS and not result_store.keepable("lp", mech):
        failed = _start_lp_job()
        then = (
            "The background solve could not finish here (the server is busy or the job was stopped), so this "
            "mechanism stays."
            if failed
            else "**Improving in the background** to a gap of 0.5 %: the map and the numbers update by themselves."
        )
        out.note = (
            f"{label}: a first certified mechanism, average error {fmt_m(float(upper))}; no mechanism can go below "
            f"{fmt_m(float(lower))} (gap {100 * float(gap):.1f} %). {then}"
            if finite
            else out.note
        )
    out.estimated = bool(isinstance(mech.details, dict) and mech.details.get("estimated"))
    return out


def _panda_rows(key: str) -> _Rows:
    out = _Rows()
    config = to_config(params.replace(decay=lesson_numbers.PANDA_KEYS[key]))
    items = state.config_items(config)
    try:
        with st.spinner(f"Running {lesson_numbers.MECHANISMS[key][0]} at ε = {eps:g}/km ..."):
            res = state.panda_result(params.instance_key, items, params.seed)
    except Exception as exc:  # noqa: BLE001
        out.problem = f"**PAnDA could not run on this view.** {exc}"
        return out
    rows = surrogate_rows(res)
    ok = np.flatnonzero(rows >= 0)
    if res.z is None or ok.size < 2:
        out.problem = (
            f"**PAnDA released no usable report distributions here** ({ok.size} of {res.user_records.size} users "
            "have one). Open the PAnDA page for the reasons."
        )
        return out
    users = res.user_records[ok]
    near = [int(ok[np.argmin(inst.distances_km(np.array([x]), users)[0])]) for x in (a, b)]
    if near[0] == near[1]:
        near[1] = int(ok[np.argsort(inst.distances_km(np.array([a]), users)[0])[1]])
    ua, ub = (int(res.user_records[n]) for n in near)
    out.shown_a, out.shown_b = ua, ub
    out.row_a, out.row_b = res.z[rows[near[0]]], res.z[rows[near[1]]]
    out.phase1 = state.phase1_pair_cost(params.instance_key, items, params.seed, ua, ub)
    if (ua, ub) != (a, b):
        out.note = (
            f"PAnDA only has report distributions for its {res.user_records.size} users (anchors drawn for them): "
            f"showing the users at place {ua} (for A) and place {ub} (for B), the nearest to your places."
        )
    out.numbers = {
        "audited": True,
        "passed": res.user_pair_violation_rate == 0,
        "violation_rate": res.user_pair_violation_rate,
        "panda": True,
    }
    return out


with right:
    rows = _panda_rows(mech_key) if mech_key in lesson_numbers.PANDA_KEYS else _baseline_rows(mech_key)
    if rows.problem:
        st.warning(rows.problem)
    if rows.note:
        st.caption(rows.note)
pa, pb = rows.shown_a, rows.shown_b


def _curve_clicked() -> None:
    """A click on a point of the curve sets epsilon (the sidebar's and the page's)."""
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
            ss.w_eps = ss.lesson_eps = value
            return


def _curve(mech_key: str, eps: float) -> None:
    """The privacy-utility curve of every mechanism on this instance (background, cached for all sessions)."""
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
    job = state.start_tradeoff_curve(
        params.instance_key, methods, tuple(DEFAULT_EPSILONS), panda_items, params.seed, CURVE_LP_LIMIT_S
    )

    def on_progress(message: str, fraction: float) -> None:
        bar.progress(min(max(fraction, 0.0), 1.0), text=f"Computing the curve: {message} ...")

    rows = job.result(on_progress)
    bar.empty()
    labels = {k: v[0] for k, v in lesson_numbers.MECHANISMS.items()}
    fig = curve_charts.tradeoff_figure(rows, eps, metric="both", height=640, labels=labels)
    # A narrow column: the legend goes under the panels, the panels get the width. y = -0.1 touched the
    # axis title "ε (1/km)" on a 390-px phone (the tick labels and title take about 55 px of the 640).
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.14, "x": 0, "font": {"size": 11}})
    exports["tradeoff-curve"] = fig
    st.plotly_chart(fig, key="lesson_curve", on_select=_curve_clicked, selection_mode="points")
    st.caption(
        "Each point is one mechanism built at that ε on these places. Top: the average error of a report "
        f"({params.loss_label}); "
        "bottom: the best attacker's average error. Filled: the exact check passed; hollow: it failed. "
        "**Click a point to move ε there.**"
    )
    for note in curve_charts.tradeoff_notes(rows, labels=labels):
        st.caption(note)


def _repeated(mech_key: str, eps: float) -> None:
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
    names = [key for key in REPEATED_MECHANISMS]
    if mech_key in lesson_numbers.BASELINE_KEYS and mech_key not in names:
        names.append(mech_key)
    with st.spinner("The attacker's error after 1 to 20 reports ..."):
        results = state.repeated_reports(params.instance_key, tuple((n, _options(n)) for n in names), eps, params.seed)
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


def _background(mech_key: str, eps: float) -> None:
    """The same mechanism at the same ε against an attacker with and without background knowledge."""
    if mech_key in lesson_numbers.PANDA_KEYS:
        st.info(
            "PAnDA has report distributions only for its users, not a mechanism for every place: pick another "
            "mechanism to compare the attacker with and without background knowledge."
        )
        return
    with st.spinner("The attacker under each prior ..."):
        bg = state.background_errors(params.instance_key, mech_key, eps, _options(mech_key))
    if bg is None:
        st.info("This mechanism has no full matrix on this view: pick another one, or another ε.")
        return
    label = PRIOR_OPTIONS.get(bg["peaked_name"], "Your uploaded places")
    c1, c2 = st.columns(2)
    c1.metric(
        "Naive attacker",
        fmt_m(bg["uniform_m"]),
        help="It knows the mechanism, but not where people go: it believes every place equally likely.",
    )
    c2.metric(
        "Informed attacker",
        fmt_m(bg["peaked_m"]),
        delta=f"{bg['peaked_m'] - bg['uniform_m']:+,.0f} m",
        delta_color="inverse",
        help=f"It knows the mechanism and where people go (background knowledge): {label}.",
    )
    holds = "✓ holds" if rows.numbers.get("passed") else "gives the same verdict"
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


# ---------------------------------------------------------------------------------------------
# Three key numbers
m1, m2, m3 = right.columns(3)
err_a = lesson_numbers.expected_error_m(rows.row_a, inst.cost_m[pa]) if rows.row_a is not None else float("nan")
m1.metric(
    "Error at A",
    fmt_m(err_a),
    help=lesson_numbers.loss_help(params.resolved_loss, params.n_tasks),
)
adv = rows.numbers.get("adversary_error_m", float("nan"))
m2.metric(
    "Attacker",
    fmt_m(adv),
    help="The attacker's average error: how far, over all places, the best possible guess is from the truth when it "
    "knows the mechanism and how people are spread. Larger is more private."
    + (
        " PAnDA has report distributions only for its users, not a mechanism for every place: see the trade-off "
        "curve for its average over the anchor draws."
        if rows.numbers.get("panda")
        else ""
    ),
)
num = rows.numbers
if not num.get("audited"):
    verdict, verdict_help = "—", "No exact check: the mechanism has no matrix here."
elif num.get("passed"):
    verdict, verdict_help = "✓ holds", "Checked exactly for every pair of places and every report."
else:
    rate = float(num.get("violation_rate", float("nan")))
    verdict = lesson_numbers.geoind_verdict(rate)  # "✗ 21 %": a third of the column at 1280x720 holds no more
    verdict_help = f"{verdict}: fails for {fmt_pct(rate)} of the " + (
        "user pairs: their reports (with the anchor upload counted) are more distinguishable than ε allows."
        if num.get("panda")
        else "place pairs: they are more distinguishable than ε allows (exact check)."
    )
m3.metric("Geo-ind.", verdict, help="ε-geo-indistinguishability. " + verdict_help)


def _start_round() -> None:
    """Open a class round on this view (the lecturer's page then shows the join code)."""
    from app.game import rounds

    mode = "shared" if ss.get("lesson_round_secret") == "shared" else "each"
    k = int(ss.get("lesson_k") or 1)
    spec = rounds.RoundSpec(mech_key, eps, k, mode, pa if mode == "shared" else None, options=_options(mech_key))
    try:
        code, token = rounds.open_game(list(params.instance_key), spec)
    except Exception as exc:  # noqa: BLE001 (a message, never a traceback)
        ss.lesson_round_problem = f"The class round could not be opened: {exc}"
        return
    ss.lesson_round_open = {"code": code, "key": token}


if presenting:
    with right.popover("Class round", icon=":material/groups:", help="Students guess from their phones."):
        if rows.matrix is None:
            st.caption("A class round needs a mechanism with a report for every place: pick another mechanism.")
        else:
            st.radio(
                "Secret place",
                ["each", "shared"],
                format_func={"each": "Each student gets their own", "shared": "Place A, for everyone"}.get,
                key="lesson_round_secret",
            )
            k_now = int(ss.get("lesson_k") or 1)
            st.caption(
                f"{lesson_numbers.MECHANISMS[mech_key][0]} at ε = {eps:g}/km, "
                f"{k_now} report{'s' if k_now > 1 else ''} per student (*k reports* sets k)."
            )
            st.button(
                "Start a round",
                type="primary",
                icon=":material/play_arrow:",
                on_click=_start_round,
            )
        if ss.get("lesson_round_problem"):
            st.warning(ss.pop("lesson_round_problem"))
    opened = ss.pop("lesson_round_open", None)
    if opened:
        st.switch_page("app_pages/host.py", query_params=opened)

# ---------------------------------------------------------------------------------------------
# Map (left) and tabs (right)
with left:
    # The rightmost column stays empty: once a place is picked, the map's toolbar (clear selection,
    # fullscreen) sits over the top right of the row above the map and covered the Draw button's centre.
    mc1, mc2, mc3, _ = st.columns([4, 3, 2.5, 1.5], vertical_alignment="center")
    mode = (
        mc1.segmented_control(
            "Map shows",
            list(lesson_maps.MODES),
            key="lesson_mode",
            persist_state="session",
            format_func=lesson_maps.MODES.get,
            label_visibility="collapsed",
        )
        or "reports"
    )
    mc2.segmented_control(
        "A click on the map picks",
        ["A", "B"],
        key="lesson_click",
        persist_state="session",
        format_func=lambda v: "click: A" if v == "A" else "B",
        label_visibility="collapsed",
        help="Which place a click on the map sets.",
    )
    sample_id = (params.instance_key, mech_key, eps, pa)
    if ss.get("lesson_samples_for") != sample_id:
        ss.lesson_samples, ss.lesson_samples_for = [], sample_id
    if mc3.button("Draw", icon=":material/casino:", disabled=rows.row_a is None, help="Draw 10 reports from A."):
        rng = np.random.default_rng([params.seed, pa, len(ss.lesson_samples)])
        p = np.asarray(rows.row_a, dtype=float)
        ss.lesson_samples = ss.lesson_samples + rng.choice(p.size, size=N_SAMPLES, p=p / p.sum()).tolist()
    samples = list(ss.lesson_samples)

    belief = report = guess = None
    n_reports = int(ss.get("lesson_k") or 1)
    seen: list[int] = []  # the k reports the attacker sees (k > 1)
    if mode == "attacker" and rows.matrix is not None and rows.row_a is not None and n_reports > 1:
        # k independent reports from A (the same ones for the same view), and the exact posterior after them.
        p = np.asarray(rows.row_a, dtype=float)
        seen = np.random.default_rng([params.seed, pa, 20]).choice(p.size, size=n_reports, p=p / p.sum()).tolist()
        belief = posterior_after(inst.prior, rows.matrix, seen)
        guess = lesson_numbers.bayes_guess(belief, inst.d_km * 1000.0)
    elif mode == "attacker" and rows.matrix is not None and rows.row_a is not None:
        likely = np.argsort(-np.asarray(rows.row_a))[:12].tolist()
        choices = list(dict.fromkeys([*reversed(samples), *likely]))  # sampled reports first, newest first
        if ss.get("lesson_report") not in choices:
            ss.lesson_report = choices[0]
        report = int(
            st.selectbox(
                "The report the attacker sees",
                choices,
                key="lesson_report",
                format_func=lambda j: f"Output {j}",  # stable labels
                help="Sampled reports first (newest first), then A's likeliest reports.",
            )
        )
        belief = lesson_numbers.posterior(inst.prior, rows.matrix, report)
        guess = lesson_numbers.bayes_guess(belief, inst.d_km * 1000.0)
    map_inputs: dict | None = None
    with current_view.guarded("The map"):
        segments, _ = maps.road_segments(net)
        density = None
        if mech_key == "laplace" and mode == "reports" and rows.row_a is not None:
            half_km = min(max(6.0 / eps, 0.3), 0.6 * max(inst.d_max_km, 0.5))
            density = lesson_maps.laplace_density_image(
                float(inst.lon[pa]), float(inst.lat[pa]), eps, half_width_km=half_km
            )
        map_inputs = dict(
            instance=inst,
            segments=segments,
            place_a=pa,
            place_b=pb,
            row_a=rows.row_a if mode == "reports" else None,
            ring_m=err_a if mode == "reports" else None,
            samples=samples if mode == "reports" else (seen or None),
            density=density,
            belief=belief,
            report=report,
            guess=guess,
            height_px=MAP_HEIGHT,
            width_px=MAP_WIDTH_PRESENTING if presenting else MAP_WIDTH,
        )
        deck = lesson_maps.build_lesson_deck(**map_inputs)
        st.pydeck_chart(
            deck,
            height=MAP_HEIGHT,
            key="lesson_map",
            on_select=_map_clicked,
            selection_mode="single-object",
        )
    if mode == "attacker":
        if belief is None:
            st.caption("The attacker's view needs the mechanism's full matrix (not available here).")
        elif seen:
            d_guess = 1000 * float(inst.distances_km_pairs(np.array([guess]), np.array([pa]))[0])
            st.caption(
                f"The attacker sees **{n_reports} independent reports** from A (white dots; the *k reports* tab sets "
                "k), knows the mechanism and how people are spread, and multiplies what each report says. Its best "
                f"guess (black) is **{fmt_m(d_guess)}** from the truth (orange). Together the reports cost "
                f"{n_reports} × ε = {n_reports * eps:g}/km."
            )
        else:
            d_guess = 1000 * float(inst.distances_km_pairs(np.array([guess]), np.array([pa]))[0])
            st.caption(
                f"The attacker sees output {report} (white dot), knows the mechanism and how people are spread, "
                "and weighs every place by how likely it makes that report (bigger, darker = more believed). "
                f"Its best guess (black) is **{fmt_m(d_guess)}** from the truth (orange)."
            )
    else:
        extra = " The soft glow is planar Laplace's noise before it is snapped to an output." if density else ""
        st.caption(
            "Orange: place A · blue: place B · discs: where A's reports land (bigger, darker = likelier) · "
            f"orange ring: A's expected error ({fmt_m(err_a)}, {params.loss_label}) · "
            f"white: sampled reports.{extra}  \n"
            f"Map data {net.attribution}"
        )
    if mech_key in lesson_numbers.PANDA_KEYS:  # PAnDA-e and PAnDA-l look the same on the default view: say why
        with current_view.guarded("The decays' comparison"):
            configs = [to_config(params.replace(decay=d)) for d in ("exponential", "logistic")]
            same = lesson_numbers.same_decay_sentence(lesson_numbers.decay_agreement(*configs, inst), K)
            if same:
                st.caption(same)
    # The Download menu's place, filled at the end of the run (it offers the charts the tabs draw). A fixed
    # slot keeps the elements' positions stable between runs (a menu appended last made the browser drop the
    # keyboard focus from the tab just chosen).
    download_slot = st.container()

with right:
    tabs = st.tabs(list(LESSON_TABS.values()), key="lesson_tab", on_change="rerun")
    with tabs[0]:
        if tabs[0].open is not False and rows.row_a is not None and rows.row_b is not None:
            with current_view.guarded("The two-places comparison"):
                d_km = float(inst.distances_km_pairs(np.array([pa]), np.array([pb]))[0])
                check = lesson_numbers.pair_check(rows.row_a, rows.row_b, d_km, eps, phase1=rows.phase1)
                st.markdown(lesson_numbers.ratio_sentence(check, verdict=not rows.estimated))
                if rows.estimated:
                    st.caption(
                        "These rows are estimated by sampling, so small probabilities are noisy: no verdict is drawn."
                    )
                # An SVG image on the page (no plotly.js on the first screen, which it would delay); the plotly
                # figure is what the Download menu exports.
                n_shown = int(np.count_nonzero((np.asarray(rows.row_a) > 0) | (np.asarray(rows.row_b) > 0)))
                st.image(
                    lesson_charts.two_places_svg(check, rows.row_a, rows.row_b, width=360, height=300),
                    width="stretch",
                    alt=lesson_charts.two_places_alt(check, min(n_shown, 60)),
                )
                # Built only when someone downloads it (it was an eighth of a rerun's CPU).
                exports["two-places"] = functools.partial(
                    lesson_charts.two_places, check, rows.row_a, rows.row_b, height=340
                )
                st.caption(
                    "Top: how likely each output is from A (orange) and from B (blue). Bottom: the log of their "
                    "ratio per output; ε-geo-indistinguishability keeps every bar between the dashed lines ±ε·d."
                )
    with tabs[1]:
        if tabs[1].open:
            with current_view.guarded("The repeated reports"):
                _repeated(mech_key, eps)
    with tabs[2]:
        if tabs[2].open:
            with current_view.guarded("The background-knowledge view"):
                _background(mech_key, eps)
    with tabs[3]:
        if tabs[3].open:
            with current_view.guarded("The trade-off curve"):
                _curve(mech_key, eps)
    with tabs[4]:
        if tabs[4].open:
            label, text = lesson_numbers.MECHANISMS[mech_key]
            st.markdown(f"**{label}**: {text}")
            st.page_link("app_pages/learn.py", label="Learn: the ideas in plain words", icon=":material/school:")

# ---------------------------------------------------------------------------------------------
# Take it away: the charts drawn in this run, the map, the mechanism's matrix (made only on a click)
with download_slot, current_view.guarded("The downloads"):
    export_menu.export_menu(
        instance=inst,
        figures=exports,
        map_inputs=map_inputs,
        matrix=rows.matrix,
        meta=export_files.lesson_meta(params, inst, mech_key, eps),
        key_prefix="lesson_export",
    )


# ---------------------------------------------------------------------------------------------
# The optimal LP improving in the background: rerun the page when its full solve is done.
_pending = (ss.get("lesson_lp_jobs") or {}).get((params.instance_key, eps))
if mech_key == "lp" and _pending is not None and not _pending.done():

    @st.fragment(run_every=2.0)
    def _watch_lp() -> None:
        if _pending.done():
            st.rerun(scope="app")

    _watch_lp()
elif mech_key == "lp" and _pending is not None and not ss.get("lesson_lp_settled", True):
    # The page said the optimum is on its way, and the background solve is already done (another session's
    # result, a cache hit; or a failure after the page spoke): no watcher would ever see it pending, so rerun
    # once now. The next run shows the full solve's mechanism, or says that it failed.
    st.rerun()
