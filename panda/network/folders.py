"""Where the network data is and where its caches go: the embedded data's folder and the cache folders.

Every function that needs the cache folder reads it here (:func:`_cache_root`), so that setting
:data:`CACHE_DIR` (``PANDA_CACHE_DIR``, or a test's temporary folder) moves every cache at once.
The folders and files the caches write are created private (:func:`make_private_dir`: 0700, :func:`open_private`:
0600): what people looked at and uploaded is readable by the server's user only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

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


#: Mode of the folders the project creates for its caches and data: only their owner may list or enter them
#: (a cache holds the areas people looked at and the files they uploaded).
PRIVATE_DIR_MODE = 0o700
#: Mode of the files the project writes there: only their owner may read them.
PRIVATE_FILE_MODE = 0o600


def make_private_dir(path: str | os.PathLike) -> Path:
    """Create the folder ``path`` and its missing parents, each with mode 0700; return it, absolute.

    Only the folders created here get that mode: one that exists already keeps its own (a user's ``~/.cache``,
    a folder named by ``PANDA_CACHE_DIR``, one another process has just made).

    Parameters
    ----------
    path
        The folder.

    Returns
    -------
    pathlib.Path
        ``path``, absolute (``~`` expanded).

    Raises
    ------
    OSError
        When a folder cannot be created (no permission, a file in the way).
    """
    folder = Path(path).expanduser().absolute()
    missing: list[Path] = []
    probe = folder
    while not probe.exists() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    for step in reversed(missing):
        try:
            os.mkdir(step, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another process or thread: its mode is its creator's
        # The umask can only take bits away from os.mkdir's mode; this makes it exactly 0700.
        os.chmod(step, PRIVATE_DIR_MODE)
    if not folder.is_dir():
        msg = f"{folder} is not a folder"
        raise NotADirectoryError(msg)
    return folder


def private_folder_problem(path: str | os.PathLike) -> str | None:
    """Make ``path`` this user's private folder: None once it is, else why it cannot be (a sentence).

    The folder is created (0700) if missing; an existing one is used only if it is a folder, not a symbolic
    link, and owned by this user, and its group and other permission bits are removed. For folders whose
    files are loaded back as code or data that must not be planted (numba's pickled cache, osmnx's responses).
    """
    folder = Path(path).expanduser().absolute()
    try:
        make_private_dir(folder.parent)
        try:
            os.mkdir(folder, PRIVATE_DIR_MODE)
        except FileExistsError:
            pass
        info = os.lstat(folder)
        if stat.S_ISLNK(info.st_mode):
            return "it is a symbolic link"
        if not stat.S_ISDIR(info.st_mode):
            return "it is not a folder"
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            return f"it belongs to uid {info.st_uid}, not {os.getuid()}"
        if stat.S_IMODE(info.st_mode) != PRIVATE_DIR_MODE:
            os.chmod(folder, PRIVATE_DIR_MODE)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def open_private(path: str | os.PathLike) -> BinaryIO:
    """Create the file ``path`` with mode 0600 and open it for writing (binary).

    The file must not exist yet (callers write a temporary file of a unique name, then rename it): an existing
    file or a link in its place is never written through.

    Parameters
    ----------
    path
        The new file.

    Returns
    -------
    typing.BinaryIO
        The open file; close it (a ``with`` block).

    Raises
    ------
    FileExistsError
        When something is already at ``path``.
    OSError
        When the file cannot be created.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), PRIVATE_FILE_MODE)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, PRIVATE_FILE_MODE)  # exactly 0600 whatever the umask
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def create_private_file(path: str | os.PathLike) -> bool:
    """Create ``path`` empty with mode 0600 unless something is there already; True when it was created.

    An existing file keeps its content and its mode (it is the user's, or an earlier run's).

    Parameters
    ----------
    path
        The file.

    Returns
    -------
    bool
        Whether the file was created here.

    Raises
    ------
    OSError
        When the file cannot be created (other than because it exists).
    """
    try:
        open_private(path).close()
    except FileExistsError:
        return False
    return True
