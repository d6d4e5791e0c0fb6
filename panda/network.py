"""Road networks: embedded cities, files a user has, and live OpenStreetMap downloads.

A :class:`RoadNetwork` is a plain, read-only value: node coordinates, directed edges with their
length in metres, and where the data came from. Every network is reduced to its largest strongly
connected component, so that every shortest-path distance between two of its nodes is finite.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import datetime as dt
import functools
import gzip
import hashlib
import io
import json
import math
import numbers
import os
import re
import socket
import tempfile
import threading
import time
import warnings
import zlib
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
    "network_from_upload",
    "load_upload",
    "geocode_bbox",
    "snap_bbox",
    "BBOX_GRID_DEG",
    "cached_bbox_network",
    "is_bbox_cached",
    "evict_download_cache",
    "download_cache_max_bytes",
    "UPLOAD_SUFFIXES",
    "MAX_UPLOAD_BYTES",
    "MAX_UPLOAD_DECOMPRESSED_BYTES",
    "MAX_UPLOAD_NODES",
    "haversine_km",
]

#: Attribution every map and export of OpenStreetMap-derived data must carry (ODbL 1.0).
OSM_ATTRIBUTION = "(c) OpenStreetMap contributors, ODbL 1.0"

_PACKAGE_DIR = Path(__file__).resolve().parent
#: Folder of the embedded city extracts and points of interest (absolute: never relative to the working
#: directory): the checkout's data/, or the installed package's copy of it (pyproject.toml puts data/ into the
#: wheel as panda/data).
DATA_DIR = _PACKAGE_DIR / "data" if (_PACKAGE_DIR / "data").is_dir() else _PACKAGE_DIR.parent / "data"
#: Whether this is the project's checkout (data/ beside panda/): caches then live in data/cache; an installed
#: package writes nothing beside its own files and keeps them in the user's cache folder instead.
IN_CHECKOUT = DATA_DIR == _PACKAGE_DIR.parent / "data"

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
    cache_file = CITIES_CACHE_DIR / f"{key}-{digest}.npz"
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


def network_from_file(
    path: str | os.PathLike, *, name: str | None = None, network_type: str | None = None
) -> RoadNetwork:
    """Load a road network from an OSM XML, OSM PBF or GraphML file.

    Parameters
    ----------
    path
        OSM XML (``.osm``, ``.xml``, optionally ``.bz2``/``.gz`` compressed), OSM PBF
        (``.osm.pbf``, ``.pbf``) or GraphML (``.graphml``, e.g. written by ``osmnx.save_graphml``).
        GraphML nodes need ``x``/``y`` (WGS84, or projected with a ``crs`` graph attribute) and
        edges a ``length`` in metres.
    name
        The network's name; defaults to the file name without its suffixes.
    network_type
        Which OpenStreetMap ways become roads: one of :data:`NETWORK_TYPES`, osmnx's Overpass way
        filter for that type (the filter a live download uses), applied with pyosmium. ``None``
        (the default) keeps every way of an OSM XML file (osmnx's ``graph_from_xml``: the embedded
        extracts are filtered already) and applies ``"drive"`` to a PBF file (PBF extracts are
        usually raw: buildings, rivers and paths too). Ignored for GraphML.

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
    if network_type is not None and network_type not in NETWORK_TYPES:
        msg = (
            f"The 'network_type' parameter of network_from_file must be None or one of {NETWORK_TYPES}. "
            f"Got {network_type!r} instead."
        )
        raise ValueError(msg)
    label = name or p.name.split(".")[0]
    suffixes = "".join(p.suffixes[-2:]).lower()
    if suffixes.endswith(".pbf"):
        graph = _read_osm_filtered(p, "pbf", network_type or "drive", label=p.name)
    elif suffixes.endswith(_GRAPHML_SUFFIXES):
        graph = _read_graphml(p)
    elif suffixes.endswith(_OSM_XML_SUFFIXES):
        if network_type is None:
            graph = _read_osm_xml(p)
        else:
            graph = _read_osm_filtered(p, _osmium_xml_format(suffixes), network_type, label=p.name)
    else:
        msg = (
            f"The file {p.name!r} is not a supported road network file: use OSM XML "
            "(.osm, .osm.bz2, .xml), OSM PBF (.osm.pbf) or GraphML (.graphml)."
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
# OSM files read with pyosmium (PBF; filtered XML; uploads)
# ---------------------------------------------------------------------------------------------

#: One condition of an Overpass way filter: ``["key"]``, ``["key"~"regex"]`` or ``["key"!~"regex"]``.
_FILTER_TERM = re.compile(r'\["([^"]+)"(?:(!?~)"([^"]*)")?\]')


def _way_filter(network_type: str) -> list[tuple[str, str | None, re.Pattern | None]]:
    """Return osmnx's Overpass way filter of ``network_type`` as (key, operator, regex) terms."""
    from osmnx._overpass import _get_network_filter

    text = _get_network_filter(network_type)
    terms = [
        (m.group(1), m.group(2), re.compile(m.group(3)) if m.group(2) else None) for m in _FILTER_TERM.finditer(text)
    ]
    if "".join(m.group(0) for m in _FILTER_TERM.finditer(text)) != text:  # a filter form this reader does not know
        msg = f"osmnx's way filter for {network_type!r} has a form panda cannot apply to a file: {text!r}."
        raise RuntimeError(msg)
    return terms


def _way_passes(tags: dict[str, str], terms: list[tuple[str, str | None, re.Pattern | None]]) -> bool:
    """Tell whether a way's tags pass the filter, with Overpass semantics.

    ``[k]``: the key is set; ``[k~r]``: its value matches r (unanchored); ``[k!~r]``: the key is
    absent or its value does not match r.
    """
    for key, op, pattern in terms:
        value = tags.get(key)
        if op is None:
            if value is None:
                return False
        elif op == "~":
            if value is None or not pattern.search(value):  # type: ignore[union-attr]
                return False
        elif value is not None and pattern.search(value):  # type: ignore[union-attr]
            return False
    return True


def _osmium_xml_format(suffixes: str) -> str:
    if suffixes.endswith(".bz2"):
        return "osm.bz2"
    if suffixes.endswith(".gz"):
        return "osm.gz"
    return "osm"


def _osm_elements(path: Path, fmt: str, network_type: str, *, label: str, max_nodes: int | None = None) -> list[dict]:
    """Return the Overpass-JSON elements a live download of ``network_type`` would give for the file.

    Two pyosmium passes: the ways that pass osmnx's filter (a way whose nodes are partly missing,
    as in a clipped extract, is split into its runs of present nodes), then their nodes.
    """
    import osmium
    import osmnx as ox

    terms = _way_filter(network_type)
    node_tags = set(ox.settings.useful_tags_node)
    ways: list[tuple[int, list[int], dict[str, str]]] = []
    needed: set[int] = set()

    def processor(kind):
        return osmium.FileProcessor(osmium.io.File(str(path), fmt), kind)

    try:
        for way in processor(osmium.osm.WAY):
            tags = {t.k: t.v for t in way.tags}
            if not _way_passes(tags, terms):
                continue
            refs = [n.ref for n in way.nodes]
            ways.append((way.id, refs, tags))
            needed.update(refs)
            if max_nodes is not None and len(needed) > max_nodes:
                msg = (
                    f"The file {label!r} holds more than {max_nodes:,} road nodes, the limit here: cut a smaller "
                    "area out of it first (for example with osmium extract) or use an embedded city."
                )
                raise ValueError(msg)
        nodes: dict[int, dict] = {}
        if ways:
            for node in processor(osmium.osm.NODE):
                if node.id in needed and node.location.valid():
                    item = {"type": "node", "id": node.id, "lon": node.location.lon, "lat": node.location.lat}
                    tags = {t.k: t.v for t in node.tags if t.k in node_tags}
                    if tags:
                        item["tags"] = tags
                    nodes[node.id] = item
    except RuntimeError as exc:  # libosmium's parse errors (PBF, XML, compression)
        kind = "OSM PBF" if fmt == "pbf" else "OpenStreetMap XML"
        msg = (
            f"The file {label!r} could not be read as {kind} ({exc}): it is damaged or not an OpenStreetMap "
            "extract. Give an unbroken .osm.pbf, .osm, .osm.bz2 or .osm.gz file."
        )
        raise ValueError(msg) from None
    elements: list[dict] = list(nodes.values())
    for way_id, refs, tags in ways:
        runs: list[list[int]] = [[]]
        for ref in refs:
            if ref in nodes:
                runs[-1].append(ref)
            elif runs[-1]:
                runs.append([])
        runs = [r for r in runs if len(r) >= 2]
        for k, run in enumerate(runs):
            # Pieces of a split way need their own key in osmnx (the way id stays in their tags' place).
            piece_id = way_id if k == 0 else -(way_id * 1000 + k)
            elements.append({"type": "way", "id": piece_id, "nodes": run, "tags": tags})
    if not any(e["type"] == "way" for e in elements):
        msg = (
            f"The file {label!r} holds no '{network_type}' roads (OpenStreetMap ways with a highway tag of that "
            "kind whose nodes are in the file): give an extract with roads in it."
        )
        raise ValueError(msg)
    return elements


def _read_osm_filtered(
    path: Path, fmt: str, network_type: str, *, label: str, max_nodes: int | None = None
) -> nx.MultiDiGraph:
    """Build the graph osmnx builds for a live download of ``network_type``, from a file (no truncation)."""
    import osmnx as ox
    from osmnx.graph import _create_graph

    elements = _osm_elements(path, fmt, network_type, label=label, max_nodes=max_nodes)
    bidirectional = network_type in ox.settings.bidirectional_network_types
    graph = _create_graph([{"elements": elements}], bidirectional)
    return ox.simplify_graph(graph)


#: File names an upload may have (the kind is read from the name).
UPLOAD_SUFFIXES = (".osm", ".osm.bz2", ".osm.gz", ".osm.pbf")
#: Largest upload, bytes as sent (compressed).
MAX_UPLOAD_BYTES = 50_000_000
#: Largest decompressed size of a .osm.bz2/.osm.gz upload, bytes (a decompression-bomb guard; OSM XML
#: compresses about 10 to 20 times, so a full 50 MB upload stays within it).
MAX_UPLOAD_DECOMPRESSED_BYTES = 1_000_000_000
#: Most road nodes (nodes of the kept ways, before osmnx's simplification) an upload may hold.
MAX_UPLOAD_NODES = 300_000
#: Bounds of the upload cache (``cache_dir/uploads``): oldest-used files go first beyond them.
UPLOAD_CACHE_MAX_BYTES = 200_000_000
UPLOAD_CACHE_MAX_FILES = 64
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
    return (CACHE_DIR if cache_dir is None else Path(cache_dir)).expanduser().resolve() / "uploads"


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
) -> RoadNetwork:
    """Build a road network from an uploaded OpenStreetMap file, safely (bounded size and work).

    The file is read with pyosmium through osmnx's way filter for ``network_type``, as
    :func:`network_from_file` reads a PBF file. Decompressed data goes to a temporary folder that
    is removed afterwards; the resulting network is cached as ``cache_dir/uploads/<id>.<type>.npz``
    (at most :data:`UPLOAD_CACHE_MAX_FILES` files and :data:`UPLOAD_CACHE_MAX_BYTES` bytes, the least
    recently used deleted first), so that :func:`load_upload` finds it again by its id.

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
        much, holds too many road nodes, is damaged or not OpenStreetMap data, or holds no usable roads.
    """
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
    label = _upload_label(filename)
    kind = _upload_kind(filename)
    if kind is None:
        msg = (
            f"The file {label!r} is not an OpenStreetMap extract this page reads: upload a file ending in "
            f"{', '.join(UPLOAD_SUFFIXES)}."
        )
        raise ValueError(msg)
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
    file_id = hashlib.sha256(data).hexdigest()[:16]
    folder = _upload_cache_dir(cache_dir)
    cache_file = _upload_cache_file(folder, file_id, network_type)
    cached = _read_upload_cache(cache_file)
    if cached is not None:
        return cached
    fmt, compression = kind
    with tempfile.TemporaryDirectory(prefix="panda-upload-") as tmp:
        path = Path(tmp) / ("upload.osm.pbf" if fmt == "pbf" else "upload.osm")
        if compression:
            _decompress_capped(data, compression, path, max_decompressed_bytes, label)
        else:
            path.write_bytes(data)
        del data
        graph = _read_osm_filtered(path, fmt, network_type, label=label, max_nodes=max_nodes)
    name = label
    for suffix in UPLOAD_SUFFIXES[::-1]:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)] or label
            break
    try:
        net = network_from_graph(graph, name=name, source=f"file:{file_id}")
    except ValueError as exc:
        msg = (
            f"The file {label!r} holds no usable '{network_type}' road network: {exc} "
            "Give an extract with connected roads."
        )
        raise ValueError(msg) from None
    try:
        _save_network_npz(net, cache_file)
        _evict_uploads(folder, cache_file, UPLOAD_CACHE_MAX_BYTES, UPLOAD_CACHE_MAX_FILES)
    except OSError as exc:
        msg = f"Could not cache the uploaded network in {cache_file} ({exc}): a link to it works only until restart."
        warnings.warn(msg, PandaWarning, stacklevel=2)
    return net


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

#: Environment variable naming another cache folder for downloads and uploads (read at import).
CACHE_DIR_ENV = "PANDA_CACHE_DIR"
#: Default cache folder of live downloads and uploads (absolute, git-ignored): ``networks/`` holds the
#: downloaded road networks, ``osmnx/`` osmnx's HTTP cache, ``uploads/`` uploaded files' networks,
#: ``locks/`` the download locks. ``PANDA_CACHE_DIR`` moves it (the embedded cities' parsed copies stay in
#: ``data/cache/cities`` in a checkout). An installed package's default is the user's cache folder.
_USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache") / "panda-explorer"
CACHE_DIR = (
    Path(os.environ.get(CACHE_DIR_ENV, "").strip() or (DATA_DIR / "cache" if IN_CHECKOUT else _USER_CACHE))
    .expanduser()
    .resolve()
)
#: The embedded cities' parsed copies (.npz, keyed by the OSM file's hash).
CITIES_CACHE_DIR = DATA_DIR / "cache" / "cities" if IN_CHECKOUT else _USER_CACHE / "cities"

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

#: False in a process that must never download itself (the dashboard's web server sets it): then
#: :func:`network_from_bbox` only reads the cache and raises :class:`DataUnavailableError` for a box not
#: in it; the download runs as a job elsewhere (:mod:`panda.download_jobs`).
IN_PROCESS_DOWNLOADS = True

_CACHE_FORMAT = 1
#: osmnx keeps its settings (server, cache folder, timeout) in module globals and pins the server's
#: address by replacing ``socket.getaddrinfo``: downloads in one process take turns. The dashboard runs
#: its downloads as jobs on worker processes (:mod:`panda.download_jobs`), each box under its own lock.
_DOWNLOAD_LOCK = threading.Lock()


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


def _cache_root(cache_dir: str | os.PathLike | None) -> Path:
    return (CACHE_DIR if cache_dir is None else Path(cache_dir)).expanduser().resolve()


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


def _configure_osmnx(http_cache: Path | None, timeout_s: float) -> None:
    import osmnx as ox

    ox.settings.doh_url_template = None
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


# ---------------------------------------------------------------------------------------------
# Place names (osmnx's Nominatim geocoder)
# ---------------------------------------------------------------------------------------------

#: Seconds the geocoder waits for the Nominatim server (the connection probe gets at most PROBE_TIMEOUT_S).
GEOCODE_TIMEOUT_S = 15.0
#: Longest place name :func:`geocode_bbox` sends.
MAX_QUERY_CHARS = 200


def _geocode_offline_message(url: str, reason: str) -> str:
    return (
        f"Cannot reach the place-name search (Nominatim, {url}) ({reason}): finding an area by its name does not "
        "work from here. Type the area's bounding box instead (west, south, east, north in degrees), pick an "
        f"embedded city, which needs no connection ({', '.join(list_cities())}), or load an OpenStreetMap "
        "extract you have (.osm, .osm.bz2, .osm.gz or .osm.pbf)."
    )


def geocode_bbox(
    query: str, *, timeout_s: float = GEOCODE_TIMEOUT_S, cache_dir: str | os.PathLike | None = None
) -> tuple[BoundingBox, str]:
    """Find a place by its name with osmnx's Nominatim geocoder: its bounding box and full name.

    Nothing is downloaded but the place's record; :func:`network_from_bbox` then downloads the roads.

    Parameters
    ----------
    query
        A place name, e.g. ``"Kotka, Finland"`` (1 to :data:`MAX_QUERY_CHARS` characters).
    timeout_s
        Seconds the geocoder waits for the server's answer.
    cache_dir
        Folder of the caches (osmnx's HTTP cache goes to ``cache_dir/osmnx``); default ``data/cache``.

    Returns
    -------
    bbox, display_name
        The place's bounding box (at most :data:`MAX_BBOX_AREA_KM2`) and Nominatim's name for it.
        The first result with an area (a boundary polygon) is taken, else the most important one.

    Raises
    ------
    ValueError
        For an empty or too long query, a name the geocoder does not know, or a place larger than
        :data:`MAX_BBOX_AREA_KM2`.
    OfflineError
        When the Nominatim server (``osmnx.settings.nominatim_url``) cannot be reached (within about
        ``2 * PROBE_TIMEOUT_S`` seconds).
    DownloadError
        When the geocoder fails in any other way.
    """
    if not isinstance(query, str):
        msg = f"The 'query' parameter of geocode_bbox must be a str. Got {type(query).__name__} instead."
        raise TypeError(msg)
    text = " ".join(query.split())
    if not text:
        msg = "The 'query' parameter of geocode_bbox must be a place name. Got an empty text instead: type a name."
        raise ValueError(msg)
    if len(text) > MAX_QUERY_CHARS:
        msg = (
            f"The 'query' parameter of geocode_bbox must be at most {MAX_QUERY_CHARS} characters. "
            f"Got {len(text)} instead: type a shorter place name."
        )
        raise ValueError(msg)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) or not 0 < timeout_s < math.inf:
        msg = f"The 'timeout_s' parameter of geocode_bbox must be a number > 0. Got {timeout_s!r} instead."
        raise ValueError(msg)
    import osmnx as ox
    import requests
    from osmnx._errors import InsufficientResponseError, ResponseStatusCodeError

    ox.settings.doh_url_template = None
    url = ox.settings.nominatim_url
    _probe_server(
        url,
        min(PROBE_TIMEOUT_S, float(timeout_s)),
        offline_message=lambda reason: _geocode_offline_message(url, reason),
        setting="The Nominatim URL {url!r} (osmnx.settings.nominatim_url)",
    )
    root = (CACHE_DIR if cache_dir is None else Path(cache_dir)).expanduser().resolve()
    # osmnx's settings are global: a running download owns them (and the server's address) until it ends.
    if not _DOWNLOAD_LOCK.acquire(timeout=float(timeout_s)):
        msg = "A road network download is running on this server: find the place again when it has finished."
        raise DownloadError(msg)
    getaddrinfo = socket.getaddrinfo
    try:
        _configure_osmnx(root / "osmnx", float(timeout_s))
        try:
            gdf = ox.geocoder.geocode_to_gdf(text)
        except TypeError:  # found, but no result has an area (a point, a street): take the top result's box
            gdf = ox.geocoder.geocode_to_gdf(text, which_result=1)
    except InsufficientResponseError as exc:
        if "0 results" in str(exc):
            msg = (
                f"No place called {text!r} was found in OpenStreetMap: check the spelling, add the country "
                '("Kotka, Finland"), or type the area\'s bounding box.'
            )
            raise ValueError(msg) from None
        msg = f"The place-name search's answer could not be used: {exc}"
        raise DownloadError(msg) from exc
    except ResponseStatusCodeError as exc:
        msg = f"The place-name search (Nominatim) answered with an error: {exc}"
        raise DownloadError(msg) from exc
    except requests.RequestException as exc:
        msg = f"The place-name search at {url} failed ({type(exc).__name__}: {exc})."
        raise DownloadError(msg) from exc
    finally:
        socket.getaddrinfo = getaddrinfo
        _DOWNLOAD_LOCK.release()
    evict_download_cache(root)  # osmnx's HTTP cache holds the answer: bounded with the downloads
    row = gdf.iloc[0]
    name = str(row.get("display_name") or text)
    w, s, e, n = (float(row[c]) for c in ("bbox_west", "bbox_south", "bbox_east", "bbox_north"))
    if w > e:
        msg = (
            f"The place {name!r} crosses the 180° meridian, which a bounding box here cannot: type a box on "
            "one side of it."
        )
        raise ValueError(msg)
    pad = 1e-4  # a point's box: about 10 m around it
    if not w < e:
        w, e = max(w - pad, -180.0), min(e + pad, 180.0)
    if not s < n:
        s, n = max(s - pad, -90.0), min(n + pad, 90.0)
    bbox = BoundingBox(w, s, e, n)
    if bbox.area_km2 > MAX_BBOX_AREA_KM2:
        msg = (
            f"The place {name!r} covers about {bbox.area_km2:,.0f} km², more than the {MAX_BBOX_AREA_KM2:,.0f} km² "
            "a download may have: search for a smaller place (a town or a district) or type a smaller box."
        )
        raise ValueError(msg)
    return bbox, name


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
