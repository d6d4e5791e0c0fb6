"""Place names: a place's bounding box and full name from osmnx's Nominatim geocoder."""

from __future__ import annotations

import math
import numbers
import os
import socket
from pathlib import Path
from typing import Any

from panda.errors import DownloadError
from panda.network.cache import evict_download_cache
from panda.network.cities import list_cities
from panda.network.download import (
    _DOWNLOAD_LOCK,
    MAX_BBOX_AREA_KM2,
    PROBE_TIMEOUT_S,
    _configure_osmnx,
    _probe_server,
)
from panda.network.folders import _cache_root
from panda.network.roads import BoundingBox

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
    text = _query_text(query, timeout_s)
    import osmnx as ox

    ox.settings.doh_url_template = None
    url = ox.settings.nominatim_url
    _probe_server(
        url,
        min(PROBE_TIMEOUT_S, float(timeout_s)),
        offline_message=lambda reason: _geocode_offline_message(url, reason),
        setting="The Nominatim URL {url!r} (osmnx.settings.nominatim_url)",
    )
    root = _cache_root(cache_dir)
    gdf = _geocode(text, url, root, float(timeout_s))
    evict_download_cache(root)  # osmnx's HTTP cache holds the answer: bounded with the downloads
    return _place_box(gdf.iloc[0], text)


def _query_text(query: object, timeout_s: float) -> str:
    """Return the place name, whitespace collapsed, once it and ``timeout_s`` are checked (before any connection)."""
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
    return text


def _geocode(text: str, url: str, root: Path, timeout_s: float) -> Any:
    """Ask the geocoder for ``text``: osmnx's GeoDataFrame of the results, its failures as sentences."""
    import osmnx as ox
    import requests
    from osmnx._errors import InsufficientResponseError, ResponseStatusCodeError

    # osmnx's settings are global: a running download owns them (and the server's address) until it ends.
    if not _DOWNLOAD_LOCK.acquire(timeout=timeout_s):
        msg = "A road network download is running on this server: find the place again when it has finished."
        raise DownloadError(msg)
    getaddrinfo = socket.getaddrinfo
    try:
        _configure_osmnx(root / "osmnx", timeout_s)
        try:
            return ox.geocoder.geocode_to_gdf(text)
        except TypeError:  # found, but no result has an area (a point, a street): take the top result's box
            return ox.geocoder.geocode_to_gdf(text, which_result=1)
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


def _place_box(row: Any, text: str) -> tuple[BoundingBox, str]:
    """Return the bounding box and name of the geocoder's result ``row``; a point gets a small box around it."""
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
