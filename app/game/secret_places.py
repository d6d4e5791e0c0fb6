"""A class round's secret place: drawn from the view's prior, never one the class has seen revealed."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.game.types import RoundSpec
from app.server.db.models import Game, Round

__all__ = ["draw_place", "unique_places", "revealed_shared_places", "shared_place"]


def draw_place(prior: Sequence[float], avoid: Sequence[int] = (), rng: np.random.Generator | None = None) -> int:
    """A secret place drawn from ``prior``, never one of ``avoid`` (places the class has seen, the latest first).

    When the prior gives no weight outside ``avoid``, only ``avoid[0]`` (the last place seen) is kept out; with
    no other place at all, the prior's own. ``rng``: by default seeded from :mod:`secrets` (the place is secret).
    """
    w = np.asarray(prior, dtype=float)
    w = np.where(np.isfinite(w) & (w > 0), w, 0.0)
    rng = rng if rng is not None else np.random.default_rng(secrets.randbits(128))
    avoided = [int(a) for a in avoid if 0 <= int(a) < w.size]
    for kept_out in (avoided, avoided[:1], []):
        q = w.copy()
        q[kept_out] = 0.0
        if q.sum() > 0:
            return int(rng.choice(q.size, p=q / q.sum()))
    raise ValueError("The prior gives no place any weight: no secret place can be drawn.")


def unique_places(places: Iterable[int | None]) -> list[int]:
    """``places`` without None and repeats, in order."""
    return list(dict.fromkeys(int(p) for p in places if p is not None))


def revealed_shared_places(s: Session, game: Game) -> list[tuple[int, int]]:
    """(round number, shared place) of every round of ``game`` whose reveal the class saw, the latest first."""
    rows = s.execute(
        select(Round.number, Round.shared_place, Round.summary)
        .where(Round.game_id == game.id, Round.shared_place.is_not(None))
        .order_by(Round.number.desc())
    ).all()
    return [(number, int(place)) for number, place, summary in rows if summary is not None]


def shared_place(s: Session, game: Game, spec: RoundSpec, prior: Sequence[float] | None) -> int | None:
    """The new round's shared place: the lecturer's, or drawn away from the places the class has seen."""
    if spec.secret_mode == "each":
        return None
    if spec.shared_place is not None:
        return int(spec.shared_place)
    if prior is None:
        raise ValueError("A shared round without a place draws one: pass the view's prior.")
    return draw_place(prior, unique_places(place for _, place in revealed_shared_places(s, game)))
