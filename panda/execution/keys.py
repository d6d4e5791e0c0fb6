"""Job keys: identical jobs share one Dask key, so callers from different sessions join one computation.

A job's key is its name plus a hash of its arguments (:func:`job_key`); panda's road networks and
instances are hashed by their public fields, not by their lazily filled caches.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

_NORMALIZERS_REGISTERED = False


def _register_normalizers() -> None:
    """Hash panda's road networks and instances by their public fields (not their lazy ``_cache``)."""
    global _NORMALIZERS_REGISTERED
    if _NORMALIZERS_REGISTERED:
        return
    from dask.base import normalize_token

    from panda.instance import Instance
    from panda.network import RoadNetwork

    def public_fields(obj: Any) -> tuple:
        fields = [f.name for f in dataclasses.fields(obj) if not f.name.startswith("_")]
        return (type(obj).__qualname__, [(name, normalize_token(getattr(obj, name))) for name in fields])

    normalize_token.register((Instance, RoadNetwork))(public_fields)
    _NORMALIZERS_REGISTERED = True


def job_key(label: str, args: tuple, kwargs: dict | None = None) -> str:
    """Return the Dask key of a job: ``"<label>-<hash of the arguments>"``, the same for equal arguments.

    Arguments dask cannot hash deterministically give a unique key (the job is then not shared).
    """
    from dask.base import tokenize

    _register_normalizers()
    try:
        token = tokenize(label, args, kwargs or {}, ensure_deterministic=True)
    except Exception:  # noqa: BLE001 (an unhashable argument: run the job unshared)
        token = uuid.uuid4().hex
    return f"{label}-{token}"
