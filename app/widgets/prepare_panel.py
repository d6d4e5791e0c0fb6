"""The presenter's *Prepare this view* button: ``python -m panda prepare`` for the current link, in the background.

On the guided lesson it is *Prepare this lecture*: the view's link covers every scene (they share the view and its
ε), and a line says how many scenes are ready (app/server/lecture_readiness.py).

The preparation is a process of its own (never the web server's work), at the lowest CPU priority, one per
server at a time; its progress is the command's own output, kept in data/cache/prepare/. The sidebar shows its
last line and a Stop button (Ctrl-C: what is done is kept).
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import streamlit as st

from app import state
from app.model.params import Params, to_query
from app.server import lecture_readiness
from app.widgets import lecturer_sign_in

__all__ = ["panel", "start", "status", "stop", "PREPARE_DIR"]

ROOT = Path(__file__).resolve().parents[2]
PREPARE_DIR = ROOT / "data" / "cache" / "prepare"
#: Page key -> the path of its link.
PATHS = {"lesson": "", "explore": "explore", "learn": "learn", "compare": "compare", "audit": "audit"}
_lock = threading.Lock()
_running: dict[str, subprocess.Popen] = {}


def link_of(params: Params, page: str) -> str:
    """The dashboard link of a view (what ``python -m panda prepare`` reads)."""
    query = "&".join(f"{k}={v}" for k, v in to_query(params).items())
    return f"http://localhost/{PATHS.get(page, '')}?{query}"


def _ident(link: str) -> str:
    return hashlib.sha256(link.encode()).hexdigest()[:16]


def start(link: str) -> str:
    """Start preparing ``link`` (unless a preparation is already running on this server); returns its id."""
    ident = _ident(link)
    with _lock:
        for other, proc in list(_running.items()):
            if proc.poll() is None:
                return other
        PREPARE_DIR.mkdir(parents=True, exist_ok=True)
        log = open(PREPARE_DIR / f"{ident}.log", "w", encoding="utf-8")  # noqa: SIM115 (the child holds it)
        cmd = [sys.executable, "-m", "panda", "prepare", "--link", link]
        nice = (lambda: os.nice(19)) if hasattr(os, "nice") else None
        _running[ident] = subprocess.Popen(
            cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=nice, start_new_session=True,
        )  # fmt: skip
        log.close()
        return ident


def status(ident: str) -> dict:
    """``running``, the fraction done and the last progress line of a preparation."""
    proc = _running.get(ident)
    running = proc is not None and proc.poll() is None
    path = PREPARE_DIR / f"{ident}.log"
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []
    progress = [ln for ln in lines if ln.startswith("[")]
    last = progress[-1] if progress else (lines[-1] if lines else "starting ...")
    m = re.match(r"\[(\d+)/(\d+)\]", last)
    done = (int(m.group(1)) - (1 if last.endswith("...") else 0)) / int(m.group(2)) if m else 0.0
    final = next((ln for ln in reversed(lines) if ln.startswith(("Done", "Stopped", "Bad link"))), None)
    return {"running": running, "fraction": min(max(done, 0.0), 1.0), "last": last, "final": final}


def stop(ident: str) -> None:
    """Stop a preparation as Ctrl-C does (what is done stays kept)."""
    proc = _running.get(ident)
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGINT)


def panel(params: Params, page: str) -> None:
    """The sidebar's *Prepare this view* section (presenter view; the lecturer's, once signed in)."""
    ss = st.session_state
    if not lecturer_sign_in.signed_in():
        st.markdown("**Prepare this view**")
        lecturer_sign_in.form("prepare", "prepare this view for the class")
        return
    link = link_of(params, page)
    ident = _ident(link)

    title = "Prepare this lecture" if page == "guided" else "Prepare this view"

    @st.fragment(run_every=5.0 if (ident in _running and _running[ident].poll() is None) else None)
    def show() -> None:
        st.markdown(f"**{title}**")
        if page == "guided":
            _scenes_ready(params)
        info = status(ident) if ident in _running or (PREPARE_DIR / f"{ident}.log").exists() else None
        if info and info["running"]:
            st.progress(info["fraction"], text=info["last"][:120])
            if st.button("Stop preparing", icon=":material/stop:", key="prepare_stop"):
                stop(ident)
        else:
            if info and info["final"]:
                st.caption(info["final"])
            st.caption(
                "Computes every mechanism of this view and the whole curve with the optimal LP certified to 0.5 %, "
                "in the background (minutes). Prepared views then show at once, for every student."
            )
            if st.button("Prepare", icon=":material/pending_actions:", key="prepare_start", help=title):
                got = start(link)
                if got != ident:
                    ss.prepare_busy = "Another view is being prepared on this server: try again when it is done."
                st.rerun(scope="app")
        if ss.get("prepare_busy"):
            st.caption(ss.pop("prepare_busy"))

    show()


def _scenes_ready(params: Params) -> None:
    """The guided lesson's "6 of 8 scenes ready" line, from the result store (redrawn while preparing)."""
    try:
        rows = lecture_readiness.readiness(
            params, str(st.session_state.get("guided_mech", "laplace")), network_of=state.network
        )
    except Exception as exc:  # noqa: BLE001 (a view whose network cannot load: the page itself says why)
        st.caption(f"The scenes' readiness could not be read ({type(exc).__name__}).")
        return
    st.markdown(lecture_readiness.ready_line(rows))
