"""Keep the web server's memory level with glibc's allocator (Linux; elsewhere nothing happens).

Every Streamlit script run is a thread of its own, and glibc gives threads their own malloc arenas (up
to 8 per core) that keep freed memory; the big short-lived blocks of a rerun (a map's JSON, a mechanism's
matrix) then leave the server's resident memory higher after every burst of reruns. Measured with
``bench/bench_load.py --soak`` (docs/benchmarks.md, "Memory soak"). :func:`tune` asks glibc for at most
:data:`ARENA_MAX` arenas and to serve blocks of :data:`MMAP_THRESHOLD_BYTES` or more from their own
mappings (returned to the system when freed), and :func:`start_trimmer` hands the free pages inside the
arenas back to the system every :data:`TRIM_INTERVAL_S` seconds (``malloc_trim``). The Dask workers need
none of this: the nanny already sets their ``MALLOC_TRIM_THRESHOLD_``.

The garbage collector, too: Streamlit runs a full collection (``gc.collect(2)``) after every script run,
and with the server's heap (networks, instances, matrices, Streamlit's own state) each one walks every
object with the GIL held: a class's phones polling a round every 3 s then ask for more CPU than the one
process has (bench/bench_game.py measures it; docs/benchmarks.md). :func:`start_gc_freezer` moves every
object that survives a full collection into the permanent generation (``gc.freeze``) every
:data:`FREEZE_INTERVAL_S` seconds (30), so the collection after a run only walks what is newer. It first
unfreezes and collects everything, so cyclic garbage is still freed, at most one interval late.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import sys
import threading

__all__ = [
    "ARENA_MAX",
    "FREEZE_INTERVAL_S",
    "MMAP_THRESHOLD_BYTES",
    "TRIM_INTERVAL_S",
    "refreeze",
    "start_gc_freezer",
    "start_trimmer",
    "tune",
]

log = logging.getLogger(__name__)

#: Most malloc arenas for the whole process (glibc's default: 8 per core).
ARENA_MAX = 2
#: Blocks at least this big get a mapping of their own (glibc's default threshold floats up to 32 MiB).
MMAP_THRESHOLD_BYTES = 1 << 20
#: Seconds between two ``malloc_trim(0)`` calls of the trimmer thread.
TRIM_INTERVAL_S = 30.0
#: Seconds between two re-freezes of the heap by the freezer thread (the first comes after FIRST_FREEZE_S:
#: once the first page has loaded its network and instance).
FREEZE_INTERVAL_S = 30.0
FIRST_FREEZE_S = 15.0

# mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

_lock = threading.Lock()
_state: dict[str, object] = {}


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (musl and others have no useful ``mallopt``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        version = libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_char_p
    return libc


def tune(arena_max: int = ARENA_MAX, mmap_threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Set the allocator's arena cap and mmap threshold once per process; True when glibc took both."""
    with _lock:
        if "tuned" not in _state:
            libc = _glibc()
            ok = False
            if libc is not None:
                ok = libc.mallopt(_M_ARENA_MAX, int(arena_max)) == 1
                ok = libc.mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)) == 1 and ok
            _state["tuned"] = ok
        return bool(_state["tuned"])


def trim() -> bool:
    """Return the free memory of every arena to the system now; True when some was returned."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)


def start_trimmer(interval_s: float = TRIM_INTERVAL_S) -> bool:
    """Start the daemon thread that calls :func:`trim` every ``interval_s`` seconds (once per process)."""
    with _lock:
        if "trimmer" in _state:
            return True
        if _glibc() is None:
            return False
        _state["trimmer"] = _every(interval_s, interval_s, trim, "panda-malloc-trim")
        return True


def _every(first_s: float, interval_s: float, fn, name: str) -> tuple:  # noqa: ANN001 (a callable)
    """A daemon thread calling ``fn()`` after ``first_s`` seconds, then every ``interval_s``; its errors are logged."""
    stop = threading.Event()

    def loop() -> None:
        wait = first_s
        while not stop.wait(wait):
            wait = interval_s
            try:
                fn()
            except Exception:  # noqa: BLE001 (never take the server down for this)
                log.debug("%s failed", name, exc_info=True)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread, stop


def refreeze() -> int:
    """Collect everything (the frozen objects too), then freeze the survivors; returns how many are frozen."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def start_gc_freezer(interval_s: float = FREEZE_INTERVAL_S) -> bool:
    """Start the daemon thread that calls :func:`refreeze` every ``interval_s`` seconds (once per process)."""
    with _lock:
        if "freezer" in _state:
            return False
        _state["freezer"] = _every(min(FIRST_FREEZE_S, interval_s), interval_s, refreeze, "panda-gc-freeze")
        return True
