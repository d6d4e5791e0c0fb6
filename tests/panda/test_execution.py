"""panda.execution on a real local Dask cluster (a scheduler here, two worker processes).

One cluster for the whole file (starting one costs seconds); it is closed at teardown and no worker
process may be left behind. The jobs below are this module's functions: the workers get the test
folders on their path (Dask pickles functions by reference).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import distributed  # noqa: F401 (a runtime dependency: missing, this file fails rather than skips)
import numpy as np
import psutil
import pytest
from conftest import ROOT, TEST_IMPORT_PATH

import panda
from panda.execution import (
    HIGH,
    LOW,
    RUNNING_DIR_ENV,
    Executor,
    JobError,
    JobTimeout,
    job_key,
    running_jobs,
)
from panda.jobs import delta_sweep_job, run_panda_job

ARTIFACTS = ROOT / "test-artifacts"


def _worker_processes() -> list[psutil.Process]:
    me = psutil.Process()
    return [p for p in me.children(recursive=True) if "dask_worker" in " ".join(p.cmdline())]


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    """A local cluster of two one-thread workers, 1.5 GiB each; every worker process gone at teardown.

    Its jobs mark themselves running in a folder of their own (not the machine's, which another
    cluster on this machine may share).
    """
    ARTIFACTS.mkdir(exist_ok=True)
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (TEST_IMPORT_PATH, os.environ.get("PYTHONPATH")) if p),
        RUNNING_DIR_ENV: str(tmp_path_factory.mktemp("running-jobs")),
    }
    before = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:  # the worker processes copy the environment when they start
        ex = Executor(n_workers=2, memory_limit=int(1.5 * 2**30), worker_log=ARTIFACTS / "dask-workers.log")
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
    try:
        ex.wait_for_workers(2, timeout_s=180)
        yield ex
    finally:
        ex.close()
        deadline = time.monotonic() + 20
        while _worker_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _worker_processes(), "worker processes left behind"


# --- jobs (run on the workers) -----------------------------------------------------------------


def started_at(seconds: float, tag: str) -> float:
    """The wall-clock time the job started; then sleep."""
    t = time.time()
    time.sleep(seconds)
    return t


def counted(path: str, seconds: float) -> int:
    """Append a line to ``path`` (one per execution), sleep, return the worker's pid."""
    with open(path, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return os.getpid()


def allocate(n_bytes: int, hold_s: float = 0.0) -> float:
    """Touch ``n_bytes`` of memory and keep them ``hold_s`` seconds."""
    block = np.ones(n_bytes // 8)
    time.sleep(hold_s)
    return float(block.sum())


def checksum(block: np.ndarray) -> float:
    """The sum of an array (the job's argument is what matters)."""
    return float(block.sum())


def compiled_threads(min_jobs: int) -> tuple[int, int, int]:
    """Once ``min_jobs`` jobs run (this one included; at most 60 s): the threads the next compiled PDHG
    steps use, numba's threads, the cores."""
    import numba

    from panda import _pdhg_blocks
    from panda.execution import running_jobs
    from panda.threads import cores

    deadline = time.monotonic() + 60
    while running_jobs() < min_jobs and time.monotonic() < deadline:
        time.sleep(0.05)
    return _pdhg_blocks.apply_thread_policy(), int(numba.config.NUMBA_NUM_THREADS), cores()


def worker_environment() -> tuple:
    """What a worker process was started with: glibc's trim threshold, the BLAS threads, Dask's profiler."""
    import dask

    return (
        os.environ.get("MALLOC_TRIM_THRESHOLD_"),
        os.environ.get("OPENBLAS_NUM_THREADS"),
        dask.config.get("distributed.worker.profile.enabled"),
    )


def reports(progress) -> str:
    progress("first half", 0.25)
    time.sleep(0.4)
    progress("second half", 0.75)
    time.sleep(0.4)
    return "done"


# --- tests -------------------------------------------------------------------------------------


def test_errors_memory_deaths_and_time_limits_leave_a_working_cluster(executor):
    """Refused work, MemoryError, a dead worker and a time limit: plain JobErrors; the next job works."""
    from app.state import config_items

    inst = panda.make_instance(panda.load_city("kotka"), n_records=200, n_users=10, n_outputs=40, seed=0)
    fine = config_items(panda.preset("artifact"))
    # gamma = 5 km: every record is 'near' every other one; the library refuses the margin search
    # (it would need gigabytes) with a clear message, which reaches the caller through the worker.
    runaway = config_items(panda.preset("artifact", gamma_km=5.0, constraint_radius_km=5.0, decay="logistic"))
    with pytest.raises(JobError, match="safety-margin search would examine") as info:
        executor.run(run_panda_job, inst, runaway, 0, timeout_s=60)
    assert info.value.__cause__ is None and "Traceback" not in str(info.value)

    caller = threading.get_ident()
    seen: list[tuple[str, float, int]] = []
    res = executor.run(
        run_panda_job, inst, fine, 0, timeout_s=60, progress=lambda p, f: seen.append((p, f, threading.get_ident()))
    )
    assert res.lp_status == "Optimal"
    assert seen and all(thread == caller for *_, thread in seen)

    # One huge allocation: MemoryError under the worker's address-space cap (3.5 GiB).
    with pytest.raises(JobError, match="more memory than the dashboard allows"):
        executor.run(allocate, 16 * 2**30, timeout_s=60)
    assert executor.run(run_panda_job, inst, fine, 1, timeout_s=60).lp_status == "Optimal"

    # 2 GiB touched, under the cap but past the 1.5 GiB memory limit: the nanny kills the worker (twice:
    # the scheduler tries a job once more), the job fails, the nannies start fresh workers.
    with pytest.raises(JobError, match="crashed its process"):
        executor.run(allocate, 2 * 2**30, 3.0, timeout_s=60)
    assert executor.run(run_panda_job, inst, fine, 2, timeout_s=120).lp_status == "Optimal"

    t0 = time.perf_counter()
    with pytest.raises(JobTimeout, match="did not finish within 1 s"):
        executor.run(delta_sweep_job, inst, fine, 0, tuple(np.logspace(-9, -1, 5000)), timeout_s=1.0)
    assert time.perf_counter() - t0 < 15
    assert executor.restarted  # the worker of the stopped sweep (and of the MemoryError)
    assert executor.run(run_panda_job, inst, fine, 3, timeout_s=120).lp_status == "Optimal"
    # The same job again after its time limit: a new computation under the same key.
    with pytest.raises(JobTimeout):
        executor.run(started_at, 2.5, "again", timeout_s=1.0)
    assert executor.run(started_at, 2.5, "again", timeout_s=60) > 0


def test_compiled_steps_share_the_cores_among_running_jobs(executor):
    """A lone job's compiled steps use every core; beside another running job, their share of them.

    (Two optimal LPs with two spinning OpenMP threads each on 2 cores reached gaps of 18.7 and 12.0 %
    in 20 s, against 4.3 and 2.6 % with one thread each.)
    """
    threads, numba_max, cores = executor.run(compiled_threads, 1, timeout_s=60)
    assert threads == min(cores, numba_max) >= 1
    sleeper = executor.submit(started_at, 10.0, "beside", priority=LOW)  # the long worker
    shared, _, _ = executor.run(compiled_threads, 2, timeout_s=90)  # the interactive worker, meanwhile
    assert shared == max(1, min(cores // 2, numba_max))
    executor.result(sleeper, timeout_s=60)
    assert executor.run(compiled_threads, 1, timeout_s=60)[0] == threads  # alone again: every core


def test_workers_keep_glibcs_allocator_defaults_and_no_profiler(executor):
    """Dask's nanny would set MALLOC_TRIM_THRESHOLD_=65536 (every numpy temporary over 128 KB mapped afresh:
    the Lesson's background LP took 35.3 s on a worker against 29.1 s without it); BLAS keeps one thread."""
    for priority in (HIGH, LOW):  # the interactive worker and the long one
        assert executor.run(worker_environment, timeout_s=60, priority=priority) == (None, "1", False)


def test_running_jobs_counts_live_processes_only(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert running_jobs(tmp_path) == 1  # no job: counted as alone
    for name in (str(os.getpid()), str(os.getppid()), str(dead.pid), "notes.txt", "9" * 30):
        (tmp_path / name).touch()
    assert running_jobs(tmp_path) == 2
    assert not (tmp_path / str(dead.pid)).exists()  # a killed worker's file is cleared
    assert not (tmp_path / ("9" * 30)).exists()
    assert running_jobs(tmp_path / "missing") == 1


def test_progress_is_relayed_in_order(executor):
    phases: list[str] = []
    assert executor.run(reports, timeout_s=30, progress=lambda p, f: phases.append(p)) == "done"
    assert phases == ["first half", "second half"]


def test_finished_jobs_arguments_are_not_kept_by_the_server(executor):
    """Dask's debugging logs of recent messages keep at most MESSAGE_LOG_LENGTH jobs' arguments.

    With Dask's default (1000 messages per connection) the client's stream to the scheduler and the
    scheduler's streams to the workers kept every job's pickled arguments: 40 jobs left 40 graphs here.
    """
    import gc

    from dask._task_spec import Task
    from distributed.protocol.serialize import Serialized

    from panda.execution import MESSAGE_LOG_LENGTH

    def kept() -> tuple[int, int]:
        gc.collect()
        objs = gc.get_objects()
        return sum(isinstance(o, Serialized) for o in objs), sum(isinstance(o, Task) for o in objs)

    before = kept()
    rng = np.random.default_rng(0)
    for _ in range(40):
        block = rng.random(2**15)  # 256 KiB (Dask logs messages under 1 MB), a new job each time
        assert executor.run(checksum, block, timeout_s=60) == pytest.approx(float(block.sum()))
    graphs, tasks = kept()
    # Kept per connection: the client's stream and one stream per worker, MESSAGE_LOG_LENGTH each.
    bound = MESSAGE_LOG_LENGTH * (1 + executor.n_workers) + 2
    assert graphs - before[0] <= bound, (graphs, before)
    assert tasks - before[1] <= bound, (tasks, before)


def test_identical_jobs_share_one_computation(executor, tmp_path):
    """Two sessions asking for the same job at once: one execution, both get its value."""
    path = str(tmp_path / "executions.txt")
    out: list[int] = []

    def ask() -> None:
        out.append(executor.run(counted, path, 2.0, timeout_s=60))

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
        time.sleep(0.1)
    for thread in threads:
        thread.join()
    assert len(out) == 3 and len(set(out)) == 1
    assert len(open(path).read().split()) == 1
    assert job_key("counted", (path, 2.0)) == job_key("counted", (path, 2.0)) != job_key("counted", (path, 3.0))
    # Equal instances hash equal even when one has filled its lazy caches.
    a = panda.make_instance(panda.load_city("kotka"), n_records=60, n_users=5, n_outputs=20, seed=0)
    b = panda.make_instance(panda.load_city("kotka"), n_records=60, n_users=5, n_outputs=20, seed=0)
    b.d_km  # noqa: B018 (fills b._cache)
    assert job_key("run_panda", (a, (), 0)) == job_key("run_panda", (b, (), 0))


def test_submit_joining_a_job_still_being_submitted_returns_its_future(executor, monkeypatch):
    """A second submit of the same job while the first caller is still handing it to the scheduler (the
    flight is registered, its future not yet there) waits for that future instead of returning None."""
    entered, release = threading.Event(), threading.Event()
    real = executor._long_resources

    def held_up() -> dict | None:  # called between the flight's registration and the scheduler's submit
        entered.set()
        assert release.wait(60), "the test did not release the first submission"
        return real()

    monkeypatch.setattr(executor, "_long_resources", held_up)
    first: dict = {}
    thread = threading.Thread(
        target=lambda: first.update(future=executor.submit(started_at, 0.0, "joined-early", priority=LOW))
    )
    thread.start()
    try:
        assert entered.wait(60), "the first submission did not start"
        base = job_key("started_at", (0.0, "joined-early"))
        flight = executor._flights.of(base)
        assert flight.future is None
        second: dict = {}
        joiner = threading.Thread(
            target=lambda: second.update(future=executor.submit(started_at, 0.0, "joined-early", priority=LOW))
        )
        joiner.start()
        deadline = time.monotonic() + 60
        while flight.claims < 2:  # the second call joined the flight
            assert time.monotonic() < deadline, "the second submit did not join the job in flight"
            time.sleep(0.02)
    finally:
        release.set()
        thread.join(60)
    joiner.join(60)
    assert second["future"] is not None and second["future"] is first["future"] is flight.future
    assert executor.result(second["future"], timeout_s=60) > 0


def test_an_interactive_job_starts_at_once_beside_long_jobs(executor):
    """Two long jobs running/queued on two workers: an interactive job starts while the first long job
    still runs, so it waited for neither of them."""
    long_jobs = [executor.submit(started_at, 3.0, f"long-{k}", priority=LOW) for k in range(2)]
    time.sleep(1.0)  # the first long job is running
    t0 = time.time()
    start = executor.run(started_at, 0.0, "interactive", timeout_s=30, priority=HIGH)
    print(f"interactive job started {(start - t0) * 1000:.0f} ms after submission, two long jobs in the cluster")
    starts = sorted(executor.result(f, timeout_s=60) for f in long_jobs)
    assert starts[1] - starts[0] > 2.5  # the long jobs ran one after the other: one worker stays free
    # Behind a long job it would have started at starts[0] + 3 s at the earliest (on a machine of any speed).
    assert start < starts[0] + 3.0


def test_an_unreachable_scheduler_is_a_readable_job_error():
    """A named scheduler nobody runs: creating the executor does not connect (so it cannot hang); a job
    fails in plain words."""
    import select
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()  # records any connection attempt, answers none
        port = sock.getsockname()[1]
        ex = Executor(f"tcp://127.0.0.1:{port}", connect_timeout_s=1.0)
        pending, _, _ = select.select([sock], [], [], 0.5)
        assert not pending, "creating the executor connected to the scheduler"
    try:
        assert not ex.closed
        with pytest.raises(JobError, match=f"computing cluster at tcp://127.0.0.1:{port} cannot be reached"):
            ex.run(run_panda_job, None, (), 0, timeout_s=5)
    finally:
        ex.close()
