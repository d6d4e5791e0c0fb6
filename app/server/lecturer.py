"""The lecturer's key: what a session must know to start, reveal and end class rounds and to prepare lectures.

The key is never part of an address the dashboard shows (a projected address bar is read by the whole room):
the lecturer types it once per browser session (a phone, the laptop) or opens ``?lecturer=KEY`` once, which the
page takes out of its address at once. It is

* ``PANDA_LECTURER_KEY`` when set (several servers behind one proxy share it that way), else
* a random key kept in ``<cache folder>/lecturer-key`` (created 0600 in a private folder, so one machine's
  servers, and a restarted server, share it), printed to the server's console when it starts.

A round's lecturer token (what :mod:`app.game.rounds` checks) is derived from the key and the join code
(:func:`round_token`): a session that knows the key controls every round opened with it, from any device.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sys
import threading
from pathlib import Path

from panda.network import folders

__all__ = ["LECTURER_KEY_ENV", "announce", "is_lecturer_key", "key_file", "lecturer_key", "round_token"]

LECTURER_KEY_ENV = "PANDA_LECTURER_KEY"
#: Characters of a key this module makes (URL-safe base64 of 15 random bytes: 120 bits).
KEY_BYTES = 15
#: A key set by hand shorter than this is refused: a room can guess a short key.
MIN_KEY_LENGTH = 12

_lock = threading.Lock()
_announced = False


def key_file() -> Path:
    """Where the generated key is kept."""
    return folders.CACHE_DIR / "lecturer-key"


def _read_or_make(path: Path) -> str:
    folders.make_private_dir(path.parent)
    try:
        with folders.open_private(path) as f:  # only if nothing is there yet (never through a link)
            f.write(secrets.token_urlsafe(KEY_BYTES).encode("ascii"))
    except FileExistsError:
        pass
    if path.is_symlink() or (hasattr(os, "getuid") and path.stat().st_uid != os.getuid()):
        msg = f"{path} is not this account's own file: set {LECTURER_KEY_ENV} instead."
        raise PermissionError(msg)
    return path.read_text(encoding="ascii").strip()


def lecturer_key() -> str:
    """This server's lecturer key (the setting, else the key file's, made on first use)."""
    set_by_hand = os.environ.get(LECTURER_KEY_ENV, "").strip()
    if set_by_hand:
        if len(set_by_hand) < MIN_KEY_LENGTH:
            msg = f"{LECTURER_KEY_ENV} must have at least {MIN_KEY_LENGTH} characters (a short key can be guessed)."
            raise ValueError(msg)
        return set_by_hand
    with _lock:
        return _read_or_make(key_file())


def is_lecturer_key(text: object) -> bool:
    """Whether ``text`` is the lecturer key (compared in constant time)."""
    if not isinstance(text, str) or not text.strip():
        return False
    return hmac.compare_digest(text.strip().encode("utf-8", "replace"), lecturer_key().encode("utf-8"))


def round_token(code: str) -> str:
    """The lecturer token of the round with join code ``code``: only a holder of the key can compute it."""
    mac = hmac.new(lecturer_key().encode("utf-8"), f"panda-round:{code}".encode(), hashlib.sha256)
    return mac.hexdigest()[:32]


def announce() -> None:
    """Print where the lecturer finds the key, once per server process (its console, not any page)."""
    global _announced
    with _lock:
        if _announced:
            return
        _announced = True
    try:
        if os.environ.get(LECTURER_KEY_ENV, "").strip():
            lecturer_key()  # checked now, not in front of the class
            line = f"the lecturer key is {LECTURER_KEY_ENV}'s value."
        else:
            line = f"lecturer key: {lecturer_key()}  (kept in {key_file()}; {LECTURER_KEY_ENV} sets another)."
    except (OSError, ValueError) as exc:
        line = f"no lecturer key: {exc} Class rounds and lecture preparation are off until it is fixed."
    print(f"PAnDA Explorer: {line} The presenter view asks for it to start rounds and prepare.", file=sys.stderr)
