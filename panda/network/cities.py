"""Embedded cities: OpenStreetMap extracts shipped in data/ (offline), and the paper's Rome network.

A city's OSM file is parsed once and its network cached as .npz (:data:`CITIES_CACHE_DIR`), keyed by the
file's hash; within a process the parsed network is kept too (repeated calls return the same object).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import hashlib
import os
from pathlib import Path

import numpy as np

from panda.errors import DataUnavailableError
from panda.network.cache import _load_network_npz, _save_network_npz
from panda.network.files import network_from_file
from panda.network.folders import CITIES_CACHE_DIR, DATA_DIR
from panda.network.roads import RoadNetwork, _largest_scc

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
