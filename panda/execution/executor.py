"""The executor: heavy jobs on a Dask cluster, run under a time limit and returned as a value or a JobError.

:class:`Executor` composes the package's parts: the connection to a scheduler
(:class:`~panda.execution.connection.Connection`, which starts and replaces the
:class:`~panda.execution.cluster.LocalCluster` when no scheduler is named), the jobs in flight
(:class:`~panda.execution.flights.Flights`) and the owners' job slots
(:class:`~panda.execution.fairness.OwnerSlots`). :func:`get_executor` returns the process-wide one.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from panda.execution.cluster import (
    MESSAGE_LOG_LENGTH,
    SCHEDULER_ENV,
    LocalCluster,
    default_n_workers,
    memory_limit_bytes,
)
from panda.execution.connection import CONNECT_TIMEOUT_S, START_TIMEOUT_S, Connection
from panda.execution.errors import JobError, _describe
from panda.execution.fairness import HIGH, LONG_RESOURCE, LOW, OwnerSlots, default_priority
from panda.execution.flights import QUEUE_LIMIT_S, Flights, _Flight
from panda.execution.keys import job_key
from panda.execution.worker import ADDRESS_SPACE_HEADROOM_BYTES, _execute


class Executor:
    """Jobs on a Dask cluster: a local one started here, or an existing scheduler's.

    Parameters
    ----------
    address
        A scheduler address (``tls://host:port``, with the certificates of :data:`TLS_CONFIG_ENV`) to
        connect to; default: ``PANDA_DASK_SCHEDULER``, else a local cluster. (``tcp://`` to another
        machine works but is warned about: anyone who can reach that scheduler can run code on it.)
    n_workers
        Local worker processes (default :func:`default_n_workers`); ignored for a named scheduler.
    memory_limit
        One local worker's memory limit, bytes (default :func:`memory_limit_bytes`).
    address_space
        One local worker's address-space cap, bytes (default: ``memory_limit`` plus
        :data:`ADDRESS_SPACE_HEADROOM_BYTES`; 0: none).
    queue_limit_s
        Seconds a job may wait for a worker to start it.
    worker_log
        File for the local workers' output (default: discarded).
    connect_timeout_s
        Seconds to wait for a named scheduler (connected on first use).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        n_workers: int | None = None,
        memory_limit: int | None = None,
        address_space: int | None = None,
        queue_limit_s: float = QUEUE_LIMIT_S,
        worker_log: str | os.PathLike | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        import dask
        import distributed  # noqa: F401 (first: its exit handlers are registered before this executor's)

        # Before any connection exists: every BatchedSend reads the length when it is made.
        dask.config.set({"distributed.admin.low-level-log-length": MESSAGE_LOG_LENGTH})
        self.queue_limit_s = float(queue_limit_s)
        self._long_checked = -1e9
        self._long_available = False
        address = address or os.environ.get(SCHEDULER_ENV, "").strip() or None
        cluster = None
        if address is None:
            self.n_workers = int(n_workers) if n_workers else default_n_workers()
            self.memory_limit = int(memory_limit) if memory_limit else memory_limit_bytes(self.n_workers)
            self.address_space = (
                int(address_space) if address_space is not None else self.memory_limit + ADDRESS_SPACE_HEADROOM_BYTES
            )
            cluster = LocalCluster(self.n_workers, self.memory_limit, self.address_space, worker_log)
        else:
            self.n_workers = 0
            self.memory_limit = 0
            self.address_space = 0
        self._connection = Connection(address, cluster, connect_timeout_s)
        self._flights = Flights(self._connection)
        self._slots = OwnerSlots()
        # A local cluster is started and connected to now. A named scheduler is connected to on first use: a
        # page never hangs on an unreachable cluster before its first job, and the job then fails with a
        # readable JobError.
        self._connection.start()
        # Registered after distributed's own exit handlers (atexit runs last-in first-out): at exit this
        # executor closes its client and workers before distributed closes the scheduler under them.
        atexit.register(self.close)

    # --- the cluster -----------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The scheduler's address (a local cluster's changes when a new one replaces it)."""
        return self._connection.address

    @property
    def local(self) -> bool:
        """True for a local cluster started by this executor, False for a named scheduler."""
        return self._connection.local

    @property
    def connect_timeout_s(self) -> float:
        """Seconds to wait for a named scheduler."""
        return self._connection.connect_timeout_s

    @property
    def recoveries(self) -> int:
        """Times the local cluster was started anew after its scheduler stopped."""
        return self._connection.recoveries

    @property
    def restarted(self) -> list[str]:
        """Worker addresses restarted by this executor (time limits, MemoryError), oldest first."""
        return self._connection.restarted

    @property
    def client(self) -> Any:
        """The ``distributed.Client``, connected on first use (raises JobError if the scheduler is unreachable).

        A local cluster whose scheduler stopped is replaced first (see
        :attr:`panda.execution.connection.Connection.client`).
        """
        return self._connection.client

    @property
    def closed(self) -> bool:
        """True after :meth:`close`, or when the connection to a named scheduler is gone for good.

        A local cluster whose scheduler stopped is not closed: the next job starts a new one.
        """
        return self._connection.closed

    def worker_info(self) -> dict[str, dict]:
        """Return the scheduler's workers: address -> {"name", "resources", "pid", ...}."""
        return dict(self.client.scheduler_info(n_workers=-1)["workers"])

    def wait_for_workers(self, n: int | None = None, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until ``n`` workers (default: all local ones, else 1) are connected."""
        self.client.wait_for_workers(n or self.n_workers or 1, timeout=timeout_s)

    def _long_resources(self) -> dict | None:
        """``{"long": 1}`` when some worker has that resource (local cluster: always), else None."""
        if self.local:
            return {LONG_RESOURCE: 1}
        now = time.monotonic()
        if now - self._long_checked > 10.0:
            try:
                workers = self.worker_info().values()
                self._long_available = any(LONG_RESOURCE in (w.get("resources") or {}) for w in workers)
            except Exception:  # noqa: BLE001 (unknown: run long jobs anywhere)
                self._long_available = False
            self._long_checked = now
        return {LONG_RESOURCE: 1} if self._long_available else None

    # --- jobs ------------------------------------------------------------------------------------

    def _submit(
        self, target: Callable[..., Any], args: tuple, kwargs: dict, priority: int | None, key: str | None
    ) -> _Flight:
        if self.closed:
            msg = "the computing cluster was shut down"
            raise JobError(msg)
        if not callable(target):
            msg = f"A job is a function the workers can import (panda.jobs); got {target!r}."
            raise TypeError(msg)
        label = getattr(target, "__name__", "job")
        priority = default_priority(target) if priority is None else int(priority)
        self._connection.recover()  # a local cluster whose scheduler stopped: a new one
        client = self.client  # JobError when the cluster cannot be reached
        base = key or job_key(label, args, kwargs)
        flight, joined = self._flights.claim(base, priority)
        if joined:
            return flight  # the same job is already in flight
        # A long job (LOW, or below it: a session's later ones) needs a worker with the long resource. (Dask
        # does not give an interactive one to a worker busy with a long job: tests/panda/test_fairness.py.)
        resources = self._long_resources() if priority <= LOW else None
        try:
            future = client.submit(
                _execute, target, args, kwargs, key=flight.key, priority=priority, resources=resources, retries=0
            )
        except Exception as exc:
            reason = f"the job could not be submitted ({_describe(exc)})"
            self._flights.failed(flight, reason)
            raise JobError(reason) from None
        self._flights.launched(flight, future)
        return flight

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        priority: int | None = None,
        key: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Start job ``fn(*args, **kwargs)`` and return its ``distributed.Future`` at once.

        ``fn`` is a function the workers can import (a module-level function of an importable module, such as
        :mod:`panda.jobs`); if it has a ``progress`` parameter it gets the reporter.
        Equal jobs in flight share one computation (and one key). Wait with :meth:`result`.
        """
        flight = self._submit(fn, args, kwargs, priority, key)
        if flight.future is None:  # joined while its first caller is still submitting it
            flight.submitted_event.wait(self.connect_timeout_s + 60.0)
            if flight.future is None:
                raise JobError(flight.stopped or "the job could not be submitted in time")
        return flight.future

    def result(
        self,
        future: Any,
        *,
        timeout_s: float,
        progress: Callable[[str, float], None] | None = None,
    ) -> Any:
        """Wait for a future of :meth:`submit` under the rules of :meth:`run`."""
        flight = self._flights.claim_future(future)
        return self._flights.wait(flight, float(timeout_s), progress, None, self.queue_limit_s)

    def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        timeout_s: float,
        priority: int | None = None,
        progress: Callable[[str, float], None] | None = None,
        key: str | None = None,
        owner: str | None = None,
        keep_waiting: Callable[[], bool] | None = None,
        group: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run job ``fn(*args, **kwargs)`` on a worker and return its value.

        Parameters
        ----------
        fn
            A module-level function the workers can import (:mod:`panda.jobs`: ``run_panda_job``, ...).
        timeout_s
            Seconds the job may run once a worker has started it; past them it is stopped and its
            worker restarted (:class:`JobTimeout`).
        priority
            :data:`HIGH` (interactive) or :data:`LOW` (long); default: the job's own (:func:`default_priority`).
        progress
            ``progress(phase, fraction)``, called in this thread with the job's progress messages.
        key
            The Dask key (default :func:`job_key`: equal jobs share it and run once).
        owner
            Who asks (a dashboard session's id). An owner has at most :data:`MAX_JOBS_PER_OWNER` interactive
            and as many long jobs in flight (a further call waits here, saying so through ``progress``, for
            as long as they keep finishing: :class:`JobBusy` when none did for ``queue_limit_s``), and
            its n-th job of a kind in flight is queued one priority step below its first: owners are served in
            turn, so a session that opens many jobs does not hold up the others' first ones.
        group
            The owner's group (a client address): its owners share :data:`MAX_JOBS_PER_GROUP` slots of a kind
            (with ``owner`` only), and the group's n-th job in flight is queued n steps below its first, as an
            owner's is: one address's twenty tabs do not hold up another address's first job.
        keep_waiting
            Asked every 0.1 s while waiting; when it says no (the session went away), the wait ends with
            :class:`JobAbandoned`, and a job nobody else waits for is withdrawn after
            :data:`ABANDON_GRACE_S` (a long one that already runs is stopped and its worker restarted; an
            interactive one that runs is left to finish).

        While the job waits for a worker, ``progress("busy: N ahead of you", 0.0)`` says how many of this
        server's jobs go first (N > 0 only).

        Raises
        ------
        JobError
            The job failed (its exception as ``"Type: message"``, MemoryError, its worker died).
        JobTimeout
            Past the time limit (counted from the job's start on a worker).
        JobBusy
            (A JobTimeout.) No worker started it within ``queue_limit_s``, or (``owner``) its wait for a slot
            ran out: the server is busy, not the setting too heavy.
        JobAbandoned
            ``keep_waiting`` said no.
        """
        if owner is None:
            flight = self._submit(fn, args, kwargs, priority, key)
            return self._flights.wait(flight, float(timeout_s), progress, keep_waiting, self.queue_limit_s)
        if priority is None:
            priority = default_priority(fn)
        # Interactive and long jobs have slots of their own: a session's slider never waits for its own curve.
        slots = (owner, "interactive" if int(priority) >= HIGH else "long")
        rank = self._enter(slots, progress, keep_waiting, group)
        try:
            flight = self._submit(fn, args, kwargs, int(priority) - rank, key)
            return self._flights.wait(flight, float(timeout_s), progress, keep_waiting, self.queue_limit_s)
        finally:
            self._leave(slots, group)

    # --- fairness between owners -----------------------------------------------------------------

    def _enter(
        self,
        owner: tuple[str, str],
        progress: Callable[[str, float], None] | None,
        keep_waiting: Callable[[], bool] | None,
        group: str | None = None,
    ) -> int:
        """Take one of ``owner``'s job slots, waiting up to ``queue_limit_s`` (see :meth:`OwnerSlots.enter`)."""
        return self._slots.enter(owner, progress, keep_waiting, self.queue_limit_s, group)

    def _leave(self, owner: tuple[str, str], group: str | None = None) -> None:
        self._slots.leave(owner, group)

    def jobs_of(self, owner: str) -> int:
        """Jobs ``owner`` has in flight now, interactive and long."""
        return self._slots.jobs_of(owner)

    def ahead_of(self, flight: _Flight) -> int:
        """Count this server's jobs that a worker will start before ``flight`` (0 once it runs)."""
        return self._flights.ahead_of(flight)

    def close(self) -> None:
        """Disconnect; stop the local cluster's workers and scheduler (a named scheduler is left running)."""
        if self._connection.shut:
            return
        atexit.unregister(self.close)
        self._connection.close()


_EXECUTOR: Executor | None = None
_EXECUTOR_LOCK = threading.Lock()


def get_executor(address: str | None = None, **options: Any) -> Executor:
    """Return the process-wide executor, started on first use (see :class:`Executor` for the arguments).

    Later calls return the same executor whatever their arguments, until :func:`close_executor` (or a
    lost connection to a named scheduler) ends it; a local cluster whose scheduler stopped is replaced
    inside the same executor by its next job.
    """
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None or _EXECUTOR.closed:
            if _EXECUTOR is not None:
                _EXECUTOR.close()
            _EXECUTOR = Executor(address, **options)
        return _EXECUTOR


def close_executor(executor: Executor | None = None) -> None:
    """Close ``executor`` (default: the process-wide one); the next :func:`get_executor` starts anew."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        target = executor or _EXECUTOR
        if target is _EXECUTOR:
            _EXECUTOR = None
    if target is not None:
        target.close()
