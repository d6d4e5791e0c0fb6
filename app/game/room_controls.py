"""The lecturer's controls while a round is open: peer instruction's second vote, and a timer (no streamlit).

* **Second vote**: "talk to your neighbour, vote again". Every guess made so far is kept as the entry's first
  vote; the students may then change theirs until the reveal. The projector shows both clouds and how many
  changed; the reveal scores both votes (:func:`panda.class_round.score_round`).
* **Timer**: the room has N seconds; past it, guesses are refused with a sentence (:func:`app.game.rounds.guess`
  checks it), whichever server of the class takes them.

Both need the lecturer's token, as every control of :mod:`app.game.rounds` does.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.game.rounds import _current, _host, _now
from app.game.types import GameError
from app.server.db import store
from app.server.db.models import Entry

__all__ = ["TIMER_SECONDS", "second_vote", "start_timer"]

#: The timer's choices, seconds.
TIMER_SECONDS = (30, 60, 90, 120)


def second_vote(code: object, host_token: object, *, url: str | None = None) -> int:
    """Keep every guess as the first vote and open the second; returns how many guesses were kept."""
    with store.session(url) as s:
        rnd = _current(s, _host(s, code, host_token), lock="update")
        if rnd.status != "open":
            raise GameError(f"Round {rnd.number} is {rnd.status}: a second vote needs an open round.")
        if rnd.vote >= 2:
            raise GameError(f"Round {rnd.number} is already on its second vote.")
        kept = 0
        for entry in s.scalars(select(Entry).where(Entry.round_id == rnd.id)):
            entry.first_guess_place = entry.guess_place
            kept += entry.guess_place is not None
        rnd.vote, rnd.timer_ends_at = 2, None  # the first vote's timer does not cut the second short
        return kept


def start_timer(code: object, host_token: object, seconds: object, *, url: str | None = None) -> None:
    """Give the room ``seconds`` (one of :data:`TIMER_SECONDS`) from now; guesses are refused after it."""
    if isinstance(seconds, bool) or seconds not in TIMER_SECONDS:
        raise GameError(f"A timer runs {', '.join(map(str, TIMER_SECONDS))} seconds.")
    with store.session(url) as s:
        rnd = _current(s, _host(s, code, host_token), lock="update")
        if rnd.status != "open":
            raise GameError(f"Round {rnd.number} is {rnd.status}: a timer needs an open round.")
        rnd.timer_ends_at = _now() + timedelta(seconds=int(seconds))
