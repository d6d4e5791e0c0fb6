"""Nothing heavy in the web server process (issue 29): the Compare page's numbers at the users' records (loss,
the Bayes attacker's error, the exact audit of the user pairs) come from a job on a Dask worker.

The numbers must equal what the page computed in the server before (``app.model.panda_numbers.mechanism_at_users`` and
``panda.audit.audit_mechanism`` at the users' rows), and the page must still show them when those functions
are poisoned in this (the server's) process, as tests/app/test_audit_job.py does for the Lesson.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("streamlit")

from apptest_support import SMALL, clear_caches, make_app, release_resources, run_ok  # noqa: E402, F401

import app.model.panda_numbers  # noqa: E402
import panda.audit  # noqa: E402
from panda.jobs import users_numbers_job  # noqa: E402

pytestmark = pytest.mark.slow

NUMBERS = ("loss_m", "adversary_error_m", "violation_rate", "epsilon_min_per_km")


def _poisoned(*_args, **_kwargs):
    msg = "the Compare page's numbers were computed in the web server process"
    raise AssertionError(msg)


def _in_process(inst, users: np.ndarray, rows: np.ndarray, eps: float) -> dict:
    """What the Compare page computed in the server before the job (its own arithmetic, unchanged)."""
    nan = float("nan")
    out = {"loss_m": nan, "adversary_error_m": nan, "violation_rate": nan, "epsilon_min_per_km": nan}
    guess_m = 1000 * inst.distances_km(users, None)
    m = app.model.panda_numbers.mechanism_at_users(rows, inst.cost_m[users], guess_m)
    out.update(loss_m=m["loss_m"], adversary_error_m=m["adversary_error_m"])
    if users.size >= 2:
        audit = panda.audit.audit_mechanism(rows, inst.distances_km(users, users), eps)
        out.update(violation_rate=audit.violation_rate, epsilon_min_per_km=audit.epsilon_min_per_km)
    return out


def _same(a: dict, b: dict) -> bool:
    return all((math.isnan(a[k]) and math.isnan(b[k])) if math.isnan(b[k]) else a[k] == b[k] for k in NUMBERS) and set(
        a
    ) == set(NUMBERS)


def _panda_rows(res) -> tuple[np.ndarray, np.ndarray]:
    rows_idx = app.model.panda_numbers.surrogate_rows(res)
    ok = rows_idx >= 0
    return res.user_records[ok], res.z[rows_idx[ok]]


def test_the_users_numbers_job_equals_the_pages_own_arithmetic(monkeypatch):
    from app import state
    from app.model.params import Params, to_config

    monkeypatch.setenv("PANDA_RESULT_STORE", "off")
    params = Params(n_records=int(SMALL["K"]), n_users=int(SMALL["N"]), n_outputs=int(SMALL["M"]), seed=5)
    view, eps = params.instance_key, params.epsilon_per_km
    inst = state.instance(*view)
    items = state.config_items(to_config(params))
    res = state.panda_result(view, items, params.seed)
    em = state.baseline(view, "em", eps, ())
    users = inst.users

    # Through the page's cached wrapper: the rows it picks (PAnDA's users with a surrogate; every user's row).
    got_em = state.users_numbers(view, "em", eps, ())
    assert _same(got_em, _in_process(inst, users, em.matrix[users], eps)), got_em
    assert got_em["violation_rate"] == 0.0 and got_em["epsilon_min_per_km"] <= eps + 1e-9  # EM is eps-mDP
    p_users, p_rows = _panda_rows(res)
    got_panda = state.users_numbers(view, "panda", eps, (), items=items, seed=params.seed)
    assert _same(got_panda, _in_process(inst, p_users, p_rows, eps)), got_panda
    assert got_panda["loss_m"] > 0.0 and got_panda["adversary_error_m"] > 0.0

    # The job itself on a worker, with one user only: loss and attacker measured, no pair to audit.
    one = state.panda_worker().run(users_numbers_job, inst, users[:1], em.matrix[users[:1]], eps, timeout_s=60.0)
    assert _same(one, _in_process(inst, users[:1], em.matrix[users[:1]], eps)), one
    assert math.isnan(one["epsilon_min_per_km"]) and math.isfinite(one["loss_m"])


def test_the_compare_page_shows_numbers_measured_on_a_worker(monkeypatch):
    from app import state
    from app.figures.tables import HEADERS
    from app.model.params import to_config

    monkeypatch.setenv("PANDA_RESULT_STORE", "off")  # nothing kept from earlier tests: the jobs must run
    at = make_app("app_pages/compare.py", baselines="em,laplace")
    state.panda_worker()  # the workers are processes of their own: the poison below stays in this one
    with monkeypatch.context() as poison:
        poison.setattr(panda.audit, "audit_mechanism", _poisoned)
        poison.setattr(panda.audit, "adversary_error_m", _poisoned)
        poison.setattr(app.model.panda_numbers, "mechanism_at_users", _poisoned)
        run_ok(at)
    table = at.table[0].value.rename(columns={v: k for k, v in HEADERS.items()}).set_index("method")
    assert list(table.index) == ["PAnDA-e", "EM", "Planar Laplace"]
    params = at.session_state["params"]
    # The direct computation below, in this process, with the real functions.

    view, eps = params.instance_key, params.epsilon_per_km
    inst = state.instance(*view)
    res = state.panda_result(view, state.config_items(to_config(params)), params.seed)
    p_users, p_rows = _panda_rows(res)
    expected = {"PAnDA-e": _in_process(inst, p_users, p_rows, eps)}
    expected["PAnDA-e"]["violation_rate"] = res.user_pair_violation_rate  # PAnDA's own check (Phase I's cost)
    for name, key, options in (("EM", "em", ()), ("Planar Laplace", "laplace", (("rng", params.seed),))):
        matrix = state.baseline(view, key, eps, options).matrix
        expected[name] = _in_process(inst, inst.users, matrix[inst.users], eps)
    for method, numbers in expected.items():
        shown = {k: float(table.loc[method, k]) for k in NUMBERS}
        assert _same(shown, numbers), (method, shown, numbers)
        assert all(math.isfinite(shown[k]) for k in ("loss_m", "adversary_error_m")), (method, shown)
    assert not table["detail"].str.contains("not measured").any(), list(table["detail"])
