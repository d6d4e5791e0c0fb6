"""What a lecturer and a student can do in a class round, and the rules (no streamlit).

Every function takes the join code and a token from a link (hostile input: checked here, never trusted)
and either does what was asked or raises :class:`GameError` with the sentence to show. The pages hold no
secret: a student's report is sampled on the server and stored; the secret place leaves the database only
after the reveal.

Rules:

* Join codes are 6 characters drawn with :mod:`secrets` from 31 unambiguous letters and digits (8.9e8
  codes): one code says nothing about another.
* The lecturer's token (in the lecturer's link only) opens, reveals, closes and exports; a student's token
  (in the student's link) guesses. Both are stored as SHA-256 hashes.
* A new round never starts on a secret place the class has seen revealed: in a shared-secret round the place is
  drawn from the view's prior away from every place revealed in the game (:func:`draw_place`) unless the lecturer
  picks one (the host view then says in which round the class saw it); a student with a secret of their own gets
  none revealed to them before (the draw gets them as ``avoid_places``). Only when the prior has no other place
  left is an older one drawn again, never the last one revealed.
* A question round (one question for the room) shows every phone the same reports: each phone draws them with the
  round's seed, which mixes the lecturer token's stored hash with the round (no link carries it).
* Joins are counted per client address and round (:data:`MAX_JOINS_PER_ADDRESS`, ``PANDA_JOINS_PER_ADDRESS``),
  in the database, so that one phone cannot take a round's seats (nor, in a shared-secret round, pile up reports
  of the one secret) through any server of the class.
* A guess can change until the reveal; after it, or in a closed round, it is refused with a message.
  The reveal and a guess never interleave: the reveal first marks the round ``scoring`` under a lock on its row
  (``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` serialises writers), a guess reads it ``FOR SHARE``; the scores
  are computed with no transaction open and stored in a second one. The ``scoring`` mark is the claim: a claim
  older than any scoring can take (:data:`SCORING_STALE`) was left by a server that stopped, and the host page
  offers to score the round again (every guess is kept); a late result of the old claim is then refused.
* Games older than a day are deleted (:func:`cleanup`, run whenever a game opens).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.game import join_limits, secret_places
from app.game.secret_places import draw_place, unique_places
from app.game.types import GameError, HostView, PlayerView, RoundSpec
from app.server.db import store
from app.server.db.models import Entry, Game, Player, Round

__all__ = [
    "GameError",
    "RoundSpec",
    "PlayerView",
    "HostView",
    "CODE_ALPHABET",
    "CODE_LENGTH",
    "MAX_AGE",
    "MAX_PLAYERS",
    "MAX_JOINS_PER_ADDRESS",
    "SCORING_STALE",
    "new_code",
    "draw_place",
    "normalize_code",
    "open_game",
    "next_round",
    "close_round",
    "reveal",
    "join",
    "player_view",
    "guess",
    "status",
    "host_view",
    "room_view",
    "cleanup",
]

#: No 0/O, 1/I/L: a code read off a projector is typed right.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
MAX_AGE = timedelta(days=1)
#: Players per game: a lecture hall, not the internet.
MAX_PLAYERS = 500
#: Rounds per game.
MAX_ROUNDS = 100
#: Joins per client address (an IPv6 client's /64) and round (``PANDA_JOINS_PER_ADDRESS``; 0: no limit).
MAX_JOINS_PER_ADDRESS = join_limits.joins_per_address()


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # naive UTC in the database (SQLite keeps no zone)


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def new_code() -> str:
    """A fresh join code (not checked for uniqueness: :func:`open_game` retries on a collision)."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(code: object) -> str:
    """A typed or linked code in canonical form; refuses anything that cannot be a code."""
    text = str(code or "").strip().upper().replace(" ", "").replace("-", "")
    if len(text) != CODE_LENGTH or any(c not in CODE_ALPHABET for c in text):
        shown = "".join(c for c in text if c.isascii() and c.isalnum())[:12]  # never echo markup from a link
        raise GameError(f"“{shown}” is not a join code: a code has {CODE_LENGTH} letters and digits, like K7M2QX.")
    return text


def _game(s: Session, code: object, *, now: datetime | None = None) -> Game:
    c = normalize_code(code)
    game = s.scalars(select(Game).where(Game.code == c)).one_or_none()
    if game is None:
        raise GameError(f"There is no round with the code {c}. Check the code on the lecturer's screen.")
    if game.created_at < (now or _now()) - MAX_AGE:
        raise GameError(f"The code {c} has expired (rounds last a day). Ask the lecturer for a new one.")
    return game


def _host(s: Session, code: object, host_token: object) -> Game:
    game = _game(s, code)
    if not isinstance(host_token, str) or not hmac.compare_digest(_sha(host_token), game.host_token_sha256):
        raise GameError("Only the lecturer who opened this round can do that (their link carries a lecturer key).")
    return game


def _player(s: Session, game: Game, token: object) -> Player:
    player = None
    if isinstance(token, str) and token:
        player = s.scalars(
            select(Player).where(Player.game_id == game.id, Player.token_sha256 == _sha(token))
        ).one_or_none()
    if player is None:
        raise GameError(f"This link is not a player of round {game.code}. Join again with the code.")
    return player


def _current(s: Session, game: Game, *, lock: str | None = None) -> Round:
    q = select(Round).where(Round.game_id == game.id).order_by(Round.number.desc()).limit(1)
    if lock == "update":
        q = q.with_for_update()
    elif lock == "share":
        q = q.with_for_update(read=True)
    return s.scalars(q).one()


def _add_round(
    s: Session, game: Game, number: int, spec: RoundSpec, now: datetime, prior: Sequence[float] | None = None
) -> Round:
    place = secret_places.shared_place(s, game, spec, prior)
    rnd = Round(
        game_id=game.id,
        number=number,
        mechanism=spec.mechanism,
        options=[list(o) for o in spec.options],
        epsilon_per_km=float(spec.epsilon_per_km),
        n_reports=int(spec.n_reports),
        secret_mode=spec.secret_mode,
        shared_place=place,
        status="open",
        created_at=now,
    )
    s.add(rnd)
    s.flush()
    return rnd


def open_game(
    view: list | tuple,
    spec: RoundSpec,
    *,
    prior: Sequence[float] | None = None,
    host_token_for: Callable[[str], str] | None = None,
    url: str | None = None,
) -> tuple[str, str]:
    """Open a game on ``view`` (the instance key) with its first round; returns (join code, lecturer token).

    ``prior``: the view's prior, to draw the shared place from when ``spec`` is shared and names none.
    ``host_token_for(code)``: the lecturer token of a code (the dashboard's: derived from the lecturer key, so
    every session that knows the key controls the round); a random token when None.
    """
    if spec.secret_mode != "each" and spec.shared_place is None and prior is None:
        raise ValueError("A shared round without a place draws one: pass the view's prior.")
    cleanup(url=url)
    for _ in range(20):
        code = new_code()
        token = host_token_for(code) if host_token_for is not None else secrets.token_urlsafe(24)
        try:
            with store.session(url) as s:
                now = _now()
                game = Game(code=code, host_token_sha256=_sha(token), created_at=now, view=list(view))
                s.add(game)
                s.flush()
                _add_round(s, game, 1, spec, now, prior)
                return game.code, token
        except IntegrityError:  # the code is taken (about one chance in 10^7 with 100 live games): draw again
            continue
    raise GameError("Could not find a free join code: try again.")


def next_round(
    code: str, host_token: str, spec: RoundSpec, *, prior: Sequence[float] | None = None, url: str | None = None
) -> int:
    """Start the next round (the current one is closed first if the lecturer had not revealed it).

    A shared round with no place in ``spec`` gets a new one drawn from ``prior`` (the view's), never a place
    revealed in this game while the prior has another (:func:`draw_place`). A place the lecturer names is taken
    as it is; :func:`host_view` says in which round the class saw it (``seen_in_round``).
    """
    if spec.secret_mode != "each" and spec.shared_place is None and prior is None:
        raise ValueError("A shared round without a place draws one: pass the view's prior.")
    with store.session(url) as s:
        game = _host(s, code, host_token)
        rnd = _current(s, game, lock="update")
        if rnd.number >= MAX_ROUNDS:
            raise GameError(f"This game has had {MAX_ROUNDS} rounds: open a new one.")
        if rnd.status in ("open", "scoring"):  # a reveal still scoring stores nothing into a round moved on
            rnd.status = "closed"
        return _add_round(s, game, rnd.number + 1, spec, _now(), prior).number


def close_round(code: str, host_token: str, *, url: str | None = None) -> None:
    """End the current round: no more guesses (its scores stay if it was revealed)."""
    with store.session(url) as s:
        game = _host(s, code, host_token)
        _current(s, game, lock="update").status = "closed"


#: A round stays "scoring" while its reveal is scored (outside any transaction). A reveal older than this that
#: never stored its scores (its server stopped mid-way) may be started again. It is well over what a scoring can
#: take (the worker job's time limit is app.state.JOB_TIMEOUT_S), so the claim of a live server is not taken over.
SCORING_STALE = timedelta(minutes=5)


def _scoring_stuck(rnd: Round, now: datetime) -> bool:
    """The round is "scoring" under a claim no live server can still hold (its server stopped)."""
    return rnd.status == "scoring" and (rnd.revealed_at is None or now - rnd.revealed_at > SCORING_STALE)


def reveal(
    code: str,
    host_token: str,
    score: Callable[[Any, list[dict]], tuple[list[dict], dict]],
    *,
    url: str | None = None,
) -> dict:
    """Reveal the current round: close it to guesses, score every entry with ``score``, store the summary.

    ``score(round, entries)`` gets the round's spec (``mechanism``, ``epsilon_per_km``, ``options``,
    ``n_reports``) and the entries as dicts (``secret``, ``reports``, ``guess``), and returns the per-entry
    scores and the summary (:func:`panda.class_round.score_round`). It may take a while (a worker job), so it
    runs between two short transactions, never inside one: the class's guesses, joins and results are not
    held up. Meanwhile the round is ``scoring`` (a guess is refused); if ``score`` fails the round is open
    again and the error propagates. A round stuck in ``scoring`` (:func:`host_view`'s ``scoring_stuck``: its
    server stopped mid-way) is scored again by this call, from every entry, under a new claim.
    """
    with store.session(url) as s:  # 1. no more guesses
        game = _host(s, code, host_token)
        rnd = _current(s, game, lock="update")
        if rnd.status == "scoring" and not _scoring_stuck(rnd, _now()):
            raise GameError(f"Round {rnd.number} is being revealed: its scores appear in a moment.")
        if rnd.status not in ("open", "scoring"):
            raise GameError(f"Round {rnd.number} is already {rnd.status}.")
        stamp = _now()
        rnd.status, rnd.revealed_at = "scoring", stamp
        round_id, game_id = rnd.id, game.id
        spec = SimpleNamespace(
            mechanism=rnd.mechanism,
            epsilon_per_km=rnd.epsilon_per_km,
            options=rnd.options,
            n_reports=rnd.n_reports,
            secret_mode=rnd.secret_mode,
        )
        rows = [
            (
                e.id,
                e.player_id,
                {
                    "secret": e.secret_place,
                    "reports": list(e.reports),
                    "guess": e.guess_place,
                    "first_guess": e.first_guess_place,
                },
            )
            for e in s.scalars(select(Entry).where(Entry.round_id == rnd.id).order_by(Entry.id))
        ]
    try:  # 2. the scores, outside any transaction
        scored, summary = score(spec, [entry for _, _, entry in rows])
    except BaseException:
        with store.session(url) as s:
            rnd = s.get(Round, round_id, with_for_update=True)
            if rnd is not None and rnd.status == "scoring" and rnd.revealed_at == stamp:
                rnd.status, rnd.revealed_at = "open", None
        raise
    with store.session(url) as s:  # 3. store them
        rnd = s.get(Round, round_id, with_for_update=True)
        if rnd is None or rnd.status != "scoring" or rnd.revealed_at != stamp:
            raise GameError("The round moved on while it was being revealed: nothing was stored.")
        entries = {e.id: e for e in s.scalars(select(Entry).where(Entry.round_id == round_id))}
        for (entry_id, _, _), sc in zip(rows, scored, strict=True):
            e = entries[entry_id]
            e.error_m, e.bayes_place, e.bayes_error_m, e.rank = (
                sc["error_m"],
                sc["bayes_place"],
                sc["bayes_error_m"],
                sc["rank"],
            )
        if spec.secret_mode != "shared":  # one draw for the room, or a place each: no independent reports to pool
            summary = {key: value for key, value in summary.items() if not key.startswith(("pooled_", "resend_"))}
        best = summary.pop("best_index", None)
        numbers = dict(s.execute(select(Player.id, Player.number).where(Player.game_id == game_id)).all())
        summary["best_player"] = None if best is None else numbers[rows[best][1]]
        summary["best_place"] = None if best is None else rows[best][2]["guess"]
        rnd.status, rnd.summary = "revealed", summary
        return summary


def join(code: object, *, address: str | None = None, url: str | None = None) -> str:
    """A new player in the game of ``code`` (late joiners welcome); returns the player's token.

    ``address``: the client's network address (app.client_address); at most :data:`MAX_JOINS_PER_ADDRESS`
    joins per address and round. None (not known: a phone on the server's own machine, a script) is not counted.
    """
    token = secrets.token_urlsafe(18)
    limit = int(MAX_JOINS_PER_ADDRESS)
    for _ in range(20):
        try:
            with store.session(url) as s:
                game = _game(s, code)
                rnd = _current(s, game)
                if rnd.status == "closed":
                    raise GameError(f"The lecturer closed round {game.code}: wait for the next round, then join.")
                n = s.scalar(select(func.max(Player.number)).where(Player.game_id == game.id)) or 0
                if n >= MAX_PLAYERS:
                    raise GameError(f"This round is full ({MAX_PLAYERS} players).")
                now = _now()
                if address is not None and limit > 0:
                    join_limits.claim_slot(s, game, rnd.number, address, limit, now)
                s.add(Player(game_id=game.id, number=n + 1, token_sha256=_sha(token), joined_at=now))
                return token
        except IntegrityError:  # two phones took the same number (or address slot) at once: take the next
            continue
    raise GameError("Too many phones joined at once: tap Join again.")


def player_view(
    code: object,
    token: object,
    draw: Callable[[list, Round], tuple[int, list[int]]],
    *,
    url: str | None = None,
) -> PlayerView:
    """The student's round: their reports, their guess, and their scores after the reveal.

    On the first sight of an open round the reports are drawn with ``draw(view, round)`` (secret place, outputs),
    outside any transaction (a mechanism may take a while to build the first time), then stored. ``round`` has the
    round's spec (``number``, ``mechanism``, ``epsilon_per_km``, ``options``, ``n_reports``, ``secret_mode``,
    ``shared_place``) and ``avoid_places``: in a round where each student has their own secret, the student's
    secrets revealed in earlier rounds, the latest first, for :func:`draw_place` to keep out; and
    ``question_seed``: in a question round, the seed every phone draws its (the same) reports with, else None.
    """
    for _ in range(3):
        with store.session(url, read=True) as s:
            game = _game(s, code)
            player = _player(s, game, token)
            rnd = _current(s, game)
            entry = s.scalars(select(Entry).where(Entry.round_id == rnd.id, Entry.player_id == player.id)).one_or_none()
            out = PlayerView(
                code=game.code,
                view=list(game.view),
                player_number=player.number,
                round_number=rnd.number,
                status=rnd.status,
                epsilon_per_km=rnd.epsilon_per_km,
                mechanism=rnd.mechanism,
                n_reports=rnd.n_reports,
                vote=rnd.vote,
                timer_left_s=_timer_left_s(rnd),
            )
            if entry is not None:
                out.reports, out.guess = list(entry.reports), entry.guess_place
                if rnd.summary is not None:
                    out.secret, out.error_m, out.rank = entry.secret_place, entry.error_m, entry.rank
                    out.bayes_place, out.bayes_error_m = entry.bayes_place, entry.bayes_error_m
                    out.summary = rnd.summary
                    out.n_ranked = int(rnd.summary.get("n_guesses") or 0)
                return out
            if rnd.status != "open":
                out.waiting = True
                return out
            avoid: list[int] = []
            if rnd.secret_mode == "each":
                earlier = s.execute(
                    select(Entry.secret_place, Round.summary)
                    .join(Round, Round.id == Entry.round_id)
                    .where(Entry.player_id == player.id, Round.number < rnd.number)
                    .order_by(Round.number.desc())
                ).all()
                avoid = unique_places(place for place, summary in earlier if summary is not None)
            round_id, player_id, view = rnd.id, player.id, list(game.view)
            spec = SimpleNamespace(
                number=rnd.number,
                mechanism=rnd.mechanism,
                epsilon_per_km=rnd.epsilon_per_km,
                options=rnd.options,
                n_reports=rnd.n_reports,
                secret_mode=rnd.secret_mode,
                shared_place=rnd.shared_place,
                avoid_places=tuple(avoid),
                question_seed=_question_seed(game, rnd) if rnd.secret_mode == "question" else None,
            )
        secret, reports = draw(view, spec)
        try:
            with store.session(url) as s:
                if s.get(Round, round_id) is not None and s.get(Round, round_id).status == "open":
                    s.add(
                        Entry(
                            round_id=round_id,
                            player_id=player_id,
                            secret_place=int(secret),
                            reports=[int(j) for j in reports],
                            n_guesses=0,
                        )
                    )
        except IntegrityError:  # the same phone loaded twice at once: the other load drew the entry
            pass
    raise GameError("Your report could not be drawn: reload the page.")


def _question_seed(game: Game, rnd: Round) -> int:
    """The seed of a question round's one draw: every phone draws the same reports with it, and nobody can
    compute it from a link (it mixes the lecturer token's stored hash with the round)."""
    digest = hashlib.sha256(f"{game.host_token_sha256}:question:{rnd.id}".encode()).digest()
    return int.from_bytes(digest[:16], "big")


def status(code: object, *, url: str | None = None) -> tuple[int, str, int, str]:
    """What a student's page polls for: the current round's number, status, vote (1, 2) and timer state ("off",
    "running", "up"); a change of any of them redraws the phone."""
    with store.session(url, read=True) as s:
        rnd = _current(s, _game(s, code))
        left = _timer_left_s(rnd)
        return rnd.number, rnd.status, rnd.vote, "off" if left is None else "running" if left > 0 else "up"


def guess(code: object, token: object, place: object, *, url: str | None = None) -> str:
    """Store (or change) the student's guess for the current round; returns the confirmation to show."""
    with store.session(url) as s:
        game = _game(s, code)
        player = _player(s, game, token)
        rnd = _current(s, game, lock="share")
        if rnd.status == "revealed":
            raise GameError(f"Round {rnd.number} has been revealed: guesses are closed. Your score is below.")
        if rnd.status == "scoring":
            raise GameError(
                f"Round {rnd.number} has been revealed: guesses are closed. Your score appears in a moment."
            )
        if rnd.status == "closed":
            raise GameError(f"The lecturer closed round {rnd.number}: guesses are closed.")
        if rnd.timer_ends_at is not None and _now() > rnd.timer_ends_at:  # app/game/room_controls.py
            raise GameError("Time is up: guesses are closed. The lecturer reveals in a moment.")
        n_places = int(game.view[1])
        if isinstance(place, bool) or not isinstance(place, int) or not (0 <= place < n_places):
            raise GameError("That is off the map: tap inside the map, near the place you choose.")
        entry = s.scalars(select(Entry).where(Entry.round_id == rnd.id, Entry.player_id == player.id)).one_or_none()
        if entry is None:
            raise GameError("Your report for this round is not loaded yet: reload the page.")
        if entry.guess_place == place:
            return f"Already saved: your guess is place {place}."
        changed = entry.guess_place is not None
        entry.guess_place, entry.guessed_at, entry.n_guesses = place, _now(), entry.n_guesses + 1
        return f"Guess {'changed' if changed else 'saved'}: place {place}. You can change it until the reveal."


def _timer_left_s(rnd: Round) -> float | None:
    """Seconds the room has left to guess (0 when the time is up); None without a timer."""
    return None if rnd.timer_ends_at is None else max(0.0, (rnd.timer_ends_at - _now()).total_seconds())


def _round_row(rnd: Round, *, lecturer: bool = True) -> dict:
    """A round's settings and, once revealed, its summary; the room never sees a secret before the reveal."""
    row = {
        "round": rnd.number,
        "mechanism": rnd.mechanism,
        "epsilon_per_km": rnd.epsilon_per_km,
        "n_reports": rnd.n_reports,
        "secret_mode": rnd.secret_mode,
        "status": rnd.status,
        "vote": rnd.vote,
        "timer_left_s": _timer_left_s(rnd),
        "shared_place": rnd.shared_place if lecturer or rnd.summary is not None else None,
        "options": rnd.options,
    }
    row.update(rnd.summary or {})
    return row


def host_view(code: object, host_token: object, *, url: str | None = None) -> HostView:
    """The lecturer's screen: every round's summary, the current round's guesses (and scores after the reveal)."""
    with store.session(url) as s:
        return _view(s, _host(s, code, host_token), lecturer=True)


def room_view(code: object, *, url: str | None = None) -> HostView:
    """What the projector shows the room (anyone with the join code may see it): the rounds' summaries and the
    current round's guesses; the secret places and scores only once the round is revealed."""
    with store.session(url) as s:
        return _view(s, _game(s, code), lecturer=False)


def _view(s: Session, game: Game, *, lecturer: bool) -> HostView:
    rounds = list(s.scalars(select(Round).where(Round.game_id == game.id).order_by(Round.number)))
    cur = rounds[-1]
    n_players = s.scalar(select(func.count()).select_from(Player).where(Player.game_id == game.id)) or 0
    rows = s.execute(
        select(Entry, Player.number).join(Player, Player.id == Entry.player_id).where(Entry.round_id == cur.id)
    ).all()
    # The lecturer sees the secrets once the round stops taking guesses; the room, once it is revealed.
    shown = cur.status != "open" if lecturer else cur.summary is not None
    seen_in = [
        r.number
        for r in reversed(rounds[:-1])
        if r.summary is not None and r.shared_place is not None and r.shared_place == cur.shared_place
    ]
    entries = [
        {
            "player": number,
            "guess": e.guess_place,
            "first_guess": e.first_guess_place,
            **(
                {"secret": e.secret_place, "error_m": e.error_m, "bayes_error_m": e.bayes_error_m, "rank": e.rank}
                if shown
                else {}
            ),
        }
        for e, number in rows
    ]
    return HostView(
        code=game.code,
        view=list(game.view),
        rounds=[_round_row(r, lecturer=lecturer) for r in rounds],
        current=_round_row(cur, lecturer=lecturer)
        | {
            "n_entries": len(rows),
            # Scoring under a claim no live server holds: the host page offers to score the round again.
            "scoring_stuck": _scoring_stuck(cur, _now()),
            # The shared place was revealed in this earlier round: the class has seen it.
            "seen_in_round": seen_in[0] if seen_in else None,
            # A question round's one draw (every phone's reports; no secret): the projector shows it too.
            "question_reports": list(rows[0][0].reports) if cur.secret_mode == "question" and rows else None,
        },
        n_players=int(n_players),
        guesses=[e["guess"] for e in entries if e["guess"] is not None],
        entries=entries,
    )


def cleanup(*, url: str | None = None, now: datetime | None = None) -> int:
    """Delete games older than a day (their rounds, players and entries go with them); returns how many."""
    with store.session(url) as s:
        old = list(s.scalars(select(Game.id).where(Game.created_at < (now or _now()) - MAX_AGE)))
        if old:
            s.execute(delete(Game).where(Game.id.in_(old)))
        return len(old)
