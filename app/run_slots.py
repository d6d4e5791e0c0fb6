"""Script runs in progress per client address: one person's many tabs wait for each other, not the class.

With ``PANDA_RUNS_PER_ADDRESS=N`` (N > 0), every page run of the dashboard takes a slot of its client's address
group (app.client_address) for as long as it runs: at most N at once. A run over the limit waits for a slot, up
to :data:`WAIT_S`, and then says so in a sentence. The server is one Python process whose script runs take
turns, so twenty tabs reopening heavy links would otherwise take twenty turns for every one of an ordinary
student's. A client whose address is unknown (on this machine, no proxy header) is not limited.

Off by default (:data:`DEFAULT_RUNS_PER_ADDRESS` is 0): a run holds its slot while it waits for its jobs, so a
few long pages of one address (a lecturer's, or a class behind one NAT address) make its other pages wait.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

__all__ = ["DEFAULT_RUNS_PER_ADDRESS", "RUNS_PER_ADDRESS_ENV", "WAIT_S", "runs_per_address", "slot"]

RUNS_PER_ADDRESS_ENV = "PANDA_RUNS_PER_ADDRESS"
DEFAULT_RUNS_PER_ADDRESS = 0
#: Seconds a run waits for a slot before it gives up with a sentence.
WAIT_S = 60.0

_lock = threading.Lock()
_slots: dict[str, threading.BoundedSemaphore] = {}
_holders: dict[str, int] = {}


def runs_per_address() -> int:
    """The limit (0: none)."""
    try:
        return max(0, int(os.environ.get(RUNS_PER_ADDRESS_ENV, DEFAULT_RUNS_PER_ADDRESS)))
    except ValueError:
        return DEFAULT_RUNS_PER_ADDRESS


@contextlib.contextmanager
def slot(group: str | None, *, wait_s: float = WAIT_S) -> Iterator[bool]:
    """Hold one of ``group``'s run slots for the ``with`` block; yields False when none came within ``wait_s``."""
    limit = runs_per_address()
    if group is None or limit == 0:
        yield True
        return
    with _lock:
        sem = _slots.get(group)
        if sem is None:
            sem = _slots[group] = threading.BoundedSemaphore(limit)
        _holders[group] = _holders.get(group, 0) + 1
    got = sem.acquire(timeout=wait_s)
    try:
        yield got
    finally:
        if got:
            sem.release()
        with _lock:  # the last one out forgets the address (the dict stays as large as the live clients)
            _holders[group] -= 1
            if _holders[group] == 0:
                del _holders[group]
                _slots.pop(group, None)
