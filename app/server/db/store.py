"""The class database: one engine per process, from a URL, migrated with Alembic on first use.

* Default: SQLite at ``data/class.db`` (one server, nothing to install), in WAL mode (many readers, one
  writer), every writing transaction ``BEGIN IMMEDIATE`` so that a guess and the reveal never interleave.
* ``PANDA_DB_URL`` names any SQLAlchemy URL, e.g. ``postgresql+psycopg://user@host/db``: several dashboard
  servers then share one class. Migrations run under a PostgreSQL advisory lock, so servers started together
  do not race.

The schema is versioned by Alembic (app/server/db/migrations): a maintained schema changes, and a class database
must survive an upgrade of the dashboard.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["DEFAULT_URL", "ENV_URL", "database_url", "engine", "session", "migrate", "describe_url"]

ROOT = Path(__file__).resolve().parents[3]
ENV_URL = "PANDA_DB_URL"
DEFAULT_URL = f"sqlite:///{ROOT / 'data' / 'class.db'}"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: An arbitrary key for pg_advisory_lock: one migration at a time over every server of a class.
_PG_LOCK_KEY = 2027_0027
_engines: dict[str, Engine] = {}
_makers: dict[tuple[str, bool], sessionmaker[Session]] = {}
_lock = threading.Lock()


def database_url() -> str:
    """The class database's URL: ``PANDA_DB_URL`` when set, else SQLite in data/."""
    return os.environ.get(ENV_URL, "").strip() or DEFAULT_URL


def describe_url(url: str) -> str:
    """The URL without its password, for pages and logs."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _sqlite_engine(url: str) -> Engine:
    path = url.split(":///", 1)[1] if ":///" in url else ""
    if path and path != ":memory:":
        from panda.network.folders import create_private_file, make_private_dir  # the library only for SQLite

        # Private: the class's names, guesses and kept results. SQLite gives its -wal and -shm files the mode of
        # the database file, so creating that one 0600 (in folders created 0700) covers them; an existing file
        # keeps its mode.
        make_private_dir(Path(path).parent)
        if "?" not in path:  # a plain file name (a URI's query would be part of it)
            create_private_file(path)
    eng = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(eng, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # noqa: ANN001 (DB-API connection)
        dbapi_conn.isolation_level = None  # the driver's own BEGIN off: ours below
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(eng, "begin")
    def _on_begin(conn) -> None:  # noqa: ANN001
        # A reading session (execution option "panda_read") starts deferred: WAL readers never wait.
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("panda_read") else "BEGIN IMMEDIATE")

    return eng


def engine(url: str | None = None) -> Engine:
    """The process's engine for ``url`` (default :func:`database_url`), created and migrated once."""
    url = url or database_url()
    with _lock:
        eng = _engines.get(url)
        if eng is None:
            if url.startswith("sqlite"):
                eng = _sqlite_engine(url)
            else:
                eng = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)
            migrate(eng)
            _engines[url] = eng
            _makers[url, False] = sessionmaker(eng, expire_on_commit=False)
            _makers[url, True] = sessionmaker(eng.execution_options(panda_read=True), expire_on_commit=False)
        return eng


@contextmanager
def session(url: str | None = None, *, read: bool = False) -> Iterator[Session]:
    """A short transaction: committed at the end of the block, rolled back on an exception.

    ``read=True``: the block only reads (on SQLite it then does not take the write lock).
    """
    url = url or database_url()
    engine(url)
    with _makers[url, bool(read)].begin() as s:
        yield s


def migrate(eng: Engine) -> None:
    """Bring the schema to Alembic's head (creates the tables in a new database)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with eng.connect() as conn:
        if eng.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
            conn.commit()
        try:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
            conn.commit()
        finally:
            if eng.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
                conn.commit()


def dispose(url: str | None = None) -> None:
    """Close the pooled connections of ``url``'s engine and forget it (tests; a server never needs it)."""
    url = url or database_url()
    with _lock:
        eng = _engines.pop(url, None)
        _makers.pop((url, False), None)
        _makers.pop((url, True), None)
    if eng is not None:
        eng.dispose()
