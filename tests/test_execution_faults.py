"""Faults of the local cluster, made for real: a worker process SIGKILLed in the middle of a job, the
scheduler stopped under the executor.

One process-wide executor (``get_executor``, as the dashboard gets it) of two one-thread workers for the
whole file; no worker process may be left behind at teardown (those of a replaced cluster included).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import distributed  # noqa: F401 (a runtime dependency: missing, this file fails rather than skips)
import psutil
import pytest
from conftest import ROOT
from executor_support import in_thread, local_cluster, worker_processes

from panda.execution import (
    JobClusterLost,
    JobError,
    close_executor,
    get_executor,
)

ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    ARTIFACTS.mkdir(exist_ok=True)
    close_executor()
    with local_cluster(
        tmp_path_factory, make=get_executor, memory_limit=2**30, worker_log=ARTIFACTS / "dask-workers-faults.log"
    ) as ex:
        yield ex
    close_executor(ex)


# --- jobs (run on the workers) -----------------------------------------------------------------


def noted(path: str, seconds: float) -> int:
    """Append this worker's pid to ``path`` (one line per execution), sleep, return the pid."""
    with open(path, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return os.getpid()


# --- helpers -----------------------------------------------------------------------------------


def _executions(path: Path) -> list[int]:
    try:
        return [int(line) for line in path.read_text().split()]
    except FileNotFoundError:
        return []


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# --- tests -------------------------------------------------------------------------------------


def test_a_worker_killed_mid_job_is_retried_once_and_the_job_succeeds(executor, tmp_path):
    path = tmp_path / "executions.txt"
    t0 = time.perf_counter()
    thread, out = in_thread(executor.run, noted, str(path), 3.0, timeout_s=60)
    _wait_for(lambda: len(_executions(path)) == 1, 60, "the job to start")
    victim = _executions(path)[0]
    assert victim != os.getpid()
    os.kill(victim, signal.SIGKILL)
    thread.join(90)
    elapsed = time.perf_counter() - t0
    assert not thread.is_alive()
    assert "error" not in out, out.get("error")
    runs = _executions(path)
    assert len(runs) == 2 and runs[0] == victim and out["value"] == runs[1] != victim
    assert _gone(victim)
    print(f"\n[faults] worker SIGKILLed mid-job: the retry returned after {elapsed:.1f} s in all")


def test_a_job_whose_worker_is_killed_twice_fails_in_plain_words(executor, tmp_path):
    """The scheduler tries a job once more after its worker dies (allowed_failures = 1), not more."""
    path = tmp_path / "executions.txt"
    thread, out = in_thread(executor.run, noted, str(path), 30.0, timeout_s=120)
    for n in (1, 2):
        _wait_for(lambda n=n: len(_executions(path)) == n, 60, f"execution {n}")
        os.kill(_executions(path)[-1], signal.SIGKILL)
    thread.join(60)
    assert not thread.is_alive()
    error = out.get("error")
    assert isinstance(error, JobError), out
    assert "crashed its process" in str(error)
    assert "Traceback" not in str(error) and error.__cause__ is None
    assert len(_executions(path)) == 2  # no third attempt
    # The nannies started fresh workers: the next job runs.
    assert executor.run(noted, str(tmp_path / "after.txt"), 0.0, timeout_s=120) > 0


def test_a_stopped_scheduler_is_replaced_on_the_next_job(executor, tmp_path):
    """The scheduler (in this process) stops under a running job: that job fails in plain words, the
    executor stays the process-wide one (the dashboard's cache keeps it), and its next job starts a new
    local cluster and runs there; the old cluster's workers are stopped."""
    old_address = executor.address
    old_workers = [p.pid for p in worker_processes()]
    assert old_workers
    path = tmp_path / "executions.txt"
    thread, out = in_thread(executor.run, noted, str(path), 30.0, timeout_s=60)
    _wait_for(lambda: len(_executions(path)) == 1, 60, "the job to start")

    t0 = time.perf_counter()
    executor._cluster.sync(executor._cluster.scheduler.close)  # the scheduler is gone
    thread.join(30)
    assert not thread.is_alive()
    error = out.get("error")
    assert isinstance(error, JobClusterLost), out  # the page says "try again", not "too heavy"
    assert "cluster stopped during the computation" in str(error) and "Traceback" not in str(error)
    lost_s = time.perf_counter() - t0

    assert not executor.closed  # the dashboard's cached executor stays valid ...
    assert get_executor() is executor  # ... and so does the process-wide one
    t0 = time.perf_counter()
    pid = executor.run(noted, str(tmp_path / "after.txt"), 0.0, timeout_s=120)  # ... and works again
    recovered_s = time.perf_counter() - t0
    assert executor.recoveries == 1
    assert executor.address != old_address and executor.address.startswith("tls://127.0.0.1:")
    assert pid not in old_workers
    _wait_for(lambda: all(_gone(p) for p in old_workers), 20, "the old cluster's workers to stop")
    executor.wait_for_workers(2, timeout_s=120)
    print(
        f"\n[faults] scheduler stopped: the running job failed after {lost_s:.1f} s; "
        f"the next job started a new cluster and returned in {recovered_s:.1f} s"
    )
