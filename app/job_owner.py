"""Whom a worker job is run for: the Streamlit session of this script run, its client address, and whether it
still waits (:meth:`panda.execution.Executor.run`'s ``owner``, ``group`` and ``keep_waiting``)."""

from __future__ import annotations

from typing import Any

from streamlit.runtime.scriptrunner import get_script_run_ctx

from app.client_address import address_group, client_address

__all__ = ["of_this_run"]


def of_this_run() -> dict[str, Any]:
    """``owner``, ``group`` and ``keep_waiting`` for :meth:`panda.execution.Executor.run` from the session of this run.

    The owner is the Streamlit session (at most a few jobs in flight each, served in turn with the other
    sessions'); its group is the client's address (app.client_address), whose sessions share a few more, so
    that one person's many tabs hold no more of the class's workers than two. The job is waited for while the
    session is connected and its view (the sidebar's instance: city, K, N, M, seed, loss, prior) is the one the
    job was asked for: a closed tab or a new view ends the wait, and a job nobody else waits for is then
    withdrawn (see the executor). Outside a server (AppTest, a script): no owner.
    """
    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is None:
        return {}
    session_id, session_state = ctx.session_id, ctx.session_state
    try:
        from streamlit.runtime import Runtime

        runtime = Runtime.instance() if Runtime.exists() else None
    except RuntimeError:
        runtime = None
    if runtime is None:
        return {"owner": session_id}

    def view() -> tuple | None:
        try:
            params = session_state["params"]
        except (KeyError, AttributeError):
            return None
        return getattr(params, "instance_key", None)

    asked_for = view()

    def keep_waiting() -> bool:
        if not runtime.is_active_session(session_id):
            return False
        return asked_for is None or view() == asked_for

    address = client_address()
    group = {"group": address_group(address)} if address is not None else {}
    return {"owner": session_id, "keep_waiting": keep_waiting, **group}
