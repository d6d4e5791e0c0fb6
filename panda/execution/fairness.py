"""Fairness between the jobs and between their owners: priorities, long jobs' workers, per-owner slots.

* **Priorities**: :data:`HIGH` (interactive: a PAnDA run, a mechanism matrix, an audit) is scheduled
  before :data:`LOW` (long: sweeps, trade-off curves, the optimal LP), through Dask's ``priority=``.
  Dask never pre-empts a running task, so long jobs also need the worker resource :data:`LONG_RESOURCE`,
  which one worker of the local cluster lacks (:class:`~panda.execution.cluster.LocalCluster`).
* **Owners** (a dashboard session): each has at most :data:`MAX_JOBS_PER_OWNER` jobs of a kind in flight
  (:class:`OwnerSlots`); a further one waits in the owner's own thread. Owners of one **group** (the sessions
  of one client address) share :data:`MAX_JOBS_PER_GROUP` slots of a kind: twenty tabs of one person hold as
  many of the class's workers as two. A job's rank (its owner's or group's jobs in flight before it) lowers its
  priority by as many steps, so every owner's and every address's first job goes before anyone's second.
* **Queue positions**: how many jobs a worker will start before a waiting one (:func:`jobs_ahead`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from panda.execution.errors import JobAbandoned, JobBusy

#: Priority of interactive jobs (someone waits for them) and of long ones.
HIGH = 10
LOW = 0
#: The worker resource long jobs need (when some worker of the cluster has it).
LONG_RESOURCE = "long"
#: Jobs one owner (a dashboard session) may have in flight at once; more wait in the owner's own thread.
MAX_JOBS_PER_OWNER = 3
#: Sets :data:`MAX_JOBS_PER_GROUP` (0: no limit per group, for a class whose phones reach the server through one
#: address, e.g. a campus NAT).
JOBS_PER_GROUP_ENV = "PANDA_JOBS_PER_ADDRESS"


def _jobs_per_group(default: int = 2 * MAX_JOBS_PER_OWNER) -> int:
    try:
        return max(0, int(os.environ.get(JOBS_PER_GROUP_ENV, "").strip() or default))
    except ValueError:
        return default


#: Jobs of a kind the owners of one group may have in flight at once (0: no limit).
MAX_JOBS_PER_GROUP = _jobs_per_group()


def default_priority(fn: Callable[..., Any]) -> int:
    """Return a job's own priority (:func:`panda.jobs.interactive_job`, :func:`panda.jobs.long_job`), else HIGH."""
    return int(getattr(fn, "priority", HIGH))


class _Queued(Protocol):
    """What the queue order reads of a job in flight (a :class:`panda.execution.flights._Flight`)."""

    priority: int
    submitted: float
    started: float | None
    stopped: str | None


def jobs_ahead(flight: _Queued, others: Iterable[_Queued]) -> int:
    """Count the jobs of ``others`` that a worker will start before the waiting ``flight``.

    A job goes first when it waits too and has a higher priority, or the same one and was submitted earlier.
    """
    return sum(
        1
        for other in others
        if other is not flight
        and other.started is None
        and other.stopped is None
        and (
            other.priority > flight.priority
            or (other.priority == flight.priority and other.submitted < flight.submitted)
        )
    )


class OwnerSlots:
    """Each owner's job slots: at most :data:`MAX_JOBS_PER_OWNER` jobs in flight per (owner, kind).

    A slot is held from before a job's submission to the end of the owner's wait for it
    (:meth:`enter`, :meth:`leave`).
    """

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], int] = {}  # (owner, kind) -> jobs in flight
        self._freed: dict[tuple[str, str], float] = {}  # (owner, kind) -> when a slot was last given back
        self._free = threading.Condition()

    def enter(
        self,
        owner: tuple[str, str],
        progress: Callable[[str, float], None] | None,
        keep_waiting: Callable[[], bool] | None,
        queue_limit_s: float,
        group: str | None = None,
    ) -> int:
        """Take one of ``owner``'s job slots (waiting for one if all are taken); return its rank.

        The rank is the number of jobs in flight before it of the owner, or of its group when that has more.

        ``group`` (the owner's client address): the slot is also one of the group's :data:`MAX_JOBS_PER_GROUP`.
        Give it back with :meth:`leave` and the same ``group``.

        The wait is for the owner's own jobs (a curve's seven methods in three slots), so it goes on for as
        long as they keep finishing: it ends with :class:`JobBusy` (the server is busy, try again; never
        "too heavy") only when none of them gave its slot back for ``queue_limit_s``. It does not count
        against the job's time limit, which starts when a worker starts the job.
        """
        began = time.monotonic()
        told = False
        team = (f"group:{group}", owner[1]) if group is not None and MAX_JOBS_PER_GROUP > 0 else None

        def full() -> bool:
            return self._held.get(owner, 0) >= MAX_JOBS_PER_OWNER or (
                team is not None and self._held.get(team, 0) >= MAX_JOBS_PER_GROUP
            )

        with self._free:
            while full():
                if keep_waiting is not None and not keep_waiting():
                    msg = "nobody waits for this computation any more"
                    raise JobAbandoned(msg)
                mine = self._held.get(owner, 0) >= MAX_JOBS_PER_OWNER
                whose = "this session's" if mine else "this network's"
                n_held = MAX_JOBS_PER_OWNER if mine else MAX_JOBS_PER_GROUP
                last_freed = max(self._freed.get(owner, began), self._freed.get(team, began) if team else began)
                if time.monotonic() > max(began, last_freed) + queue_limit_s:
                    msg = (
                        f"the computation waited {queue_limit_s:.0f} s without a free worker: {whose} "
                        f"other {n_held} computations hold its share and none of them finished "
                        "meanwhile; try again when they have"
                    )
                    raise JobBusy(msg)
                if progress is not None and not told:
                    progress(f"busy: waiting for {whose} other {n_held} computations", 0.0)
                    told = True
                self._free.wait(0.1)
            rank = self._held.get(owner, 0)
            self._held[owner] = rank + 1
            if team is not None:
                # The group's n-th job in flight ranks n, whichever of its sessions asks: twenty tabs of one
                # address queue behind another address's first job, as one session's later jobs do.
                rank = max(rank, self._held.get(team, 0))
                self._held[team] = self._held.get(team, 0) + 1
        return rank

    def leave(self, owner: tuple[str, str], group: str | None = None) -> None:
        """Give one of ``owner``'s slots back (and its group's: as given to :meth:`enter`); wake those waiting."""
        team = (f"group:{group}", owner[1]) if group is not None and MAX_JOBS_PER_GROUP > 0 else None
        with self._free:
            for slots in (owner, team) if team is not None else (owner,):
                left = self._held.get(slots, 1) - 1
                if left > 0:
                    self._held[slots] = left
                    self._freed[slots] = time.monotonic()
                else:
                    self._held.pop(slots, None)
                    self._freed.pop(slots, None)
            self._free.notify_all()

    def held(self, owner: tuple[str, str]) -> int:
        """Slots ``owner`` (an (owner, kind) pair) holds now."""
        with self._free:
            return self._held.get(owner, 0)

    def jobs_of(self, owner: str) -> int:
        """Jobs ``owner`` has in flight now, interactive and long."""
        with self._free:
            return sum(n for (who, _kind), n in self._held.items() if who == owner)
