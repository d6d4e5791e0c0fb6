"""Where the network data is and where its caches go: the embedded data's folder and the cache folders.

Every function that needs the cache folder reads it here (:func:`_cache_root`), so that setting
:data:`CACHE_DIR` (``PANDA_CACHE_DIR``, or a test's temporary folder) moves every cache at once.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The panda/ folder (this file is panda/network/folders.py).
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: Folder of the embedded city extracts and points of interest (absolute: never relative to the working
#: directory): the checkout's data/, or the installed package's copy of it (pyproject.toml puts data/ into the
#: wheel as panda/data).
DATA_DIR = _PACKAGE_DIR / "data" if (_PACKAGE_DIR / "data").is_dir() else _PACKAGE_DIR.parent / "data"
#: Whether this is the project's checkout (data/ beside panda/): caches then live in data/cache; an installed
#: package writes nothing beside its own files and keeps them in the user's cache folder instead.
IN_CHECKOUT = DATA_DIR == _PACKAGE_DIR.parent / "data"

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


def _cache_root(cache_dir: str | os.PathLike | None) -> Path:
    """Return the cache folder, absolute: ``cache_dir``, or :data:`CACHE_DIR` when it is None."""
    return (CACHE_DIR if cache_dir is None else Path(cache_dir)).expanduser().resolve()
