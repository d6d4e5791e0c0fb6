"""Road networks: embedded cities, files a user has, and live OpenStreetMap downloads.

A :class:`RoadNetwork` is a plain, read-only value: node coordinates, directed edges with their
length in metres, and where the data came from. Every network is reduced to its largest strongly
connected component, so that every shortest-path distance between two of its nodes is finite.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import gzip
import hashlib
import json
import math
import numbers
import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from panda.errors import DataUnavailableError, DownloadError, OfflineError, PandaWarning

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "BoundingBox",
    "RoadNetwork",
    "CITIES",
    "DEFAULT_CITY",
    "OSM_ATTRIBUTION",
    "NETWORK_TYPES",
    "MAX_BBOX_AREA_KM2",
    "list_cities",
    "load_city",
    "network_from_bbox",
    "network_from_graph",
    "network_from_file",
    "haversine_km",
]

#: Attribution every map and export of OpenStreetMap-derived data must carry (ODbL 1.0).
OSM_ATTRIBUTION = "(c) OpenStreetMap contributors, ODbL 1.0"

#: Folder of the embedded city extracts (absolute: never relative to the working directory).
DATA_DIR = Path(__file__).resolve().parent.parent / "data"

EARTH_RADIUS_KM = 6371.0088  # mean Earth radius (IUGG)


@dataclass(frozen=True)
class BoundingBox:
    """A lon/lat rectangle in WGS84 degrees (west, south, east, north)."""

    west_lon_degree: float
    south_lat_degree: float
    east_lon_degree: float
    north_lat_degree: float

    def __post_init__(self) -> None:
        w, s, e, n = self.as_tuple()
        for name, value in zip(("west", "south", "east", "north"), (w, s, e, n), strict=True):
            if not np.isfinite(value):
                msg = f"The '{name}' coordinate of a bounding box must be a finite number. Got {value!r} instead."
                raise ValueError(msg)
        if not (-180.0 <= w <= 180.0 and -180.0 <= e <= 180.0):
            msg = f"Longitudes must lie in [-180, 180] degrees. Got west={w}, east={e}."
            raise ValueError(msg)
        if not (-90.0 <= s <= 90.0 and -90.0 <= n <= 90.0):
            msg = f"Latitudes must lie in [-90, 90] degrees. Got south={s}, north={n}."
            raise ValueError(msg)
        if not w < e:
            msg = (
                f"The bounding box is inverted or empty: west ({w}) must be smaller than east ({e}). "
                "Give the coordinates in the order west, south, east, north."
            )
            raise ValueError(msg)
        if not s < n:
            msg = (
                f"The bounding box is inverted or empty: south ({s}) must be smaller than north ({n}). "
                "Give the coordinates in the order west, south, east, north."
            )
            raise ValueError(msg)

    def as_tuple(self) -> tuple[float, float, float, float]:
        """Return ``(west, south, east, north)`` in degrees."""
        return (self.west_lon_degree, self.south_lat_degree, self.east_lon_degree, self.north_lat_degree)

    @property
    def area_km2(self) -> float:
        """Approximate area on the sphere, in square kilometres."""
        w, s, e, n = (np.radians(v) for v in self.as_tuple())
        return float(EARTH_RADIUS_KM**2 * (e - w) * (np.sin(n) - np.sin(s)))


@dataclass(frozen=True, eq=False)
class RoadNetwork:
    """A directed road network, reduced to its largest strongly connected component.

    Nodes are indexed ``0 .. n_nodes-1``; ``osm_id`` keeps their OpenStreetMap ids.
    """

    name: str
    osm_id: np.ndarray
    lon: np.ndarray
    lat: np.ndarray
    street_count: np.ndarray
    edge_u: np.ndarray
    edge_v: np.ndarray
    edge_length_m: np.ndarray
    attribution: str = OSM_ATTRIBUTION
    source: str = ""
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return int(self.lon.shape[0])

    @property
    def n_edges(self) -> int:
        """Number of directed edges."""
        return int(self.edge_u.shape[0])

    @property
    def bbox(self) -> BoundingBox:
        """The nodes' bounding box (widened by 1e-7 degrees where all nodes share a lon or lat)."""
        w, e = float(self.lon.min()), float(self.lon.max())
        s, n = float(self.lat.min()), float(self.lat.max())
        pad = 1e-7
        if not w < e:
            w, e = max(w - pad, -180.0), min(e + pad, 180.0)
        if not s < n:
            s, n = max(s - pad, -90.0), min(n + pad, 90.0)
        return BoundingBox(w, s, e, n)

    @property
    def adjacency(self) -> sp.csr_matrix:
        """Sparse ``n_nodes x n_nodes`` matrix of edge lengths in metres (shortest of parallel edges)."""
        if "adjacency" not in self._cache:
            self._cache["adjacency"] = _adjacency(self.edge_u, self.edge_v, self.edge_length_m, self.n_nodes)
        return self._cache["adjacency"]

    def summary(self) -> dict:
        """Plain-data description (name, sizes, bbox, attribution) for JSON output."""
        return {
            "name": self.name,
            "n_nodes": self.n_nodes,
            "n_edges": self.n_edges,
            "bbox": list(self.bbox.as_tuple()),
            "attribution": self.attribution,
            "source": self.source,
        }


def haversine_km(lon1, lat1, lon2, lat2) -> np.ndarray:
    """Great-circle distance in km between points given in degrees (broadcasting)."""
    lon1, lat1, lon2, lat2 = (np.radians(np.asarray(a, dtype=float)) for a in (lon1, lat1, lon2, lat2))
    a = np.sin((lat2 - lat1) / 2.0) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2.0) ** 2
    return 2.0 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def _adjacency(u: np.ndarray, v: np.ndarray, length: np.ndarray, n: int) -> sp.csr_matrix:
    # Keep the shortest of parallel edges; drop self-loops (they never shorten a path).
    keep = u != v
    u, v, length = u[keep], v[keep], length[keep]
    order = np.lexsort((length, v, u))
    u, v, length = u[order], v[order], length[order]
    first = np.ones(u.shape[0], dtype=bool)
    first[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    mat = sp.csr_matrix((length[first], (u[first], v[first])), shape=(n, n))
    return mat


def _largest_scc(
    name: str,
    osm_id: np.ndarray,
    lon: np.ndarray,
    lat: np.ndarray,
    street_count: np.ndarray,
    u: np.ndarray,
    v: np.ndarray,
    length: np.ndarray,
    source: str,
) -> RoadNetwork:
    n = lon.shape[0]
    if n == 0 or u.shape[0] == 0:
        msg = f"The road network '{name}' has no roads (nodes: {n}, edges: {u.shape[0]})."
        raise ValueError(msg)
    keep_edge = np.isfinite(length) & (length >= 0)
    u, v, length = u[keep_edge], v[keep_edge], length[keep_edge]
    adj = sp.csr_matrix((np.ones(u.shape[0]), (u, v)), shape=(n, n))
    _, labels = connected_components(adj, directed=True, connection="strong")
    biggest = np.bincount(labels).argmax()
    keep = labels == biggest
    if keep.sum() < 2:
        msg = f"The road network '{name}' has no two nodes connected by roads in both directions."
        raise ValueError(msg)
    new_index = np.full(n, -1, dtype=np.int64)
    new_index[keep] = np.arange(int(keep.sum()))
    e_keep = keep[u] & keep[v]
    return RoadNetwork(
        name=name,
        osm_id=np.asarray(osm_id)[keep].astype(np.int64),
        lon=np.asarray(lon, dtype=float)[keep],
        lat=np.asarray(lat, dtype=float)[keep],
        street_count=np.asarray(street_count)[keep].astype(np.int64),
        edge_u=new_index[u[e_keep]].astype(np.int32),
        edge_v=new_index[v[e_keep]].astype(np.int32),
        edge_length_m=np.asarray(length, dtype=float)[e_keep],
        source=source,
    )


def network_from_graph(graph: nx.MultiDiGraph, *, name: str, source: str = "") -> RoadNetwork:
    """Build a :class:`RoadNetwork` from an osmnx/networkx graph.

    Parameters
    ----------
    graph
        Nodes need ``x`` (lon) and ``y`` (lat); edges need ``length`` in metres (osmnx adds
        both). A graph whose ``crs`` graph attribute is a projected CRS (``ox.project_graph``)
        is converted back to WGS84 degrees. An undirected graph gets both directions of each edge.
    name
        The network's name.
    source
        Where the data came from (free text, shown in summaries).

    Returns
    -------
    RoadNetwork
        The largest strongly connected component of ``graph``.
    """
    nodes = list(graph.nodes)
    if not nodes:
        msg = f"The road network '{name}' has no nodes: it holds no roads of the requested type."
        raise ValueError(msg)
    index = {node: i for i, node in enumerate(nodes)}
    data = graph.nodes
    try:
        lon = np.array([float(data[n]["x"]) for n in nodes])
        lat = np.array([float(data[n]["y"]) for n in nodes])
    except KeyError as exc:
        msg = f"The graph '{name}' is not a road network: its nodes lack the coordinate attribute {exc}."
        raise ValueError(msg) from None
    except (TypeError, ValueError) as exc:
        msg = f"The graph '{name}' is not a road network: a node coordinate is not a number ({exc})."
        raise ValueError(msg) from None
    lon, lat = _to_lonlat(lon, lat, graph.graph.get("crs"), name)
    try:
        street = np.array([int(float(data[n].get("street_count", graph.degree(n) // 2) or 0)) for n in nodes])
    except (TypeError, ValueError):
        street = np.array([graph.degree(n) // 2 for n in nodes])
    try:
        osm_id = np.array([int(n) for n in nodes], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        osm_id = np.arange(len(nodes), dtype=np.int64)
    edges = list(graph.edges(data="length"))
    if not edges:
        msg = f"The road network '{name}' has no edges: it holds no roads of the requested type."
        raise ValueError(msg)
    if any(length is None for _, _, length in edges):
        msg = f"The graph '{name}' is not a road network: some edges lack the 'length' attribute (metres)."
        raise ValueError(msg)
    u = np.array([index[a] for a, _, _ in edges], dtype=np.int64)
    v = np.array([index[b] for _, b, _ in edges], dtype=np.int64)
    try:
        length = np.array([float(x) for _, _, x in edges])
    except (TypeError, ValueError) as exc:
        msg = f"The graph '{name}' is not a road network: an edge 'length' is not a number of metres ({exc})."
        raise ValueError(msg) from None
    if not graph.is_directed():
        u, v, length = np.concatenate([u, v]), np.concatenate([v, u]), np.concatenate([length, length])
    return _largest_scc(name, osm_id, lon, lat, street, u, v, length, source)


def _to_lonlat(x: np.ndarray, y: np.ndarray, crs: object, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Return WGS84 lon/lat degrees: convert projected coordinates, check the ranges."""
    if crs is not None:
        import pyproj

        try:
            parsed = pyproj.CRS.from_user_input(crs)
        except pyproj.exceptions.CRSError:
            msg = f"The graph '{name}' has a 'crs' attribute pyproj does not understand: {crs!r}."
            raise ValueError(msg) from None
        if not parsed.is_geographic:
            transformer = pyproj.Transformer.from_crs(parsed, "EPSG:4326", always_xy=True)
            x, y = (np.asarray(a, dtype=float) for a in transformer.transform(x, y))
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        msg = f"The graph '{name}' is not a road network: some node coordinates are not finite."
        raise ValueError(msg)
    if np.abs(x).max() > 180.0 or np.abs(y).max() > 90.0:
        msg = (
            f"The graph '{name}' has node coordinates outside [-180, 180] x [-90, 90]: they must be "
            "WGS84 lon/lat degrees. Set the graph's 'crs' attribute to its projected CRS (osmnx does) "
            "or project it back with osmnx.project_graph(G, to_latlong=True)."
        )
        raise ValueError(msg)
    return x, y


# ---------------------------------------------------------------------------------------------
# Embedded cities
# ---------------------------------------------------------------------------------------------

#: Embedded cities: name -> (file under data/, description). The first is the default.
CITIES: dict[str, tuple[str, str]] = {
    "neubrandenburg": ("neubrandenburg_city_drive.osm.bz2", "Neubrandenburg, DE: drivable roads of the city"),
    "liechtenstein": ("liechtenstein_drive.osm.bz2", "Liechtenstein: drivable roads of the whole country"),
    "helsinki": ("helsinki_all.osm.bz2", "Helsinki centre, FI: all streets and paths"),
    "kotka": ("kotka_karhula_drive.osm.bz2", "Kotka/Karhula, FI: a small drivable network (fast)"),
}
DEFAULT_CITY = "neubrandenburg"

#: The paper's Rome network: looked for here (or in $PANDA_ROME_PAPER_DIR), never shipped.
ROME_PAPER = "rome-paper"
_ROME_DEFAULT_DIR = DATA_DIR.parent.parent / "shared" / "data" / "rome-paper"


def list_cities() -> list[str]:
    """Names accepted by :func:`load_city` that work offline on this machine."""
    names = list(CITIES)
    if _rome_dir() is not None:
        names.append(ROME_PAPER)
    return names


def _rome_dir() -> Path | None:
    env = os.environ.get("PANDA_ROME_PAPER_DIR")
    for cand in ([Path(env)] if env else []) + [_ROME_DEFAULT_DIR]:
        if (cand / "nodes.csv.gz").is_file() and (cand / "edges.csv.gz").is_file():
            return cand.resolve()
    return None


def load_city(name: str = DEFAULT_CITY) -> RoadNetwork:
    """Load an embedded city (offline) by name.

    Parameters
    ----------
    name
        One of :data:`CITIES` (``"neubrandenburg"``, the default, ``"liechtenstein"``,
        ``"helsinki"``, ``"kotka"``), or ``"rome-paper"`` when the paper's Rome network is present
        (``../shared/data/rome-paper`` or the folder named by ``$PANDA_ROME_PAPER_DIR``).

    Returns
    -------
    RoadNetwork
        A read-only network; repeated calls return the same cached object.
    """
    if not isinstance(name, str):
        msg = f"The 'name' parameter of load_city must be a str. Got {type(name).__name__} instead."
        raise TypeError(msg)
    key = name.strip().lower()
    if key == ROME_PAPER:
        return _load_rome()
    if key not in CITIES:
        msg = (
            f"The 'name' parameter of load_city must be one of {sorted(CITIES) + [ROME_PAPER]}. "
            f"Got {name!r} instead. For another area use panda.network_from_bbox(west, south, east, north) "
            "or panda.network.network_from_file(path)."
        )
        raise ValueError(msg)
    return _load_embedded(key)


@functools.lru_cache(maxsize=8)
def _load_embedded(key: str) -> RoadNetwork:
    # Parsing OSM XML takes seconds; the parsed network is cached as .npz, keyed by the file's hash.
    filename, _ = CITIES[key]
    path = DATA_DIR / filename
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    cache_file = DATA_DIR / "cache" / "cities" / f"{key}-{digest}.npz"
    if cache_file.is_file():
        try:
            net = _load_network_npz(cache_file)
            return dataclasses.replace(net, source=str(path.resolve()))
        except (OSError, ValueError, KeyError):
            # An unreadable cache file: parse the OSM file again below (and replace it if we can).
            with contextlib.suppress(OSError):
                cache_file.unlink(missing_ok=True)
    net = network_from_file(path, name=key)
    try:
        _save_network_npz(net, cache_file)
    except OSError:
        # A read-only install still works, only slower (no cache written).
        return net
    return net


@functools.lru_cache(maxsize=1)
def _load_rome() -> RoadNetwork:
    folder = _rome_dir()
    if folder is None:
        msg = (
            "The paper's Rome network ('rome-paper') is not on this machine. It is looked for in "
            f"{_ROME_DEFAULT_DIR} or in the folder named by the environment variable PANDA_ROME_PAPER_DIR "
            "(files nodes.csv.gz and edges.csv.gz). Use an embedded city instead "
            f"({', '.join(CITIES)}), or download the same area live with "
            "panda.network_from_bbox(12.2354, 41.6566, 12.8081, 42.0979)."
        )
        raise DataUnavailableError(msg)
    with gzip.open(folder / "nodes.csv.gz", "rt") as fh:
        nodes = np.loadtxt(fh, delimiter=",", skiprows=1)
    with gzip.open(folder / "edges.csv.gz", "rt") as fh:
        edges = np.loadtxt(fh, delimiter=",", skiprows=1)
    order = np.argsort(nodes[:, 0])
    nodes = nodes[order]
    return _largest_scc(
        ROME_PAPER,
        nodes[:, 1].astype(np.int64),
        nodes[:, 2],
        nodes[:, 3],
        nodes[:, 4].astype(np.int64),
        edges[:, 0].astype(np.int64),
        edges[:, 1].astype(np.int64),
        edges[:, 2],
        source=f"PAnDA paper artifact (paopao128/CCS-2025-PAnDA), {folder}",
    )


_OSM_XML_SUFFIXES = (".osm", ".osm.bz2", ".osm.gz", ".xml", ".xml.bz2", ".xml.gz")
_GRAPHML_SUFFIXES = (".graphml", ".graphml.bz2", ".graphml.gz")


def network_from_file(path: str | os.PathLike, *, name: str | None = None) -> RoadNetwork:
    """Load a road network from an OSM XML file or a GraphML file.

    Parameters
    ----------
    path
        OSM XML (``.osm``, ``.xml``, optionally ``.bz2``/``.gz`` compressed) or GraphML
        (``.graphml``, e.g. written by ``osmnx.save_graphml``). OSM XML is read with osmnx, which
        turns every way in the file into edges: filter the file to the network type you want
        first. GraphML nodes need ``x``/``y`` (WGS84, or projected with a ``crs`` graph
        attribute) and edges a ``length`` in metres.
    name
        The network's name; defaults to the file name without its suffixes.

    Returns
    -------
    RoadNetwork
        The file's largest strongly connected component.

    Raises
    ------
    ValueError
        When the file is missing, of an unsupported kind, unreadable, or holds no roads.
    """
    if not isinstance(path, (str, os.PathLike)):
        msg = f"The 'path' parameter of network_from_file must be a str or path. Got {type(path).__name__} instead."
        raise TypeError(msg)
    p = Path(path).expanduser()
    if not p.is_file():
        msg = f"The 'path' parameter of network_from_file must name an existing file. Got {str(path)!r} instead."
        raise ValueError(msg)
    label = name or p.name.split(".")[0]
    suffixes = "".join(p.suffixes[-2:]).lower()
    if suffixes.endswith(".pbf"):
        msg = (
            f"The file {p.name!r} is OSM PBF, which panda does not read: convert it to OSM XML first, "
            f"e.g. `osmium cat {p.name} -o {p.name.removesuffix('.pbf')}.osm`."
        )
        raise ValueError(msg)
    if suffixes.endswith(_GRAPHML_SUFFIXES):
        graph = _read_graphml(p)
    elif suffixes.endswith(_OSM_XML_SUFFIXES):
        graph = _read_osm_xml(p)
    else:
        msg = (
            f"The file {p.name!r} is not a supported road network file: use OSM XML "
            "(.osm, .osm.bz2, .xml) or GraphML (.graphml)."
        )
        raise ValueError(msg)
    try:
        return network_from_graph(graph, name=label, source=str(p.resolve()))
    except ValueError as exc:
        msg = f"The file {p.name!r} is not a usable road network: {exc}"
        raise ValueError(msg) from None


def _read_osm_xml(p: Path) -> nx.MultiDiGraph:
    import osmnx as ox
    from osmnx._errors import InsufficientResponseError

    try:
        return ox.graph_from_xml(p, retain_all=True)
    except InsufficientResponseError:
        msg = f"The file {p.name!r} holds no OpenStreetMap nodes or ways: it is not a road network."
        raise ValueError(msg) from None
    except Exception as exc:  # the XML parser and osmnx raise many types for a file that is not OSM data
        msg = (
            f"The file {p.name!r} could not be read as OpenStreetMap XML ({type(exc).__name__}: {exc}). "
            "Give an OSM XML extract (<osm> with <node> and <way> elements) or a GraphML file."
        )
        raise ValueError(msg) from exc


def _read_graphml(p: Path) -> nx.MultiDiGraph:
    import networkx as nx

    try:
        graph = nx.read_graphml(p, force_multigraph=True)
    except Exception as exc:  # ElementTree and networkx raise many types for a file that is not GraphML
        msg = f"The file {p.name!r} could not be read as GraphML ({type(exc).__name__}: {exc})."
        raise ValueError(msg) from exc
    return graph


# ---------------------------------------------------------------------------------------------
# Live download (osmnx + Overpass), cached on disk
# ---------------------------------------------------------------------------------------------

#: Network types osmnx can download (its Overpass filters).
NETWORK_TYPES = ("all", "all_public", "bike", "drive", "drive_service", "walk")

#: Largest bounding box :func:`network_from_bbox` downloads, km^2. The paper's Rome box
#: (12.2354, 41.6566, 12.8081, 42.0979) is about 2,330 km^2; this leaves twice that headroom
#: (about 70 km x 70 km) while keeping one download to a few hundred thousand nodes.
MAX_BBOX_AREA_KM2 = 5000.0

#: Seconds osmnx waits for the Overpass server. osmnx puts it into the query, and so into its HTTP
#: cache key: keep one value (osmnx's own default) so that cached answers are found again.
DEFAULT_TIMEOUT_S = 180.0

#: Seconds the connection probe waits for the name lookup and again for the TCP connect.
PROBE_TIMEOUT_S = 3.0

#: Default cache folder of live downloads (absolute, git-ignored): ``networks/`` holds the
#: resulting road networks, ``osmnx/`` osmnx's HTTP cache.
CACHE_DIR = DATA_DIR / "cache"

_CACHE_FORMAT = 1
_DOWNLOAD_LOCK = threading.Lock()


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

    The first call downloads through osmnx from the Overpass server (``osmnx.settings.overpass_url``)
    and stores the resulting network under ``cache_dir/networks/``; later calls with the same box and
    network type read that file and need no connection.

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
    ``requests_timeout = timeout_s``; downloads run one at a time. Delete the cache files to
    fetch newer OpenStreetMap data.
    """
    bbox = BoundingBox(west, south, east, north)
    area = bbox.area_km2
    if area > MAX_BBOX_AREA_KM2:
        msg = (
            f"The bounding box of network_from_bbox must be at most {MAX_BBOX_AREA_KM2:,.0f} km^2. "
            f"Got {area:,.0f} km^2 instead: choose a smaller area (the paper's Rome box is about 2,330 km^2)."
        )
        raise ValueError(msg)
    if not isinstance(network_type, str) or network_type not in NETWORK_TYPES:
        msg = (
            f"The 'network_type' parameter of network_from_bbox must be one of {NETWORK_TYPES}. "
            f"Got {network_type!r} instead."
        )
        raise ValueError(msg)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) or not 0 < timeout_s < math.inf:
        msg = f"The 'timeout_s' parameter of network_from_bbox must be a number > 0. Got {timeout_s!r} instead."
        raise ValueError(msg)
    root = (CACHE_DIR if cache_dir is None else Path(cache_dir)).expanduser().resolve()
    cache_file = root / "networks" / _cache_name(bbox, network_type)
    cached = _read_cached(cache_file)
    if cached is not None:
        return cached
    with _DOWNLOAD_LOCK:
        cached = _read_cached(cache_file, warn=False)  # another thread may have just downloaded it
        if cached is not None:
            return cached
        graph = _download_graph(bbox, network_type, root / "osmnx", float(timeout_s))
        w, s, e, n = bbox.as_tuple()
        name = f"bbox {w:.4f},{s:.4f},{e:.4f},{n:.4f} {network_type}"
        import osmnx as ox

        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        source = f"OpenStreetMap via Overpass ({ox.settings.overpass_url}), osmnx {ox.__version__}, {when}"
        try:
            net = network_from_graph(graph, name=name, source=source)
        except ValueError as exc:
            msg = f"The bounding box {bbox.as_tuple()} holds no usable '{network_type}' road network: {exc}"
            raise ValueError(msg) from None
        try:
            _save_network_npz(net, cache_file)
        except OSError as exc:
            msg = f"Could not cache the downloaded network in {cache_file} ({exc}): the next call downloads it again."
            warnings.warn(msg, PandaWarning, stacklevel=2)
    return net


def _read_cached(cache_file: Path, *, warn: bool = True) -> RoadNetwork | None:
    """Return the cached network, or None when there is none (or it is unreadable: then warn)."""
    if not cache_file.is_file():
        return None
    try:
        return _load_network_npz(cache_file)
    except (OSError, ValueError, KeyError) as exc:
        if warn:
            msg = f"Ignoring the unreadable cached network {cache_file} ({exc}); downloading it again."
            warnings.warn(msg, PandaWarning, stacklevel=3)
        return None


def _cache_name(bbox: BoundingBox, network_type: str) -> str:
    w, s, e, n = bbox.as_tuple()
    return f"bbox_{w:.6f}_{s:.6f}_{e:.6f}_{n:.6f}_{network_type}.npz"


def _configure_osmnx(http_cache: Path, timeout_s: float) -> None:
    import osmnx as ox

    ox.settings.doh_url_template = None
    ox.settings.use_cache = True
    ox.settings.cache_folder = str(http_cache)
    ox.settings.requests_timeout = timeout_s


def _download_graph(bbox: BoundingBox, network_type: str, http_cache: Path, timeout_s: float) -> nx.MultiDiGraph:
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
    import osmnx as ox
    import requests

    timeout_s = PROBE_TIMEOUT_S if timeout_s is None else timeout_s
    target = url
    proxies = dict(requests.utils.get_environ_proxies(url))
    proxies.update(ox.settings.requests_kwargs.get("proxies") or {})
    proxy = requests.utils.select_proxy(url, proxies)
    if proxy:
        target = proxy if "://" in proxy else f"http://{proxy}"
    parsed = urlparse(target)
    host = parsed.hostname
    if not host:
        msg = f"The Overpass URL {url!r} (osmnx.settings.overpass_url) names no host."
        raise OfflineError(msg)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)

    addresses: list[tuple] = []
    failures: list[OSError] = []

    def lookup() -> None:
        try:
            addresses.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            failures.append(exc)

    worker = threading.Thread(target=lookup, name="panda-overpass-lookup", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise OfflineError(_offline_message(url, f"looking up {host!r} took more than {timeout_s:g} s"))
    if failures:
        raise OfflineError(_offline_message(url, f"cannot look up {host!r}: {failures[0]}"))
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
    raise OfflineError(_offline_message(url, reason))


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
