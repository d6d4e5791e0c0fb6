"""A server restarted in the middle of a lesson (issue 29, item 6): the link brings the view back, prepared
results included.

The Optimal (LP) mechanism of a small Kotka view is prepared into a fresh class database (as ``python -m
panda prepare`` does); a server on that database shows it in Chromium, marked as prepared; the server is
killed (SIGKILL, no goodbye) and a new one started on the same port and database. The open page reconnects by
itself; on its next action the new server, with nothing in memory, draws the same view and numbers, still
marked prepared; a fresh tab opened at the link does too.

A reconnected page that was idle is not rerun by Streamlit (1.53: only a page that never had a session, or was
running, asks for a run on reconnection): it goes on showing what the old server drew. So the test asks for the
rerun (the "r" shortcut, as any click would) and waits until the new server's connection says the script run
finished before it reads the page: what it reads then is what the new server drew (a finished run removes
every element it did not draw).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from browser_support import (  # noqa: F401 (fixtures and helpers of the browser test)
    ROOT,
    _free_port,
    _metric,
    _wait_healthy,
    _wait_idle,
    browser,
    streamlit_cmd,
)

from app.server import prepare
from app.server import result_store as rs
from app.server.db import store

pytestmark = pytest.mark.browser

QUERY = "city=kotka&K=30&N=8&M=15&eps=3&seed=2&mech=lp"
PREPARED = "Prepared before the lecture"


def _serve(port: int, db: str) -> subprocess.Popen:
    env = {**os.environ, store.ENV_URL: db}
    proc = subprocess.Popen(
        streamlit_cmd(port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _wait_healthy(f"http://127.0.0.1:{port}", proc)
    return proc


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the server and its process group's children (its local Dask workers)."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def _connected(pid: int, port: int) -> bool:
    """Whether a client (the browser's websocket) is connected to the server ``pid`` on ``port``."""
    import psutil

    return any(
        c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port
        for c in psutil.Process(pid).net_connections(kind="tcp")
    )


#: Whether the page's frontend says it is connected to a server (it says CONNECTING meanwhile).
_CONNECTED_JS = """() => document.querySelector('[data-test-connection-state]')
    ?.getAttribute('data-test-connection-state') === 'CONNECTED'"""


class _Runs:
    """The script runs the page's server connections report: per websocket, the ``script_finished`` statuses."""

    def __init__(self, page) -> None:
        self.finished: list[list[int]] = []
        page.on("websocket", self._opened)

    def _opened(self, ws) -> None:
        finished: list[int] = []
        self.finished.append(finished)

        def received(payload: bytes | str) -> None:
            from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

            if isinstance(payload, bytes):
                msg = ForwardMsg.FromString(payload)
                if msg.WhichOneof("type") == "script_finished":
                    finished.append(msg.script_finished)

        ws.on("framereceived", received)


def _shows_the_prepared_view(page) -> str:
    page.get_by_text(PREPARED, exact=False).first.wait_for(timeout=120_000)
    _wait_idle(page, timeout_s=120)
    assert page.locator('[data-testid="stException"]').count() == 0
    return _metric(page, "Error at A")


def test_a_restarted_server_brings_the_lesson_back_with_its_prepared_results(tmp_path, monkeypatch, browser):  # noqa: F811
    db = f"sqlite:///{tmp_path / 'class.db'}"
    monkeypatch.setenv(store.ENV_URL, db)
    params = prepare.parse_link(f"http://127.0.0.1/?{QUERY}")
    (task,) = [t for t in prepare.tasks_for(params) if t.kind == "mechanism" and t.name == "lp"]
    from app.model import instances

    net = instances.network_of(params.source)
    outcome = prepare.run_task(task, params, lambda key: instances.build_instance(net, *key[1:]))
    assert not outcome.startswith("not kept"), outcome
    assert rs.get_mechanism(task.instance_key, "lp", task.epsilon_per_km, prepare._options("lp")) is not None
    store.dispose(db)

    port = _free_port()
    url = f"http://127.0.0.1:{port}/?{QUERY}"
    proc = _serve(port, db)
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = context.new_page()
        runs = _Runs(page)
        page.goto(url, wait_until="domcontentloaded")
        before = _shows_the_prepared_view(page)
        assert before and before != "—", before
        assert len(runs.finished) == 1 and runs.finished[0], runs.finished  # the old server's connection
        assert page.evaluate(_CONNECTED_JS)

        _kill(proc)
        proc = _serve(port, db)  # the same address and database, nothing in memory
        t0 = time.perf_counter()
        # The open page reconnects by itself (a websocket to the new server) ...
        deadline = time.monotonic() + 120
        while not (_connected(proc.pid, port) and len(runs.finished) > 1 and page.evaluate(_CONNECTED_JS)):
            assert time.monotonic() < deadline, "the open page did not reconnect to the new server"
            page.wait_for_timeout(200)
        # ... and its next action is a run on the new server, finished (status 0: FINISHED_SUCCESSFULLY).
        page.keyboard.press("r")
        deadline = time.monotonic() + 120
        while 0 not in runs.finished[-1]:
            assert time.monotonic() < deadline, f"the new server did not finish a run of the open page: {runs.finished}"
            page.wait_for_timeout(200)
        assert _shows_the_prepared_view(page) == before
        print(f"\n[restart] the open page showed the prepared view again {time.perf_counter() - t0:.1f} s after")
        assert "mech=lp" in page.url and "eps=3" in page.url

        fresh = context.new_page()
        fresh.goto(url, wait_until="domcontentloaded")
        assert _shows_the_prepared_view(fresh) == before
    finally:
        context.close()
        _kill(proc)
