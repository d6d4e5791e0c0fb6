"""Faults of the local cluster, made for real: a worker process SIGKILLed in the middle of a job, the
scheduler stopped under the executor.

One process-wide executor (``get_executor``, as the dashboard gets it) of two one-thread workers for the
whole file; no worker process may be left behind at teardown (those of a replaced cluster included).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import distributed  # (a runtime dependency: missing, this file fails rather than skips)
import psutil
import pytest
from conftest import ROOT
from executor_support import in_thread, local_cluster, worker_processes

from panda.execution import (
    SCHEDULER_ENV,
    Executor,
    JobClusterLost,
    JobError,
    close_executor,
    get_executor,
)
from panda.execution import cluster as execution_cluster

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
    local = executor._connection.cluster.dask_cluster
    local.sync(local.scheduler.close)  # the scheduler is gone
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


class _WatchedLock:
    """A lock that tells when the thread named ``name`` asks for it."""

    def __init__(self, lock: threading.Lock, name: str, asked: threading.Event) -> None:
        self._lock, self._name, self._asked = lock, name, asked

    def acquire(self, *args, **kwargs) -> bool:
        if threading.current_thread().name == self._name:
            self._asked.set()
        return self._lock.acquire(*args, **kwargs)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()


def test_a_thread_asking_for_the_client_mid_recovery_waits_for_the_new_cluster(executor, monkeypatch, tmp_path):
    """While one thread replaces a stopped cluster, the new scheduler runs but the executor's address still
    names the old one. Another thread asking for the client then must wait for the recovery, not dial the
    old address (a Client would try it for START_TIMEOUT_S, holding the connection lock that the
    recovery needs next)."""
    executor.wait_for_workers(2, timeout_s=120)
    old_address, recoveries = executor.address, executor.recoveries
    asker_name = "panda-test-asker"
    decided = threading.Event()  # the asker reached the recovery lock, or dialed
    dialed: list[tuple[str, str]] = []
    asked: dict = {}
    connection = executor._connection
    real_connect, real_start = connection._connect, connection.cluster.start

    def connect() -> None:
        name = threading.current_thread().name
        dialed.append((name, executor.address))
        if name == asker_name:
            decided.set()
            if executor.address == old_address:  # (for real: up to START_TIMEOUT_S holding the lock)
                raise JobError("dialed the stopped scheduler's address")
        real_connect()

    def start_local():
        address = real_start()  # the new scheduler runs; executor.address is still the old one
        assert executor.address == old_address and connection._client is None
        asker = threading.Thread(target=lambda: asked.update(client=executor.client), name=asker_name, daemon=True)
        asked["thread"] = asker
        asker.start()
        _wait_for(decided.is_set, 60, "the asking thread to dial or to wait for the recovery")
        return address

    monkeypatch.setattr(connection, "_connect", connect)
    monkeypatch.setattr(connection.cluster, "start", start_local)
    monkeypatch.setattr(connection, "_recover_lock", _WatchedLock(connection._recover_lock, asker_name, decided))
    local = connection.cluster.dask_cluster
    local.sync(local.scheduler.close)  # the scheduler is gone
    client = executor.client  # this thread replaces the cluster
    asked["thread"].join(60)
    assert not asked["thread"].is_alive()
    assert asked.get("client") is client is connection._client, asked
    assert executor.recoveries == recoveries + 1
    assert executor.address != old_address
    assert [address for _, address in dialed] == [executor.address], dialed  # once, by the recovery
    monkeypatch.undo()
    assert executor.run(noted, str(tmp_path / "after.txt"), 0.0, timeout_s=120) > 0


def test_a_local_start_that_fails_leaves_no_scheduler_workers_or_certificates(monkeypatch):
    """The second worker group cannot be started (Popen raises): the executor is not made, and the scheduler
    it started in this process, the first worker group and the certificate folder are all gone."""
    from distributed.core import Status

    folders: list[Path] = []
    clusters: list = []
    groups: list[subprocess.Popen] = []
    real_write, real_popen = execution_cluster._write_tls_files, subprocess.Popen
    real_cluster = distributed.LocalCluster

    def write_tls_files(security) -> Path:
        folders.append(real_write(security))
        return folders[-1]

    def cluster(*args, **kwargs):
        clusters.append(real_cluster(*args, **kwargs))
        return clusters[-1]

    def popen(cmd, *args, **kwargs):
        if "distributed.cli.dask_worker" not in cmd:
            return real_popen(cmd, *args, **kwargs)
        if groups:
            raise OSError("no more processes")
        groups.append(real_popen(cmd, *args, **kwargs))
        return groups[-1]

    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    monkeypatch.setattr(execution_cluster, "_write_tls_files", write_tls_files)
    monkeypatch.setattr(distributed, "LocalCluster", cluster)
    monkeypatch.setattr(execution_cluster.subprocess, "Popen", popen)
    with pytest.raises(OSError, match="no more processes"):
        Executor(n_workers=2, memory_limit=2**30)
    monkeypatch.undo()
    assert len(folders) == len(clusters) == len(groups) == 1
    assert not folders[0].exists()
    assert clusters[0].status == Status.closed and clusters[0].scheduler.status == Status.closed
    assert groups[0].poll() is not None  # stopped and reaped
