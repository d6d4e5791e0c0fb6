"""The running-jobs folder: how many jobs run on this machine now, and so a job's share of the cores.

Each running job leaves a file named by its worker's pid in a per-machine folder (:data:`RUNNING_DIR_ENV`).
The folder is used only if it is this user's own and not a symlink; it is narrowed to mode 0700, and its
files are made and removed through the opened folder without following links (another user of a shared
temporary directory may have planted the folder or a link in it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from panda.execution.errors import _describe
from panda.threads import cores

log = logging.getLogger(__name__)

#: Environment variable naming the folder where each running job leaves a file named by its worker's
#: pid (default: one folder per user in the temporary directory, shared by every worker of the machine).
RUNNING_DIR_ENV = "PANDA_RUNNING_JOBS_DIR"


def _running_dir() -> Path:
    folder = os.environ.get(RUNNING_DIR_ENV, "").strip()
    if folder:
        return Path(folder)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"panda-running-jobs-{uid}"


_WARNED_DIRS: set[str] = set()
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _refuse(folder: Path, why: str) -> None:
    """Warn (once per folder and process) that the running-jobs folder is not used."""
    if str(folder) not in _WARNED_DIRS:
        _WARNED_DIRS.add(str(folder))
        log.warning("not using the running-jobs folder %s (%s); jobs are counted as alone", folder, why)


def _open_private_dir(folder: Path, *, create: bool) -> int | None:
    """Open ``folder`` as a private folder of this user and return its descriptor, or None (not used).

    In a shared temporary directory another user may have made the folder, or a symlink in its place:
    the folder is opened without following a symlink (``O_NOFOLLOW``), and used only if it is a
    directory owned by this user; group or other permission bits on it are removed (``fchmod`` of the
    opened folder, so it is that very folder). Markers are then made and removed through the
    descriptor, never through a path a symlink could redirect.
    """
    if create:
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        fd = os.open(folder, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file; EACCES: another user's
        if os.path.islink(folder):
            _refuse(folder, "it is a symbolic link")
        else:
            _refuse(folder, _describe(exc))
        return None
    try:
        st = os.fstat(fd)
        uid = os.getuid() if hasattr(os, "getuid") else st.st_uid
        if not stat.S_ISDIR(st.st_mode):
            _refuse(folder, "not a folder")
        elif st.st_uid != uid:
            _refuse(folder, f"owned by uid {st.st_uid}, not {uid}")
        else:
            if stat.S_IMODE(st.st_mode) & 0o077:
                os.fchmod(fd, 0o700)
            return fd
    except OSError as exc:
        _refuse(folder, _describe(exc))
    os.close(fd)
    return None


def running_jobs(folder: str | os.PathLike | None = None) -> int:
    """Jobs running on this machine now (at least 1): the files of live processes in the running-jobs folder.

    A file whose process is gone (a worker killed mid-job) is not counted, and is removed. A folder
    that is not this user's private folder (see :func:`_open_private_dir`) is not read: 1.
    """
    folder = Path(folder) if folder is not None else _running_dir()
    fd = _open_private_dir(folder, create=False)
    if fd is None:
        return 1
    try:
        names = os.listdir(fd)
        n = 0
        for name in names:
            if not name.isdigit():
                continue
            try:
                if not stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    continue  # only files this layer made are counted (a symlink is neither followed nor counted)
                os.kill(int(name), 0)
            except (ProcessLookupError, OverflowError):  # gone (or never a pid): not counted, cleared
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
                continue
            except PermissionError:  # alive, another user's process
                pass
            except OSError:  # removed meanwhile
                continue
            n += 1
        return max(n, 1)
    except OSError:
        return 1
    finally:
        os.close(fd)


def core_share() -> int:
    """Return a job's share of the cores: the cores this process may use over the jobs running now.

    :data:`panda._pdhg_blocks.thread_policy` in the workers (asked before every compiled step batch).
    """
    return max(1, cores() // running_jobs())


def _make_marker(fd: int, name: str) -> bool:
    """Create the regular file ``name`` in the folder ``fd`` (never through a symlink); False if impossible."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW
    for _ in range(2):
        try:
            os.close(os.open(name, flags, 0o600, dir_fd=fd))
            return True
        except FileExistsError:  # a stale marker (a reused pid) or a planted link: remove the entry itself
            try:
                if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    return False
                os.unlink(name, dir_fd=fd)  # unlink removes a symlink, not its target
            except OSError:
                return False
        except OSError:
            return False
    return False


@contextlib.contextmanager
def _running() -> Iterator[None]:
    """Mark this process as running a job for the length of the block (see :func:`running_jobs`)."""
    name = str(os.getpid())
    fd = _open_private_dir(_running_dir(), create=True)
    if fd is not None and not _make_marker(fd, name):  # no usable folder: the job runs, counted as alone
        os.close(fd)
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
            os.close(fd)
