"""Helpers shared by the tests of panda.execution on a real local Dask cluster (tests/panda: test_execution.py,
test_execution_faults.py, test_fairness.py).

The clusters' workers get the test folders on their path (the test modules' own functions are the jobs:
Dask pickles functions by reference) and a running-jobs folder of their own (not the machine's, which another
cluster on this machine may share).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
from conftest import TEST_IMPORT_PATH

from panda.execution import RUNNING_DIR_ENV, SCHEDULER_ENV, Executor


def worker_processes() -> list[psutil.Process]:
    """This process's Dask worker processes: the ``dask worker`` groups and the worker processes their nannies
    spawn (not the forkserver or resource tracker another test's process pool leaves in this process)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            line = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "dask_worker" in line or "multiprocessing.spawn" in line:
            found.append(proc)
    return found


@contextlib.contextmanager
def local_cluster(
    tmp_path_factory: Any, n_workers: int = 2, make: Callable[..., Executor] = Executor, **options: Any
) -> Iterator[Executor]:
    """A local cluster of ``n_workers`` one-thread workers (``make(n_workers=..., **options)``: ``Executor`` or
    ``get_executor``); closed at the end, and no worker process may be left behind."""
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (TEST_IMPORT_PATH, os.environ.get("PYTHONPATH")) if p),
        RUNNING_DIR_ENV: str(tmp_path_factory.mktemp("running-jobs")),
    }
    before = {name: os.environ.get(name) for name in (*env, SCHEDULER_ENV)}
    os.environ.update(env)  # the worker processes copy the environment when they start
    os.environ.pop(SCHEDULER_ENV, None)  # a local cluster, whatever the caller's environment
    try:
        ex = make(n_workers=n_workers, **options)
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    try:
        ex.wait_for_workers(n_workers, timeout_s=180)
        yield ex
    finally:
        ex.close()
        deadline = time.monotonic() + 60  # a worker restarted just before the close may still be starting
        while worker_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = worker_processes()
        assert not left, f"worker processes left behind: {[' '.join(p.cmdline())[:120] for p in left]}"


def in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[threading.Thread, dict]:
    """Run ``fn`` in a thread; the dict gets "value" or "error"."""
    out: dict = {}

    def target() -> None:
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out
