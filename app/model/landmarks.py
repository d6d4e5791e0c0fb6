"""A few landmarks for a phone's map in a class round, from the shipped points of interest, and the places' labels
with their nearest street (no streamlit).

A map of dots on grey roads has nothing a student recognises. A handful of labelled buildings people know
(a hospital, the town hall, a cinema) lets them say "near the hospital" to a neighbour. They come from the
city's shipped OpenStreetMap points of interest (:func:`panda.load_pois`), which carry a kind but no name: the
label is the kind in plain words. Chosen spread out over the places' area (each the farthest from those already
chosen, the more distinctive kinds first); none for a city without points of interest or an uploaded map.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

import panda
from app.model.params import parse_source

__all__ = ["Landmark", "LANDMARK_KINDS", "landmarks", "place_labels"]

#: The kinds a landmark may be, most distinctive first, with their label.
LANDMARK_KINDS = {
    "amenity=townhall": "Town hall",
    "amenity=hospital": "Hospital",
    "amenity=university": "University",
    "amenity=theatre": "Theatre",
    "amenity=cinema": "Cinema",
    "amenity=library": "Library",
    "amenity=bus_station": "Bus station",
    "amenity=marketplace": "Market",
    "amenity=fire_station": "Fire station",
    "amenity=police": "Police",
    "amenity=college": "College",
    "amenity=place_of_worship": "Place of worship",
    "amenity=school": "School",
    "shop=supermarket": "Supermarket",
}
#: Landmarks drawn on a phone's map: enough to find one's way, few enough to read.
MAX_LANDMARKS = 6


@dataclass(frozen=True)
class Landmark:
    lon: float
    lat: float
    label: str


def landmarks(source: str, lon: np.ndarray, lat: np.ndarray, n: int = MAX_LANDMARKS) -> list[Landmark]:
    """Up to ``n`` landmarks within the bounding box of the places at ``lon``, ``lat`` (degrees) of a view's
    ``source``; none when the source is not an embedded city with points of interest."""
    kind, city = parse_source(source)
    if kind != "city" or str(city) not in panda.list_poi_cities() or n <= 0:
        return []
    pois = panda.load_pois(str(city))
    lon, lat = np.asarray(lon, dtype=float), np.asarray(lat, dtype=float)
    inside = (pois.lon >= lon.min()) & (pois.lon <= lon.max()) & (pois.lat >= lat.min()) & (pois.lat <= lat.max())
    rank = np.array([list(LANDMARK_KINDS).index(k) if k in LANDMARK_KINDS else -1 for k in pois.kind])
    candidates = np.flatnonzero(inside & (rank >= 0))
    if candidates.size == 0:
        return []
    kx = np.cos(np.radians(float(lat.mean())))
    xy = np.c_[pois.lon[candidates] * kx, pois.lat[candidates]]
    # The most distinctive kind first, then each next one as far as can be from those chosen (distance divided
    # by 1 + its rank: a far school does not beat a hospital almost as far; by 4 more for a kind already shown).
    chosen = [int(np.lexsort((candidates, rank[candidates]))[0])]
    far = np.hypot(*(xy - xy[chosen[0]]).T)
    # None closer than a tenth of the places' diagonal to another: their labels stay apart on a phone.
    min_gap = 0.1 * float(np.hypot(np.ptp(lon) * kx, np.ptp(lat)))
    while len(chosen) < min(n, candidates.size):
        shown = np.isin(rank[candidates], rank[candidates[chosen]])
        score = far / (1.0 + rank[candidates]) / np.where(shown, 4.0, 1.0)
        score[far < min_gap] = -1.0
        score[chosen] = -1.0
        nxt = int(np.argmax(score))
        if score[nxt] <= 0:
            break
        chosen.append(nxt)
        far = np.minimum(far, np.hypot(*(xy - xy[nxt]).T))
    picked = candidates[chosen]
    return [Landmark(float(pois.lon[i]), float(pois.lat[i]), LANDMARK_KINDS[pois.kind[i]]) for i in picked]


def place_labels(source: str, lon: np.ndarray, lat: np.ndarray) -> tuple[str, ...]:
    """Each place's label: "Place 61 · near Gartenstraße" (its nearest named street within
    :data:`panda.place_names.DEFAULT_MAX_NAME_M`), or "Place 61" away from named streets and on a map with no shipped
    names (an uploaded map, a box). The number stays first: labels are unique and sort as before."""
    kind, city = parse_source(source)
    lon, lat = np.ascontiguousarray(lon, dtype=float), np.ascontiguousarray(lat, dtype=float)
    return _place_labels(str(city) if kind == "city" else "", lon.tobytes(), lat.tobytes())


@functools.lru_cache(maxsize=16)  # a few views per server; the key is the places' own coordinates
def _place_labels(city: str, lon_bytes: bytes, lat_bytes: bytes) -> tuple[str, ...]:
    from panda.place_names import place_names

    lon, lat = np.frombuffer(lon_bytes), np.frombuffer(lat_bytes)
    if not city or city not in panda.CITIES:
        return tuple(f"Place {x}" for x in range(lon.size))
    names = place_names(lon, lat, city)
    return tuple(f"Place {x} · {name}" if name.startswith("near ") else f"Place {x}" for x, name in enumerate(names))
