"""The guided lesson: the Lesson's ideas as scenes, in order, one idea and one control each.

Next and Back (also Page Down and Page Up, what a presenter's clicker sends) move between the scenes; the
scene is in the link (``?scene=cost``). Each scene's sentence is computed on the sidebar's view; the scenes'
words are in app/model/lesson_scenes.py. The free Lesson stays one click away.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from app import state
from app.figures import lesson_maps
from app.model import lesson_numbers, lesson_scenes, panda_numbers
from app.model.lesson_scenes import SCENES
from app.widgets import current_view, lesson_tabs, mechanism_rows, round_starter

MAP_HEIGHT = 520
MAP_WIDTH, MAP_WIDTH_PRESENTING = 480, 700
#: The mechanisms scene 2 offers: those with a matrix for every place that the page computes in seconds.
COST_MECHANISMS = ("laplace", "em", "em-br", "lp-ca", "lp-em")

ss = st.session_state
params = current_view.current_params()
presenting = bool(ss.get("present"))

# ---------------------------------------------------------------------------------------------
# The scene (the link's ``scene``, read into the session by the sidebar, which writes it back)
if not isinstance(ss.get("guided_scene"), int):
    ss.guided_scene = 0
index = min(max(int(ss.guided_scene), 0), len(SCENES) - 1)
scene = SCENES[index]


def _go(step: int) -> None:
    ss.guided_scene = min(max(int(ss.guided_scene) + step, 0), len(SCENES) - 1)


with st.container(key="lesson_title"):  # the h1 at an h4's size (app/figures/style.py), as on the Lesson
    st.markdown(f"# {index + 1}. {scene.title}")
st.progress((index + 1) / len(SCENES), text=lesson_scenes.progress_line(index))

# ---------------------------------------------------------------------------------------------
# The view's places (scenes 1-3 draw them on the map)
try:
    net = state.network(params.source)
    with st.spinner("Drawing places and outputs ..."):
        inst = state.instance(*params.instance_key)
except Exception as exc:  # noqa: BLE001 (never a traceback in the page)
    st.error(f"**The places for this lesson could not be prepared.** Try another city.\n\nDetails: {exc}")
    st.stop()
a = lesson_numbers.default_place(inst)
b = lesson_numbers.second_place(inst, a)
if ss.get("guided_eps") not in lesson_numbers.epsilon_options(params.epsilon_per_km):
    ss.guided_eps = float(ss.get("w_epsilon_per_km", params.epsilon_per_km))
if ss.get("guided_mech") not in COST_MECHANISMS:
    ss.guided_mech = "laplace"


def _eps_changed() -> None:
    ss.w_epsilon_per_km = float(ss.guided_eps)  # the sidebar's ε follows (one value for the view)


# The scene's words first, its picture second: side by side on a projector, and on a phone (where columns stack)
# the idea and the question come before the map.
words, picture = st.columns([2, 3], gap="medium")
# A container of the scene's own: the last scene's chart goes at once, not after this scene's (maybe slow) one.
picture = picture.container(key=f"guided_picture_{scene.key}")
with words:
    st.markdown(scene.idea)
    control = st.container()
    sentence = st.container()
    st.info(f"**Ask the room:** {scene.question}", icon=":material/forum:")
    back, forward = st.columns(2)
    back.button(
        "Back",
        icon=":material/arrow_back:",
        disabled=index == 0,
        on_click=_go,
        args=(-1,),
        shortcut="PageUp",
        width="stretch",
    )
    forward.button(
        "Next",
        icon=":material/arrow_forward:",
        type="primary",
        disabled=index == len(SCENES) - 1,
        on_click=_go,
        args=(1,),
        shortcut="PageDown",
        width="stretch",
    )
    st.page_link("app_pages/lesson.py", label="The free Lesson: every control at once", icon=":material/open_in_new:")

eps = float(ss.guided_eps)
if scene.key == "background":  # the tab states the exact check's verdict of the mechanism it shows
    with sentence:
        rows = mechanism_rows.mechanism_rows(mechanism_rows.LessonChoice(params, ss.guided_mech, eps, a, b), inst)
    with picture, current_view.guarded("The background-knowledge view"):
        lesson_tabs.background_tab(params, ss.guided_mech, eps, bool(rows.numbers.get("passed")))
elif scene.key in ("promise", "cost", "attacker"):
    with control:
        if scene.key == "promise":
            st.select_slider(
                "ε (1/km)",
                lesson_numbers.epsilon_options(eps),
                key="guided_eps",
                format_func=lambda e: f"{e:g}",
                on_change=_eps_changed,
            )
        elif scene.key == "cost":
            st.selectbox(
                "Mechanism",
                COST_MECHANISMS,
                key="guided_mech",
                format_func=lambda k: lesson_numbers.MECHANISMS[k][0],
            )
        else:
            st.button("Draw a report", icon=":material/casino:", key="guided_draw")
    mech = ss.guided_mech if scene.key != "promise" else "laplace"
    with sentence:
        rows = mechanism_rows.mechanism_rows(
            mechanism_rows.LessonChoice(params, mech, float(ss.guided_eps), a, b), inst
        )
    eps = float(ss.guided_eps)
    if rows.row_a is None or rows.matrix is None:
        sentence.warning(rows.problem or "This mechanism has no report distribution here: pick another one.")
        st.stop()
    row_a = np.asarray(rows.row_a, dtype=float)
    belief = report = guess = None
    if scene.key == "promise":
        d_ab_km = float(inst.distances_km_pairs(np.array([a]), np.array([b]))[0])
        check = lesson_numbers.pair_check(rows.row_a, rows.row_b, d_ab_km, eps)
        sentence.markdown(lesson_scenes.promise_sentence(eps, 1000 * d_ab_km, check.worst))
    elif scene.key == "cost":
        err_a = lesson_numbers.expected_error_m(row_a, inst.cost_m[a])
        sentence.markdown(
            lesson_scenes.cost_sentence(lesson_numbers.MECHANISMS[mech][0], eps, err_a, params.loss_label)
        )
    else:
        ss.guided_draws = int(ss.get("guided_draws", 0)) + (1 if ss.get("guided_draw") else 0)
        j = int(np.random.default_rng([params.seed, a, 30, ss.guided_draws]).choice(row_a.size, p=row_a / row_a.sum()))
        belief = lesson_numbers.posterior(inst.prior, rows.matrix, j)
        guess = lesson_numbers.bayes_guess(belief, inst.d_km * 1000.0)
        report = j
        report_m = 1000 * float(inst.distances_km_pairs(np.array([a]), np.array([int(inst.outputs[j])]))[0])
        guess_m = 1000 * float(inst.distances_km_pairs(np.array([a]), np.array([guess]))[0])
        sentence.markdown(
            lesson_scenes.attacker_sentence(report_m, guess_m, rows.numbers.get("adversary_error_m", float("nan")))
        )
    with picture, current_view.guarded("The map"):
        segments, _ = state.road_segments(params.source)
        deck = lesson_maps.build_lesson_deck(
            instance=inst,
            segments=segments,
            place_a=a,
            place_b=b if scene.key == "promise" else None,
            row_a=row_a if scene.key != "attacker" else None,
            ring_m=err_a if scene.key == "cost" and params.resolved_loss != "task" else None,
            belief=belief,
            report=report,
            guess=guess,
            height_px=MAP_HEIGHT,
            width_px=MAP_WIDTH_PRESENTING if presenting else MAP_WIDTH,
        )
        st.pydeck_chart(deck, height=MAP_HEIGHT, key="guided_map")
        legend = {
            "promise": "Orange: place A · blue: place B · discs: where A's reports land (darker = likelier)",
            "cost": "Orange: place A · discs: where A's reports land (darker = likelier) · ring: A's expected error",
            "attacker": "Orange: place A (the truth) · white: the report · discs: places the attacker believes "
            "(bigger, darker = more) · black: its guess",
        }[scene.key]
        st.caption(f"{legend}. Map data {net.attribution}")
elif scene.key == "round":
    with sentence:
        rows = mechanism_rows.mechanism_rows(mechanism_rows.LessonChoice(params, ss.guided_mech, eps, a, b), inst)
    with picture:
        st.markdown(
            "1. The lecturer signs in here and starts the round: the page then shows the join code, its link and "
            "QR code, for the projector.\n2. Students open the link on their phones; each phone shows a report.\n"
            "3. Students tap their guess; the lecturer reveals where the secret places were."
        )
        round_starter.panel(params, ss.guided_mech, eps, a, has_matrix=rows.matrix is not None)
elif scene.key == "repeated":
    with picture, current_view.guarded("The repeated reports"):
        lesson_tabs.repeated_tab(params, ss.guided_mech, eps, {})
elif scene.key == "curve":
    with picture, current_view.guarded("The trade-off curve"):
        lesson_tabs.curve_tab(params, ss.guided_mech, eps, {})
else:
    view = current_view.load_view(params)
    if view is not None:
        with sentence:
            st.markdown(panda_numbers.verdict(view.result))
        with picture:
            texts = current_view.metric_texts(view.result)
            for col, key in zip(st.columns(3), ("violation", "phase1", "loss"), strict=True):
                m = texts[key]
                col.metric(m.label, m.value, m.note or None, delta_color="off", delta_arrow="off", help=m.help)
            st.page_link("app_pages/explore.py", label="The PAnDA page: where the budget goes", icon=":material/map:")
