"""The current round's status as the students' phones poll it: one database read per round and second.

Every open phone asks every few seconds whether the lecturer has revealed, closed or started a round
(app/app_pages/play.py). With a lecture hall on one server that is a hundred reads a second of the same row,
most of the server's CPU between the taps. Here the answer of one read is shared by every phone of the server
for :data:`MAX_AGE_S`: a reveal reaches the phones at most that much later. A failed read (a code that is not a
round, an expired one) is not kept: it raises :class:`GameError` as :func:`app.game.rounds.status` does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from app.game import rounds

__all__ = ["MAX_AGE_S", "status", "forget"]

#: How long one read of a round's status answers every phone of this server, seconds.
MAX_AGE_S = 1.0
#: Rounds remembered at once (a lecture hall has one or a few; hostile links cannot grow this without bound).
MAX_ROUNDS = 256

_lock = threading.Lock()
_seen: dict[tuple[str | None, str], tuple[float, tuple[int, str, int, str]]] = {}


def status(
    code: object, *, url: str | None = None, max_age_s: float = MAX_AGE_S, clock: Callable[[], float] = time.monotonic
) -> tuple[int, str, int, str]:
    """:func:`app.game.rounds.status` of ``code``, read at most once per ``max_age_s`` for the whole server."""
    key = (url, rounds.normalize_code(code))
    now = clock()
    with _lock:
        hit = _seen.get(key)
    if hit is not None and now - hit[0] < max_age_s:
        return hit[1]
    value = rounds.status(key[1], url=url)
    with _lock:
        if key not in _seen and len(_seen) >= MAX_ROUNDS:
            _seen.pop(min(_seen, key=lambda k: _seen[k][0]))  # the round read longest ago
        _seen[key] = (now, value)
    return value


def forget() -> None:
    """Drop every kept status (tests; a server that changes a round itself needs no call: the age bounds it)."""
    with _lock:
        _seen.clear()
