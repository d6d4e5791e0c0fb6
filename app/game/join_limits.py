"""Joins per client address and round, counted in the class database (so through any server of the class).

A round's seats (and, in a shared-secret round, the reports of its one secret) are not for one phone to take:
each join from an address takes a numbered slot of that address in that round, under a unique key, so two
servers racing for an address's last slot cannot both hand it out.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.client_address import address_group
from app.game.types import GameError
from app.server.db.models import Game, JoinSlot

__all__ = ["JOINS_PER_ADDRESS_ENV", "joins_per_address", "claim_slot"]

#: Sets the joins per address and round (0: no limit, for a class whose phones all reach the server through one
#: address, e.g. a campus NAT in front of a server on the internet).
JOINS_PER_ADDRESS_ENV = "PANDA_JOINS_PER_ADDRESS"


def joins_per_address(default: int = 8) -> int:
    """``PANDA_JOINS_PER_ADDRESS``, else ``default``: a few phones behind one home router or a reloaded page,
    not a round's seats."""
    try:
        return max(0, int(os.environ.get(JOINS_PER_ADDRESS_ENV, "").strip() or default))
    except ValueError:
        return default


def claim_slot(s: Session, game: Game, round_number: int, address: str, limit: int, now: datetime) -> None:
    """Take the next of ``address``'s ``limit`` slots in the round, or raise GameError with the sentence.

    The address is stored salted with the game's lecturer hash: the table links no address across games. Two
    joins racing for the last slot: the unique key lets one through (the caller retries the other on its
    IntegrityError, and it counts again).
    """
    salted = f"{game.host_token_sha256}:{address_group(str(address))}"
    who = hashlib.sha256(salted.encode("utf-8", "replace")).hexdigest()
    mine = (JoinSlot.game_id == game.id, JoinSlot.round_number == round_number, JoinSlot.address_sha256 == who)
    used = s.scalar(select(func.count()).select_from(JoinSlot).where(*mine)) or 0
    if used >= limit:
        raise GameError(
            f"Too many joins from this network for this round: at most {limit} phones may join "
            "from one address in a round. Join when the next round starts, or ask the lecturer."
        )
    s.add(JoinSlot(game_id=game.id, round_number=round_number, address_sha256=who, slot=used + 1, joined_at=now))
