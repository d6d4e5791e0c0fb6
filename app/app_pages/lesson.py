"""Lesson (the first screen): geo-indistinguishability working, one mechanism at a time, on a real city.

Pick a place on the map, pick a mechanism, move ε: the map shows where the place's reports land, the
"Two places" tab shows why a second place nearby is indistinguishable, the curve shows the
privacy-utility trade-off of every mechanism, and the attacker mode shows what one report reveals.
"""

from __future__ import annotations

import functools

import numpy as np
import streamlit as st

import panda
from app import state
from app.figures import lesson_charts, lesson_maps
from app.model import export_files, landmarks, lesson_numbers
from app.model.messages import plain
from app.model.page_links import LESSON_TABS
from app.model.panda_numbers import fmt_m, fmt_pct
from app.model.params import LOSS_SHORT, to_config
from app.widgets import current_view, export_menu, lesson_tabs, mechanism_rows, round_starter
from panda.class_round import expected_bayes_error_m
from panda.repeated import posterior_after

MAP_HEIGHT = 540
#: The map's width (px) the initial view fits the city into: the left column at 1280 px with and without the sidebar.
MAP_WIDTH, MAP_WIDTH_PRESENTING = 480, 700
#: Reports one click of *Draw* samples from place A.
N_SAMPLES = 10
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
if ss.get("lesson_epsilon_per_km") != ss.get("w_epsilon_per_km", params.epsilon_per_km):
    ss.lesson_epsilon_per_km = float(ss.get("w_epsilon_per_km", params.epsilon_per_km))


def _eps_changed() -> None:
    ss.w_epsilon_per_km = float(ss.lesson_epsilon_per_km)


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
place_name = panda.CITIES[net.name][1].split(":")[0] if net.name in panda.CITIES else plain(net.name)
# The page's h1, at an h4's size (app/figures/style.py): headings then go in order.
with st.container(key="lesson_title"):
    st.markdown(f"# Geo-indistinguishability on the roads of {place_name}")
if not presenting:  # (in the presenter view each line above the map costs the 720-px screen: the menu has it)
    st.page_link(
        "app_pages/guided.py", label="Guided lesson: the same ideas as 8 scenes, in order", icon=":material/slideshow:"
    )
    st.caption(
        "**Or explore freely:** ① move **ε** and watch where place A's reports land · ② switch mechanisms and read "
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
    eps = c2.select_slider(
        "ε (1/km)",
        lesson_numbers.epsilon_options(ss.lesson_epsilon_per_km),
        key="lesson_epsilon_per_km",
        format_func=lambda e: f"{e:g}",
        on_change=_eps_changed,
        help="The privacy budget, the same as the sidebar's, on a log scale. Smaller ε: reports spread further, "
        "places blur together.",
    )
    # Stable labels (the pinned streamlit keys a selectbox by label): the number, then the nearest street.
    place_label = landmarks.place_labels(params.source, inst.lon, inst.lat).__getitem__
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
    st.markdown(
        f"**ε = {eps:g}/km ≈ {fmt_m(lesson_numbers.doubling_distance_m(eps))}**: places closer than that look alike "
        "to an attacker: any report is at most twice as likely from one of them as from the other."
    )
    st.caption(
        f"**ε = {eps:g}/km means:** a report may be at most {lesson_numbers.times(eps * 0.2)} likelier from one "
        f"place than from another 200 m away ({lesson_numbers.times(eps)} at 1 km). "
        f"A and B are {fmt_m(1000 * d_ab_km)} apart: "
        f"{lesson_numbers.times(eps * d_ab_km)} allowed."
    )


# ---------------------------------------------------------------------------------------------
# The mechanism's rows
choice = mechanism_rows.LessonChoice(params, mech_key, eps, a, b)
with right:
    rows = mechanism_rows.mechanism_rows(choice, inst)
    if rows.problem:
        st.warning(rows.problem)
    if rows.note:
        st.caption(rows.note)
    if rows.optimum_ready:
        st.button(
            "Show the optimum",
            icon=":material/auto_awesome:",
            on_click=mechanism_rows.show_the_optimum,
            args=(params, eps),
        )
pa, pb = rows.shown_a, rows.shown_b


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
if rows.matrix is not None:  # the two scopes side by side: one place, and the city's average (issue 39 item 6)
    adv_a = expected_bayes_error_m(inst.prior, rows.matrix, pa, 1, inst.d_km * 1000.0, rng=np.random.default_rng(0))
    scopes = lesson_numbers.scope_lines(
        (err_a, adv_a), (num.get("loss_m", float("nan")), adv), LOSS_SHORT[params.resolved_loss]
    )
    right.markdown(scopes)


if presenting:
    with right.popover("Class round", icon=":material/groups:", help="Students guess from their phones."):
        round_starter.panel(params, mech_key, eps, pa, has_matrix=rows.matrix is not None)

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
        segments, _ = state.road_segments(params.source)
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
            # A ring of the expected cost only where the cost is a distance from A (the task cost is not).
            ring_m=err_a if mode == "reports" and params.resolved_loss != "task" else None,
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
            + (
                f"orange ring: A's expected error ({fmt_m(err_a)}, {params.loss_label}) · "
                if params.resolved_loss != "task"
                else f"no ring: {params.loss_label} is not a distance from A · "
            )
            + f"white: sampled reports.{extra}  \n"
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
                lesson_tabs.repeated_tab(params, mech_key, eps, exports)
    with tabs[2]:
        if tabs[2].open:
            with current_view.guarded("The background-knowledge view"):
                lesson_tabs.background_tab(params, mech_key, eps, bool(rows.numbers.get("passed")))
    with tabs[3]:
        if tabs[3].open:
            with current_view.guarded("The trade-off curve"):
                lesson_tabs.curve_tab(params, mech_key, eps, exports)
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
# The optimal LP improving in the background: rerun the page when its full solve is done (the page then offers it).
_pending = mechanism_rows.pending_lp_job(params, eps)
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
