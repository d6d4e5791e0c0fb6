"""The class round's schema: a game (one join code) holds rounds; a player gets one entry per round.

Tokens are stored as SHA-256 hashes only: the lecturer's and the students' links carry the tokens, the
database never does, so a copy of the database cannot reveal or guess for anyone.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "Base",
    "Game",
    "Round",
    "Player",
    "Entry",
    "JoinSlot",
    "StoredResult",
    "ROUND_STATUSES",
    "SECRET_MODES",
]

#: open: students join and guess; scoring: revealed, the scores are being computed (guesses refused); revealed:
#: scores are shown, guesses refused; closed: ended by the lecturer.
ROUND_STATUSES = ("open", "scoring", "revealed", "closed")
#: question: one question for the room: one secret place and one draw of its reports, the same on every phone;
#: shared: every student's reports come from one place (the lecturer's, or drawn when the round starts), drawn
#: for each phone (the class can pool them); each: every student gets their own place.
SECRET_MODES = ("question", "shared", "each")


class Base(DeclarativeBase):
    """Declarative base of the class round's tables."""


class Game(Base):
    """A class session: one join code, one lecturer, the view every round is played on."""

    __tablename__ = "games"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    code: Mapped[str] = mapped_column(String(12), unique=True)
    host_token_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(), index=True)
    #: The view's instance key (source, K, N, M, seed, loss, n_tasks, prior) as a JSON list.
    view: Mapped[list] = mapped_column(JSON)
    rounds: Mapped[list[Round]] = relationship(
        back_populates="game", cascade="all, delete-orphan", passive_deletes=True, order_by="Round.number"
    )
    players: Mapped[list[Player]] = relationship(
        back_populates="game", cascade="all, delete-orphan", passive_deletes=True
    )


class Round(Base):
    """One question to the class: a mechanism at one ε, k reports per student, a secret place."""

    __tablename__ = "rounds"
    __table_args__ = (UniqueConstraint("game_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int] = mapped_column(ForeignKey("games.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    mechanism: Mapped[str] = mapped_column(String(16))
    #: The mechanism's build options (a JSON list of [name, value] pairs; the LP's time limit).
    options: Mapped[list] = mapped_column(JSON)
    epsilon_per_km: Mapped[float] = mapped_column(Float)
    n_reports: Mapped[int] = mapped_column(Integer)
    secret_mode: Mapped[str] = mapped_column(String(8))
    #: The one secret place (secret_mode "question" or "shared"); None when every student gets their own.
    shared_place: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[str] = mapped_column(String(10), default="open")
    #: The vote the room is on: 1, or 2 once the lecturer asked the room to talk and vote again (migration 0004).
    vote: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    #: When the lecturer's timer runs out: guesses are refused after it; None: no timer (migration 0004).
    timer_ends_at: Mapped[datetime | None] = mapped_column(DateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime())
    revealed_at: Mapped[datetime | None] = mapped_column(DateTime(), nullable=True)
    #: Filled at the reveal: the class's and the Bayes attacker's errors (see panda.class_round.summary).
    summary: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    game: Mapped[Game] = relationship(back_populates="rounds")
    entries: Mapped[list[Entry]] = relationship(
        back_populates="round", cascade="all, delete-orphan", passive_deletes=True
    )


class Player(Base):
    """A student's phone: anonymous, numbered in join order, known by the token in their link."""

    __tablename__ = "players"
    __table_args__ = (UniqueConstraint("game_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int] = mapped_column(ForeignKey("games.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    joined_at: Mapped[datetime] = mapped_column(DateTime())
    game: Mapped[Game] = relationship(back_populates="players")


class Entry(Base):
    """A player's part in one round: their secret place, the reports sampled on the server, their guess, scores."""

    __tablename__ = "entries"
    __table_args__ = (UniqueConstraint("round_id", "player_id"), Index("ix_entries_round", "round_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id", ondelete="CASCADE"))
    player_id: Mapped[int] = mapped_column(ForeignKey("players.id", ondelete="CASCADE"))
    secret_place: Mapped[int] = mapped_column(Integer)
    #: The k reports (output positions), sampled on the server from the mechanism's row of the secret place.
    reports: Mapped[list] = mapped_column(JSON)
    guess_place: Mapped[int | None] = mapped_column(Integer, nullable=True)
    guessed_at: Mapped[datetime | None] = mapped_column(DateTime(), nullable=True)
    n_guesses: Mapped[int] = mapped_column(Integer, default=0)
    #: The guess of the first vote, kept when the lecturer asks for a second one (migration 0004).
    first_guess_place: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error_m: Mapped[float | None] = mapped_column(Float, nullable=True)
    bayes_place: Mapped[int | None] = mapped_column(Integer, nullable=True)
    bayes_error_m: Mapped[float | None] = mapped_column(Float, nullable=True)
    rank: Mapped[int | None] = mapped_column(Integer, nullable=True)
    round: Mapped[Round] = relationship(back_populates="entries")


class JoinSlot(Base):
    """One join from one client address in one round: the joins an address may make per round are numbered
    slots, so two servers sharing the database cannot both hand out the last one (the unique key refuses)."""

    __tablename__ = "join_slots"
    __table_args__ = (UniqueConstraint("game_id", "round_number", "address_sha256", "slot"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int] = mapped_column(ForeignKey("games.id", ondelete="CASCADE"))
    #: The round that was current when the phone joined.
    round_number: Mapped[int] = mapped_column(Integer)
    #: SHA-256 of the game's salt and the client's address (or IPv6 network): never the address itself.
    address_sha256: Mapped[str] = mapped_column(String(64))
    slot: Mapped[int] = mapped_column(Integer)
    joined_at: Mapped[datetime] = mapped_column(DateTime())


class StoredResult(Base):
    """A computed result the dashboard keeps (app/server/result_store.py): a mechanism, its audit, a curve.

    Keyed by a hash of its kind, its exact inputs and the version of the code that made it; evicted least
    recently used first when the store outgrows its size.
    """

    __tablename__ = "results"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    code_version: Mapped[str] = mapped_column(String(16))
    #: The inputs in words (JSON), for people reading the store; the key is their hash.
    inputs: Mapped[list] = mapped_column(JSON)
    #: The value: an .npz archive (no pickle: a shared database must not be able to run code in a server).
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    size_bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime())
    used_at: Mapped[datetime] = mapped_column(DateTime(), index=True)
    #: Made by ``python -m panda prepare`` (no time limit, certified to the gap target).
    prepared: Mapped[bool] = mapped_column(Boolean, default=False)
