"""Opening a class round on the shown view: the lecturer's sign-in, the secret place, k, and *Start a round*.

Used by the Lesson's presenter view (its *Class round* menu) and by the guided lesson's round scene. Once the
round is open, the page switches to the host page of its join code (the lecturer key, not the address,
controls it).
"""

from __future__ import annotations

import streamlit as st

from app.model import lesson_numbers
from app.model.params import Params
from app.server import lecturer
from app.widgets import lecturer_sign_in, mechanism_rows

__all__ = ["panel", "SECRET_CHOICES"]

#: The round's kinds (app.server.db.models.SECRET_MODES), the first the default: one question for the whole room.
SECRET_CHOICES = {
    "question": "One question for the room: place A, the same report on every phone",
    "shared": "Place A, a report of its own on every phone (the class can pool them)",
    "each": "Each student gets a secret place of their own",
}


def _start_round(params: Params, mech_key: str, eps: float, place_a: int) -> None:
    """Open a class round on this view (the lecturer's page then shows the join code)."""
    from app.game import rounds

    ss = st.session_state
    mode = ss.get("lesson_round_secret") if ss.get("lesson_round_secret") in SECRET_CHOICES else "question"
    k = int(ss.get("lesson_k") or 1)
    spec = rounds.RoundSpec(
        mech_key,
        eps,
        k,
        mode,
        place_a if mode != "each" else None,
        options=mechanism_rows.options_for(params, mech_key, eps),
    )
    try:
        code, _ = rounds.open_game(list(params.instance_key), spec, host_token_for=lecturer.round_token)
    except Exception as exc:  # noqa: BLE001 (a message, never a traceback)
        ss.lesson_round_problem = f"The class round could not be opened: {exc}"
        return
    ss.lesson_round_open = {"code": code}


def panel(params: Params, mech_key: str, eps: float, place_a: int, *, has_matrix: bool) -> None:
    """The lecturer's form, then the round's choices and its Start button; switches to the host page once open.

    ``has_matrix``: the mechanism has a report distribution for every place (a round needs one).
    """
    ss = st.session_state
    may_start = lecturer_sign_in.form("lesson_round", "start a class round")  # else the form is shown
    if may_start and not has_matrix:
        st.caption("A class round needs a mechanism with a report for every place: pick another mechanism.")
    elif may_start:
        st.radio("The round", list(SECRET_CHOICES), format_func=SECRET_CHOICES.get, key="lesson_round_secret")
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
            args=(params, mech_key, eps, place_a),
        )
    if ss.get("lesson_round_problem"):
        st.warning(ss.pop("lesson_round_problem"))
    opened = ss.pop("lesson_round_open", None)
    if opened:
        st.switch_page("app_pages/host.py", query_params=opened)
