"""The session-scoped ``pg_url`` fixture: one throwaway PostgreSQL server for the whole test session.

Test modules that need it import it (``tests/support`` is on ``sys.path``: pytest's ``pythonpath`` in pyproject.toml)::

    from pg_fixture import pg_url  # noqa: F401

Without PostgreSQL's binaries the tests using it are skipped locally, but fail under CI (``CI`` set),
where ``.ci/run`` installs Debian's ``postgresql`` package.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_server import PG_INSTALL_HINT, find_pg_bin, postgres_server

__all__ = ["pg_url", "require_pg_bin"]


def _on_ci() -> bool:
    """True when the ``CI`` environment variable is set (to anything but empty, ``0`` or ``false``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def require_pg_bin() -> Path:
    """Return PostgreSQL's ``bin`` directory; skip the test without it, or fail it under CI.

    Returns
    -------
    Path
        The directory ``find_pg_bin`` found.
    """
    pg_bin = find_pg_bin()
    if pg_bin is None:
        message = f"PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin; {PG_INSTALL_HINT}"
        if _on_ci():
            pytest.fail(f"CI is set, so a missing PostgreSQL is an error: {message}", pytrace=False)
        pytest.skip(message)
    return pg_bin


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """Yield a SQLAlchemy URL (``postgresql+psycopg://panda@127.0.0.1:<port>/panda_test``) to a fresh server.

    The server is started on first use and stopped (its directory removed) at the end of the session.
    Tests share the database: each should use its own tables or clean up after itself.
    """
    require_pg_bin()
    started = time.perf_counter()
    with postgres_server() as url:
        print(f"\n[pg_url] PostgreSQL started in {time.perf_counter() - started:.2f} s: {url}")
        yield url
