"""The words of a class round: the refusal a page shows, what a round is started on, what each page shows."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.server.db.models import SECRET_MODES

__all__ = ["GameError", "RoundSpec", "PlayerView", "HostView"]


class GameError(Exception):
    """A request the rules refuse; ``str(error)`` is the plain sentence to show."""


@dataclass(frozen=True)
class RoundSpec:
    """What the lecturer starts a round on (the view itself is the game's)."""

    mechanism: str
    epsilon_per_km: float
    n_reports: int = 1
    secret_mode: str = "each"
    #: The shared secret place the lecturer picked; None in a question or shared round: a new place is drawn from
    #: the prior
    #: passed to :func:`open_game` or :func:`next_round`.
    shared_place: int | None = None
    options: tuple = ()

    def __post_init__(self) -> None:
        if self.secret_mode not in SECRET_MODES:
            raise ValueError(f"secret_mode must be one of {SECRET_MODES}. Got {self.secret_mode!r} instead.")
        if self.secret_mode == "each" and self.shared_place is not None:
            raise ValueError("A secret per student takes no shared_place.")
        if not (1 <= int(self.n_reports) <= 20):
            raise ValueError(f"n_reports must be 1 to 20. Got {self.n_reports} instead.")
        if not (self.epsilon_per_km > 0):
            raise ValueError(f"epsilon_per_km must be > 0. Got {self.epsilon_per_km} instead.")


@dataclass
class PlayerView:
    """What a student's page shows (no secret before the reveal)."""

    code: str
    view: list
    player_number: int
    round_number: int
    status: str
    epsilon_per_km: float
    mechanism: str
    n_reports: int
    #: 2 once the lecturer asked the room to talk to a neighbour and vote again.
    vote: int = 1
    #: Seconds left to guess when the lecturer started a timer (0: the time is up); None without one.
    timer_left_s: float | None = None
    reports: list[int] = field(default_factory=list)
    guess: int | None = None
    #: After the reveal only:
    secret: int | None = None
    error_m: float | None = None
    bayes_place: int | None = None
    bayes_error_m: float | None = None
    rank: int | None = None
    n_ranked: int = 0
    #: None while the round is open; after the reveal, the round's summary.
    summary: dict | None = None
    #: The student joined after this round ended: they wait for the next one.
    waiting: bool = False


@dataclass
class HostView:
    """What the lecturer's screen shows."""

    code: str
    view: list
    rounds: list[dict]
    current: dict
    n_players: int
    #: The current round's guesses (place per guessing student) and, after the reveal, secrets and scores.
    guesses: list[int]
    entries: list[dict]
