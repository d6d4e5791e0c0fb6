"""The result store (app/server/result_store.py) on SQLite and a real PostgreSQL: what is kept, under which key, how it
comes back, what is refused, and the least-recently-used bound."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from datetime import timedelta

import numpy as np
import pytest
from conftest import ROOT
from pg_fixture import pg_url  # noqa: F401 (fixture)
from sqlalchemy import select, update

import panda
from app.server import result_store as rs
from app.server.db import store
from app.server.db.models import StoredResult
from panda.mechanisms import BASELINES

KEY = ("city:kotka", 40, 10, 20, 0, "road", 1, "uniform")


@pytest.fixture(scope="module")
def inst():
    return panda.make_instance(panda.load_city("kotka"), n_records=40, n_outputs=20, n_users=10, loss="road", seed=0)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path, monkeypatch):
    u = f"sqlite:///{tmp_path / 'store.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    monkeypatch.setenv(store.ENV_URL, u)
    if request.param == "postgresql":  # a shared server: start from an empty table
        with store.session(u) as s:
            s.execute(StoredResult.__table__.delete())
    yield u
    store.dispose(u)


@pytest.mark.parametrize("name", ["laplace", "em", "em-br", "lp-ca", "lp"])
def test_a_mechanism_comes_back_as_it_was_kept(inst, url, name):
    options = (("time_limit_s", 60.0),) if name.startswith("lp") else ()
    mech = BASELINES[name](inst, 3.0, **dict(options))
    assert mech.matrix is not None and mech.status.startswith("solved")
    assert rs.get_mechanism(KEY, name, 3.0, options) is None
    assert not rs.has_mechanism(KEY, name, 3.0, options)
    assert rs.put_mechanism(KEY, name, 3.0, options, mech)
    assert rs.has_mechanism(KEY, name, 3.0, options) and not rs.has_mechanism(KEY, name, 3.5, options)
    back = rs.get_mechanism(KEY, name, 3.0, options)
    np.testing.assert_array_equal(back.matrix, mech.matrix)
    assert back.matrix.dtype == mech.matrix.dtype
    assert (back.name, back.status, back.epsilon_per_km) == (mech.name, mech.status, mech.epsilon_per_km)
    assert back.loss_m == mech.loss_m and back.build_time_s == mech.build_time_s
    assert back.details["kept"] is True and back.details["prepared"] is False
    kept = {k: v for k, v in back.details.items() if k not in ("kept", "prepared")}
    assert json.dumps(kept, sort_keys=True) == json.dumps(rs._plain(mech.details), sort_keys=True)
    # Another eps, another options tuple, another instance: not this entry.
    assert rs.get_mechanism(KEY, name, 3.5, options) is None
    assert rs.get_mechanism((*KEY[:4], 1, *KEY[5:]), name, 3.0, options) is None


def test_the_optimal_lp_is_kept_only_when_certified_and_then_serves_any_time_limit(inst, url):
    unsolved = BASELINES["lp"](inst, 3.0, time_limit_s=1e-3)
    assert unsolved.matrix is None or not unsolved.status.startswith("solved")
    assert not rs.put_mechanism(KEY, "lp", 3.0, (("time_limit_s", 1e-3),), unsolved)
    solved = BASELINES["lp"](inst, 3.0, time_limit_s=120.0)
    assert solved.details["gap"] <= rs.GAP_TARGET
    assert rs.put_mechanism(KEY, "lp", 3.0, (("time_limit_s", 120.0),), solved, prepared=True)
    back = rs.get_mechanism(KEY, "lp", 3.0, (("time_limit_s", 20.0),))  # the page's own limit
    assert back is not None and back.details["prepared"] is True
    np.testing.assert_array_equal(back.matrix, solved.matrix)


def test_values_of_another_code_version_are_not_reused(inst, url, monkeypatch):
    mech = BASELINES["em"](inst, 3.0)
    rs.put_mechanism(KEY, "em", 3.0, (), mech)
    monkeypatch.setattr(rs, "CODE_VERSION", "0" * 16)
    assert rs.get_mechanism(KEY, "em", 3.0, ()) is None


def test_the_code_version_follows_the_library_source(tmp_path):
    import shutil

    assert len(rs.CODE_VERSION) == 16 and all(c in "0123456789abcdef" for c in rs.CODE_VERSION)
    copy = tmp_path / "panda"
    shutil.copytree(rs.PANDA_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = rs._code_version(copy)
    assert rs._code_version(copy) == before  # the same source, the same version
    (copy / "mechanisms" / "em.py").write_text((copy / "mechanisms" / "em.py").read_text() + "\n# changed\n")
    assert rs._code_version(copy) != before


def test_it_survives_a_restart_and_is_shared_by_another_process(inst, url):
    mech = BASELINES["em"](inst, 2.0)
    rs.put_mechanism(KEY, "em", 2.0, (), mech)
    store.dispose(url)  # the server stops
    code = (
        f"import sys, numpy as np; sys.path.insert(0, {str(ROOT)!r})\n"
        "from app.server import result_store as rs\n"
        f"m = rs.get_mechanism({KEY!r}, 'em', 2.0, ())\n"
        "print(m.loss_m, float(np.abs(m.matrix).sum()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PANDA_DB_URL": url})
    assert out.returncode == 0, out.stderr
    loss, total = map(float, out.stdout.split())
    assert loss == mech.loss_m and total == pytest.approx(float(np.abs(mech.matrix).sum()))


def test_curves_are_kept_only_when_every_point_solved(url):
    rows = [{"method": "em", "epsilon_per_km": 1.0, "outcome": "solved", "loss_m": 12.5, "lower_bound_m": math.nan}]
    assert rs.curve_complete(rows)
    assert not rs.curve_complete([*rows, {"outcome": "time limit"}])
    assert not rs.curve_complete([])
    inputs = rs.curve_key_inputs(KEY, "lp", (1.0, 2.0), (), 0)
    assert inputs != rs.curve_key_inputs(KEY, "em", (1.0, 2.0), (), 0)
    assert inputs != rs.curve_key_inputs(KEY, "lp", (1.0, 2.0, 5.0), (), 0)
    # The view's own eps is no input of a curve; PAnDA's other settings are, for PAnDA's curves only.
    a = (("delta", 1e-7), ("epsilon_per_km", 5.0))
    b = (("delta", 1e-7), ("epsilon_per_km", 2.0))
    c = (("delta", 1e-5), ("epsilon_per_km", 5.0))
    assert rs.curve_key_inputs(KEY, "panda-e", (1.0,), a, 0) == rs.curve_key_inputs(KEY, "panda-e", (1.0,), b, 0)
    assert rs.curve_key_inputs(KEY, "panda-e", (1.0,), a, 0) != rs.curve_key_inputs(KEY, "panda-e", (1.0,), c, 0)
    assert rs.curve_key_inputs(KEY, "em", (1.0,), a, 0) == rs.curve_key_inputs(KEY, "em", (1.0,), c, 0)
    rs.put_value("curve", inputs, rows)
    doc, _, prepared = rs.get_value("curve", inputs)
    assert doc[0]["loss_m"] == 12.5 and math.isnan(doc[0]["lower_bound_m"]) and prepared is False


def test_the_least_recently_used_go_first(url):
    for i in range(4):
        rs.put_value("numbers", ["entry", i], {"i": i}, {"pad": np.random.default_rng(i).random(2000)})
    hours_after = {0: 10, 1: 1, 2: 2, 3: 3}  # when each entry was last used: entry 0 last of all
    with store.session(url) as s:
        rows = s.scalars(select(StoredResult)).all()
        base = min(r.used_at for r in rows)
        for r in rows:
            used = base + timedelta(hours=hours_after[r.inputs[1]])
            s.execute(update(StoredResult).where(StoredResult.key == r.key).values(used_at=used))
        one = max(r.size_bytes for r in rows)
    assert rs.stats()["entries"] == 4
    assert rs.evict(2 * one + one // 2) == 2  # room for two: the two least recently used go (entries 1 and 2)
    assert [i for i in range(4) if rs.get_value("numbers", ["entry", i]) is not None] == [0, 3]
    assert rs.stats()["entries"] == 2 and rs.stats()["bytes"] <= 2 * one + one // 2


def test_a_payload_with_a_pickle_is_refused(url):
    rs.put_value("numbers", ["x"], {"ok": 1})
    buf = io.BytesIO()
    np.savez(buf, __json__=np.frombuffer(b'{"ok": 2}', dtype=np.uint8), evil=np.array([object()], dtype=object))
    with store.session(url) as s:
        s.execute(update(StoredResult).values(payload=buf.getvalue()))
    assert rs.get_value("numbers", ["x"]) is None  # np.load(allow_pickle=False) refuses it: nothing runs


def test_an_unreachable_store_breaks_nothing(monkeypatch):
    monkeypatch.setenv(store.ENV_URL, "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert rs.get_value("numbers", ["y"]) is None
    assert rs.has_value("numbers", ["y"]) is False
    assert rs.put_value("numbers", ["y"], {"a": 1}) is False


def test_the_store_can_be_switched_off(url, monkeypatch):
    rs.put_value("numbers", ["z"], {"a": 1})
    assert rs.has_value("numbers", ["z"])
    monkeypatch.setenv(rs.ENV_SWITCH, "off")
    assert rs.get_value("numbers", ["z"]) is None
    assert not rs.has_value("numbers", ["z"])
    assert rs.put_value("numbers", ["w"], {"a": 1}) is False
