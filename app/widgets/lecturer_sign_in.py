"""The lecturer's sign-in: once per browser session, by typing the key (app/server/lecturer.py) or opening
``?lecturer=KEY`` once. Nothing a student's session shows lets it start, reveal, end or prepare."""

from __future__ import annotations

import streamlit as st

from app.server import lecturer

__all__ = ["consume_link_key", "form", "signed_in"]

#: Wrong keys a session may type before the form stops taking keys (a reload starts a new session).
MAX_ATTEMPTS = 10
_SIGNED_IN = "lecturer_signed_in"
_ATTEMPTS = "lecturer_attempts"
_PROBLEM = "lecturer_problem"


def signed_in() -> bool:
    """Whether this session has shown the lecturer key."""
    return bool(st.session_state.get(_SIGNED_IN))


def _check(text: object) -> None:
    ss = st.session_state
    try:
        ok = lecturer.is_lecturer_key(text)
    except (OSError, ValueError) as exc:  # the server's key is unusable: say so, never a traceback
        ss[_PROBLEM] = f"The server has no usable lecturer key: {exc}"
        return
    if ok:
        ss[_SIGNED_IN] = True
        ss.pop(_PROBLEM, None)
    else:
        ss[_ATTEMPTS] = ss.get(_ATTEMPTS, 0) + 1
        ss[_PROBLEM] = "That is not this server's lecturer key (the server's console shows it when it starts)."


def consume_link_key() -> None:
    """Sign in with ``?lecturer=KEY`` and take the key out of the page's address at once."""
    if "lecturer" in st.query_params:
        text = str(st.query_params.get("lecturer", ""))[:256]
        del st.query_params["lecturer"]
        if not signed_in():
            _check(text)


def _submit(field: str) -> None:
    _check(st.session_state.get(field, ""))
    st.session_state[field] = ""  # the typed key never stays in a widget


def form(key: str, why: str) -> bool:
    """The sign-in form (``key``: a widget key prefix unique on the page; ``why``: what signing in allows).

    Returns whether the session is signed in (then nothing is drawn).
    """
    if signed_in():
        return True
    ss = st.session_state
    st.caption(f"Lecturer only: {why}. Type the lecturer key (the server's console shows it when it starts).")
    if ss.get(_ATTEMPTS, 0) >= MAX_ATTEMPTS:
        st.warning("Too many wrong keys in this session: reload the page to try again.")
        return False
    field = f"{key}_lecturer_key"
    st.text_input("Lecturer key", type="password", key=field, on_change=_submit, args=(field,))
    if ss.get(_PROBLEM):
        st.warning(ss[_PROBLEM])
    return False
