"""Live downloads of a bounding box's road network (osmnx + Overpass), cached on disk.

A box is rounded to the grid (:func:`~panda.network.cache.snap_bbox`) and its network kept in the download
cache (:mod:`panda.network.cache`); a connection probe makes a machine without internet fail within seconds.
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
import os
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from panda.errors import DataUnavailableError, DownloadError, OfflineError, PandaWarning
from panda.network.cache import _cache_name, _read_cached, _save_network_npz, evict_download_cache, snap_bbox
from panda.network.cities import DEFAULT_CITY, list_cities
from panda.network.folders import _cache_root, private_folder_problem
from panda.network.roads import NETWORK_TYPES, BoundingBox, RoadNetwork, network_from_graph

if TYPE_CHECKING:
    import networkx as nx

#: Largest bounding box :func:`network_from_bbox` downloads, km^2. The paper's Rome box
#: (12.2354, 41.6566, 12.8081, 42.0979) is about 2,330 km^2; this leaves twice that headroom
#: (about 70 km x 70 km) while keeping one download to a few hundred thousand nodes.
MAX_BBOX_AREA_KM2 = 5000.0

#: Seconds osmnx waits for the Overpass server. osmnx puts it into the query, and so into its HTTP
#: cache key: keep one value (osmnx's own default) so that cached answers are found again.
DEFAULT_TIMEOUT_S = 180.0

#: Seconds the connection probe waits for the name lookup and again for the TCP connect.
PROBE_TIMEOUT_S = 3.0

#: False in a process that must never download itself (the dashboard's web server sets it): then
#: :func:`network_from_bbox` only reads the cache and raises :class:`DataUnavailableError` for a box not
#: in it; the download runs as a job elsewhere (:mod:`panda.download_jobs`).
IN_PROCESS_DOWNLOADS = True

#: osmnx keeps its settings (server, cache folder, timeout) in module globals and pins the server's
#: address by replacing ``socket.getaddrinfo``: downloads in one process take turns. The dashboard runs
#: its downloads as jobs on worker processes (:mod:`panda.download_jobs`), each box under its own lock.
_DOWNLOAD_LOCK = threading.Lock()


def _check_download_args(bbox: BoundingBox, network_type: str, timeout_s: float, where: str) -> None:
    area = bbox.area_km2
    if area > MAX_BBOX_AREA_KM2:
        msg = (
            f"The bounding box of {where} must be at most {MAX_BBOX_AREA_KM2:,.0f} km^2. "
            f"Got {area:,.0f} km^2 instead: choose a smaller area (the paper's Rome box is about 2,330 km^2)."
        )
        raise ValueError(msg)
    if not isinstance(network_type, str) or network_type not in NETWORK_TYPES:
        msg = f"The 'network_type' parameter of {where} must be one of {NETWORK_TYPES}. Got {network_type!r} instead."
        raise ValueError(msg)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) or not 0 < timeout_s < math.inf:
        msg = f"The 'timeout_s' parameter of {where} must be a number > 0. Got {timeout_s!r} instead."
        raise ValueError(msg)


def network_from_bbox(
    west: float,
    south: float,
    east: float,
    north: float,
    *,
    network_type: str = "drive",
    cache_dir: str | os.PathLike | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> RoadNetwork:
    """Download the OpenStreetMap road network inside a bounding box (or read it from the cache).

    The box is first rounded to the grid of :data:`BBOX_GRID_DEG` degrees (:func:`snap_bbox`): boxes that
    round alike are one download and one cache file. The first call downloads through osmnx from the
    Overpass server (``osmnx.settings.overpass_url``) and stores the resulting network under
    ``cache_dir/networks/`` (written atomically); later calls with the same box and network type read that
    file and need no connection. The download cache is bounded (:func:`evict_download_cache`,
    ``PANDA_DOWNLOAD_CACHE_MB``): least recently used files go first.

    Parameters
    ----------
    west, south, east, north
        The box in WGS84 degrees (lon, lat, lon, lat), at most :data:`MAX_BBOX_AREA_KM2` large.
    network_type
        One of :data:`NETWORK_TYPES`: ``"drive"`` (default), ``"drive_service"``, ``"walk"``,
        ``"bike"``, ``"all"``, ``"all_public"``.
    cache_dir
        Folder of the caches (created when missing); default ``data/cache`` in the project.
    timeout_s
        Seconds osmnx waits for the Overpass server.

    Returns
    -------
    RoadNetwork
        The largest strongly connected component of the downloaded network.

    Raises
    ------
    ValueError
        For a bad box (inverted, empty, too large) or network type, or a box that holds no roads.
    OfflineError
        When the Overpass server cannot be reached (within about ``2 * PROBE_TIMEOUT_S`` seconds).
    DownloadError
        When the download fails in any other way.

    Notes
    -----
    A download sets osmnx's global settings ``doh_url_template = None`` (no DNS-over-HTTPS detour),
    ``use_cache = True``, ``cache_folder = cache_dir/osmnx`` (absolute) and
    ``requests_timeout = timeout_s``; downloads in one process run one at a time (osmnx's settings are
    global). Delete the cache files to fetch newer OpenStreetMap data. In a process with
    :data:`IN_PROCESS_DOWNLOADS` False (the dashboard's server) a box not in the cache raises
    :class:`~panda.errors.DataUnavailableError` instead of downloading.
    """
    bbox = snap_bbox(BoundingBox(west, south, east, north))
    _check_download_args(bbox, network_type, timeout_s, "network_from_bbox")
    root = _cache_root(cache_dir)
    cache_file = root / "networks" / _cache_name(bbox, network_type)
    cached = _read_cached(cache_file)
    if cached is not None:
        return cached
    if not IN_PROCESS_DOWNLOADS:
        w, s, e, n = bbox.as_tuple()
        msg = (
            f"The road network of the box west {w:g}, south {s:g}, east {e:g}, north {n:g} is not downloaded on "
            "this server yet: downloads start only from the Download button."
        )
        raise DataUnavailableError(msg)
    with _DOWNLOAD_LOCK:
        cached = _read_cached(cache_file, warn=False)  # another thread may have just downloaded it
        if cached is not None:
            return cached
        net = download_network(bbox, network_type, http_cache=root / "osmnx", timeout_s=float(timeout_s))
        try:
            _save_network_npz(net, cache_file)
        except OSError as exc:
            msg = f"Could not cache the downloaded network in {cache_file} ({exc}): the next call downloads it again."
            warnings.warn(msg, PandaWarning, stacklevel=2)
        else:
            evict_download_cache(root, keep=cache_file)
    return net


def download_network(
    bbox: BoundingBox, network_type: str, *, http_cache: Path | None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> RoadNetwork:
    """Download a box's network from the Overpass server now (no cache of networks; the box as given).

    ``http_cache``: osmnx's HTTP cache folder, or None for none. The caller holds the process's
    download turn (``_DOWNLOAD_LOCK``) or is alone in its process (a download job's worker). Raises
    as :func:`network_from_bbox` does.
    """
    graph = _download_graph(bbox, network_type, http_cache, float(timeout_s))
    w, s, e, n = bbox.as_tuple()
    name = f"bbox {w:.4f},{s:.4f},{e:.4f},{n:.4f} {network_type}"
    import osmnx as ox

    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    source = f"OpenStreetMap via Overpass ({ox.settings.overpass_url}), osmnx {ox.__version__}, {when}"
    try:
        return network_from_graph(graph, name=name, source=source)
    except ValueError as exc:
        msg = f"The bounding box {bbox.as_tuple()} holds no usable '{network_type}' road network: {exc}"
        raise ValueError(msg) from None


def _configure_osmnx(http_cache: Path | None, timeout_s: float) -> None:
    import osmnx as ox

    ox.settings.doh_url_template = None
    if http_cache is not None:
        # osmnx answers from the files there: only from a folder nobody else can write a response into.
        problem = private_folder_problem(http_cache)
        if problem is not None:
            msg = f"osmnx's cache folder {http_cache} is not used ({problem}): downloading without it."
            warnings.warn(msg, PandaWarning, stacklevel=3)
            http_cache = None
    ox.settings.use_cache = http_cache is not None
    if http_cache is not None:
        ox.settings.cache_folder = str(http_cache)
    ox.settings.requests_timeout = timeout_s


def _download_graph(bbox: BoundingBox, network_type: str, http_cache: Path | None, timeout_s: float) -> nx.MultiDiGraph:
    import osmnx as ox
    import requests
    from osmnx._errors import InsufficientResponseError, ResponseStatusCodeError

    _configure_osmnx(http_cache, timeout_s)
    _probe_overpass(ox.settings.overpass_url)
    no_roads = (
        f"The bounding box {bbox.as_tuple()} holds no '{network_type}' roads in OpenStreetMap: "
        "choose a larger box or another network_type ('all' holds the most)."
    )
    getaddrinfo = socket.getaddrinfo  # osmnx pins the server's address by replacing it: undo that after
    try:
        return ox.graph_from_bbox(bbox.as_tuple(), network_type=network_type)
    except ResponseStatusCodeError as exc:
        msg = f"The Overpass server answered with an error: {exc}"
        raise DownloadError(msg) from exc
    except InsufficientResponseError as exc:
        if "No data elements" in str(exc):
            raise ValueError(no_roads) from None
        msg = f"The Overpass server's answer could not be used: {exc}"
        raise DownloadError(msg) from exc
    except ValueError as exc:
        if "no graph nodes" in str(exc):
            raise ValueError(no_roads) from None
        msg = f"The downloaded OpenStreetMap data could not be turned into a graph: {exc}"
        raise DownloadError(msg) from exc
    except requests.RequestException as exc:
        msg = f"The download from {ox.settings.overpass_url} failed ({type(exc).__name__}: {exc})."
        raise DownloadError(msg) from exc
    finally:
        socket.getaddrinfo = getaddrinfo


def _offline_message(url: str, reason: str) -> str:
    return (
        f"Cannot reach the Overpass server of {url} ({reason}): live OpenStreetMap downloads do not work "
        f"from here. Use an embedded city instead, which needs no connection: load_city(name) with name in "
        f"{list_cities()} (command line: python -m panda network --city {DEFAULT_CITY}), or load a file "
        "you have with network_from_file(path)."
    )


def _probe_overpass(url: str, timeout_s: float | None = None) -> None:
    """Raise :class:`OfflineError` unless a TCP connection to the server (or its proxy) opens in time.

    The name lookup and the connect each get ``timeout_s`` seconds (default
    :data:`PROBE_TIMEOUT_S`), so that a machine without internet fails within seconds instead of
    osmnx's minute of retries.
    """
    _probe_server(
        url,
        PROBE_TIMEOUT_S if timeout_s is None else timeout_s,
        offline_message=lambda reason: _offline_message(url, reason),
        setting="The Overpass URL {url!r} (osmnx.settings.overpass_url)",
    )


def _probe_server(url: str, timeout_s: float, *, offline_message, setting: str) -> None:
    """:func:`_probe_overpass` for any server: ``offline_message(reason)`` is the error's text."""
    import osmnx as ox
    import requests

    target = url
    proxies = dict(requests.utils.get_environ_proxies(url))
    proxies.update(ox.settings.requests_kwargs.get("proxies") or {})
    proxy = requests.utils.select_proxy(url, proxies)
    if proxy:
        target = proxy if "://" in proxy else f"http://{proxy}"
    parsed = urlparse(target)
    host = parsed.hostname
    if not host:
        msg = f"{setting.format(url=url)} names no host."
        raise OfflineError(msg)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)

    addresses: list[tuple] = []
    failures: list[OSError] = []

    def lookup() -> None:
        try:
            addresses.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            failures.append(exc)

    worker = threading.Thread(target=lookup, name="panda-server-lookup", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise OfflineError(offline_message(f"looking up {host!r} took more than {timeout_s:g} s"))
    if failures:
        raise OfflineError(offline_message(f"cannot look up {host!r}: {failures[0]}"))
    deadline = time.monotonic() + timeout_s
    errors = []
    for family, kind, proto, _, address in addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            errors.append("timed out")
            break
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(remaining)
                sock.connect(address)
            return
        except OSError as exc:
            errors.append(str(exc) or type(exc).__name__)
    reason = f"no TCP connection to {host}:{port} within {timeout_s:g} s: {'; '.join(errors) or 'no address'}"
    raise OfflineError(offline_message(reason))
