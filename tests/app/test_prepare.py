"""``python -m panda prepare``: a link's views computed ahead of a lecture, kept as prepared, stopped and resumed.

Real runs of the command (a subprocess, Ctrl-C sent as SIGINT) on a small view of the embedded Kotka network,
against a SQLite result store of the test's own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT

from app.model import instances
from app.model.params import Params
from app.model.lesson_scenes import SCENES
from app.server import lecture_readiness, prepare
from app.server import result_store as rs
from app.server.db import store

LINK = "http://127.0.0.1:8501/?city=kotka&K=30&N=8&M=15&eps=3&seed=2"

pytestmark = pytest.mark.slow


def _command(db: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, store.ENV_URL: db, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "panda", "prepare", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_link_is_read_the_way_the_dashboard_reads_it():
    p = prepare.parse_link(LINK)
    shown = (p.source, p.n_records, p.n_users, p.n_outputs, p.epsilon_per_km, p.seed)
    assert shown == ("city:kotka", 30, 8, 15, 3.0, 2)
    assert p.resolved_loss == "road"  # the Lesson's default loss
    assert prepare.parse_link("http://h/explore?city=kotka").resolved_loss == "task"
    for bad in ("http://h/nowhere?K=30", "http://h/?K=abc", "http://h/?eps=-1"):
        with pytest.raises(ValueError):
            prepare.parse_link(bad)
    assert prepare.read_links(["# a lecture", "", LINK + "  # first", "  "]) == [LINK]
    tasks = prepare.tasks_for(p)
    assert [t.name for t in tasks if t.kind == "mechanism"] == list(prepare.LESSON_MECHANISMS)
    assert [t.name for t in tasks if t.kind == "curve"][-1] == "lp"


def test_prepare_stops_and_resumes_then_the_dashboard_finds_everything(db):
    # Start, and stop it (Ctrl-C) once its first task is done.
    proc = _command(db, "--link", LINK)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[1/") and "..." not in line:
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, "".join(lines) + rest
    assert "run the same command again to go on" in rest
    # The guided lesson's readiness line: planar Laplace (the first task) is kept, so the promise scene is ready,
    # and PAnDA's scene, which keeps nothing; the scenes of the exponential mechanism and the curve are not yet.
    by = {r.key: r for r in lecture_readiness.readiness(prepare.parse_link(LINK), "em")}
    assert by["promise"].ready and by["panda"].ready
    assert not any(by[k].ready for k in ("cost", "attacker", "round", "background", "repeated", "curve"))
    line = lecture_readiness.ready_line(list(by.values()))
    assert line.startswith(f"2 of {len(SCENES)} scenes ready · to prepare: 2. What a report costs"), line
    # Run again: the first task is not redone, and everything is kept.
    t0 = time.perf_counter()
    proc = _command(db, "--link", LINK, "--link", LINK)  # the same link twice: its work is done once
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    n = len(prepare.tasks_for(prepare.parse_link(LINK)))
    assert f": {n} tasks" in out
    assert out.count("already prepared") >= 1 and f"[1/{n}] laplace at ε = 3/km" in out
    print(f"\n[prepare] resumed run {time.perf_counter() - t0:.1f} s")
    # What the dashboard asks for is there, marked prepared: the optimal LP certified to 0.5 %.
    p = prepare.parse_link(LINK)
    lp = rs.get_mechanism(p.instance_key, "lp", 3.0, (("time_limit_s", 20.0),))
    assert lp is not None and lp.details["prepared"] and lp.details["gap"] <= rs.GAP_TARGET
    inst = instances.build_instance(instances.network_of(p.source), *p.instance_key[1:])
    for name in prepare.LESSON_MECHANISMS:
        mech = rs.get_mechanism(p.instance_key, name, 3.0, prepare._options(name))
        assert mech is not None and mech.details["prepared"], name
        inputs = rs.mechanism_key_inputs(p.instance_key, name, 3.0, prepare._options(name))
        numbers = rs.get_value("numbers", inputs)[0]
        # the exact audit
        assert numbers["audited"] and numbers == instances.mechanism_numbers_of(inst, mech, 3.0), name
    assert rs.get_value("numbers", rs.mechanism_key_inputs(p.instance_key, "lp", 3.0, ()))[0]["passed"]
    curve, _, prepared = rs.get_value("curve", prepare._curve_inputs(p, "lp")[0])
    assert prepared and [r["epsilon_per_km"] for r in curve] == [0.5, 1.0, 2.0, 3.5, 5.0, 10.0, 20.0, 50.0]
    assert all(r["outcome"] == "solved" for r in curve)
    assert lecture_readiness.ready_line(lecture_readiness.readiness(p, "em")) == f"{len(SCENES)} of {len(SCENES)} scenes ready"
    # A third run has nothing to do.
    proc = _command(db, "--link", LINK)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out.count("already prepared") == n, out


def test_a_bad_link_is_a_message_and_exit_code_2(db):
    proc = _command(db, "--link", "http://h/?K=abc")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out.startswith("Bad link:") and "Traceback" not in out


def test_the_store_key_of_a_prepared_curve_is_the_lessons(db):
    """The Lesson asks app/state.tradeoff_method with config_items(to_config(params)): the same inputs."""
    from app.model.params import to_config
    from app.state import config_items
    from panda.tradeoff import DEFAULT_EPSILONS

    p = Params(source="city:kotka", n_records=30, n_users=8, n_outputs=15, epsilon_per_km=3.0, seed=2)
    page = rs.curve_key_inputs(p.instance_key, "lp", tuple(DEFAULT_EPSILONS), config_items(to_config(p)), p.seed)
    assert prepare._curve_inputs(p, "lp")[0] == page
