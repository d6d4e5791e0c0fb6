"""What runs in the worker processes: the preload hook and the Dask task that wraps every job.

:func:`dask_setup` is Dask's preload hook (``dask worker ... --preload panda.execution``: the package
re-exports it); :func:`_execute` is the task the client submits for every job: it announces the job's
start, hands the job a progress reporter, marks it running (:mod:`panda.execution.running`) and turns
its failures into :class:`~panda.execution.errors.JobError`.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable
from typing import Any

from panda.execution.errors import MEMORY_MESSAGE, JobError, JobMemoryError, _describe
from panda.execution.running import _running, core_share

#: Environment variable with a worker's address-space cap in bytes (read by :func:`dask_setup`).
ADDRESS_SPACE_ENV = "PANDA_WORKER_ADDRESS_SPACE"
#: A worker's address space may exceed its memory limit by this much (thread stacks, libraries, maps).
ADDRESS_SPACE_HEADROOM_BYTES = 2 * 2**30
#: Dask event topic of the jobs' start and progress messages.
EVENT_TOPIC = "panda-job"
#: Least seconds between two progress messages of one job (phase changes are always sent).
PROGRESS_INTERVAL_S = 0.1


def dask_setup(worker: Any) -> None:  # pragma: no cover (runs in the worker process)
    """Dask preload hook (``dask worker ... --preload panda.execution``): cap the address space, import panda.

    The cap is ``PANDA_WORKER_ADDRESS_SPACE`` bytes, else the worker's memory limit plus
    :data:`ADDRESS_SPACE_HEADROOM_BYTES` (none without a memory limit): a single allocation beyond it
    raises MemoryError in the job instead of pushing the machine into swap or the OOM killer.
    """
    value = os.environ.get(ADDRESS_SPACE_ENV, "").strip()
    limit = int(value) if value else 0
    if not limit:
        memory = getattr(getattr(worker, "memory_manager", None), "memory_limit", None)
        limit = int(memory) + ADDRESS_SPACE_HEADROOM_BYTES if memory else 0
    if limit > 0:
        try:
            import resource

            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (limit if hard < 0 else min(limit, hard), hard))
        except (ImportError, ValueError, OSError):
            pass
    import panda  # noqa: F401  (the first job starts warm)


class _Reporter:
    """A job's ``progress(phase, fraction)`` on the worker: throttled Dask events for the client."""

    def __init__(self, worker: Any, key: str) -> None:
        self._worker, self._key = worker, key
        self._phase: str | None = None
        self._last = 0.0

    def __call__(self, phase: str, fraction: float) -> None:
        now = time.monotonic()
        phase = str(phase)
        if phase == self._phase and now - self._last < PROGRESS_INTERVAL_S:
            return
        self._phase, self._last = phase, now
        msg = {"key": self._key, "event": "progress", "phase": phase, "fraction": float(fraction)}
        self._worker.log_event(EVENT_TOPIC, msg)


def _takes_progress(fn: Callable[..., Any]) -> bool:
    try:
        return "progress" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _execute(target: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Run one job on a worker (the Dask task of every job): announce its start, turn failures into JobError."""
    from distributed import get_worker

    worker = get_worker()
    key = str(worker.get_current_task())
    worker.log_event(EVENT_TOPIC, {"key": key, "event": "start", "worker": worker.address, "pid": os.getpid()})
    try:
        fn = target
        if _takes_progress(fn):
            kwargs = {**kwargs, "progress": _Reporter(worker, key)}
        from panda import _pdhg_blocks

        _pdhg_blocks.thread_policy = core_share  # compiled steps share the cores with the other jobs
        with _running():
            return fn(*args, **kwargs)
    except MemoryError:
        raise JobMemoryError(MEMORY_MESSAGE) from None
    except JobError:
        raise
    except Exception as exc:  # reported as a plain message; the worker lives on
        raise JobError(_describe(exc)) from None
