"""The instances the server keeps, bounded by their bytes as well as by their count (issue 38).

Streamlit's cache bounds the kept instances by number (app/state.py: ``MAX_INSTANCES``). Eight small ones are a
few MB; eight near the 1 GB cap a view may reach (:data:`panda.instance.MAX_DENSE_BYTES`), as a run of uploads
could build, would be 8 GB in the web server. The ledger here counts each kept instance's bytes
(:func:`panda.instance.instance_footprint` of its sizes: its tables at their largest) in the order they were last
used, and names the ones to drop, the least recently used first, when together they would exceed the budget.
The instance in use is never dropped (a single view up to the cap always fits).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Hashable

__all__ = ["InstanceBudget", "DEFAULT_BUDGET_BYTES"]

#: Bytes of instance tables the server keeps at once: two views at the cap, or the class's few ordinary views.
DEFAULT_BUDGET_BYTES = 2_000_000_000


class InstanceBudget:
    """A least-recently-used ledger of kept instances' bytes (thread-safe; holds keys and numbers only)."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES, max_entries: int | None = None) -> None:
        self.budget_bytes = int(budget_bytes)
        self.max_entries = max_entries
        self._bytes: collections.OrderedDict[Hashable, int] = collections.OrderedDict()
        self._lock = threading.Lock()

    def use(self, key: Hashable, nbytes: int) -> list[Hashable]:
        """Record that the instance of ``key`` (``nbytes``) is in use; returns the keys to drop now, oldest first.

        Keys beyond ``max_entries`` are forgotten without being named (the cache itself has dropped them).
        """
        drop: list[Hashable] = []
        with self._lock:
            self._bytes[key] = int(nbytes)
            self._bytes.move_to_end(key)
            if self.max_entries is not None:
                while len(self._bytes) > self.max_entries:
                    self._bytes.popitem(last=False)
            total = sum(self._bytes.values())
            while total > self.budget_bytes and len(self._bytes) > 1:
                old, old_bytes = self._bytes.popitem(last=False)
                total -= old_bytes
                drop.append(old)
        return drop

    def clear(self) -> None:
        """Forget every kept instance (the cache was cleared)."""
        with self._lock:
            self._bytes.clear()

    @property
    def total_bytes(self) -> int:
        """Bytes of the instances recorded as kept."""
        with self._lock:
            return sum(self._bytes.values())

    def keys(self) -> list[Hashable]:
        """The kept instances' keys, least recently used first."""
        with self._lock:
            return list(self._bytes)
