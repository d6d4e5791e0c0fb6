"""The jobs in flight: one :class:`_Flight` per Dask key, shared by every caller that waits for it.

:class:`Flights` keeps them by key, hands the workers' start and progress events to their waiters, waits
for one under the rules of :meth:`panda.execution.Executor.run` (time limit from the job's start on a
worker, queue limit, abandoned callers), turns its end into a value or a readable
:class:`~panda.execution.errors.JobError`, and stops a job (cancelled, its worker restarted).
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from panda.execution.errors import (
    CRASH_MESSAGE,
    JobAbandoned,
    JobBusy,
    JobClusterLost,
    JobError,
    JobMemoryError,
    JobTimeout,
    _describe,
)
from panda.execution.fairness import LOW, jobs_ahead

if TYPE_CHECKING:
    from panda.execution.connection import Connection

log = logging.getLogger(__name__)

#: Seconds a job may wait for a worker to start it before it is withdrawn.
QUEUE_LIMIT_S = 300.0
#: Seconds a job nobody waits for any more is kept before it is withdrawn (a reload re-joins it meanwhile).
ABANDON_GRACE_S = 5.0
#: Seconds between two "busy: N ahead of you" messages of a job waiting for a worker.
QUEUE_REPORT_S = 1.0


@dataclasses.dataclass(eq=False)
class _Flight:
    """One job in flight, shared by every caller waiting for its key."""

    key: str
    submitted: float
    base: str = ""
    future: Any = None
    started: float | None = None
    worker: str | None = None
    stopped: str | None = None
    waiters: list = dataclasses.field(default_factory=list)
    priority: int = 0
    #: Callers that asked for this job and have not finished waiting (a job with none may be withdrawn).
    claims: int = 0
    #: Set once ``future`` is there (or the submission failed): a caller that joins a job in flight waits for it.
    submitted_event: threading.Event = dataclasses.field(default_factory=threading.Event)


def _newest_progress(inbox: queue.SimpleQueue) -> tuple | None:
    """Wait up to 0.1 s for a flight's message; return the newest progress message of the burst, if any."""
    try:
        item = inbox.get(timeout=0.1)
    except queue.Empty:
        item = None
    latest = item if item and item[0] == "progress" else None
    while True:  # relay only the newest of a burst
        try:
            item = inbox.get_nowait()
        except queue.Empty:
            break
        if item[0] == "progress":
            latest = item
    return latest


class Flights:
    """The jobs in flight on ``connection``'s cluster, by Dask key (see the module's description)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}  # by Dask key
        self._current: dict[str, str] = {}  # job key -> Dask key of its flight
        self._reissued: dict[str, int] = {}  # job key -> times it was stopped (a stopped key is not reused)
        connection.listen(self._on_event, self.forget_current)

    # --- the table -------------------------------------------------------------------------------

    def of(self, base: str) -> _Flight | None:
        """Return the flight of job key ``base`` now in flight, or None."""
        with self._lock:
            return self._flights.get(self._current.get(base, ""))

    def all(self) -> list[_Flight]:
        """Return the flights now in flight."""
        with self._lock:
            return list(self._flights.values())

    def claim(self, base: str, priority: int) -> tuple[_Flight, bool]:
        """Join job ``base`` if it is in flight, else register a new flight for it; return (flight, joined).

        A new flight gets the key ``base``, or, if a job of that key was stopped before, ``base-r<n>`` (the
        scheduler may still be cancelling the stopped one). The caller submits a new flight
        (:meth:`launched` or :meth:`failed`).
        """
        with self._lock:
            flight = self._flights.get(self._current.get(base, ""))
            if flight is not None and flight.stopped is None:
                flight.claims += 1
                return flight, True
            reissued = self._reissued.get(base, 0)
            key = f"{base}-r{reissued}" if reissued else base
            flight = _Flight(key=key, base=base, submitted=time.monotonic(), priority=priority, claims=1)
            self._flights[key] = flight
            self._current[base] = key
        return flight, False

    def launched(self, flight: _Flight, future: Any) -> None:
        """Record the future of a new flight (its joiners stop waiting for it)."""
        flight.future = future
        flight.submitted_event.set()
        future.add_done_callback(lambda _f, fl=flight: self._landed(fl))

    def failed(self, flight: _Flight, reason: str) -> None:
        """Record that a new flight could not be submitted (its joiners get ``reason``)."""
        with self._lock:
            flight.stopped = reason
            self._forget(flight)
        flight.submitted_event.set()

    def claim_future(self, future: Any) -> _Flight:
        """Return the flight of a future of :meth:`panda.execution.Executor.submit`, with one claim more."""
        with self._lock:
            flight = self._flights.get(future.key)
        if flight is None:  # already finished (or never seen here): no start time to count from
            return _Flight(key=future.key, submitted=time.monotonic(), future=future, started=time.monotonic())
        with self._lock:
            flight.claims += 1
        return flight

    def forget_current(self) -> None:
        """Let no caller join the jobs in flight (those of a local cluster that was replaced)."""
        with self._lock:
            self._current.clear()

    def ahead_of(self, flight: _Flight) -> int:
        """Count the jobs in flight that a worker will start before ``flight`` (0 once it runs)."""
        if flight.started is not None:
            return 0
        with self._lock:
            return jobs_ahead(flight, self._flights.values())

    def _forget(self, flight: _Flight) -> None:
        """Drop ``flight`` from the tables (under the lock)."""
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]
        if self._current.get(flight.base) == flight.key:
            del self._current[flight.base]

    # --- events from the workers -----------------------------------------------------------------

    def _on_event(self, event: tuple) -> None:
        """Hand a job's start or progress event to its waiters (called in the client's event loop)."""
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else event
        if not isinstance(msg, dict):
            return
        with self._lock:
            flight = self._flights.get(str(msg.get("key")))
            if flight is None:
                return
            item: tuple
            if msg.get("event") == "start":
                flight.started = time.monotonic()
                flight.worker = msg.get("worker")
                item = ("start",)
            else:
                item = ("progress", str(msg.get("phase", "")), float(msg.get("fraction", 0.0)))
            waiters = list(flight.waiters)
        for waiter in waiters:
            waiter.put(item)

    def _landed(self, flight: _Flight) -> None:
        """Forget ``flight`` (its future finished, failed or was cancelled) and wake its waiters."""
        with self._lock:
            self._forget(flight)
            waiters = list(flight.waiters)
        for waiter in waiters:
            waiter.put(("done",))

    # --- waiting ---------------------------------------------------------------------------------

    def wait(
        self,
        flight: _Flight,
        timeout_s: float,
        progress: Callable[[str, float], None] | None,
        keep_waiting: Callable[[], bool] | None,
        queue_limit_s: float,
    ) -> Any:
        """Wait for ``flight`` (one of its claims, given back at the end); see :meth:`panda.execution.Executor.run`."""
        if flight.future is None:  # joined while its first caller is still submitting it
            flight.submitted_event.wait(self._connection.connect_timeout_s + 60.0)
            if flight.future is None:
                with self._lock:
                    flight.claims = max(flight.claims - 1, 0)
                raise JobError(flight.stopped or "the job could not be submitted in time")
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        with self._lock:
            flight.waiters.append(inbox)
        abandoned = False
        told_ahead, told_at = -1, 0.0
        try:
            while not flight.future.done():
                latest = _newest_progress(inbox)
                if latest is not None and progress is not None:
                    progress(latest[1], latest[2])
                now = time.monotonic()
                if keep_waiting is not None and not keep_waiting():
                    abandoned = True
                    msg = "nobody waits for this computation any more"
                    raise JobAbandoned(msg)
                if progress is not None and flight.started is None and now - told_at >= QUEUE_REPORT_S:
                    ahead = self.ahead_of(flight)
                    if ahead and ahead != told_ahead:
                        progress(f"busy: {ahead} ahead of you", 0.0)
                        told_ahead, told_at = ahead, now
                if flight.stopped is not None and not flight.future.done():
                    raise JobTimeout(flight.stopped)
                if flight.started is not None and now > flight.started + timeout_s:
                    reason = f"the computation did not finish within {timeout_s:.0f} s and was stopped"
                    self.stop(flight, reason)
                    raise JobTimeout(reason)
                if flight.started is None and now > flight.submitted + queue_limit_s:
                    reason = (
                        f"the computation waited {queue_limit_s:.0f} s without a free worker "
                        "(the computing cluster is busy or has no workers) and was withdrawn"
                    )
                    self.stop(flight, reason)
                    raise JobBusy(reason)
            return self._outcome(flight)
        finally:
            with self._lock:
                if inbox in flight.waiters:
                    flight.waiters.remove(inbox)
                flight.claims = max(flight.claims - 1, 0)
                unclaimed = flight.claims == 0
            if abandoned and unclaimed:
                self._abandoned(flight)

    def _outcome(self, flight: _Flight) -> Any:
        """Return the value of a finished future, or raise the JobError that says why there is none."""
        from distributed import KilledWorker

        future = flight.future
        status = future.status
        if status == "cancelled":
            if flight.stopped:
                raise JobTimeout(flight.stopped)
            reason = getattr(getattr(getattr(future, "_state", None), "exception", None), "reason", None)
            if reason == "scheduler-connection-lost" or self._connection.scheduler_gone():
                msg = "the computing cluster stopped during the computation; try again"
                if self._connection.local:
                    msg += " (a new one is started)"
                raise JobClusterLost(msg)
            raise JobError("the computation was cancelled")
        if status == "finished":
            try:
                return future.result()
            except Exception as lost:  # noqa: BLE001 (the result was lost with its worker)
                raise JobError(f"the result could not be fetched ({_describe(lost)})") from None
        error: BaseException | None
        try:
            error = future.exception()
        except Exception as err:  # noqa: BLE001
            error = err
        if isinstance(error, JobMemoryError):
            self._connection.restart(flight.worker)
            raise JobError(str(error)) from None
        if isinstance(error, JobError):
            raise JobError(str(error)) from None
        if isinstance(error, KilledWorker):
            raise JobError(CRASH_MESSAGE) from None
        raise JobError(_describe(error) if error is not None else f"the computation ended as {status!r}") from None

    # --- stopping --------------------------------------------------------------------------------

    def _abandoned(self, flight: _Flight) -> None:
        """Withdraw ``flight`` if, after the grace period, nobody claims it (see :meth:`wait`'s keep_waiting)."""

        def check() -> None:
            with self._lock:
                if flight.claims > 0 or flight.stopped is not None or flight.future is None or flight.future.done():
                    return
                running = flight.started is not None
            reason = "nobody waits for this computation any more"
            if not running:
                self.stop(flight, reason, restart=False, unclaimed_only=True)
            elif flight.priority <= LOW:
                self.stop(flight, reason, unclaimed_only=True)

        timer = threading.Timer(ABANDON_GRACE_S, check)
        timer.daemon = True
        timer.start()

    def stop(self, flight: _Flight, reason: str, *, restart: bool = True, unclaimed_only: bool = False) -> None:
        """Cancel a job (for every caller waiting for it) and restart the worker running it.

        ``restart=False``: leave the worker alone (the job has not started); ``unclaimed_only``: do nothing
        if someone has claimed the job meanwhile (checked under the lock that claims take).
        """
        with self._lock:
            if flight.stopped is not None or (unclaimed_only and flight.claims > 0):
                return
            flight.stopped = reason
            self._reissued[flight.base] = self._reissued.get(flight.base, 0) + 1
            self._forget(flight)
        try:
            self._connection.client.cancel([flight.future], reason=reason)
        except Exception:  # noqa: BLE001 (the worker restart below stops it anyway)
            log.debug("cancel of %s failed", flight.key, exc_info=True)
        if restart:
            self._connection.restart(flight.worker)
