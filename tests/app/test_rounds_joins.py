"""Joins per client address and round (issue 38): one phone cannot fill a round's seats.

Without a limit one student could take all of a round's 500 seats, and in a shared-secret round every extra join
is k more reports of the one secret. The joins are counted in the database (SQLite and PostgreSQL), so the limit
holds across the servers of one class; the phone says why in a sentence.
"""

from __future__ import annotations

import threading

import pytest
from apptest_support import SMALL, clear_caches, make_app, release_resources, run_ok  # noqa: F401
from pg_fixture import pg_url  # noqa: F401 (fixture)
from sqlalchemy import create_engine, select, text

from app import client_address
from app.game import rounds
from app.model.params import Params
from app.server.db import store
from app.server.db.models import Game, JoinSlot

VIEW = ["city:kotka", 60, 30, 30, 0, "road", 1, "uniform"]
LIMIT = 3


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path, monkeypatch):
    u = f"sqlite:///{tmp_path / 'class.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    monkeypatch.setattr(rounds, "MAX_JOINS_PER_ADDRESS", LIMIT)
    yield u
    store.dispose(u)


def _refusal(code, address, url) -> str:
    with pytest.raises(rounds.GameError) as info:
        rounds.join(code, address=address, url=url)
    return str(info.value)


def test_joins_from_one_address_are_limited_per_round(url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 2, "shared", 7), url=url)
    for _ in range(LIMIT):
        rounds.join(code, address="203.0.113.7", url=url)
    message = _refusal(code, "203.0.113.7", url)
    assert message.startswith("Too many joins from this network for this round: ")
    assert str(LIMIT) in message and len(message) < 250
    # Another address, and joins with no known address (a script, a test), are not held up.
    rounds.join(code, address="203.0.113.8", url=url)
    rounds.join(code, url=url)
    # The IPv6 addresses of one /64 are one client.
    for i in range(LIMIT):
        rounds.join(code, address=f"2001:db8:0:1::{i + 1}", url=url)
    assert _refusal(code, "2001:db8:0:1:abcd::1", url).startswith("Too many joins")
    # The count is per round: in the next round the network may join again (a phone that lost its link).
    rounds.next_round(code, key, rounds.RoundSpec("em", 1.0, 2, "shared", 9), url=url)
    rounds.join(code, address="203.0.113.7", url=url)
    # The count lives in the database: another server (here: a fresh engine) sees it.
    store.dispose(url)
    for _ in range(LIMIT - 1):
        rounds.join(code, address="203.0.113.7", url=url)
    assert _refusal(code, "203.0.113.7", url).startswith("Too many joins")
    # No address is stored in clear.
    with store.session(url, read=True) as s:
        game_id = s.scalars(select(Game.id).where(Game.code == code)).one()
        stored = [r.address_sha256 for r in s.scalars(select(JoinSlot).where(JoinSlot.game_id == game_id))]
    assert stored and all(len(a) == 64 and "203.0.113" not in a for a in stored)


def test_a_burst_of_joins_from_one_address_gets_exactly_the_limit(url):
    code, _ = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    outcome: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(10)

    def phone() -> None:
        start.wait()
        try:
            rounds.join(code, address="198.51.100.20", url=url)
            result = "joined"
        except rounds.GameError as exc:
            result = str(exc)
        with lock:
            outcome.append(result)

    threads = [threading.Thread(target=phone) for _ in range(10)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert outcome.count("joined") == LIMIT, outcome
    assert all(o == "joined" or o.startswith("Too many joins from this network") for o in outcome), outcome


def test_the_limit_can_be_switched_off(url, monkeypatch):
    monkeypatch.setattr(rounds, "MAX_JOINS_PER_ADDRESS", 0)  # a class behind one NAT address
    code, _ = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    for _ in range(LIMIT + 2):
        rounds.join(code, address="203.0.113.7", url=url)


def test_a_class_database_of_the_previous_schema_is_upgraded_with_its_games(tmp_path):
    """A server upgraded mid-day keeps the games of its database: the new table is added, nothing is rebuilt."""
    from alembic import command
    from alembic.config import Config

    u = f"sqlite:///{tmp_path / 'old.db'}"
    eng = create_engine(u)
    cfg = Config()
    cfg.set_main_option("script_location", str(store.MIGRATIONS))
    with eng.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")
        conn.commit()
        conn.execute(
            text("INSERT INTO games (code, host_token_sha256, created_at, view) VALUES ('K7M2QX', :h, :t, '[]')"),
            {"h": "0" * 64, "t": rounds._now()},
        )
        game_id = conn.execute(text("SELECT id FROM games")).scalar_one()
        conn.execute(
            text("INSERT INTO players (game_id, number, token_sha256, joined_at) VALUES (:g, 1, :s, :t)"),
            {"g": game_id, "s": "1" * 64, "t": rounds._now()},
        )
        conn.commit()
    eng.dispose()
    try:
        with store.session(u, read=True) as s:  # the store migrates to head on first use
            assert s.scalars(select(Game.code)).all() == ["K7M2QX"]
            assert s.execute(text("SELECT count(*) FROM players")).scalar_one() == 1
            assert s.execute(text("SELECT count(*) FROM join_slots")).scalar_one() == 0
    finally:
        store.dispose(u)


# ---------------------------------------------------------------------------------------------
# The phone


@pytest.mark.slow
def test_the_phone_says_why_a_join_is_refused(db, monkeypatch):
    view = list(
        Params(
            n_records=int(SMALL["K"]), n_users=int(SMALL["N"]), n_outputs=int(SMALL["M"]), page_loss="road"
        ).instance_key
    )
    code, _ = rounds.open_game(view, rounds.RoundSpec("laplace", 5.0))
    monkeypatch.setattr(rounds, "MAX_JOINS_PER_ADDRESS", 2)
    monkeypatch.setattr(client_address, "client_address", lambda context=None: "203.0.113.9")
    for n in range(3):
        at = make_app("app_pages/play.py", code=code)
        run_ok(at)
        next(b for b in at.button if b.label == "Join").click()
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        if n < 2:
            assert at.query_params.get("me"), [e.value for e in at.error]
    assert not at.query_params.get("me")
    assert [e.value for e in at.error if e.value.startswith("Too many joins from this network for this round: ")]
    with store.session(read=True) as s:
        game_id = s.scalars(select(Game.id).where(Game.code == code)).one()
        assert len(s.scalars(select(JoinSlot).where(JoinSlot.game_id == game_id)).all()) == 2
