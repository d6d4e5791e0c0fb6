"""The presenter's *Prepare this view* button (AppTest): the real command in the background, its progress, Stop."""

from __future__ import annotations

import time

import pytest
from apptest_support import clear_caches, make_app, release_resources, run_ok  # noqa: F401
from conftest import LECTURER_KEY

from app.server import prepare
from app.server import result_store as rs
from app.widgets import prepare_panel

pytestmark = pytest.mark.slow
VIEW = {"city": "kotka", "K": "30", "N": "8", "M": "15", "eps": "3", "seed": "3"}


def _wait(ident: str, timeout_s: float = 600.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = prepare_panel.status(ident)
        if not info["running"]:
            return info
        time.sleep(1.0)
    raise AssertionError(f"the preparation did not finish: {prepare_panel.status(ident)}")


def test_preparing_needs_the_lecturer_key(db):
    at = make_app(present="1", **VIEW)
    run_ok(at)
    assert not [b for b in at.button if b.label == "Prepare"]  # a student in the presenter view
    at.text_input(key="prepare_lecturer_key").set_value("a guess").run()
    assert not [b for b in at.button if b.label == "Prepare"]
    assert any("not this server's lecturer key" in w.value for w in at.warning)
    at.text_input(key="prepare_lecturer_key").set_value(LECTURER_KEY).run()
    assert [b for b in at.button if b.label == "Prepare"]
    assert not [t for t in at.text_input if t.key == "prepare_lecturer_key"]  # signed in: the form is gone


def test_the_presenter_prepares_the_current_view(db):
    at = make_app(present="1", lecturer=LECTURER_KEY, **VIEW)
    run_ok(at)
    assert "lecturer" not in at.query_params  # the key leaves the address at once
    assert [b for b in at.button if b.label == "Prepare"]
    next(b for b in at.button if b.label == "Prepare").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    params = at.session_state["params"]
    link = prepare_panel.link_of(params, "lesson")
    ident = prepare_panel._ident(link)
    assert ident in prepare_panel._running
    assert prepare.parse_link(link).instance_key == params.instance_key  # the command reads the page's own view
    run_ok(at)  # while it runs the sidebar shows its progress and a Stop button
    assert any(b.label == "Stop preparing" for b in at.button) or not prepare_panel.status(ident)["running"]
    info = _wait(ident)
    assert info["final"] and info["final"].startswith("Done"), info
    lp = rs.get_mechanism(params.instance_key, "lp", 3.0, (("time_limit_s", 20.0),))
    assert lp is not None and lp.details["prepared"]
    run_ok(at)
    assert any(c.value.startswith("Done in") for c in at.caption)
    # The Lesson's Optimal (LP) is now there at once, certified and marked prepared.
    at.selectbox(key="lesson_mech").set_value("lp")
    t0 = time.perf_counter()
    run_ok(at)
    note = next(c.value for c in at.caption if "Optimal (LP): optimal (gap ≤" in c.value)
    assert "Prepared before the lecture" in note and "no mechanism can go below" in note
    gap = float(note.split("gap ≤ ")[1].split(" %")[0])
    assert gap <= 100 * rs.GAP_TARGET
    print(f"\n[prepare_ui] the prepared LP's view: {time.perf_counter() - t0:.2f} s")


def test_stop_keeps_what_is_done(db):
    link = prepare_panel.link_of(_params(), "lesson")
    ident = prepare_panel.start(link)
    deadline = time.monotonic() + 300
    # Stop it in its longest task (the optimal LP's curve): the tasks before it are done and kept.
    while not prepare_panel.status(ident)["last"].endswith("curve of lp (city:kotka K=30 seed=4) ..."):
        assert time.monotonic() < deadline and prepare_panel.status(ident)["running"], prepare_panel.status(ident)
        time.sleep(0.1)
    fraction = prepare_panel.status(ident)["fraction"]
    assert 0.8 < fraction < 1.0
    prepare_panel.stop(ident)
    info = _wait(ident, 120)
    assert info["final"] and info["final"].startswith("Stopped"), info
    # Again: every task before the stop is already prepared; the LP's curve is computed now.
    ident = prepare_panel.start(link)
    info = _wait(ident)
    log = (prepare_panel.PREPARE_DIR / f"{ident}.log").read_text()
    assert info["final"].startswith("Done") and log.count("already prepared") == 12, log


def _params():
    from app.model.params import from_query

    return from_query({**VIEW, "seed": "4"})[0].replace(page_loss="road")


def test_the_guided_lesson_prepares_the_lecture_and_counts_its_scenes(db):
    """On the guided lesson the button prepares the lecture; a line counts the scenes the result store holds,
    recomputed here from the store before and after."""
    from app.model.lesson_scenes import SCENES
    from app.server import lecture_readiness

    at = make_app("app_pages/guided.py", present="1", lecturer=LECTURER_KEY, **VIEW)
    run_ok(at)
    run_ok(at)  # the sidebar counts before the page runs, and the first scene's own matrix is kept as it runs
    assert any(m.value == "**Prepare this lecture**" for m in at.sidebar.markdown)
    params = at.session_state["params"]
    before = lecture_readiness.readiness(params, "laplace")
    line = lecture_readiness.ready_line(before)
    assert line.startswith(f"{sum(r.ready for r in before)} of {len(SCENES)} scenes ready")
    assert not all(r.ready for r in before)  # a fresh store: the curves at least are to prepare
    assert any(m.value == line for m in at.sidebar.markdown), [m.value for m in at.sidebar.markdown]
    next(b for b in at.button if b.label == "Prepare").click()
    at.run()
    info = _wait(prepare_panel._ident(prepare_panel.link_of(params, "guided")))
    assert info["final"] and info["final"].startswith("Done"), info
    run_ok(at)
    done = f"{len(SCENES)} of {len(SCENES)} scenes ready"
    assert lecture_readiness.ready_line(lecture_readiness.readiness(params, "laplace")) == done
    assert any(m.value == done for m in at.sidebar.markdown), [m.value for m in at.sidebar.markdown]
