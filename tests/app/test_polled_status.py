"""The phones' poll of a round's status: one database read per round and second for the whole server (issue 38).

Against a real SQLite class database: the reads are counted with SQLAlchemy's own event on the engine, the clock
is the test's (no sleeping).
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import event

from app.game import polled_status, rounds
from app.server.db import store

VIEW = ["city:kotka", 60, 30, 30, 0, "road", 1, "uniform"]


@pytest.fixture
def url(tmp_path):
    u = f"sqlite:///{tmp_path / 'class.db'}"
    polled_status.forget()
    yield u
    polled_status.forget()
    store.dispose(u)


def _count_statements(url: str) -> list[str]:
    seen: list[str] = []
    event.listen(store.engine(url), "before_cursor_execute", lambda *a: seen.append(a[2]))
    return seen


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_hundred_phones_polling_within_a_second_read_the_database_once(url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "each"), url=url)
    clock = Clock()
    statements = _count_statements(url)
    answers = [polled_status.status(code, url=url, clock=clock) for _ in range(100)]
    assert answers == [(1, "open", 1, "off")] * 100
    reads = len(statements)
    assert 0 < reads <= 3  # one status read (its game and round selects)

    rounds.close_round(code, key, url=url)
    clock.now += 0.5  # within the second: the kept answer
    assert polled_status.status(code, url=url, clock=clock)[:2] == (1, "open")
    clock.now += polled_status.MAX_AGE_S  # older than a second: read again, and every phone sees it
    assert polled_status.status(code, url=url, clock=clock)[:2] == (1, "closed")
    assert polled_status.status(code, url=url, clock=clock)[:2] == (1, "closed")


def test_phones_polling_from_many_threads_get_the_live_status(url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "each"), url=url)
    seen: list[tuple] = []

    def poll() -> None:
        for _ in range(20):
            seen.append(polled_status.status(code, url=url))

    threads = [threading.Thread(target=poll) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [(1, "open", 1, "off")] * 160
    rounds.next_round(code, key, rounds.RoundSpec("em", 3.0, 1, "each"), url=url)
    assert polled_status.status(code, url=url, max_age_s=0.0)[:2] == (2, "open")


def test_a_code_that_is_not_a_round_is_a_sentence_and_is_not_kept(url):
    with pytest.raises(rounds.GameError, match="not a join code"):
        polled_status.status("<script>", url=url)
    with pytest.raises(rounds.GameError, match="no round with the code"):
        polled_status.status("ABCDEF", url=url)
    assert not polled_status._seen


def test_hostile_codes_cannot_grow_the_kept_statuses_without_bound(url, monkeypatch):
    monkeypatch.setattr(polled_status, "MAX_ROUNDS", 5)
    codes = [rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "each"), url=url)[0] for _ in range(8)]
    clock = Clock()
    for code in codes:
        clock.now += 0.01
        assert polled_status.status(code, url=url, clock=clock)[:2] == (1, "open")
    assert len(polled_status._seen) == 5
    assert {c for _, c in polled_status._seen} == set(codes[-5:])  # the ones read longest ago went first
