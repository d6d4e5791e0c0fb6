"""Road networks as values: the network, the bounding box, distances, and the conversion of a graph.

:class:`RoadNetwork`, :class:`BoundingBox`, :func:`haversine_km`, and :func:`network_from_graph` (an
osmnx/networkx graph to a :class:`RoadNetwork`).

A :class:`RoadNetwork` is a plain, read-only value: node coordinates, directed edges with their
length in metres, and where the data came from. Every network is reduced to its largest strongly
connected component, so that every shortest-path distance between two of its nodes is finite.
The other modules of :mod:`panda.network` build on this one (it imports none of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

if TYPE_CHECKING:
    import networkx as nx

#: Attribution every map and export of OpenStreetMap-derived data must carry (ODbL 1.0).
OSM_ATTRIBUTION = "(c) OpenStreetMap contributors, ODbL 1.0"

EARTH_RADIUS_KM = 6371.0088  # mean Earth radius (IUGG)

#: Network types osmnx can download (its Overpass filters).
NETWORK_TYPES = ("all", "all_public", "bike", "drive", "drive_service", "walk")


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
