"""Every mechanism of the Lesson's menu gives a result on the Lesson's default view (AppTest).

The default view (no link: Neubrandenburg, K = 500 places, 100 outputs, eps = 5/km), each menu entry in turn:
the page shows A's expected error (a number) and no problem message. A run may take at most ``LIMIT_S``: a
generous bound that catches a regression (LP + EM took 40 s here before row generation), not a timing figure
(those are in bench/bench_lesson_mechanisms.py and docs/benchmarks.md).
"""

from __future__ import annotations

import re
import time

import pytest
from apptest_support import APP, clear_caches, metric, release_resources, run_ok  # noqa: F401
from streamlit.testing.v1 import AppTest

from app.model import lesson_numbers

pytestmark = pytest.mark.slow

#: Seconds one menu entry may take in CI (shared runners, several jobs at once).
LIMIT_S = 60.0


def _default_lesson() -> AppTest:
    return AppTest.from_file(APP, default_timeout=180)  # no link: the default view


@pytest.fixture(scope="module")
def timings():
    seen: dict[str, float] = {}
    yield seen
    print("\n[lesson mechanisms, default view] " + ", ".join(f"{k} {v:.1f} s" for k, v in seen.items()))


# The optimal LP last: it leaves a background solve running (stopped with the executor at the end of the file).
@pytest.mark.parametrize("key", [k for k in lesson_numbers.MECHANISMS if k != "lp"] + ["lp"])
def test_every_menu_mechanism_gives_a_result_on_the_default_view(key, timings, db):
    at = _default_lesson()
    run_ok(at)
    at.selectbox(key="lesson_mech").set_value(key)
    t0 = time.perf_counter()
    run_ok(at)
    timings[key] = elapsed = time.perf_counter() - t0
    assert at.select_slider(key="lesson_epsilon_per_km").value == 5.0
    problems = [w.value for w in at.warning]
    if key == "lp" and any("computing the optimum in the background" in p for p in problems):
        return  # no certified mechanism in its first seconds on a loaded machine: the page says so and goes on
    assert not problems, (key, problems)
    assert not any("Prepared before the lecture" in c.value for c in at.caption)  # built in this test
    assert re.search(r"\d", metric(at, "Error at A")), (key, metric(at, "Error at A"))
    if key in ("lp-em", "lp-ca"):
        note = next((c.value for c in at.caption if c.value.startswith(lesson_numbers.MECHANISMS[key][0] + ":")), "")
        assert "the optimum of its linear program" in note, [c.value for c in at.caption]
    assert elapsed <= LIMIT_S, f"{key}: {elapsed:.1f} s"
