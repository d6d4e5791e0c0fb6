"""The throwaway PostgreSQL helper (tests/support/pg_server.py) and the ``pg_url`` fixture, against a real server."""

from __future__ import annotations

import os
import pwd
import socket
import stat
import time
from pathlib import Path

import pg_server
import psycopg
import pytest
import sqlalchemy as sa
from pg_fixture import pg_url, require_pg_bin  # noqa: F401
from pg_server import find_pg_bin, postgres_server


def _port(url: str) -> int:
    return sa.make_url(url).port


def _socket_dir(engine: sa.Engine) -> Path:
    with engine.connect() as conn:
        return Path(conn.execute(sa.text("SHOW unix_socket_directories")).scalar_one())


def _connects(url: str) -> bool:
    """True when a fresh psycopg connection to ``url`` succeeds."""
    parts = sa.make_url(url)
    try:
        with psycopg.connect(
            host=parts.host, port=parts.port, user=parts.username, dbname=parts.database, connect_timeout=3
        ):
            return True
    except psycopg.OperationalError:
        return False


def _tcp_accepts(host: str, port: int, family: int = socket.AF_INET) -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(3)
        try:
            sock.connect((host, port))
        except OSError:
            return False
        return True


def _non_loopback_ipv4() -> str | None:
    """An IPv4 address of this machine other than 127.x (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.254.254.254", 9))
        except OSError:
            return None
        address = sock.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def _make_bin(root: Path, version: str, programs: tuple[str, ...]) -> Path:
    bin_dir = root / version / "bin"
    bin_dir.mkdir(parents=True)
    for program in programs:
        path = bin_dir / program
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return bin_dir


def test_find_pg_bin_picks_the_newest_complete_version(tmp_path, monkeypatch):
    """Versions sort numerically (15 > 9.6) and a version missing ``postgres`` is passed over."""
    _make_bin(tmp_path, "9.6", pg_server.PG_PROGRAMS)
    expected = _make_bin(tmp_path, "15", pg_server.PG_PROGRAMS)
    _make_bin(tmp_path, "16", ("initdb", "pg_ctl"))  # client-only leftovers: no server
    monkeypatch.setattr(pg_server, "PG_ROOT", tmp_path)
    assert find_pg_bin() == expected


def test_missing_binaries_raise_a_runtime_error_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(pg_server, "PG_ROOT", tmp_path)  # empty: nothing installed
    assert find_pg_bin() is None
    with pytest.raises(RuntimeError, match=r"apt-get install -y postgresql"):
        with postgres_server():
            pass


@pytest.mark.parametrize("ci", ["true", "1"])
def test_missing_binaries_fail_under_ci(tmp_path, monkeypatch, ci):
    monkeypatch.setattr(pg_server, "PG_ROOT", tmp_path)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match=r"CI is set.*apt-get install -y postgresql"):
        require_pg_bin()


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_missing_binaries_skip_outside_ci(tmp_path, monkeypatch, ci):
    monkeypatch.setattr(pg_server, "PG_ROOT", tmp_path)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install -y postgresql"):
        require_pg_bin()


def test_the_installed_binaries_are_found():
    pg_bin = require_pg_bin()
    assert pg_bin.parent.parent == Path("/usr/lib/postgresql")
    for program in pg_server.PG_PROGRAMS:
        assert os.access(pg_bin / program, os.X_OK), program


def test_a_real_server_starts_serves_two_engines_and_is_gone_afterwards():
    require_pg_bin()
    started = time.perf_counter()
    with postgres_server() as url:
        startup = time.perf_counter() - started
        print(f"\nPostgreSQL startup (initdb + start + create database): {startup:.2f} s")
        assert url.startswith("postgresql+psycopg://panda@127.0.0.1:")
        port = _port(url)
        writer, reader = sa.create_engine(url), sa.create_engine(url)
        try:
            with writer.connect() as conn:
                assert "PostgreSQL" in conn.execute(sa.text("SELECT version()")).scalar_one()
                assert conn.execute(sa.text("SELECT current_database()")).scalar_one() == "panda_test"
                assert conn.execute(sa.text("SHOW listen_addresses")).scalar_one() == "127.0.0.1"
                assert conn.execute(sa.text("SELECT host(inet_server_addr())")).scalar_one() == "127.0.0.1"
                assert conn.execute(sa.text("SHOW server_encoding")).scalar_one() == "UTF8"
                assert int(conn.execute(sa.text("SHOW max_connections")).scalar_one()) >= 200
            with writer.begin() as conn:
                conn.execute(sa.text("CREATE TABLE answers (id serial PRIMARY KEY, student text, guess integer)"))
                conn.execute(
                    sa.text("INSERT INTO answers (student, guess) VALUES (:student, :guess)"),
                    [{"student": "Aino", "guess": 3}, {"student": "Élise", "guess": 7}],
                )
            with reader.connect() as conn:  # another engine, another connection: sees the committed rows
                rows = conn.execute(sa.text("SELECT student, guess FROM answers ORDER BY id")).all()
            assert [tuple(row) for row in rows] == [("Aino", 3), ("Élise", 7)]

            # Only 127.0.0.1 listens: not ::1, not the machine's other addresses.
            assert _tcp_accepts("127.0.0.1", port)
            if socket.has_ipv6:
                assert not _tcp_accepts("::1", port, socket.AF_INET6)
            other = _non_loopback_ipv4()
            if other is not None:
                assert not _tcp_accepts(other, port), other

            # The cluster lives in a private directory, owned by the user the server runs as.
            cluster_dir = _socket_dir(writer)
            info = cluster_dir.stat()
            assert stat.S_IMODE(info.st_mode) == 0o700
            expected_owner = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
            assert pwd.getpwuid(info.st_uid).pw_name == expected_owner
            assert (cluster_dir / "data" / "PG_VERSION").is_file()
        finally:
            writer.dispose()
            reader.dispose()
    assert not cluster_dir.exists()
    assert not _connects(url)
    assert not _tcp_accepts("127.0.0.1", port)


def test_the_server_is_stopped_when_the_body_raises_and_two_can_run_at_once():
    require_pg_bin()
    with pytest.raises(RuntimeError, match="the body failed"):
        with postgres_server(dbname="first") as first:
            with postgres_server() as second:
                assert _port(first) != _port(second)
                assert _connects(first) and _connects(second)
                engine = sa.create_engine(first)
                cluster_dir = _socket_dir(engine)
                engine.dispose()
                raise RuntimeError("the body failed")
    assert not cluster_dir.exists()
    for url in (first, second):
        assert not _tcp_accepts("127.0.0.1", _port(url)), url
        assert not _connects(url), url


def test_an_explicit_port_is_used():
    require_pg_bin()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with postgres_server(port=port) as url:
        assert _port(url) == port
        assert _connects(url)


def test_an_explicit_port_in_use_is_a_clear_error():
    require_pg_bin()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(RuntimeError, match=r"(?s)pg_ctl start failed.*already in use"):
            with postgres_server(port=port):
                pass


def test_the_pg_url_fixture_serves_a_database(pg_url):  # noqa: F811
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
            assert conn.execute(sa.text("SELECT current_user")).scalar_one() == "panda"
    finally:
        engine.dispose()
