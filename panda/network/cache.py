"""Copies of road networks on disk: the .npz format, and the download cache.

The .npz format (:func:`_save_network_npz`, :func:`_load_network_npz`) keeps downloaded networks, uploaded
files' networks and the embedded cities' parsed copies. The download cache is the folders
:data:`DOWNLOAD_CACHE_FOLDERS` of the cache folder: one file per box (rounded to the grid by
:func:`snap_bbox`) and network type, and osmnx's HTTP cache, bounded together (:func:`evict_download_cache`).

Every .npz file read from disk is read as hostile (a cache folder can be written by others, or a file damaged):
:func:`load_npz_checked` reads what each member declares (its size in the archive, its array's shape and type)
and refuses a file beyond the caps before anything is decompressed in bulk, and :func:`_load_network_npz` checks
the network's arrays against each other. A refused file is a cache miss (one log line), never a traceback.
Files are written private (:func:`panda.network.folders.open_private`, 0600, in 0700 folders).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import threading
import time
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np

from panda.errors import PandaWarning
from panda.network.folders import _cache_root, make_private_dir, open_private
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

log = logging.getLogger(__name__)

#: Most nodes a cached network may hold. The paper's Rome box (2,330 km²) has a drive network of about 10 MB as
#: .npz, of the order of 200,000 nodes; a box of the largest area a download may have (``MAX_BBOX_AREA_KM2``,
#: 5,000 km²) of the densest network type ("all", several times the drive network's nodes) is estimated at up to
#: about two million; uploads have at most 300,000 road nodes. Four million leaves room for any of them and
#: bounds what a cached file can make the server allocate.
MAX_CACHED_NODES = 4_000_000
#: Most directed edges a cached network may hold: three per node (street networks have fewer than three).
MAX_CACHED_EDGES = 3 * MAX_CACHED_NODES
#: Most characters of a cached network's metadata (its name, attribution and source: a few hundred).
MAX_META_CHARS = 65_536
#: Most bytes a cached network's arrays may unpack to: 8 bytes per value (ids, coordinates, street counts
#: per node; two ends and a length per edge), the metadata (4 bytes a character), and 1 MiB of room for the
#: members' headers and for what deflate adds to data that does not compress (a few bytes per 16 kB block).
MAX_NETWORK_BYTES = 8 * (4 * MAX_CACHED_NODES + 3 * MAX_CACHED_EDGES) + 4 * MAX_META_CHARS + 2**20
#: Dtype kinds of the arrays :func:`load_npz_checked` accepts when no spec names a member's type.
NUMERIC_KINDS = "biuf"
#: Most members an .npz archive may have (:func:`load_npz_checked`).
MAX_NPZ_MEMBERS = 64
#: Most bytes of an .npy member's header (numpy's own reader allows 10,000).
_MAX_NPY_HEADER = 10_000
#: A member's declared dtype: an exact dtype, or the kinds allowed (``"iu"``: any integer, ``"f"``: any float).
DtypeRule = np.dtype | str
#: A member's declared shape: its dimensions, each a length or None for any length.
ShapeRule = tuple[int | None, ...]


class RefusedFile(ValueError):
    """An .npz file or payload refused: beyond a cap, not of the expected layout, or damaged.

    Raised by :func:`load_npz_checked` and :func:`_load_network_npz`. A :class:`ValueError`, so that callers
    treating unreadable caches as misses treat it so too.
    """


def load_npz_checked(
    source: bytes | BinaryIO,
    *,
    max_bytes: int,
    spec: Mapping[str, tuple[DtypeRule, ShapeRule]] | None = None,
    other_kinds: str = "",
    max_members: int = MAX_NPZ_MEMBERS,
) -> dict[str, np.ndarray]:
    """Read an .npz archive's arrays after checking what it declares, never a pickle.

    Before anything is decompressed in bulk, every member's declared size (the zip directory's) and its .npy
    header (shape, dtype) are read: the archive is refused when they add up to more than ``max_bytes``, when a
    header disagrees with its member's size, when a member is missing or not expected, or when a dtype or shape
    does not match. The data read is then bounded by those declared sizes (zipfile stops at a member's
    declared size and checks its CRC).

    Parameters
    ----------
    source
        The archive's bytes, or a binary file open for reading (seekable).
    max_bytes
        Most bytes the arrays may unpack to, all members together.
    spec
        Member name (without ``.npy``) -> (dtype rule, shape rule): the members that must be there, each an
        exact :class:`numpy.dtype` or a string of the dtype kinds allowed, and its dimensions (None: any
        length). None: any members (of :data:`NUMERIC_KINDS`, any shape).
    other_kinds
        With a ``spec``: the dtype kinds members it does not name may have (``""``: no other member allowed).
    max_members
        Most members the archive may have.

    Returns
    -------
    dict of str to numpy.ndarray
        The arrays, by member name.

    Raises
    ------
    RefusedFile
        When the archive is refused (the message says why, on one line).
    """
    try:
        return _load_npz_checked(source, int(max_bytes), spec, other_kinds, int(max_members))
    except RefusedFile:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 (a damaged archive breaks its parser in many ways: all are a refusal)
        msg = f"not a readable .npz archive ({type(exc).__name__}: {str(exc)[:200]})"
        raise RefusedFile(" ".join(msg.split())) from None


def _load_npz_checked(
    source: bytes | BinaryIO,
    max_bytes: int,
    spec: Mapping[str, tuple[DtypeRule, ShapeRule]] | None,
    other_kinds: str,
    max_members: int,
) -> dict[str, np.ndarray]:
    fh = io.BytesIO(source) if isinstance(source, (bytes, bytearray, memoryview)) else source
    with zipfile.ZipFile(fh) as zf:
        infos = zf.infolist()
        if len(infos) > max_members:
            msg = f"{len(infos)} members, at most {max_members} allowed"
            raise RefusedFile(msg)
        names = [info.filename.removesuffix(".npy") for info in infos]
        if any(not info.filename.endswith(".npy") or info.is_dir() for info in infos) or len(set(names)) < len(names):
            msg = "members that are not distinct .npy arrays"
            raise RefusedFile(msg)
        declared = sum(info.file_size for info in infos)
        if declared > max_bytes:
            msg = f"members declaring {declared:,} bytes, more than the {max_bytes:,} allowed"
            raise RefusedFile(msg)
        if spec is not None:
            missing = sorted(set(spec) - set(names))
            extra = sorted(set(names) - set(spec))
            if missing or (extra and not other_kinds):
                msg = f"members {names[:8]!r}, expected {sorted(spec)!r}"
                raise RefusedFile(msg)
        arrays: dict[str, np.ndarray] = {}
        for name, info in zip(names, infos, strict=True):
            if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                msg = f"member {name!r} is encrypted or compressed in a way numpy never writes"
                raise RefusedFile(msg)
            rule = spec.get(name) if spec is not None else None
            if rule is None:
                rule = (other_kinds if spec is not None else NUMERIC_KINDS, None)
            with zf.open(info) as member:
                arrays[name] = _read_member(member, name, info.file_size, rule)
    return arrays


def _read_member(member: BinaryIO, name: str, size: int, rule: tuple[DtypeRule, ShapeRule | None]) -> np.ndarray:
    """Return one .npy member: its header checked against ``rule`` and its declared ``size``, then its data."""
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(member, max_header_size=_MAX_NPY_HEADER)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(member, max_header_size=_MAX_NPY_HEADER)
    else:
        msg = f"member {name!r} has .npy format version {version}"
        raise RefusedFile(msg)
    want_dtype, want_shape = rule
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        msg = f"member {name!r} has the structured or object dtype {dtype}"
        raise RefusedFile(msg)
    if isinstance(want_dtype, np.dtype) and dtype != want_dtype:
        ok = False
    elif isinstance(want_dtype, str):
        ok = dtype.kind in want_dtype and (dtype.kind == "U" or dtype.itemsize <= 8)
    else:
        ok = True
    if not ok:
        msg = f"member {name!r} has dtype {dtype}, expected {want_dtype}"
        raise RefusedFile(msg)
    if any(not isinstance(n, int) or n < 0 for n in shape):
        msg = f"member {name!r} has the shape {shape}"
        raise RefusedFile(msg)
    if want_shape is not None and (
        len(shape) != len(want_shape) or any(w is not None and n != w for n, w in zip(shape, want_shape, strict=True))
    ):
        msg = f"member {name!r} has the shape {shape}, expected {want_shape}"
        raise RefusedFile(msg)
    nbytes = math.prod(shape) * dtype.itemsize
    if member.tell() + nbytes != size:
        msg = f"member {name!r} declares {size:,} bytes, its header {member.tell() + nbytes:,}"
        raise RefusedFile(msg)
    buf = bytearray(nbytes)
    view = memoryview(buf)
    got = 0
    while got < nbytes:
        n = member.readinto(view[got:])
        if not n:
            msg = f"member {name!r} is truncated"
            raise RefusedFile(msg)
        got += n
    if member.read(1):  # also reaches the member's end, where zipfile checks its CRC
        msg = f"member {name!r} holds more than its header says"
        raise RefusedFile(msg)
    count = math.prod(shape)
    flat = np.frombuffer(buf, dtype=dtype, count=count) if count else np.empty(0, dtype=dtype)
    return flat.reshape(shape, order="F" if fortran else "C")


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
    except (OSError, ValueError, KeyError) as exc:  # RefusedFile is a ValueError
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
    """Write ``net`` to ``path`` atomically (a temporary file, then a rename), private to the server's user.

    Folders created on the way get mode 0700 and the file 0600 (:mod:`panda.network.folders`): a cache holds
    the areas people looked at and the networks of the files they uploaded.
    """
    make_private_dir(path.parent)
    meta = {"format": _CACHE_FORMAT, "name": net.name, "attribution": net.attribution, "source": net.source}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.unlink(missing_ok=True)  # a crashed write of this process and thread id: open_private makes a new file
        with open_private(tmp) as fh:
            np.savez_compressed(fh, meta=np.array(json.dumps(meta)), **{k: getattr(net, k) for k in _NPZ_ARRAYS})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


#: The network's arrays in a cache file: integer ids and indices, float coordinates and lengths, one dimension.
_NPZ_SPEC: dict[str, tuple[DtypeRule, ShapeRule]] = {
    "meta": ("U", ()),
    "osm_id": ("iu", (None,)),
    "lon": ("f", (None,)),
    "lat": ("f", (None,)),
    "street_count": ("iu", (None,)),
    "edge_u": ("iu", (None,)),
    "edge_v": ("iu", (None,)),
    "edge_length_m": ("f", (None,)),
}


def _load_network_npz(path: Path) -> RoadNetwork:
    """Read a cached network, checked.

    Refused (:class:`RefusedFile`, one log line) beyond the caps or when its arrays do not make a network
    (lengths that differ, edges to no node, coordinates off the globe).
    """
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_NETWORK_BYTES:  # a file larger than any archive within the cap: not even opened
                msg = f"{size:,} bytes on disk, more than the {MAX_NETWORK_BYTES:,} a network may unpack to"
                raise RefusedFile(msg)
            data = load_npz_checked(fh, max_bytes=MAX_NETWORK_BYTES, spec=_NPZ_SPEC)
        meta, arrays = _network_parts(data)
    except RefusedFile as exc:
        log.warning("network cache: refused %s (%s): read as not cached", path, exc)
        raise
    if meta.get("format") != _CACHE_FORMAT:
        msg = f"cache format {meta.get('format')!r}, expected {_CACHE_FORMAT}"
        raise ValueError(msg)
    return RoadNetwork(
        name=meta["name"], attribution=meta["attribution"], source=f"{meta['source']} (cached: {path})", **arrays
    )


def _network_parts(data: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """Return the metadata and the arrays of a cached network, checked against each other."""
    text = str(data["meta"])
    if len(text) > MAX_META_CHARS:
        msg = f"metadata of {len(text):,} characters"
        raise RefusedFile(msg)
    try:
        meta = json.loads(text)
    except ValueError:
        msg = "metadata that is not JSON"
        raise RefusedFile(msg) from None
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k), str) for k in ("name", "attribution", "source")):
        msg = "metadata without a name, an attribution and a source"
        raise RefusedFile(msg)
    arrays = {k: data[k] for k in _NPZ_ARRAYS}
    n_nodes, n_edges = arrays["lon"].shape[0], arrays["edge_u"].shape[0]
    if n_nodes > MAX_CACHED_NODES or n_edges > MAX_CACHED_EDGES:
        msg = f"{n_nodes:,} nodes and {n_edges:,} edges, beyond {MAX_CACHED_NODES:,} and {MAX_CACHED_EDGES:,}"
        raise RefusedFile(msg)
    if any(arrays[k].shape[0] != n_nodes for k in ("osm_id", "lat", "street_count")) or any(
        arrays[k].shape[0] != n_edges for k in ("edge_v", "edge_length_m")
    ):
        msg = "node or edge arrays of different lengths"
        raise RefusedFile(msg)
    ends = (arrays["edge_u"], arrays["edge_v"])
    if n_edges and (min(int(e.min()) for e in ends) < 0 or max(int(e.max()) for e in ends) >= n_nodes):
        msg = "edges whose ends are not nodes"
        raise RefusedFile(msg)
    lon, lat, length = arrays["lon"], arrays["lat"], arrays["edge_length_m"]
    with np.errstate(invalid="ignore"):
        off_globe = not (np.all(np.abs(lon) <= 180.0) and np.all(np.abs(lat) <= 90.0))
        bad_length = not np.all((length >= 0.0) & np.isfinite(length))
    if off_globe or bad_length:
        msg = "coordinates off the globe or edge lengths that are not finite and >= 0"
        raise RefusedFile(msg)
    return meta, arrays
