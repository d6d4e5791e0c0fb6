"""Names people know for places: "near Marktplatz", from the street names of the shipped OpenStreetMap data.

The shipped points of interest (data/pois/) carry a kind but no name, so a place is named by its nearest
named street: the ways with a ``highway`` and a ``name`` tag of the embedded city's OSM extract (the file its
road network is read from; ODbL 1.0, (c) OpenStreetMap contributors). Distances are to the street's
segments, exactly, on a local plane (equirectangular about the city's mean latitude: over a city its error
is far below a metre); a place farther than ``max_m`` from every named street keeps its number ("Place 7",
the dashboard's own label). The same places always get the same names (ties go to the first segment of the
file).
"""

from __future__ import annotations

import bz2
import functools
import gzip
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy.spatial import cKDTree

from panda.network import CITIES, DATA_DIR, EARTH_RADIUS_KM

__all__ = ["DEFAULT_MAX_NAME_M", "Streets", "named_streets", "place_names", "to_local_m"]

#: Beyond this distance (m) from every named street a place is called by its number only.
DEFAULT_MAX_NAME_M = 300.0
#: Spacing (m) of the sample points along each segment that the k-d tree finds candidates with.
_STEP_M = 20.0
_EARTH_RADIUS_M = EARTH_RADIUS_KM * 1000.0


class Streets(NamedTuple):
    """The named street segments of a city: segment ``i`` runs from ``a[i]`` to ``b[i]`` and is ``names[street[i]]``.

    ``a_lon``, ``a_lat``, ``b_lon``, ``b_lat`` are in degrees; ``lat0`` is the latitude the local plane is
    centred on (the mean of the segments' ends).
    """

    names: np.ndarray
    street: np.ndarray
    a_lon: np.ndarray
    a_lat: np.ndarray
    b_lon: np.ndarray
    b_lat: np.ndarray
    lat0: float


def to_local_m(lon, lat, lat0: float) -> tuple[np.ndarray, np.ndarray]:
    """``x``, ``y`` in metres on the local plane about latitude ``lat0`` (equirectangular)."""
    lon, lat = np.asarray(lon, dtype=float), np.asarray(lat, dtype=float)
    x = _EARTH_RADIUS_M * np.cos(np.radians(lat0)) * np.radians(lon)
    return x, _EARTH_RADIUS_M * np.radians(lat)


@functools.lru_cache(maxsize=4)
def named_streets(city: str) -> Streets:
    """Read the named streets of an embedded city (:data:`panda.network.CITIES`), read from its shipped OSM file."""
    if not isinstance(city, str):
        msg = f"The 'city' parameter of named_streets must be a str. Got {type(city).__name__} instead."
        raise TypeError(msg)
    key = city.strip().lower()
    if key not in CITIES:
        msg = (
            f"No street names are shipped for {city!r}: they exist for the embedded cities {sorted(CITIES)}; "
            "places elsewhere keep their numbers."
        )
        raise ValueError(msg)
    return _read_streets(DATA_DIR / CITIES[key][0])


def _read_streets(path: Path) -> Streets:
    opener = bz2.open if path.suffix == ".bz2" else gzip.open if path.suffix == ".gz" else open
    nodes: dict[str, tuple[float, float]] = {}
    segments: list[tuple[float, float, float, float, int]] = []
    names: dict[str, int] = {}
    with opener(path, "rb") as fh:
        for _, el in ET.iterparse(fh, events=("end",)):
            if el.tag == "node":
                nodes[el.get("id")] = (float(el.get("lon")), float(el.get("lat")))
            elif el.tag == "way":
                tags = {t.get("k"): t.get("v") for t in el.iter("tag")}
                name = (tags.get("name") or "").strip()
                if name and "highway" in tags:
                    # A clipped extract misses some nodes of a way: keep the segments whose two ends are present.
                    pts = [nodes.get(nd.get("ref")) for nd in el.iter("nd")]
                    s = names.setdefault(name, len(names))
                    segments += [(*p, *q, s) for p, q in zip(pts, pts[1:], strict=False) if p and q]
                el.clear()
            elif el.tag == "relation":
                el.clear()
    seg = np.array(segments, dtype=float).reshape(-1, 5)
    lat0 = float(np.r_[seg[:, 1], seg[:, 3]].mean()) if seg.size else 0.0
    return Streets(
        names=np.array(list(names), dtype=object),
        street=seg[:, 4].astype(np.int64),
        a_lon=seg[:, 0],
        a_lat=seg[:, 1],
        b_lon=seg[:, 2],
        b_lat=seg[:, 3],
        lat0=lat0,
    )


def _segment_distance(px, py, ax, ay, bx, by) -> np.ndarray:
    """Distance from points ``p`` to segments ``ab`` on the plane (broadcasting; a zero-length segment is its end)."""
    dx, dy = bx - ax, by - ay
    length2 = dx * dx + dy * dy
    t = np.clip(((px - ax) * dx + (py - ay) * dy) / np.where(length2 > 0, length2, 1.0), 0.0, 1.0)
    return np.hypot(px - (ax + t * dx), py - (ay + t * dy))


def nearest_streets(lon, lat, streets: Streets) -> tuple[np.ndarray, np.ndarray]:
    """Find each place's nearest named street (index into ``streets.names``; -1: none) and its distance (m).

    Exact: the k-d tree of points every :data:`_STEP_M` along the segments gives each place an upper bound
    ``d0`` on its distance; every segment within the true distance has a sample point within ``d0 + step/2``,
    so the exact distances to the segments of those sample points decide.
    """
    lon, lat = np.asarray(lon, dtype=float), np.asarray(lat, dtype=float)
    if streets.street.size == 0:
        return np.full(lon.size, -1), np.full(lon.size, np.inf)
    ax, ay = to_local_m(streets.a_lon, streets.a_lat, streets.lat0)
    bx, by = to_local_m(streets.b_lon, streets.b_lat, streets.lat0)
    n_steps = np.maximum(np.ceil(np.hypot(bx - ax, by - ay) / _STEP_M).astype(np.int64), 1)
    owner = np.repeat(np.arange(ax.size), n_steps + 1)
    t = np.arange(owner.size) - np.repeat(np.cumsum(n_steps + 1) - (n_steps + 1), n_steps + 1)
    t = t / n_steps[owner]
    tree = cKDTree(np.c_[ax[owner] + t * (bx - ax)[owner], ay[owner] + t * (by - ay)[owner]])
    px, py = to_local_m(lon, lat, streets.lat0)
    d0, _ = tree.query(np.c_[px, py])
    hits = tree.query_ball_point(np.c_[px, py], d0 + _STEP_M / 2 + 1e-6)
    place = np.repeat(np.arange(lon.size), [len(h) for h in hits])
    seg = owner[np.concatenate([np.asarray(h, dtype=np.int64) for h in hits])] if place.size else place
    d = _segment_distance(px[place], py[place], ax[seg], ay[seg], bx[seg], by[seg])
    order = np.lexsort((seg, d, place))  # by place, then distance, then segment: ties to the first segment
    first = order[np.r_[True, place[order][1:] != place[order][:-1]]]
    return streets.street[seg[first]], d[first]


def place_names(
    lon,
    lat,
    city: str,
    *,
    max_m: float = DEFAULT_MAX_NAME_M,
    ids=None,
) -> list[str]:
    """Name each place: "near <street>" for its nearest named street within ``max_m``, else "Place <id>".

    Parameters
    ----------
    lon, lat
        ``(n,)`` places in WGS84 degrees.
    city
        An embedded city (:data:`panda.network.CITIES`); any other area has no shipped names and every
        place keeps its number.
    max_m
        Farthest distance (m) at which a street names a place.
    ids
        ``(n,)`` the numbers of the places (default ``0 .. n-1``, the dashboard's "Place 0", "Place 1", ...).
    """
    lon, lat = np.atleast_1d(np.asarray(lon, dtype=float)), np.atleast_1d(np.asarray(lat, dtype=float))
    if lon.ndim != 1 or lat.shape != lon.shape or not (np.isfinite(lon) & np.isfinite(lat)).all():
        msg = f"The lon and lat of place_names must be finite (n,) arrays of one length. Got {lon.shape}, {lat.shape}."
        raise ValueError(msg)
    numbers = np.arange(lon.size) if ids is None else np.asarray(ids)
    if numbers.shape != lon.shape:
        msg = f"The 'ids' parameter of place_names must have the shape of lon {lon.shape}. Got {numbers.shape}."
        raise ValueError(msg)
    if not (isinstance(max_m, (int, float)) and max_m >= 0):
        msg = f"The 'max_m' parameter of place_names must be a number >= 0. Got {max_m!r} instead."
        raise ValueError(msg)
    key = city.strip().lower() if isinstance(city, str) else ""
    if key not in CITIES or lon.size == 0:
        return [f"Place {i}" for i in numbers.tolist()]
    streets = named_streets(key)
    street, dist = nearest_streets(lon, lat, streets)
    return [
        f"near {streets.names[s]}" if s >= 0 and d <= max_m else f"Place {i}"
        for s, d, i in zip(street.tolist(), dist.tolist(), numbers.tolist(), strict=True)
    ]
