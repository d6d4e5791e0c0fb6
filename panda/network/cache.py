"""Copies of road networks on disk: the .npz format, and the download cache.

The .npz format (:func:`_save_network_npz`, :func:`_load_network_npz`) keeps downloaded networks, uploaded
files' networks and the embedded cities' parsed copies. The download cache is the folders
:data:`DOWNLOAD_CACHE_FOLDERS` of the cache folder: one file per box (rounded to the grid by
:func:`snap_bbox`) and network type, and osmnx's HTTP cache, bounded together (:func:`evict_download_cache`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from panda.errors import PandaWarning
from panda.network.folders import _cache_root
from panda.network.roads import BoundingBox, RoadNetwork

#: Grid of the boxes, degrees: every box is rounded to it (:func:`snap_bbox`) before it names its cache
#: file and its download, so boxes a few metres apart are one download. 1e-4 degrees is about 11 m of
#: latitude, below the length of a road segment, and it is the precision of the dashboard's box inputs and
#: presets: no box a person can type there is changed by it, while a box moved by 1e-6 degrees (0.1 m) is.
BBOX_GRID_DEG = 1e-4

#: Environment variable bounding the download cache (``networks/`` and osmnx's ``osmnx/`` under the cache
#: folder), in MB; least recently used files go first beyond it. Embedded cities' parsed copies
#: (``cities/``) and uploads (``uploads/``, bounded on their own) are not part of it.
DOWNLOAD_CACHE_MB_ENV = "PANDA_DOWNLOAD_CACHE_MB"
#: Default bound of the download cache, MB (the Rome box's drive network is about 10 MB as .npz).
DEFAULT_DOWNLOAD_CACHE_MB = 300.0
#: Folders of the cache folder that make up the download cache (evicted least recently used first).
DOWNLOAD_CACHE_FOLDERS = ("networks", "osmnx")
#: A temporary file of an interrupted write older than this (seconds) is removed by the eviction.
_STALE_TMP_S = 3600.0

_CACHE_FORMAT = 1


def snap_bbox(bbox: BoundingBox, grid_deg: float = BBOX_GRID_DEG) -> BoundingBox:
    """Return ``bbox`` with each edge rounded to the nearest multiple of ``grid_deg`` degrees.

    A box narrower than the grid keeps one grid step (it never becomes empty). Rounding twice gives the
    same box; boxes whose edges differ by less than half a step round to the same box, except an edge
    that lies within that distance of a half step (any grid has such edges).
    """
    w, s, e, n = (round(round(v / grid_deg) * grid_deg, 9) for v in bbox.as_tuple())
    if not w < e:
        w, e = (w, round(w + grid_deg, 9)) if w + grid_deg <= 180.0 else (round(e - grid_deg, 9), e)
    if not s < n:
        s, n = (s, round(s + grid_deg, 9)) if s + grid_deg <= 90.0 else (round(n - grid_deg, 9), n)
    return BoundingBox(w, s, e, n)


def bbox_cache_file(
    west: float,
    south: float,
    east: float,
    north: float,
    *,
    network_type: str = "drive",
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """Return the cache file of a box's network (after :func:`snap_bbox`), whether it exists or not."""
    return (
        _cache_root(cache_dir)
        / "networks"
        / _cache_name(snap_bbox(BoundingBox(west, south, east, north)), network_type)
    )


def cached_bbox_network(
    west: float,
    south: float,
    east: float,
    north: float,
    *,
    network_type: str = "drive",
    cache_dir: str | os.PathLike | None = None,
) -> RoadNetwork | None:
    """Return the box's network from the download cache, or None when it is not there (never a download).

    A file found is marked as recently used (evicted last).
    """
    return _read_cached(
        bbox_cache_file(west, south, east, north, network_type=network_type, cache_dir=cache_dir), warn=False
    )


def is_bbox_cached(
    west: float,
    south: float,
    east: float,
    north: float,
    *,
    network_type: str = "drive",
    cache_dir: str | os.PathLike | None = None,
) -> bool:
    """Whether the box's network is in the download cache (no download, no parsing; marks it recently used)."""
    path = bbox_cache_file(west, south, east, north, network_type=network_type, cache_dir=cache_dir)
    try:
        os.utime(path)
    except OSError:
        return False
    return path.is_file()


def download_cache_max_bytes() -> int:
    """Return the download cache's bound in bytes: ``PANDA_DOWNLOAD_CACHE_MB`` (MB), else the default (300 MB).

    A value that is not a number >= 0 is ignored with a :class:`PandaWarning` (the default applies).
    """
    raw = os.environ.get(DOWNLOAD_CACHE_MB_ENV, "").strip()
    mb = DEFAULT_DOWNLOAD_CACHE_MB
    if raw:
        try:
            value = float(raw)
            if not (0 <= value < math.inf):
                raise ValueError
            mb = value
        except ValueError:
            msg = (
                f"The environment variable {DOWNLOAD_CACHE_MB_ENV} must be a number of MB >= 0. Got {raw!r} "
                f"instead: the download cache keeps its default bound of {DEFAULT_DOWNLOAD_CACHE_MB:g} MB."
            )
            warnings.warn(msg, PandaWarning, stacklevel=2)
    return int(mb * 1_000_000)


def evict_download_cache(
    cache_dir: str | os.PathLike | None = None, *, keep: Path | None = None, max_bytes: int | None = None
) -> list[Path]:
    """Delete the least recently used files of the download cache until it holds at most ``max_bytes``.

    The download cache is the folders :data:`DOWNLOAD_CACHE_FOLDERS` (``networks/``, ``osmnx/``) of
    ``cache_dir`` (default ``data/cache``); nothing else there is touched (``cities/``: the embedded
    cities' parsed copies; ``uploads/``: bounded on their own). "Used" is the file's modification time,
    which a read from the cache renews. ``keep`` (the file just written) is never deleted, so the cache
    may exceed its bound by that one file when it alone is larger. Temporary files of interrupted writes
    older than an hour are deleted too. ``max_bytes`` defaults to :func:`download_cache_max_bytes`.

    Returns the deleted files, least recently used first.
    """
    root = _cache_root(cache_dir)
    limit = download_cache_max_bytes() if max_bytes is None else int(max_bytes)
    keep = keep.resolve() if keep is not None else None
    now = time.time()
    entries: list[tuple[float, int, Path]] = []
    deleted: list[Path] = []
    for folder in DOWNLOAD_CACHE_FOLDERS:
        base = root / folder
        if not base.is_dir() or base.is_symlink():
            continue
        for path in base.rglob("*"):
            try:
                st = path.lstat()
            except OSError:
                continue
            if not path.is_file() or path.is_symlink():
                continue
            if path.name.endswith(".tmp") and path.name.startswith("."):
                if now - st.st_mtime > _STALE_TMP_S:
                    path.unlink(missing_ok=True)
                    deleted.append(path)
                continue  # a write in progress: not counted, never deleted
            entries.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries, key=lambda x: (x[0], str(x[2]))):
        if total <= limit:
            break
        if keep is not None and path.resolve() == keep:
            continue
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            continue
        total -= size
        deleted.append(path)
    return deleted


def _read_cached(cache_file: Path, *, warn: bool = True) -> RoadNetwork | None:
    """Return the cached network, or None when there is none (or it is unreadable: then warn)."""
    if not cache_file.is_file():
        return None
    try:
        net = _load_network_npz(cache_file)
    except (OSError, ValueError, KeyError) as exc:
        if warn:
            msg = f"Ignoring the unreadable cached network {cache_file} ({exc}); downloading it again."
            warnings.warn(msg, PandaWarning, stacklevel=3)
        return None
    with contextlib.suppress(OSError):
        os.utime(cache_file)  # recently used: evicted last
    return net


def _cache_name(bbox: BoundingBox, network_type: str) -> str:
    w, s, e, n = bbox.as_tuple()
    return f"bbox_{w:.6f}_{s:.6f}_{e:.6f}_{n:.6f}_{network_type}.npz"


_NPZ_ARRAYS = ("osm_id", "lon", "lat", "street_count", "edge_u", "edge_v", "edge_length_m")


def _save_network_npz(net: RoadNetwork, path: Path) -> None:
    """Write ``net`` to ``path`` atomically (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": _CACHE_FORMAT, "name": net.name, "attribution": net.attribution, "source": net.source}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, meta=np.array(json.dumps(meta)), **{k: getattr(net, k) for k in _NPZ_ARRAYS})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _load_network_npz(path: Path) -> RoadNetwork:
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        if meta.get("format") != _CACHE_FORMAT:
            msg = f"cache format {meta.get('format')!r}, expected {_CACHE_FORMAT}"
            raise ValueError(msg)
        arrays = {k: data[k] for k in _NPZ_ARRAYS}
    return RoadNetwork(
        name=meta["name"], attribution=meta["attribution"], source=f"{meta['source']} (cached: {path})", **arrays
    )
