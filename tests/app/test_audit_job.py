"""Nothing heavy in the web server process (issue 29, item 3): the exact audit of a mechanism's every pair
runs as a job on a Dask worker, with the job's time and memory limits.

The test poisons the audit functions in this (the server's) process: the dashboard's numbers must still
come out, from a worker process where the functions are intact, and equal a direct computation.
"""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from apptest_support import SMALL  # noqa: E402

import panda  # noqa: E402
import panda.audit  # noqa: E402


def _poisoned(*_args, **_kwargs):
    msg = "the exact audit ran in the web server process"
    raise AssertionError(msg)


def test_the_exact_audit_of_a_mechanism_runs_on_a_worker(monkeypatch):
    from app import state
    from app.model.params import Params

    monkeypatch.setenv("PANDA_RESULT_STORE", "off")  # nothing kept from earlier tests: the job must run
    view = Params(n_records=int(SMALL["K"]), n_users=int(SMALL["N"]), n_outputs=int(SMALL["M"]), seed=11).instance_key
    mech = state.baseline(view, "em", 4.0, ())
    inst = state.instance(*view)
    expected = panda.audit.mechanism_numbers(inst, mech, 4.0)
    state.mechanism_numbers.clear()
    monkeypatch.setattr(panda.audit, "audit_mechanism", _poisoned)
    monkeypatch.setattr(panda.audit, "adversary_error_m", _poisoned)
    numbers = state.mechanism_numbers(view, "em", 4.0, ())
    assert numbers == expected
    assert numbers["audited"] and 0.0 <= numbers["violation_rate"] <= 1.0 and numbers["adversary_error_m"] > 0.0


def test_a_failed_job_is_called_too_heavy_only_when_its_limits_stopped_it():
    """A killed worker, a stopped cluster or a full queue is not the setting's fault: the page says to try
    again; the time limit or the memory limit says the setting is too heavy."""
    from app.widgets.current_view import HEAVY_HINT, RETRY_HINT, job_failure
    from panda.execution import CRASH_MESSAGE, MEMORY_MESSAGE, JobBusy, JobClusterLost, JobError, JobTimeout

    heavy = "This setting is too heavy for the dashboard."
    assert job_failure(JobTimeout("the computation did not finish within 60 s and was stopped")) == (heavy, HEAVY_HINT)
    assert job_failure(JobError(MEMORY_MESSAGE)) == (heavy, HEAVY_HINT)
    for retry in (JobBusy("waited 300 s without a free worker"), JobClusterLost("the cluster stopped")):
        assert job_failure(retry) == ("The computation did not complete.", RETRY_HINT)
    headline, hint = job_failure(JobError(CRASH_MESSAGE))
    assert headline == "The computation's process died." and RETRY_HINT in hint and HEAVY_HINT in hint


def test_the_lessons_mechanism_and_its_numbers_come_from_one_job(monkeypatch):
    """``baseline(..., _numbers=True)`` measures the mechanism in the job that builds it: the numbers need no
    second job (a second trip through a busy class's queue), and equal those of a job of their own."""
    from app import state
    from app.model.params import Params

    monkeypatch.setenv("PANDA_RESULT_STORE", "off")
    view = Params(n_records=int(SMALL["K"]), n_users=int(SMALL["N"]), n_outputs=int(SMALL["M"]), seed=12).instance_key
    mech = state.baseline(view, "laplace", 3.0, (), _numbers=True)
    jobs: list[str] = []
    real_run = state._run_job
    monkeypatch.setattr(state, "_run_job", lambda job, *a, **k: jobs.append(job) or real_run(job, *a, **k))
    numbers = state.mechanism_numbers(view, "laplace", 3.0, ())
    assert jobs == []
    assert numbers == panda.audit.mechanism_numbers(state.instance(*view), mech, 3.0)
    assert numbers["audited"]
