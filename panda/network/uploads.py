"""Road networks from uploaded OpenStreetMap files, safely: bounded size, decompressed size and what is read.

An upload is read with pyosmium (:mod:`panda.network.files`) and its network kept under its id in the
upload cache (``cache_dir/uploads``, bounded on its own), so that a link can name it (:func:`load_upload`).

Where it is read: :func:`network_from_upload` hands the bytes to ``read`` (default :func:`read_upload`, in
this process); the dashboard passes :func:`panda.upload_jobs.reader`, which reads the file in a job on a worker
process (:func:`panda.jobs.upload_network_job`) under the worker's memory and time limits, so the calling
process (the web server) only checks the size, hashes the bytes, looks in the upload cache and keeps the
network the job sends back.

What the reader may take (counted as the file streams, the reading stopped at once past a cap, with a
sentence): :data:`MAX_UPLOAD_READ_NODES` nodes and :data:`MAX_UPLOAD_READ_WAYS` ways of any kind,
:data:`MAX_UPLOAD_WAY_REFS` nodes in one way, :data:`MAX_UPLOAD_NODES` road nodes. A PBF block may unpack to
32 MiB, which holds tens of millions of nodes: libosmium unpacks a block before the reader sees its first
node, which is why the reading happens on a worker, whose memory limit bounds what no count can.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import gzip
import hashlib
import io
import numbers
import os
import re
import tempfile
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from panda.errors import DataUnavailableError, PandaWarning
from panda.network.cache import _load_network_npz, _save_network_npz
from panda.network.files import ReadLimits, _read_osm_filtered
from panda.network.folders import _cache_root
from panda.network.roads import NETWORK_TYPES, RoadNetwork, network_from_graph

if TYPE_CHECKING:
    import networkx as nx

#: File names an upload may have (the kind is read from the name).
UPLOAD_SUFFIXES = (".osm", ".osm.bz2", ".osm.gz", ".osm.pbf")
#: Largest upload, bytes as sent (compressed).
MAX_UPLOAD_BYTES = 50_000_000
#: Largest decompressed size of a .osm.bz2/.osm.gz upload, bytes (a decompression-bomb guard; OSM XML
#: compresses about 10 to 20 times, so a full 50 MB upload stays within it).
MAX_UPLOAD_DECOMPRESSED_BYTES = 1_000_000_000
#: Most road nodes (nodes of the kept ways, before osmnx's simplification) an upload may hold.
MAX_UPLOAD_NODES = 300_000
#: Most nodes of any kind the reader reads (then it stops): a raw extract holds about ten times as many nodes as
#: road nodes (buildings, paths, land use; the test extract: 14,222 nodes, its roads about 1,500), so one at
#: :data:`MAX_UPLOAD_NODES` road nodes holds about 3 million; real 50 MB PBF files hold about 6 million. Each
#: node read costs the reader's loop about a microsecond, so the cap is seconds of a worker's time.
MAX_UPLOAD_READ_NODES = 8_000_000
#: Most ways of any kind (roads or not) the reader reads: real extracts hold one way per 7 to 10 nodes, so
#: :data:`MAX_UPLOAD_READ_NODES` nodes come with about a million ways.
MAX_UPLOAD_READ_WAYS = 1_500_000
#: Most nodes of one way: OpenStreetMap's API refuses ways of more than 2,000 nodes (the embedded cities' and
#: the tests' longest way: 221). A longer one is refused on its length, before a list of its nodes is made.
MAX_UPLOAD_WAY_REFS = 10_000
#: Bounds of the upload cache (``cache_dir/uploads``): oldest-used files go first beyond them.
UPLOAD_CACHE_MAX_BYTES = 200_000_000
UPLOAD_CACHE_MAX_FILES = 64
#: Streamlit's ``server.maxUploadSize`` (.streamlit/config.toml) and the file uploader's ``max_upload_size``:
#: :data:`MAX_UPLOAD_BYTES` in Streamlit's megabytes (2**20 bytes), rounded up. Streamlit's own default (200)
#: would let the web server take four times the largest file this page reads.
UPLOAD_SIZE_MB = -(-MAX_UPLOAD_BYTES // 2**20)
_UPLOAD_ID = re.compile(r"[0-9a-f]{16}")
_READ_CHUNK = 1024 * 1024


def _upload_kind(filename: str) -> tuple[str, str] | None:
    """(osmium format, compression) of an upload's file name, or None when it is not supported."""
    low = filename.strip().lower()
    if low.endswith(".osm.pbf"):
        return "pbf", ""
    if low.endswith(".osm.bz2"):
        return "osm", "bz2"
    if low.endswith(".osm.gz"):
        return "osm", "gz"
    if low.endswith(".osm"):
        return "osm", ""
    return None


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}".replace(".0 ", " ")
    return f"{n:,.0f} bytes"


def _upload_label(filename: str) -> str:
    name = Path(filename.replace("\\", "/")).name or "upload"
    return name if len(name) <= 80 else name[:77] + "..."


def _decompress_capped(data: bytes, compression: str, dest: Path, limit: int, label: str) -> None:
    """Write the decompressed ``data`` to ``dest``, stopping with a sentence past ``limit`` bytes."""
    opener = bz2.open if compression == "bz2" else gzip.open
    total = 0
    try:
        with opener(io.BytesIO(data), "rb") as src, open(dest, "wb") as out:
            while chunk := src.read(_READ_CHUNK):
                total += len(chunk)
                if total > limit:
                    msg = (
                        f"The file {label!r} decompresses to more than {_fmt_bytes(limit)}, the limit here: "
                        "upload a smaller extract (or the same area as .osm.pbf)."
                    )
                    raise ValueError(msg)
                out.write(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        msg = (
            f"The file {label!r} is not a valid .{compression} archive ({exc}): it is damaged or was not "
            f"compressed with {'bzip2' if compression == 'bz2' else 'gzip'}. Upload it again or as plain .osm."
        )
        raise ValueError(msg) from None


def _upload_cache_dir(cache_dir: str | os.PathLike | None) -> Path:
    return _cache_root(cache_dir) / "uploads"


def _upload_cache_file(folder: Path, file_id: str, network_type: str) -> Path:
    return folder / f"{file_id}.{network_type}.npz"


def _evict_uploads(folder: Path, keep: Path, max_bytes: int, max_files: int) -> None:
    """Delete the least recently used cached uploads until the folder is within its bounds."""
    files = []
    for f in folder.glob("*.npz"):
        with contextlib.suppress(OSError):
            st = f.stat()
            files.append((st.st_mtime, st.st_size, f))
    files.sort()
    total = sum(size for _, size, _ in files)
    count = len(files)
    for _, size, f in files:
        if total <= max_bytes and count <= max_files:
            break
        if f == keep:
            continue
        with contextlib.suppress(OSError):
            f.unlink()
            total -= size
            count -= 1


def network_from_upload(
    data: bytes,
    filename: str,
    *,
    network_type: str = "drive",
    max_bytes: int = MAX_UPLOAD_BYTES,
    max_decompressed_bytes: int = MAX_UPLOAD_DECOMPRESSED_BYTES,
    max_nodes: int = MAX_UPLOAD_NODES,
    cache_dir: str | os.PathLike | None = None,
    read: Callable[..., RoadNetwork] | None = None,
) -> RoadNetwork:
    """Build a road network from an uploaded OpenStreetMap file, safely (bounded size and work).

    The file is read with pyosmium through osmnx's way filter for ``network_type``, as
    :func:`network_from_file` reads a PBF file, by ``read`` (:func:`read_upload` here, or on a worker). The
    resulting network is cached as ``cache_dir/uploads/<id>.<type>.npz`` (at most
    :data:`UPLOAD_CACHE_MAX_FILES` files and :data:`UPLOAD_CACHE_MAX_BYTES` bytes, the least recently used
    deleted first), so that :func:`load_upload` finds it again by its id; a file in the cache is not read again.

    Parameters
    ----------
    data
        The file's bytes.
    filename
        The file's name; its ending gives the kind: one of :data:`UPLOAD_SUFFIXES`.
    network_type
        One of :data:`NETWORK_TYPES` (default ``"drive"``, like the embedded cities).
    max_bytes
        Largest accepted ``len(data)``.
    max_decompressed_bytes
        Largest decompressed size of a ``.bz2``/``.gz`` file (decompression-bomb guard).
    max_nodes
        Most road nodes (nodes of the kept ways, before simplification).
    cache_dir
        Folder of the caches; default ``data/cache`` in the project.
    read
        ``read(data, filename, network_type, max_decompressed_bytes, max_nodes)``: reads the file and returns its
        network or raises a ValueError sentence. Default :func:`read_upload` (in this process); the dashboard
        passes :func:`panda.upload_jobs.reader` (a job on a worker process).

    Returns
    -------
    RoadNetwork
        The largest strongly connected component; its ``source`` is ``"file:<id>"``, where ``<id>``
        is the first 16 hex digits of the file's sha256 (the key :func:`load_upload` takes) and its
        ``name`` the file name.

    Raises
    ------
    ValueError
        With a sentence saying what to do, for a file that is empty, too large, decompresses to too
        much, holds too much (see :func:`read_upload`), is damaged or not OpenStreetMap data, or holds no
        usable roads (and ``read``'s own sentences: a job past its worker's memory or time limit).
    """
    _check_upload_arguments(data, filename, network_type, max_bytes, max_decompressed_bytes, max_nodes)
    label = _upload_label(filename)
    _upload_format(filename, label)
    data = _upload_bytes(data, label, max_bytes)
    file_id = hashlib.sha256(data).hexdigest()[:16]
    folder = _upload_cache_dir(cache_dir)
    cache_file = _upload_cache_file(folder, file_id, network_type)
    cached = _read_upload_cache(cache_file)
    if cached is not None:
        return cached
    net = (read or read_upload)(data, filename, network_type, max_decompressed_bytes, max_nodes)
    _keep_upload(net, folder, cache_file)
    return net


def read_upload(
    data: bytes,
    filename: str,
    network_type: str = "drive",
    max_decompressed_bytes: int = MAX_UPLOAD_DECOMPRESSED_BYTES,
    max_nodes: int = MAX_UPLOAD_NODES,
) -> RoadNetwork:
    """Read an upload's road network here, no cache (what the upload job runs on its worker).

    A ``.bz2``/``.gz`` file is decompressed chunk by chunk to a temporary folder (stopped past
    ``max_decompressed_bytes``); a plain one is written there as it is, for pyosmium. The folder is removed
    whatever happens. The reader counts as the file streams and stops at once past a cap:
    :data:`MAX_UPLOAD_READ_NODES` nodes, :data:`MAX_UPLOAD_READ_WAYS` ways, :data:`MAX_UPLOAD_WAY_REFS` nodes
    in one way, ``max_nodes`` road nodes (the module's caps are read at each call).

    Parameters
    ----------
    data
        The file's bytes (checked for size by the caller), or a ``uint8`` array of them (as the job gets them).
    filename
        The file's name; its ending gives the kind: one of :data:`UPLOAD_SUFFIXES`.
    network_type
        One of :data:`NETWORK_TYPES`.
    max_decompressed_bytes
        Largest decompressed size of a ``.bz2``/``.gz`` file.
    max_nodes
        Most road nodes.

    Returns
    -------
    RoadNetwork
        As :func:`network_from_upload` returns it (not cached).

    Raises
    ------
    ValueError
        With a sentence, as :func:`network_from_upload` raises it.
    """
    label = _upload_label(filename)
    fmt, compression = _upload_format(filename, label)
    data = bytes(data)
    file_id = hashlib.sha256(data).hexdigest()[:16]
    limits = ReadLimits(
        max_nodes=max_nodes,
        max_read_nodes=MAX_UPLOAD_READ_NODES,
        max_read_ways=MAX_UPLOAD_READ_WAYS,
        max_way_refs=MAX_UPLOAD_WAY_REFS,
    )
    with tempfile.TemporaryDirectory(prefix="panda-upload-") as tmp:
        path = _write_upload(data, fmt, compression, Path(tmp), max_decompressed_bytes, label)
        del data  # the file holds it now: not kept in memory while pyosmium reads the file
        graph = _read_osm_filtered(path, fmt, network_type, label=label, limits=limits)
    return _upload_network(graph, label, file_id, network_type)


def _check_upload_arguments(
    data: object,
    filename: object,
    network_type: object,
    max_bytes: object,
    max_decompressed_bytes: object,
    max_nodes: object,
) -> None:
    """Raise for an argument of :func:`network_from_upload` of the wrong type or out of range."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        msg = f"The 'data' parameter of network_from_upload must be bytes. Got {type(data).__name__} instead."
        raise TypeError(msg)
    if not isinstance(filename, str):
        msg = f"The 'filename' parameter of network_from_upload must be a str. Got {type(filename).__name__} instead."
        raise TypeError(msg)
    if not isinstance(network_type, str) or network_type not in NETWORK_TYPES:
        msg = (
            f"The 'network_type' parameter of network_from_upload must be one of {NETWORK_TYPES}. "
            f"Got {network_type!r} instead."
        )
        raise ValueError(msg)
    for pname, value in (
        ("max_bytes", max_bytes),
        ("max_decompressed_bytes", max_decompressed_bytes),
        ("max_nodes", max_nodes),
    ):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            msg = f"The '{pname}' parameter of network_from_upload must be an int >= 1. Got {value!r} instead."
            raise ValueError(msg)


def _upload_format(filename: str, label: str) -> tuple[str, str]:
    """Return the (osmium format, compression) the file name gives, or raise for a name this page does not read."""
    kind = _upload_kind(filename)
    if kind is None:
        msg = (
            f"The file {label!r} is not an OpenStreetMap extract this page reads: upload a file ending in "
            f"{', '.join(UPLOAD_SUFFIXES)}."
        )
        raise ValueError(msg)
    return kind


def _upload_bytes(data: bytes | bytearray | memoryview, label: str, max_bytes: int) -> bytes:
    """Return the upload as bytes, or raise when it is empty or larger than ``max_bytes``."""
    data = bytes(data)
    if not data:
        msg = f"The file {label!r} is empty: upload an OpenStreetMap extract with roads in it."
        raise ValueError(msg)
    if len(data) > max_bytes:
        msg = (
            f"The file {label!r} is {_fmt_bytes(len(data))}, more than the {_fmt_bytes(max_bytes)} an upload may "
            "have: cut a smaller area out of it (for example with osmium extract) or use an embedded city."
        )
        raise ValueError(msg)
    return data


def _write_upload(
    data: bytes, fmt: str, compression: str, folder: Path, max_decompressed_bytes: int, label: str
) -> Path:
    """Write the upload, decompressed within ``max_decompressed_bytes``, to a file of ``folder`` osmium can read."""
    path = folder / ("upload.osm.pbf" if fmt == "pbf" else "upload.osm")
    if compression:
        _decompress_capped(data, compression, path, max_decompressed_bytes, label)
    else:
        path.write_bytes(data)
    return path


def _upload_network(graph: nx.MultiDiGraph, label: str, file_id: str, network_type: str) -> RoadNetwork:
    """Build the network of the upload's road graph, named after the file without its suffix."""
    name = label
    for suffix in UPLOAD_SUFFIXES[::-1]:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)] or label
            break
    try:
        return network_from_graph(graph, name=name, source=f"file:{file_id}")
    except ValueError as exc:
        msg = (
            f"The file {label!r} holds no usable '{network_type}' road network: {exc} "
            "Give an extract with connected roads."
        )
        raise ValueError(msg) from None


def _keep_upload(net: RoadNetwork, folder: Path, cache_file: Path) -> None:
    """Cache the network under its id and keep the upload cache within its bounds; warn when that fails."""
    try:
        _save_network_npz(net, cache_file)
        _evict_uploads(folder, cache_file, UPLOAD_CACHE_MAX_BYTES, UPLOAD_CACHE_MAX_FILES)
    except OSError as exc:
        msg = f"Could not cache the uploaded network in {cache_file} ({exc}): a link to it works only until restart."
        # stacklevel 3: the warning points at the code that called network_from_upload, not at this helper
        warnings.warn(msg, PandaWarning, stacklevel=3)


def _read_upload_cache(cache_file: Path) -> RoadNetwork | None:
    if not cache_file.is_file():
        return None
    try:
        net = _load_network_npz(cache_file)
    except (OSError, ValueError, KeyError):
        with contextlib.suppress(OSError):
            cache_file.unlink()
        return None
    with contextlib.suppress(OSError):
        os.utime(cache_file)  # recently used: evicted last
    return dataclasses.replace(net, source=net.source.split(" (cached: ")[0])


def load_upload(
    file_id: str, *, network_type: str = "drive", cache_dir: str | os.PathLike | None = None
) -> RoadNetwork:
    """Load the road network an earlier :func:`network_from_upload` built, by its id (``source`` without ``file:``).

    Raises
    ------
    ValueError
        When ``file_id`` is not 16 lowercase hex digits.
    DataUnavailableError
        When no upload with that id is in the cache (never uploaded here, or evicted).
    """
    if not isinstance(file_id, str) or not _UPLOAD_ID.fullmatch(file_id):
        msg = f"The 'file_id' parameter of load_upload must be 16 lowercase hex digits. Got {file_id!r} instead."
        raise ValueError(msg)
    if network_type not in NETWORK_TYPES:
        msg = (
            f"The 'network_type' parameter of load_upload must be one of {NETWORK_TYPES}. Got {network_type!r} instead."
        )
        raise ValueError(msg)
    net = _read_upload_cache(_upload_cache_file(_upload_cache_dir(cache_dir), file_id, network_type))
    if net is None:
        msg = (
            f"The uploaded road network {file_id} is not on this server (uploads are kept for a while only, "
            "the oldest removed first): upload the file again, or use an embedded city."
        )
        raise DataUnavailableError(msg)
    return net
