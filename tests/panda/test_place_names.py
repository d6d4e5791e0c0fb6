"""Names people know (issue 40, item 5): "near <street>" from the street names of the shipped OSM extracts.

The expected names are computed independently: the named ways are read with pyosmium (the library parses the
XML itself), and each place's nearest street is found by a brute-force loop over every segment (the library
uses a k-d tree of sample points and then exact distances). The distance is the one the module documents: on
the equirectangular plane about the streets' mean latitude.
"""

from __future__ import annotations

import numpy as np
import osmium
import pytest

from panda.network import CITIES, DATA_DIR
from panda.place_names import DEFAULT_MAX_NAME_M, named_streets, place_names, to_local_m

#: Two cities: the default one (German street names) and the smallest (Finnish ones).
CITY_NAMES = ("neubrandenburg", "kotka")


def _segments_by_pyosmium(city: str) -> tuple[np.ndarray, list[str]]:
    """``(m, 4)`` lon/lat ends of every segment of the city's named highway ways, and each segment's name."""
    ends, names = [], []
    path = DATA_DIR / CITIES[city][0]
    for way in osmium.FileProcessor(str(path)).with_locations().with_filter(osmium.filter.KeyFilter("highway")):
        if not way.is_way() or not way.tags.get("name", "").strip():
            continue
        pts = [(n.lon, n.lat) if n.location.valid() else None for n in way.nodes]
        for p, q in zip(pts, pts[1:], strict=False):
            if p and q:
                ends.append((*p, *q))
                names.append(way.tags["name"].strip())
    return np.array(ends), names


def _brute_force(lon, lat, ends, names, lat0):
    """For each place, every name at the least distance (ties kept) and that distance, by a loop over segments."""
    ax, ay = to_local_m(ends[:, 0], ends[:, 1], lat0)
    bx, by = to_local_m(ends[:, 2], ends[:, 3], lat0)
    px, py = to_local_m(lon, lat, lat0)
    out = []
    for x, y in zip(px, py, strict=True):
        best, best_names = np.inf, set()
        for k in range(ax.size):
            dx, dy = bx[k] - ax[k], by[k] - ay[k]
            length2 = dx * dx + dy * dy
            t = 0.0 if length2 == 0 else min(max(((x - ax[k]) * dx + (y - ay[k]) * dy) / length2, 0.0), 1.0)
            d = float(np.hypot(x - ax[k] - t * dx, y - ay[k] - t * dy))
            if d < best - 1e-6:
                best, best_names = d, {names[k]}
            elif d <= best + 1e-6:
                best_names.add(names[k])
        out.append((best_names, best))
    return out


@pytest.mark.parametrize("city", CITY_NAMES)
def test_names_are_the_nearest_named_street_of_the_data(city):
    ends, names = _segments_by_pyosmium(city)
    streets = named_streets(city)
    assert streets.street.size == len(names)  # the same segments, read two ways
    assert set(streets.names) == set(names)
    rng = np.random.default_rng(5)
    # Places on the streets' area and around it: near a street, between streets, beyond the cap.
    lo, hi = ends[:, :2].min(axis=0), ends[:, :2].max(axis=0)
    pad = 0.2 * (hi - lo)
    n = 60
    lon = rng.uniform(lo[0] - pad[0], hi[0] + pad[0], n)
    lat = rng.uniform(lo[1] - pad[1], hi[1] + pad[1], n)
    got = place_names(lon, lat, city)
    expected = _brute_force(lon, lat, ends, names, streets.lat0)
    n_named = 0
    for i, (label, (nearest, distance)) in enumerate(zip(got, expected, strict=True)):
        if distance <= DEFAULT_MAX_NAME_M - 1e-6:
            assert label in {f"near {name}" for name in nearest}, (i, label, nearest, distance)
            n_named += 1
        elif distance > DEFAULT_MAX_NAME_M + 1e-6:
            assert label == f"Place {i}", (i, label, distance)
    # Both outcomes happen in this sample (else the test would check only one of them).
    assert 0 < n_named < n, n_named


def test_a_place_far_from_every_street_keeps_its_number():
    streets = named_streets("neubrandenburg")
    lon, lat = streets.a_lon[:3].copy(), streets.a_lat[:3].copy()
    lat[1] += 0.5  # about 55 km north of a street end
    names = place_names(lon, lat, "neubrandenburg", ids=[10, 11, 12])
    assert names[0] == f"near {streets.names[streets.street[0]]}"
    assert names[1] == "Place 11"
    assert names[2].startswith("near ")
    # A cap of zero names only places on a street; a city without shipped names numbers every place.
    assert place_names(lon[1:2], lat[1:2], "neubrandenburg", max_m=0.0) == ["Place 0"]
    assert place_names(lon, lat, "an uploaded map") == ["Place 0", "Place 1", "Place 2"]


def test_names_are_deterministic_and_checked():
    streets = named_streets("kotka")
    rng = np.random.default_rng(1)
    lon = rng.uniform(streets.a_lon.min(), streets.a_lon.max(), 200)
    lat = rng.uniform(streets.a_lat.min(), streets.a_lat.max(), 200)
    first = place_names(lon, lat, "kotka")
    named_streets.cache_clear()  # read the file again: the same names
    assert place_names(lon, lat, "kotka") == first
    with pytest.raises(ValueError, match="finite"):
        place_names([np.nan], [60.5], "kotka")
    with pytest.raises(ValueError, match="'ids' parameter"):
        place_names(lon, lat, "kotka", ids=[1])
    with pytest.raises(ValueError, match="No street names are shipped"):
        named_streets("rome")
