"""Priors over the secret domain: road density, points of interest, uploaded places.

The prior is what an attacker (and the optimal mechanisms' objective) believes about where a person
is before seeing a report. It never changes what the mechanism protects: every record of the secret
domain X stays protected, and geo-indistinguishability holds whatever the prior; the prior changes
the expected loss the optimal mechanisms minimise and the Bayes attacker's error.

Two kinds of per-node weights, both ``(n_nodes,)`` arrays:

- a *density* (:func:`road_density_weights`): how much road lies around a node; the prior of a
  record is its density, like ``prior="street_count"``;
- a *mass* (:func:`poi_weights`, places snapped to their nearest node): how many places a node
  stands for. :func:`record_prior` gives a record the mass of the nodes nearest to it (its cell),
  so no place is lost when X holds only some of the nodes, then mixes in a small uniform share.

Places are ``lon``/``lat`` in WGS84 degrees; distances are great-circle (haversine) metres. Reading them
(the shipped points of interest, uploaded CSV files) is :mod:`panda.places`, whose names are re-exported
here; uploaded places files are kept on the server here, so that a link can name them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.spatial import cKDTree

from panda.gis import parse_places_file
from panda.network import EARTH_RADIUS_KM, RoadNetwork, haversine_km
from panda.network.folders import make_private_dir, open_private
from panda.places import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES
from panda.places import DEFAULT_MAX_ROWS as DEFAULT_MAX_ROWS
from panda.places import (
    POI_DIR,
    Places,
    _check_positive,
    list_poi_cities,
    load_pois,
    parse_places_csv,
    sniff_places_format,
)

__all__ = [
    "DEFAULT_DENSITY_RADIUS_M",
    "DEFAULT_MAX_SNAP_M",
    "DEFAULT_UNIFORM_SHARE",
    "PRIOR_NAMES",
    "POI_DIR",
    "Places",
    "SnapResult",
    "has_places_upload",
    "list_poi_cities",
    "load_places_upload",
    "load_pois",
    "parse_places_csv",
    "parse_places_file",
    "poi_weights",
    "prior_for_records",
    "record_prior",
    "road_density_weights",
    "save_places_upload",
    "snap_places",
]

#: Radius (m) of the disc whose road length is a node's road density.
DEFAULT_DENSITY_RADIUS_M = 300.0
#: A place farther than this (m) from every node lies off the network: it is dropped, and counted.
DEFAULT_MAX_SNAP_M = 500.0
#: Share of a place-based prior spread uniformly over X, so every record keeps a positive prior.
DEFAULT_UNIFORM_SHARE = 0.05
#: Road pieces are sampled at most this many metres apart when measuring road density.
_DENSITY_STEP_M = 25.0
#: Node-piece pairs road_density_weights aims to hold at once (bounds its memory).
_DENSITY_PAIRS = 4_000_000

_EARTH_RADIUS_M = EARTH_RADIUS_KM * 1000.0


@dataclass(frozen=True, eq=False)
class SnapResult:
    """Places snapped to their nearest target (a network's nodes or an instance's records).

    Attributes
    ----------
    weights
        ``(n_targets,)`` summed weights of the places snapped to each target.
    index
        ``(n_places,)`` the target each place snapped to, ``-1`` for a dropped place.
    distance_m
        ``(n_places,)`` great-circle distance in metres from each place to its nearest target.
    n_dropped
        Places farther than ``max_snap_m`` from every target (their weight is in no target).
    max_snap_m
        The snapping radius used.
    """

    weights: np.ndarray
    index: np.ndarray
    distance_m: np.ndarray
    n_dropped: int
    max_snap_m: float

    @property
    def n_snapped(self) -> int:
        """Places that snapped to a target."""
        return int(self.index.shape[0]) - self.n_dropped


# ---------------------------------------------------------------------------------------------
# Geometry
# ---------------------------------------------------------------------------------------------


def _unit_xyz(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """``(n, 3)`` points on the unit sphere: the chord between two is monotone in their great-circle distance."""
    lon_r, lat_r = np.radians(lon), np.radians(lat)
    cos_lat = np.cos(lat_r)
    return np.column_stack([cos_lat * np.cos(lon_r), cos_lat * np.sin(lon_r), np.sin(lat_r)])


def _chord(distance_m: float) -> float:
    """Chord length on the unit sphere of a great-circle distance in metres."""
    return float(2.0 * np.sin(min(distance_m / _EARTH_RADIUS_M, np.pi) / 2.0))


def _check_network(network: object, func: str) -> RoadNetwork:
    if not isinstance(network, RoadNetwork):
        msg = f"The 'network' parameter of {func} must be a RoadNetwork. Got {type(network).__name__} instead."
        raise TypeError(msg)
    return network


def road_density_weights(network: RoadNetwork, *, radius_m: float = DEFAULT_DENSITY_RADIUS_M) -> np.ndarray:
    """Road density around every node: metres of road within ``radius_m`` of it.

    Each road segment counts once whatever its directions (a two-way street is not twice a one-way
    street), as the straight line between its end nodes, cut into pieces of at most 25 m (and at
    most ``radius_m / 2``); a piece lies within the disc when its midpoint does (great-circle
    distance). So a node's weight is the road length of its neighbourhood, to within a piece per
    segment end, and is positive: every node has a segment whose first piece is within
    ``radius_m / 4`` of it.

    The radius keeps the weight a *density* of the area around the node, smooth across nearby nodes,
    rather than a count at the node itself (that is ``prior="street_count"``).

    Parameters
    ----------
    network
        The road network.
    radius_m
        Radius of the disc, metres, in ``[10, 1000]`` (a neighbourhood, not a district: the work
        grows with the square of the radius).

    Returns
    -------
    numpy.ndarray
        ``(n_nodes,)`` metres of road within ``radius_m`` of each node (all positive).
    """
    net = _check_network(network, "road_density_weights")
    r = _check_positive(radius_m, "radius_m", "road_density_weights")
    if not 10.0 <= r <= 1000.0:
        msg = (
            f"The 'radius_m' parameter of road_density_weights must be a number in [10, 1000]. "
            f"Got {radius_m!r} instead."
        )
        raise ValueError(msg)
    key = ("road_density_weights", r)
    if key in net._cache:
        return net._cache[key].copy()
    # Undirected segments: the longer of both directions' shortest parallel edge, once per node pair.
    adj = net.adjacency
    und = sp.triu(adj.maximum(adj.T), k=1).tocoo()
    u, v, length_m = und.row, und.col, und.data
    step_m = min(_DENSITY_STEP_M, r / 2.0)
    n_pieces = np.maximum(np.ceil(length_m / step_m).astype(np.int64), 1)
    seg = np.repeat(np.arange(u.size), n_pieces)
    first = np.cumsum(n_pieces) - n_pieces
    frac = (np.arange(seg.size) - first[seg] + 0.5) / n_pieces[seg]
    # Piece midpoints interpolated in lon/lat (segments are short: the chord error is negligible).
    lon = net.lon[u][seg] + frac * (net.lon[v][seg] - net.lon[u][seg])
    lat = net.lat[u][seg] + frac * (net.lat[v][seg] - net.lat[u][seg])
    piece_m = (length_m / n_pieces)[seg]
    pieces = cKDTree(_unit_xyz(lon, lat))
    node_xyz = _unit_xyz(net.lon, net.lat)
    weights = np.zeros(net.n_nodes)
    # Nodes in chunks of nearby nodes (a k-d tree's leaf order): memory stays bounded by chunk x
    # (pieces within a disc), whatever the network, and each chunk's tree prunes well.
    order = cKDTree(node_xyz).indices
    probe = node_xyz[order[:: max(1, net.n_nodes // 64)]]
    per_node = float(np.max(pieces.query_ball_point(probe, _chord(r), return_length=True)))
    chunk = int(np.clip(_DENSITY_PAIRS / max(per_node, 1.0), 64, net.n_nodes))
    for start in range(0, net.n_nodes, chunk):
        idx = order[start : start + chunk]
        near = cKDTree(node_xyz[idx]).sparse_distance_matrix(pieces, _chord(r), output_type="coo_matrix")
        weights[idx] = np.bincount(near.row, weights=piece_m[near.col], minlength=idx.size)
    weights.setflags(write=False)
    net._cache[key] = weights
    return weights.copy()


def _targets(targets: object, func: str) -> tuple[np.ndarray, np.ndarray]:
    """lon/lat of a RoadNetwork's nodes or an Instance's records.

    Any object with ``lon`` and ``lat`` arrays of its points will do: panda.instance imports this module, so
    it is not imported here to name its class.
    """
    lon, lat = getattr(targets, "lon", None), getattr(targets, "lat", None)
    if isinstance(targets, RoadNetwork) or (isinstance(lon, np.ndarray) and isinstance(lat, np.ndarray)):
        return np.asarray(lon, dtype=float), np.asarray(lat, dtype=float)
    msg = (
        f"The 'targets' parameter of {func} must be a RoadNetwork (snap to its nodes) or an Instance "
        f"(snap to its records). Got {type(targets).__name__} instead."
    )
    raise TypeError(msg)


def _coords(lon: object, lat: object, weights: object, func: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        lon_a = np.asarray(lon, dtype=float).reshape(-1)
        lat_a = np.asarray(lat, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        msg = f"The 'lon' and 'lat' parameters of {func} must be arrays of numbers (degrees)."
        raise TypeError(msg) from None
    if lon_a.shape != lat_a.shape:
        msg = f"The 'lon' and 'lat' parameters of {func} must have the same length. Got {lon_a.size} and {lat_a.size}."
        raise ValueError(msg)
    if not (np.all(np.isfinite(lon_a)) and np.all(np.isfinite(lat_a))):
        msg = f"The 'lon' and 'lat' parameters of {func} must be finite numbers: remove the places without coordinates."
        raise ValueError(msg)
    if np.any(np.abs(lon_a) > 180.0) or np.any(np.abs(lat_a) > 90.0):
        msg = (
            f"The 'lon' and 'lat' parameters of {func} must lie in [-180, 180] and [-90, 90] degrees: "
            "check that they are not swapped."
        )
        raise ValueError(msg)
    if weights is None:
        w = np.ones(lon_a.size)
    else:
        try:
            w = np.asarray(weights, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            msg = f"The 'weights' parameter of {func} must be an array of numbers or None."
            raise TypeError(msg) from None
        if w.shape != lon_a.shape:
            msg = f"The 'weights' parameter of {func} must have one weight per place ({lon_a.size}). Got {w.size}."
            raise ValueError(msg)
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            msg = f"The 'weights' parameter of {func} must hold finite numbers >= 0."
            raise ValueError(msg)
    return lon_a, lat_a, w


def snap_places(
    targets: object,
    lon: object,
    lat: object,
    *,
    weights: object = None,
    max_snap_m: float = DEFAULT_MAX_SNAP_M,
) -> SnapResult:
    """Snap places to their nearest target by great-circle distance and sum their weights there.

    Parameters
    ----------
    targets
        A :class:`~panda.network.RoadNetwork` (snap to its nodes) or an
        :class:`~panda.instance.Instance` (snap to its records, the secret domain X).
    lon, lat
        ``(n,)`` coordinates of the places, WGS84 degrees.
    weights
        ``(n,)`` non-negative weights of the places; ``None`` counts each place once.
    max_snap_m
        A place farther than this from every target is dropped (and counted in ``n_dropped``);
        ``numpy.inf`` keeps every place.

    Returns
    -------
    SnapResult
        Per-target weights, each place's target (``-1`` if dropped) and distance, the drop count.
    """
    t_lon, t_lat = _targets(targets, "snap_places")
    p_lon, p_lat, w = _coords(lon, lat, weights, "snap_places")
    limit = _check_positive(max_snap_m, "max_snap_m", "snap_places")
    return _snap(t_lon, t_lat, p_lon, p_lat, w, limit)


def _snap(
    t_lon: np.ndarray, t_lat: np.ndarray, p_lon: np.ndarray, p_lat: np.ndarray, w: np.ndarray, limit: float
) -> SnapResult:
    if p_lon.size == 0:
        empty = np.zeros(0)
        return SnapResult(np.zeros(t_lon.size), np.zeros(0, dtype=np.int64), empty, 0, limit)
    _, nearest = cKDTree(_unit_xyz(t_lon, t_lat)).query(_unit_xyz(p_lon, p_lat), k=1)
    nearest = np.asarray(nearest, dtype=np.int64)
    distance_m = haversine_km(p_lon, p_lat, t_lon[nearest], t_lat[nearest]) * 1000.0
    kept = distance_m <= limit
    index = np.where(kept, nearest, -1)
    per_target = np.bincount(nearest[kept], weights=w[kept], minlength=t_lon.size)
    return SnapResult(per_target, index, distance_m, int((~kept).sum()), limit)


def poi_weights(
    network: RoadNetwork,
    lon: object,
    lat: object,
    *,
    weights: object = None,
    max_snap_m: float = DEFAULT_MAX_SNAP_M,
) -> np.ndarray:
    """Per-node mass of places: each place adds its weight to its nearest node.

    Places farther than ``max_snap_m`` from every node are dropped (use :func:`snap_places` for the
    count). The result feeds ``make_instance(network, prior=weights)``.

    Parameters
    ----------
    network
        The road network.
    lon, lat
        ``(n,)`` coordinates of the places, WGS84 degrees.
    weights
        ``(n,)`` non-negative weights of the places; ``None`` counts each place once.
    max_snap_m
        Snapping radius, metres.

    Returns
    -------
    numpy.ndarray
        ``(n_nodes,)`` summed weights of the places nearest to each node (zero where none is).
    """
    net = _check_network(network, "poi_weights")
    return snap_places(net, lon, lat, weights=weights, max_snap_m=max_snap_m).weights


def record_prior(
    network: RoadNetwork,
    records: np.ndarray,
    node_weights: np.ndarray,
    *,
    uniform_share: float = DEFAULT_UNIFORM_SHARE,
) -> np.ndarray:
    """Prior over the records X from a per-node mass, positive on every record.

    Each node gives its weight to its nearest record (great-circle), so a record holds the mass of
    its cell and no place is lost when X holds only some of the nodes. The result is then mixed with
    the uniform prior: ``(1 - uniform_share) * mass / mass.sum() + uniform_share / K``.

    Why mix: a place with no point of interest (a home, a park bench) is unlikely, not impossible.
    A record with prior 0 would drop out of the optimal mechanisms' objective (its reports could cost
    anything) and the Bayes attacker would never guess it, so its error would reflect a gap in the
    data rather than the mechanism.

    Parameters
    ----------
    network
        The road network the records are nodes of.
    records
        ``(K,)`` node indices of X.
    node_weights
        ``(n_nodes,)`` non-negative mass per node with a positive sum (e.g. :func:`poi_weights`).
    uniform_share
        Share of the prior spread uniformly over X, in ``(0, 1]``.

    Returns
    -------
    numpy.ndarray
        ``(K,)`` prior over X: sums to 1, every entry ``>= uniform_share / K``.
    """
    net = _check_network(network, "record_prior")
    share = _check_positive(uniform_share, "uniform_share", "record_prior", 0.0, 1.0)
    rec = np.asarray(records)
    try:
        w = np.asarray(node_weights, dtype=float)
    except (TypeError, ValueError):
        msg = "The 'prior' weights must be an array of numbers, one per node of the network."
        raise TypeError(msg) from None
    if w.shape != (net.n_nodes,):
        msg = (
            f"The 'prior' weights must be an array with one weight per node of the network ({net.n_nodes} for "
            f"{net.name}). Got shape {w.shape} instead: build them with panda.priors.poi_weights(network, lon, lat)."
        )
        raise ValueError(msg)
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        msg = "The 'prior' weights must be finite numbers >= 0 (a node's share of the places)."
        raise ValueError(msg)
    if not w.sum() > 0:
        msg = (
            "The 'prior' weights are all zero: no place lies on the network. Upload places inside the map's "
            "area, or choose another prior."
        )
        raise ValueError(msg)
    src = np.flatnonzero(w)
    mass = _snap(net.lon[rec], net.lat[rec], net.lon[src], net.lat[src], w[src], np.inf).weights
    k = rec.size
    return (1.0 - share) * mass / mass.sum() + share / k


#: Named priors of :func:`prior_for_records` (and ``make_instance(prior=...)``).
PRIOR_NAMES = ("uniform", "street_count", "road_density", "poi")


def prior_for_records(
    network: RoadNetwork,
    records: np.ndarray,
    prior: str | np.ndarray,
    *,
    uniform_share: float = DEFAULT_UNIFORM_SHARE,
) -> np.ndarray:
    """Build the prior over the records X that ``make_instance(network, prior=prior)`` uses.

    Parameters
    ----------
    network
        The road network.
    records
        ``(K,)`` node indices of X.
    prior
        - ``"uniform"``: ``1 / K`` each;
        - ``"street_count"``: proportional to the number of streets at the record (at least 1);
        - ``"road_density"``: proportional to the road length within 300 m of the record
          (:func:`road_density_weights`);
        - ``"poi"``: the city's points of interest (:func:`load_pois` of ``network.name``, an
          embedded city), snapped to their nearest node, through :func:`record_prior`;
        - a ``(n_nodes,)`` numpy array of non-negative per-node masses, e.g. uploaded places
          through :func:`poi_weights`, through :func:`record_prior`.

        Place-based priors (``"poi"`` and arrays) keep ``uniform_share`` spread uniformly, so every
        record has a positive prior (see :func:`record_prior`).
    uniform_share
        Uniform share of the place-based priors, in ``(0, 1]``.

    Returns
    -------
    numpy.ndarray
        ``(K,)`` prior over X, positive, summing to 1.
    """
    rec = np.asarray(records)
    k = rec.size
    if isinstance(prior, np.ndarray):
        return record_prior(network, rec, prior, uniform_share=uniform_share)
    if not isinstance(prior, str) or prior not in PRIOR_NAMES:
        msg = (
            f"The 'prior' parameter of make_instance must be one of {PRIOR_NAMES} or a numpy array of per-node "
            f"weights (one per node of the network). Got {prior!r} instead."
        )
        raise ValueError(msg)
    if prior == "uniform":
        return np.full(k, 1.0 / k)
    if prior == "street_count":
        weights = np.maximum(network.street_count[rec].astype(float), 1.0)
    elif prior == "road_density":
        weights = road_density_weights(network)[rec]
    else:
        key = network.name.strip().lower()
        if key not in list_poi_cities():
            msg = (
                f"The 'prior' parameter of make_instance is 'poi', but no points of interest are shipped for the "
                f"network {network.name!r}: they exist for the embedded cities {list_poi_cities()}. For another "
                "area pass per-node weights of your own places (panda.poi_weights(network, lon, lat)) or use "
                "prior='road_density'."
            )
            raise ValueError(msg)
        pois = load_pois(key)
        node_weights = poi_weights(network, pois.lon, pois.lat, weights=pois.weight)
        return record_prior(network, rec, node_weights, uniform_share=uniform_share)
    return weights / weights.sum()


# ---------------------------------------------------------------------------------------------
# Uploaded places kept on the server (so that a link can name them)
# ---------------------------------------------------------------------------------------------

#: At most this many uploaded places files are kept (the least recently used go first).
PLACES_STORE_MAX_FILES = 64
_PLACES_ID = re.compile(r"[0-9a-f]{16}")


def _places_dir(folder: str | os.PathLike | None) -> Path:
    from panda.network.folders import CACHE_DIR  # at call time, from the module that owns it

    return (CACHE_DIR if folder is None else Path(folder)).expanduser().resolve() / "places"


def save_places_upload(
    data: bytes, *, filename: str = "", folder: str | os.PathLike | None = None
) -> tuple[str, Places]:
    """Check uploaded places (:func:`parse_places_file`: CSV, GeoJSON, GeoPackage, zipped shapefile) and keep them.

    The id is the first 16 hex digits of the file's sha256, so the same file always gets the same id
    and a link can name it (``prior=csv:<id>``). A CSV file is kept as it came; a GIS file as the CSV of its
    places once read (``lat,lon,weight``, each number written so that it reads back as the same double), so
    that reading them back needs no GDAL and no second look at a hostile file. The store holds at most
    :data:`PLACES_STORE_MAX_FILES` files of at most :data:`DEFAULT_MAX_BYTES` each; the least
    recently used are deleted first.

    Parameters
    ----------
    filename
        The name the file was uploaded under (only for a clearer sentence, see :func:`parse_places_file`).

    Returns
    -------
    file_id, places
        The id and the parsed places.

    Raises
    ------
    ValueError
        The file is not a places table (the message says what to fix).
    """
    places = parse_places_file(data, filename)
    file_id = hashlib.sha256(bytes(data)).hexdigest()[:16]
    kept_bytes = bytes(data) if sniff_places_format(data, filename) == "csv" else _places_csv(places)
    store = make_private_dir(_places_dir(folder))  # people's places: this account's only
    path = store / f"{file_id}.csv"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.{secrets.token_hex(4)}.tmp")
        with open_private(tmp) as out:
            out.write(kept_bytes)
        os.replace(tmp, path)
    path.touch()
    kept = sorted(store.glob("*.csv"), key=lambda f: f.stat().st_mtime, reverse=True)
    for old in kept[PLACES_STORE_MAX_FILES:]:
        with contextlib.suppress(OSError):
            old.unlink()
    return file_id, places


def _places_csv(places: Places) -> bytes:
    """Places as the CSV :func:`parse_places_csv` reads back to the same doubles (``repr`` is the shortest exact)."""
    rows = (
        f"{y!r},{x!r},{w!r}\n"
        for y, x, w in zip(places.lat.tolist(), places.lon.tolist(), places.weight.tolist(), strict=True)
    )
    return ("lat,lon,weight\n" + "".join(rows)).encode()


def has_places_upload(file_id: str, *, folder: str | os.PathLike | None = None) -> bool:
    """Whether uploaded places are kept on this server under ``file_id`` (a cheap check: no parsing)."""
    if not isinstance(file_id, str) or not _PLACES_ID.fullmatch(file_id):
        return False
    return (_places_dir(folder) / f"{file_id}.csv").is_file()


def load_places_upload(file_id: str, *, folder: str | os.PathLike | None = None) -> Places:
    """Read back the places a :func:`save_places_upload` kept under ``file_id``.

    Raises
    ------
    ValueError
        ``file_id`` is not an id, or no such file is kept on this server (any more).
    """
    if not isinstance(file_id, str) or not _PLACES_ID.fullmatch(file_id):
        msg = f"{file_id!r} is not the id of uploaded places (16 hexadecimal digits)."
        raise ValueError(msg)
    path = _places_dir(folder) / f"{file_id}.csv"
    try:
        data = path.read_bytes()
    except OSError:
        msg = (
            "The uploaded places of this link are not kept on this server (they were uploaded elsewhere, or "
            "removed to make room): upload the file again under *Prior* in the sidebar."
        )
        raise ValueError(msg) from None
    with contextlib.suppress(OSError):
        path.touch()
    return parse_places_csv(data)
