"""The Lesson's Optimal (LP) live (AppTest): a first certified mechanism at once, a background solve, and the page
updating itself (a prepared view: tests/test_prepare_ui.py)."""

from __future__ import annotations

import time

import pytest
from apptest_support import clear_caches, make_app, release_resources, run_ok  # noqa: F401

from app import result_store as rs
from app.game import store

pytestmark = pytest.mark.slow


@pytest.fixture
def db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    monkeypatch.setenv(store.ENV_URL, url)
    yield url
    store.dispose(url)


def _lp_note(at) -> str:
    return next((c.value for c in at.caption if c.value.startswith("Optimal (LP):")), "")


def test_the_optimal_lp_shows_at_once_then_improves_by_itself(db):
    at = make_app(K="300", N="12", M="80", eps="2")
    run_ok(at)
    at.selectbox(key="lesson_mech").set_value("lp")
    t0 = time.perf_counter()
    run_ok(at)
    first_s = time.perf_counter() - t0
    note = _lp_note(at)
    problems = [w.value for w in at.warning]
    print(f"\n[live lp] first run {first_s:.1f} s: {note or problems}")
    jobs = at.session_state["lesson_lp_jobs"] if "lesson_lp_jobs" in at.session_state else {}
    if "optimal (gap ≤" in note:  # a fast machine: certified to 0.5 % within the first attempt, no job needed
        assert not jobs
        return
    assert "Improving in the background" in note or any("computing the optimum" in p for p in problems)
    assert len(jobs) == 1
    (job,) = jobs.values()
    deadline = time.monotonic() + 240
    while not job.done():
        assert time.monotonic() < deadline, "the background solve did not finish"
        time.sleep(1.0)
    print(f"[live lp] background solve done after {time.perf_counter() - t0:.1f} s")
    first_gap = float(note.split("(gap ")[1].split(" %")[0]) if "(gap " in note else float("inf")
    run_ok(at)  # what the fragment's rerun does
    note = _lp_note(at)
    print(f"[live lp] then: {note}")
    assert "Improving" not in note
    if "optimal (gap ≤" in note:  # certified within the background solve's limit
        gap = float(note.split("gap ≤ ")[1].split(" %")[0])
        assert gap <= 100 * rs.GAP_TARGET + 0.05  # the floored target; the honest gap can be slightly larger
    else:  # a loaded machine: the limit came first; the page says so, and the mechanism is better than the first
        assert f"not proven optimal within {120:.0f} s" in note, note
        assert float(note.split("(gap ")[1].split(" %")[0]) < first_gap
