"""A separate process for the heavy computations: a memory cap and a hard time limit.

Some settings make PAnDA's work explode (a threshold distance gamma of kilometres makes every record
"near" every other one: the safety margins then need tens of gigabytes). In the server process that
would freeze the page, or get the whole server killed by the operating system. So PAnDA runs, delta
sweeps and baselines run in one long-lived worker process instead:

* its address space is capped (:data:`MEMORY_FRACTION` of the machine's memory, at most
  :data:`MEMORY_CAP_BYTES`): a runaway computation fails with MemoryError, the server lives on;
* each job has a time limit: past it the worker is killed and started again.

The worker imports no streamlit; jobs name one of :data:`JOBS` and carry plain, picklable arguments.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

__all__ = ["PandaWorker", "WorkerPool", "WorkerError", "JobTimeout", "JOBS", "memory_limit_bytes"]

#: Share of the machine's memory the worker may address, and the absolute cap.
MEMORY_FRACTION = 0.4
MEMORY_CAP_BYTES = 8 * 2**30
#: Seconds to wait for a fresh worker to import panda and report ready.
START_TIMEOUT_S = 120.0
#: The repository root (the worker runs ``python -m app.worker`` from there).
ROOT = Path(__file__).resolve().parent.parent


class WorkerError(RuntimeError):
    """A job failed in the worker (its exception, MemoryError, or a crash of the process)."""


class JobTimeout(WorkerError):
    """A job ran past its time limit; the worker was stopped and is restarted."""


def memory_limit_bytes(n_workers: int = 1) -> int:
    """Each worker's address-space cap, bytes (the workers together get MEMORY_FRACTION of the machine)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return MEMORY_CAP_BYTES
    return int(min(MEMORY_CAP_BYTES, MEMORY_FRACTION * total / max(n_workers, 1)))


# ---------------------------------------------------------------------------------------------
# In the worker process
# ---------------------------------------------------------------------------------------------


def _job_run_panda(instance, items, seed, progress):
    import panda

    return panda.run_panda(instance, panda.PandaConfig(**dict(items)), seed=seed, progress=progress)


def _job_delta_sweep(instance, items, seed, deltas, progress):
    import panda

    base = panda.PandaConfig(**dict(items))
    rows = []
    for k, delta in enumerate(deltas):
        progress(f"δ = {delta:g}", k / max(len(deltas), 1))
        res = panda.run_panda(instance, base.replace(delta=float(delta), solve_relaxed=False), seed=seed)
        n_pairs = max(int(res.pair_i.size), 1)
        rows.append(
            {
                "delta": float(delta),
                "violation_rate": res.user_pair_violation_rate,
                "over_budget_share": float(res.pair_over_budget.sum()) / n_pairs,
                "unreachable_share": float(res.pair_unreachable.sum()) / n_pairs,
                "loss_m": res.loss_expected_m,
            }
        )
    return rows


def _job_baseline(instance, name, epsilon_per_km, options, progress):
    from panda.mechanisms import BASELINES

    progress(f"building {name}", 0.0)
    return BASELINES[name](instance, epsilon_per_km, **dict(options))


def _job_audit_panda(result, instance, n_record_pairs, progress):
    from panda.pmdp import audit_panda

    progress("exact PmDP audit", 0.0)
    return audit_panda(result, instance, n_record_pairs=n_record_pairs, seed=0)


#: Job name -> function(*args, progress) run in the worker.
JOBS: dict[str, Callable[..., Any]] = {
    "run_panda": _job_run_panda,
    "delta_sweep": _job_delta_sweep,
    "baseline": _job_baseline,
    "audit_panda": _job_audit_panda,
}


def _exit_with_parent(parent_pid: int) -> None:  # pragma: no cover (runs in the child process)
    """Stop this worker soon after the server process is gone (even in the middle of a job)."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(0)


def _worker_main(conn, memory_bytes: int) -> None:  # pragma: no cover (runs in the child process)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), name="parent-watch", daemon=True).start()
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ImportError, ValueError, OSError):
        pass
    import panda  # noqa: F401  (import once, before reporting ready)

    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        name, args = msg

        def progress(phase: str, fraction: float) -> None:
            conn.send(("progress", (str(phase), float(fraction))))

        try:
            value = JOBS[name](*args, progress)
        except MemoryError:
            conn.send(("error", "MemoryError: the computation needs more memory than the dashboard allows"))
            return  # a process that ran out of memory is not trusted with the next job
        except BaseException as exc:  # reported to the server, the worker lives on
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        try:
            conn.send(("ok", value))
        except MemoryError:
            conn.send(("error", "MemoryError: the result is too large to send back"))
            return


# ---------------------------------------------------------------------------------------------
# In the server process
# ---------------------------------------------------------------------------------------------


class PandaWorker:
    """One worker process, used by one job at a time (thread-safe), restarted after a failure.

    The process is ``python -m app.worker`` talking over a socket pair (not multiprocessing's spawn:
    Streamlit replaces ``sys.modules["__main__"]`` with the app script, which spawn would re-run).
    """

    def __init__(self, memory_bytes: int | None = None) -> None:
        self.memory_bytes = memory_limit_bytes() if memory_bytes is None else int(memory_bytes)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._conn: Any = None
        self._ready = False
        self._start()

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _start(self) -> None:
        parent, child = socket.socketpair()
        fd = child.fileno()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.worker", str(fd), str(self.memory_bytes)],
            cwd=str(ROOT),
            env=env,
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
        )
        child.close()
        self._proc, self._conn, self._ready = proc, Connection(parent.detach()), False

    def _stop(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._ready:
            if self._conn.poll(0.1):
                try:
                    kind, _ = self._conn.recv()
                except (EOFError, OSError):
                    kind = "crash"
                self._ready = kind == "ready"
                if kind == "crash":
                    self._stop()
                    raise WorkerError("the worker process exited while starting")
            elif not self._alive():
                code = self._proc.returncode if self._proc is not None else None
                self._stop()
                raise WorkerError(f"the worker process exited while starting (code {code})")
            elif time.monotonic() > deadline:
                self._stop()
                raise WorkerError(f"the worker process did not start within {START_TIMEOUT_S:.0f} s")

    def run(self, name: str, *args: Any, timeout_s: float, progress: Callable[[str, float], None] | None = None) -> Any:
        """Run job ``name`` with ``args``; relay its progress; raise WorkerError or JobTimeout on failure."""
        if name not in JOBS:
            msg = f"Unknown worker job {name!r}; known: {sorted(JOBS)}."
            raise ValueError(msg)
        with self._lock:
            if not self._alive():
                self._stop()
                self._start()
            self._wait_ready()
            self._conn.send((name, args))
            deadline = time.monotonic() + timeout_s
            while True:
                if self._conn.poll(0.05):
                    try:
                        kind, value = self._conn.recv()
                    except (EOFError, OSError):
                        kind, value = "crash", None
                    if kind == "progress":
                        if progress is not None:
                            progress(*value)
                        continue
                    if kind == "ok":
                        return value
                    if kind == "error":
                        if not self._alive() or "MemoryError" in str(value):
                            self._stop()
                        raise WorkerError(str(value))
                    if kind == "crash":
                        code = self._proc.poll() if self._proc is not None else None
                        self._stop()
                        raise WorkerError(f"the computation crashed its process (exit code {code}; out of memory?)")
                if not self._alive():
                    code = self._proc.returncode if self._proc is not None else None
                    self._stop()
                    raise WorkerError(f"the computation crashed its process (exit code {code}; out of memory?)")
                if time.monotonic() > deadline:
                    self._stop()
                    raise JobTimeout(f"the computation did not finish within {timeout_s:.0f} s and was stopped")

    def close(self) -> None:
        """Stop the worker process."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.send(None)
                except OSError:
                    pass
            self._stop()


class WorkerPool:
    """Up to ``size`` :class:`PandaWorker` processes, started when needed: a heavy job of one session
    does not hold up the others.

    ``run`` takes a free worker (starting one, or waiting while all ``size`` are busy) and has the same
    signature as :meth:`PandaWorker.run`.
    """

    def __init__(self, size: int = 2) -> None:
        self.size = max(int(size), 1)
        self._memory = memory_limit_bytes(self.size)
        self._lock = threading.Lock()
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list[PandaWorker] = []
        self._free.put(self._new())  # the first one starts at once (it imports panda meanwhile)

    def _new(self) -> PandaWorker:
        worker = PandaWorker(self._memory)
        self._workers.append(worker)
        return worker

    def _take(self) -> PandaWorker:
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if len(self._workers) < self.size:
                return self._new()
        return self._free.get()

    def run(self, name: str, *args: Any, timeout_s: float, progress: Callable[[str, float], None] | None = None) -> Any:
        """Run job ``name`` on a free worker (see :meth:`PandaWorker.run`)."""
        worker = self._take()
        try:
            return worker.run(name, *args, timeout_s=timeout_s, progress=progress)
        finally:
            self._free.put(worker)

    def close(self) -> None:
        """Stop every worker process."""
        with self._lock:
            for worker in self._workers:
                worker.close()


# ---------------------------------------------------------------------------------------------
# Trade-off curve (panda.tradeoff): added for the lesson page's privacy-utility curve.
# (Before the __main__ block: the worker process runs it, and _worker_main never returns.)
# ---------------------------------------------------------------------------------------------


def _job_tradeoff_curve(instance, methods, epsilons, panda_items, seed, lp_time_limit_s, options, progress):
    """panda.tradeoff.tradeoff_curve on the worker; ``options``: its keyword settings as (name, value) pairs."""
    import panda
    from panda.tradeoff import tradeoff_curve

    config = panda.PandaConfig(**dict(panda_items)) if panda_items else None
    return tradeoff_curve(
        instance,
        tuple(methods),
        tuple(epsilons),
        panda_config=config,
        seed=seed,
        lp_time_limit_s=float(lp_time_limit_s),
        progress=progress,
        **dict(options),
    )


JOBS["tradeoff_curve"] = _job_tradeoff_curve


if __name__ == "__main__":  # pragma: no cover (the worker process: python -m app.worker FD MEMORY_BYTES)
    _worker_main(Connection(int(sys.argv[1])), int(sys.argv[2]))
