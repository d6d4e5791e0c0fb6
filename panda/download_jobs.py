"""Live OpenStreetMap downloads for a server: a job on a worker process, one lock per box, a few at a time.

:func:`download_bbox` is what the dashboard's *Download* buttons call (never a link by itself). It

1. rounds the box to the grid (:func:`panda.network.snap_bbox`) and checks it (at most
   :data:`panda.network.MAX_BBOX_AREA_KM2`);
2. returns the cached network when the download cache has it (no request);
3. takes the box's lock: a file lock under ``cache_dir/locks`` (works across the server's threads and
   across several server processes on one machine), so a second click on the same box waits for the
   first download and then reads its file; another box is not held up by it. The locks are
   :data:`LOCK_BUCKETS` files chosen by a hash of the box (a fixed number of files, whatever boxes are
   asked for): two different boxes share a lock only when their hashes collide (1 in 256);
4. takes one of :data:`DEFAULT_MAX_DOWNLOADS` download slots (``PANDA_MAX_DOWNLOADS``) without waiting:
   when all are taken it raises :class:`DownloadBusy` ("another download is running; try again in a
   moment") at once;
5. runs :func:`job_download_bbox` on the project's Dask executor (:mod:`panda.execution`): a worker
   process with its memory limit (its nanny restarts a worker past it; an address-space cap turns one
   huge allocation into a MemoryError) and the time limit :data:`DOWNLOAD_TIMEOUT_S` (past it the job
   is stopped and its worker restarted). The job is a long one (priority LOW): it never takes the worker
   kept for interactive jobs. The web server itself never downloads;
6. writes the network to the download cache atomically (a temporary file, then a rename) and bounds the
   cache (:func:`panda.network.evict_download_cache`).

Failures are exceptions with a sentence: :class:`~panda.errors.OfflineError` (no connection to the
Overpass server, within seconds), :class:`~panda.errors.DownloadError` (server error, time limit, memory),
:class:`DownloadBusy`, ``ValueError`` (a bad box, no roads in it).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from panda import network as pn
from panda.errors import DownloadError, OfflineError
from panda.network.folders import make_private_dir

__all__ = [
    "DOWNLOAD_TIMEOUT_S",
    "DEFAULT_MAX_DOWNLOADS",
    "MAX_DOWNLOADS_ENV",
    "OVERPASS_URL_ENV",
    "DownloadBusy",
    "download_bbox",
    "job_download_bbox",
    "max_downloads",
]

#: Seconds a download job may run on its worker (osmnx waits up to 180 s for each Overpass answer, and
#: a box larger than osmnx's query area, 2,500 km^2, takes two or more queries).
DOWNLOAD_TIMEOUT_S = 600.0
#: Environment variable: how many downloads may run at once on this machine (an int >= 1).
MAX_DOWNLOADS_ENV = "PANDA_MAX_DOWNLOADS"
#: Downloads at once by default: a second person need not wait for the first, a hostile link cannot
#: occupy more than these (and a download needs a click).
DEFAULT_MAX_DOWNLOADS = 2
#: Environment variable naming the Overpass server of the downloads (default: ``osmnx.settings.overpass_url``
#: of the calling process), e.g. a private Overpass instance of a deployment.
OVERPASS_URL_ENV = "PANDA_OVERPASS_URL"
#: Number of box lock files (``cache_dir/locks/box-XX.lock``).
LOCK_BUCKETS = 256
#: Seconds between two tries of a lock another download holds.
_POLL_S = 0.2

try:  # POSIX: locks shared by every process on the machine
    import fcntl
except ImportError:  # pragma: no cover (Windows: locks of this process only)
    fcntl = None  # type: ignore[assignment]

_LOCAL_LOCKS: dict[str, threading.Lock] = {}
_LOCAL_LOCKS_GUARD = threading.Lock()


class DownloadBusy(DownloadError):
    """Every download slot is taken (or the same box is being downloaded for too long): try again soon."""


def max_downloads() -> int:
    """Return how many downloads may run at once: ``PANDA_MAX_DOWNLOADS`` (an int >= 1), else the default (2)."""
    raw = os.environ.get(MAX_DOWNLOADS_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_DOWNLOADS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"The environment variable {MAX_DOWNLOADS_ENV} must be an int >= 1. Got {raw!r} instead."
        raise ValueError(msg)
    return value


# ---------------------------------------------------------------------------------------------
# Locks: files under cache_dir/locks (flock), so several server processes on one machine agree
# ---------------------------------------------------------------------------------------------


class _Held:
    """A lock taken by :func:`_try_lock`; :meth:`release` gives it back."""

    def __init__(self, path: Path, handle: Any) -> None:
        self.path = path
        self._handle = handle

    def release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        if fcntl is None:  # pragma: no cover (a threading lock)
            handle.release()
            return
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        finally:
            handle.close()


def _try_lock(path: Path) -> _Held | None:
    """Take the lock of ``path`` now, or return None when someone else holds it."""
    if fcntl is None:  # pragma: no cover
        with _LOCAL_LOCKS_GUARD:
            lock = _LOCAL_LOCKS.setdefault(str(path), threading.Lock())
        return _Held(path, lock) if lock.acquire(blocking=False) else None
    make_private_dir(path.parent)
    # 0600 when created here; never through a link planted in its place.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    handle = os.fdopen(fd, "a+b")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    except BaseException:
        handle.close()
        raise
    return _Held(path, handle)


def _box_lock_path(locks: Path, key: str) -> Path:
    bucket = int(hashlib.sha256(key.encode()).hexdigest(), 16) % LOCK_BUCKETS
    return locks / f"box-{bucket:02x}.lock"


@contextmanager
def _box_lock(locks: Path, key: str, wait_s: float, on_wait: Callable[[], None] | None) -> Iterator[None]:
    """Hold the box's lock; wait up to ``wait_s`` seconds for another download of it (then DownloadBusy)."""
    path = _box_lock_path(locks, key)
    held = _try_lock(path)
    if held is None and on_wait is not None:
        on_wait()
    deadline = time.monotonic() + wait_s
    while held is None:
        if time.monotonic() >= deadline:
            msg = (
                "This area is being downloaded for another person on this server right now; "
                "try again in a moment (it then opens from the cache)."
            )
            raise DownloadBusy(msg)
        time.sleep(_POLL_S)
        held = _try_lock(path)
    try:
        yield
    finally:
        held.release()


@contextmanager
def _download_slot(locks: Path, n_slots: int) -> Iterator[int]:
    """Hold one of ``n_slots`` download slots, or raise :class:`DownloadBusy` at once when all are taken."""
    for i in range(n_slots):
        held = _try_lock(locks / f"slot-{i}.lock")
        if held is not None:
            break
    else:
        msg = f"Another download is running on this server (at most {n_slots} at a time); try again in a moment."
        raise DownloadBusy(msg)
    try:
        yield i
    finally:
        held.release()


# ---------------------------------------------------------------------------------------------
# The job (runs on a worker process) and the server's side
# ---------------------------------------------------------------------------------------------


def job_download_bbox(
    west: float, south: float, east: float, north: float, network_type: str, overpass_url: str, request_timeout_s: float
) -> dict:
    """Download one (already snapped) box on a worker; no cache here (the server writes it).

    Returns ``{"network": RoadNetwork}``, or ``{"error": kind, "message": text}`` with kind
    ``"offline"``, ``"download"`` or ``"value"`` (the server raises the matching exception).
    """
    import osmnx as ox

    bbox = pn.BoundingBox(west, south, east, north)
    with pn._DOWNLOAD_LOCK:  # osmnx's settings are global (a worker may run several threads)
        ox.settings.overpass_url = overpass_url
        try:
            net = pn.download_network(bbox, network_type, http_cache=None, timeout_s=request_timeout_s)
        except OfflineError as exc:
            return {"error": "offline", "message": str(exc)}
        except DownloadError as exc:
            return {"error": "download", "message": str(exc)}
        except ValueError as exc:
            return {"error": "value", "message": str(exc)}
    return {"network": net}


def _default_run() -> Callable[..., Any]:
    from panda.execution import get_executor

    return get_executor().run


def download_bbox(
    west: float,
    south: float,
    east: float,
    north: float,
    *,
    network_type: str = "drive",
    cache_dir: str | os.PathLike | None = None,
    run: Callable[..., Any] | None = None,
    timeout_s: float = DOWNLOAD_TIMEOUT_S,
    box_wait_s: float | None = None,
    on_wait: Callable[[], None] | None = None,
) -> pn.RoadNetwork:
    """Return the box's road network: from the download cache, else downloaded by a job on a worker (see the module).

    Parameters
    ----------
    west, south, east, north
        The box in degrees; rounded to :data:`panda.network.BBOX_GRID_DEG` first.
    network_type
        One of :data:`panda.network.NETWORK_TYPES`.
    cache_dir
        Folder of the caches (default ``data/cache``): ``networks/`` gets the network, ``locks/`` the locks.
    run
        ``run(fn, *args, timeout_s=..., priority=...)`` that runs a job on a worker (default: the
        process-wide executor's :meth:`panda.execution.Executor.run`; the dashboard passes its own).
    timeout_s
        Seconds the job may run on its worker.
    box_wait_s
        Seconds to wait for another download of the same box (default ``timeout_s`` plus a minute).
    on_wait
        Called once when the box's lock is held by another download (to say so in a page).

    Raises
    ------
    ValueError
        A bad or too large box, an unknown network type, or a box without roads.
    OfflineError
        No connection to the Overpass server (``PANDA_OVERPASS_URL``, else ``osmnx.settings.overpass_url`` of
        this process).
    DownloadBusy
        Every download slot is taken, or the same box stayed locked for ``box_wait_s``.
    DownloadError
        The server's error, the time limit, the worker's memory limit, or another failure of the job.
    """
    bbox = pn.snap_bbox(pn.BoundingBox(west, south, east, north))
    pn._check_download_args(bbox, network_type, timeout_s, "download_bbox")
    root = pn._cache_root(cache_dir)
    cache_file = root / "networks" / pn._cache_name(bbox, network_type)
    cached = pn._read_cached(cache_file, warn=False)
    if cached is not None:
        return cached
    locks = root / "locks"
    wait_s = float(timeout_s) + 60.0 if box_wait_s is None else float(box_wait_s)
    with _box_lock(locks, cache_file.name, wait_s, on_wait):
        cached = pn._read_cached(cache_file, warn=False)  # the download we waited for wrote it
        if cached is not None:
            return cached
        with _download_slot(locks, max_downloads()):
            out = _run_job(run or _default_run(), bbox, network_type, float(timeout_s))
        net = out["network"]
        try:
            pn._save_network_npz(net, cache_file)
        except OSError as exc:
            msg = f"Could not cache the downloaded network in {cache_file} ({exc}): the next call downloads it again."
            import warnings

            warnings.warn(msg, pn.PandaWarning, stacklevel=2)
        else:
            pn.evict_download_cache(root, keep=cache_file)
    return net


def _run_job(run: Callable[..., Any], bbox: pn.BoundingBox, network_type: str, timeout_s: float) -> dict:
    import osmnx as ox

    from panda.execution import LOW, MEMORY_MESSAGE, JobBusy, JobError, JobTimeout

    url = os.environ.get(OVERPASS_URL_ENV, "").strip() or ox.settings.overpass_url
    try:
        out = run(
            job_download_bbox,
            *bbox.as_tuple(),
            network_type,
            url,
            pn.DEFAULT_TIMEOUT_S,
            timeout_s=timeout_s,
            priority=LOW,
        )
    except JobTimeout as exc:
        if isinstance(exc, JobBusy):  # no worker (or no slot of this session's) in time
            msg = "The download could not start: every computing worker of this server is busy. Try again in a moment."
            raise DownloadBusy(msg) from None
        msg = (
            f"The download did not finish within {timeout_s:,.0f} s and was stopped: choose a smaller box, or try "
            "again later (the OpenStreetMap server may be busy)."
        )
        raise DownloadError(msg) from None
    except JobError as exc:
        text = str(exc)
        if MEMORY_MESSAGE in text or "died" in text:
            msg = "The download needed more memory than this server allows one download: choose a smaller box."
        else:
            msg = f"The download failed on its worker process ({text})."
        raise DownloadError(msg) from None
    if "error" in out:
        kind = {"offline": OfflineError, "download": DownloadError, "value": ValueError}[out["error"]]
        raise kind(out["message"])
    return out
