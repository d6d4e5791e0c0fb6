"""A throwaway PostgreSQL server for tests and benchmarks, started on demand from Debian's binaries.

``postgres_server()`` runs ``initdb`` on a fresh cluster in a new temporary directory, starts it on
127.0.0.1 only (a free port, its unix socket inside that directory), creates a database and yields a
SQLAlchemy URL for it; on exit it stops the server (``pg_ctl stop -m immediate``) and removes the directory,
also when the body raises.

PostgreSQL refuses to run as root, so under root (tests and CI) the server runs as Debian's ``postgres``
system user (created by the ``postgresql`` package); otherwise as the current user.

The cluster is tuned for speed, not durability (``fsync=off``, ``initdb --no-sync``): fine for tests, and
for benchmarks that do not measure commit latency to disk.

Examples
--------
>>> with postgres_server() as url:  # doctest: +SKIP
...     engine = sqlalchemy.create_engine(url)
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PG_INSTALL_HINT", "SUPERUSER", "find_pg_bin", "postgres_server"]

#: Where the binaries are looked for: Debian's layout, one directory per major version.
PG_ROOT = Path("/usr/lib/postgresql")
#: The programs the helper needs in that directory.
PG_PROGRAMS = ("initdb", "pg_ctl", "postgres")
#: The superuser ``initdb`` creates (trust authentication: no password).
SUPERUSER = "panda"
#: The system user the server runs as when we are root.
RUN_AS_ROOT_USER = "postgres"
#: The fix to name when the binaries are missing.
PG_INSTALL_HINT = "install Debian's PostgreSQL server: apt-get install -y postgresql"
#: Longest unix socket path (sun_path is 108 bytes on Linux, NUL included).
_SOCKET_PATH_MAX = 107


def _major_version(bin_dir: Path) -> tuple[int, ...]:
    """Sort key for ``/usr/lib/postgresql/<version>/bin``: ``15`` -> (15,), ``9.6`` -> (9, 6)."""
    try:
        return tuple(int(part) for part in bin_dir.parent.name.split("."))
    except ValueError:
        return (-1,)


def find_pg_bin() -> Path | None:
    """Return the newest ``/usr/lib/postgresql/*/bin`` that holds ``initdb``, ``pg_ctl`` and ``postgres``.

    Returns
    -------
    Path or None
        The ``bin`` directory of the highest installed major version with all three programs,
        or None when PostgreSQL's server package is not installed.
    """
    candidates = [
        path for path in PG_ROOT.glob("*/bin") if all(os.access(path / program, os.X_OK) for program in PG_PROGRAMS)
    ]
    if not candidates:
        return None
    return max(candidates, key=_major_version)


def _free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Runner:
    """Runs the PostgreSQL programs as the right user: ``postgres`` under root, else the current user."""

    def __init__(self) -> None:
        self.user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self.user = pwd.getpwnam(RUN_AS_ROOT_USER)
            except KeyError:
                raise RuntimeError(
                    f"PostgreSQL refuses to run as root and there is no {RUN_AS_ROOT_USER!r} system user to run it "
                    f"as; {PG_INSTALL_HINT} (the package creates the user), or run the tests as a non-root user"
                ) from None
        # The server must not pick up a developer's PGDATA, PGPORT, PGHOST, ... settings.
        self.env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        self.env["LC_ALL"] = "C"
        if self.user is not None:
            self.env.update(HOME=self.user.pw_dir, USER=self.user.pw_name, LOGNAME=self.user.pw_name)

    def chown(self, path: Path) -> None:
        """Give ``path`` to the run-as user (nothing to do when that is us)."""
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def run(self, args: list[str], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run ``args`` as the run-as user; output captured, never raises on a non-zero exit."""
        user_kwargs: dict = {}
        if self.user is not None:
            user_kwargs = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        return subprocess.run(
            args,
            cwd=cwd,  # the run-as user may not be allowed into the caller's directory
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **user_kwargs,
        )


def _base_dir(runner: _Runner) -> str:
    """A directory for the cluster that the run-as user can reach and where the socket path fits."""
    base = tempfile.gettempdir()
    reachable = runner.user is None or all(
        os.stat(parent).st_mode & 0o001 for parent in [Path(base), *Path(base).parents]
    )
    # mkdtemp adds ~20 characters; the socket file is ".s.PGSQL.<port>".
    if not reachable or len(base) + 40 > _SOCKET_PATH_MAX:
        base = "/tmp"
    return base


def _log_tail(log_file: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of the server log, for error messages."""
    try:
        text = log_file.read_text(errors="replace")
    except OSError as exc:
        return f"(no server log at {log_file}: {exc})"
    tail = "\n".join(text.splitlines()[-lines:])
    return f"server log tail ({log_file}):\n{tail}" if tail else f"(server log {log_file} is empty)"


def _output(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stdout + result.stderr).strip()


def _wait_and_create_db(port: int, dbname: str, deadline: float, log_file: Path) -> None:
    """Connect until the server accepts connections (or ``deadline`` passes), then create ``dbname``."""
    import psycopg  # imported here: the module stays importable (find_pg_bin) without the driver
    from psycopg import sql

    last_error: Exception | None = None
    while True:
        try:
            with psycopg.connect(
                host="127.0.0.1", port=port, user=SUPERUSER, dbname="postgres", connect_timeout=5, autocommit=True
            ) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
                return
        except psycopg.OperationalError as exc:
            last_error = exc
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"PostgreSQL on 127.0.0.1:{port} did not accept connections in time "
                f"(last error: {last_error}).\n{_log_tail(log_file)}"
            )
        time.sleep(0.1)


def _stop(runner: _Runner, pg_bin: Path, data_dir: Path, tmp: Path) -> None:
    """Stop the server fast; if ``pg_ctl`` cannot, kill the postmaster named in ``postmaster.pid``."""
    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        result = runner.run(
            [str(pg_bin / "pg_ctl"), "stop", "-D", str(data_dir), "-m", "immediate", "-w", "-t", "30"],
            cwd=tmp,
            timeout=40,
        )
        if result.returncode == 0:
            return
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(pid_file.read_text().splitlines()[0])
        os.kill(pid, signal.SIGQUIT)  # the postmaster's "immediate shutdown"
        for _ in range(100):
            os.kill(pid, 0)  # raises ProcessLookupError (an OSError) once it is gone
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def postgres_server(
    *, port: int | None = None, dbname: str = "panda_test", startup_timeout: float = 60.0
) -> Iterator[str]:
    """Run a fresh PostgreSQL cluster for the duration of the ``with`` block.

    Parameters
    ----------
    port : int, optional
        TCP port on 127.0.0.1; by default a free one picked by the kernel.
    dbname : str
        Name of the database created for the caller.
    startup_timeout : float
        Seconds allowed for ``initdb`` and for the server to start accepting connections.

    Yields
    ------
    str
        A SQLAlchemy URL, ``postgresql+psycopg://panda@127.0.0.1:<port>/<dbname>`` (trust authentication).

    Raises
    ------
    RuntimeError
        When the PostgreSQL binaries are missing (the message names ``apt-get install postgresql``), when
        running as root without a ``postgres`` user, or when ``initdb`` or the server fails (with its output
        or the tail of its log).
    """
    pg_bin = find_pg_bin()
    if pg_bin is None:
        raise RuntimeError(
            f"No PostgreSQL server binaries (initdb, pg_ctl, postgres) under {PG_ROOT}/*/bin: {PG_INSTALL_HINT}"
        )
    runner = _Runner()
    tmp = Path(tempfile.mkdtemp(prefix="panda-pg-", dir=_base_dir(runner)))  # mode 0700
    try:
        runner.chown(tmp)
        data_dir = tmp / "data"
        log_file = tmp / "server.log"
        started = time.monotonic()
        initdb = runner.run(
            [
                str(pg_bin / "initdb"),
                "-D",
                str(data_dir),
                "--auth=trust",
                "-U",
                SUPERUSER,
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            cwd=tmp,
            timeout=startup_timeout,
        )
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed (exit {initdb.returncode}):\n{_output(initdb)}")
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{tmp}'",
            "max_connections": "200",
            "fsync": "off",
            "full_page_writes": "off",
            "logging_collector": "off",
        }
        attempts = 1 if port is not None else 3  # a picked port can be taken between the pick and the bind
        for attempt in range(attempts):
            chosen = port if port is not None else _free_port()
            with open(data_dir / "postgresql.conf", "a") as conf:  # owned by the run-as user; we are root
                conf.writelines(f"{key} = {value}\n" for key, value in {**settings, "port": str(chosen)}.items())
            remaining = max(1.0, startup_timeout - (time.monotonic() - started))
            start = runner.run(
                [
                    str(pg_bin / "pg_ctl"),
                    "start",
                    "-D",
                    str(data_dir),
                    "-l",
                    str(log_file),
                    "-w",
                    "-t",
                    str(int(remaining) + 1),
                ],
                cwd=tmp,
                timeout=remaining + 10,
            )
            if start.returncode == 0:
                break
            if attempt == attempts - 1 or "already in use" not in _log_tail(log_file):
                raise RuntimeError(
                    f"pg_ctl start failed (exit {start.returncode}) on 127.0.0.1:{chosen}:\n"
                    f"{_output(start)}\n{_log_tail(log_file)}"
                )
        _wait_and_create_db(chosen, dbname, started + startup_timeout, log_file)
        yield f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{chosen}/{dbname}"
    finally:
        try:
            _stop(runner, pg_bin, tmp / "data", tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
