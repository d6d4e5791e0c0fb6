"""Run independent pieces of one computation on the machine's cores, in threads.

For work that leaves Python's GIL: HiGHS solves (``highspy``'s ``run``) and large numpy
reductions. The optimal LP's certificate (:mod:`panda.optimal`: one small LP per output, and
min-plus products over blocks of records) otherwise keeps one core of two idle between the
single-threaded PDHG rounds.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["THREADS", "cores", "thread_map"]

T = TypeVar("T")
R = TypeVar("R")


def cores() -> int:
    """Count the cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: Threads :func:`thread_map` uses (the cores this process may run on, at most 4). ``1`` runs
#: everything in the calling thread.
THREADS = max(1, min(4, cores()))

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0  # a forked child inherits the pool object but not its threads: it makes its own


def thread_map(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(item) for item in items]``, the items spread over :data:`THREADS` threads (results in order)."""
    global _pool, _pool_pid
    items = list(items)
    # Serial in one of the pool's own threads: a nested map would wait on itself.
    if THREADS <= 1 or len(items) <= 1 or threading.current_thread().name.startswith("panda"):
        return [fn(item) for item in items]
    if _pool is None or _pool_pid != os.getpid() or _pool._max_workers != THREADS:  # noqa: SLF001
        _pool, _pool_pid = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="panda"), os.getpid()
    return list(_pool.map(fn, items))
