"""The result store: every mechanism, audit and curve the dashboard computes, kept across restarts and servers.

Where: a table of the class database (app/server/db/store.py: SQLite in data/ by default, the PostgreSQL of
``PANDA_DB_URL`` when several servers serve a class). A table rather than files beside the database, because
servers on several machines share the database but not a disk, and because the least-recently-used
bookkeeping then needs no file locks.

What: a value is keyed by the SHA-256 of its kind, its exact inputs (the view's instance key, the mechanism,
ε, its options) and :data:`CODE_VERSION`, a hash of the library's source: a new version of panda computes
afresh. A downloaded box's or an uploaded file's instance key carries the fingerprint of its network's content
(:func:`store_key`): the same box string can name other OpenStreetMap data later (the download cache is bounded,
a box evicted is downloaded anew) or on another server of the class (each downloads its own copy). Values
are stored as .npz archives (arrays plus one JSON document, never pickle: whoever can write to a shared
database must not be able to run code in the servers).

Which: results that do not depend on how long they were allowed to run. Mechanisms whose LP stopped at a time
limit (an unsolved optimal LP, an unsolved LP on cells) stay in the process's memory cache only; the optimal LP
is kept once it is certified to :data:`GAP_TARGET` (its time limit is then left out of the key, so a prepared
optimum serves every page that asks for it, whatever time limit that page has; the other LPs likewise, kept
only when solved). A curve is kept when every point solved.

Bounded: at most ``PANDA_RESULTS_MAX_MB`` (default 2048) MB of payloads; past it the least recently used go
first, the prepared ones (``panda prepare``, a lecture's preparation) only when nothing else is left: students'
views never push out the lecturer's. A read refreshes an entry's use time at most every :data:`TOUCH_EVERY` (a
write per read would make every page view a database write).

A store that cannot be reached never breaks a page: :func:`get` then finds nothing and :func:`put` keeps
nothing (and say so in the server's log).

Read as hostile: whoever can write to the database can put any bytes in a payload. Before a payload is unpacked,
the sizes its members declare are read (:func:`panda.network.cache.load_npz_checked`) and a payload over
:data:`MAX_PAYLOAD_BYTES` is refused; then its layout is checked (a mechanism's matrix is K x M float64 with the
view's K and M, its status one the library writes, its details plain JSON). A refused payload is a miss (one line
in the log): the page computes the value again and keeps it in its place.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import case, delete, func, select, update

from app.model.params import RANGES
from app.server.db import store
from app.server.db.models import StoredResult
from panda.network.cache import RefusedFile, load_npz_checked

__all__ = [
    "CODE_VERSION",
    "GAP_TARGET",
    "network_fingerprint",
    "store_key",
    "get_mechanism",
    "has_mechanism",
    "put_mechanism",
    "get_value",
    "has_value",
    "put_value",
    "mechanism_key_inputs",
    "curve_key_inputs",
    "curve_complete",
    "stats",
    "evict",
]

log = logging.getLogger(__name__)
PANDA_DIR = Path(__file__).resolve().parents[2] / "panda"
#: The certified gap a kept optimal LP must reach (the prepare command's target too).
GAP_TARGET = 0.005
TOUCH_EVERY = timedelta(minutes=5)
ENV_MAX_MB = "PANDA_RESULTS_MAX_MB"
#: ``PANDA_RESULT_STORE=off`` turns the store off (benchmarks that time computations use a fresh database).
ENV_SWITCH = "PANDA_RESULT_STORE"
#: Mechanisms whose result depends on a time limit (kept only when solved).
TIME_LIMITED = frozenset({"lp", "lp-ca", "lp-em", "lp-bd"})

#: The largest view's matrix: K x M float64 for the largest K (records) and M (outputs) a view may have.
MAX_MATRIX_BYTES = int(RANGES["n_records"][1]) * int(RANGES["n_outputs"][1]) * 8
#: Most bytes of a value's JSON document. A mechanism's details, a curve's rows and a mechanism's numbers are a
#: few kB (an LP's row-generation log, the cells of LP+CA's K records): 8 MiB is room for any K.
MAX_JSON_BYTES = 8 * 2**20
#: Most bytes a payload may unpack to (and be stored as): the largest matrix, its document, and room for the
#: archive's headers. A payload over it is refused unread.
MAX_PAYLOAD_BYTES = MAX_MATRIX_BYTES + MAX_JSON_BYTES + 2**20
#: The words a kept mechanism's status starts with (panda.mechanisms: "solved", "unsolved: ...", "failed: ...").
STATUS_WORDS = ("solved", "unsolved", "failed")
#: Most characters of a kept status or mechanism name, and nesting of a JSON document.
_MAX_STATUS_CHARS = 1000
_MAX_JSON_DEPTH = 64


def _code_version(root: Path = PANDA_DIR) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


#: A hash of the library's source (panda/**/*.py): results of another version are not reused.
CODE_VERSION = _code_version()


def enabled() -> bool:
    """False when ``PANDA_RESULT_STORE`` is ``off`` (or ``0``, ``false``, ``no``)."""
    return os.environ.get(ENV_SWITCH, "on").strip().lower() not in ("off", "0", "false", "no")


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def max_bytes() -> int:
    """The store's size limit in bytes (``PANDA_RESULTS_MAX_MB``, default 2048 MB)."""
    try:
        mb = float(os.environ.get(ENV_MAX_MB, "2048"))
    except ValueError:
        mb = 2048.0
    return int(max(mb, 1.0) * 2**20)


def _plain(value: Any) -> Any:
    """JSON-able plain values (numpy scalars and arrays, tuples); floats keep nan and inf."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if value is None or isinstance(value, str):
        return value
    return repr(value)


def _key(kind: str, inputs: list) -> str:
    text = json.dumps([kind, CODE_VERSION, _plain(inputs)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _pack(doc: Any, arrays: dict[str, np.ndarray] | None = None) -> bytes:
    buf = io.BytesIO()
    payload = {k: np.asarray(v) for k, v in (arrays or {}).items()}
    payload["__json__"] = np.frombuffer(json.dumps(_plain(doc)).encode(), dtype=np.uint8)
    np.savez_compressed(buf, **payload)
    return buf.getvalue()


def _view_shape(inputs: list) -> tuple[int | None, int | None]:
    """(K, M) of the view a mechanism's inputs name (its instance key's records and outputs), else (None, None)."""
    try:
        key = inputs[0]
        k, m = key[1], key[3]
    except (IndexError, KeyError, TypeError):
        return None, None
    if all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in (k, m)):
        return int(k), int(m)
    return None, None


def _spec(kind: str, inputs: list) -> tuple[dict, str]:
    """The members a payload of ``kind`` must have, and the dtype kinds of others it may have."""
    spec: dict[str, tuple] = {"__json__": (np.dtype(np.uint8), (None,))}
    if kind == "mechanism":  # exactly its document and its K x M matrix
        spec["matrix"] = (np.dtype(np.float64), _view_shape(inputs))
        return spec, ""
    return spec, "biuf"  # other values may carry plain numeric arrays of their own


def _check_json(value: Any, depth: int = 0) -> None:
    """Refuse a document that is not plain JSON (dicts with string keys, lists, strings, numbers, booleans, null)."""
    if depth > _MAX_JSON_DEPTH:
        raise RefusedFile("a document nested too deep")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise RefusedFile("a document with a key that is not a string")
            _check_json(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_json(v, depth + 1)
    elif value is not None and not isinstance(value, (str, bool, int, float)):
        raise RefusedFile(f"a document holding a {type(value).__name__}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_doc(kind: str, doc: Any) -> None:
    """Refuse a document not of the layout its kind's readers expect (app/state.py, get_mechanism)."""
    _check_json(doc)
    if kind == "mechanism":
        if not isinstance(doc, dict):
            raise RefusedFile("a mechanism whose document is not an object")
        status, name = doc.get("status"), doc.get("name")
        if not isinstance(name, str) or len(name) > _MAX_STATUS_CHARS:
            raise RefusedFile("a mechanism without a name")
        if not isinstance(status, str) or len(status) > _MAX_STATUS_CHARS or not status.startswith(STATUS_WORDS):
            raise RefusedFile("a mechanism whose status is none the library writes")
        if not all(_number(doc.get(k)) for k in ("epsilon_per_km", "build_time_s", "loss_m")):
            raise RefusedFile("a mechanism whose epsilon, time or loss is not a number")
        if not isinstance(doc.get("details"), dict):
            raise RefusedFile("a mechanism whose details are not an object")
    elif kind == "numbers" and not isinstance(doc, dict):
        raise RefusedFile("numbers whose document is not an object")
    elif kind == "curve" and not (isinstance(doc, list) and all(isinstance(r, dict) for r in doc)):
        raise RefusedFile("a curve whose document is not a list of rows")
    elif kind == "plan" and not (isinstance(doc, dict) and isinstance(doc.get("mechanisms"), list)):
        raise RefusedFile("a plan whose document is not an object with its mechanisms")


def _unpack(blob: bytes, kind: str, inputs: list) -> tuple[Any, dict[str, np.ndarray]]:
    """A payload's document and arrays, checked (:class:`RefusedFile` when refused: see the module's text)."""
    # Deflate adds a few bytes per 16 kB block to what does not compress: within the cap's room of 1 MiB.
    if len(blob) > MAX_PAYLOAD_BYTES:
        raise RefusedFile(f"{len(blob):,} bytes stored, more than the {MAX_PAYLOAD_BYTES:,} a payload may hold")
    spec, other_kinds = _spec(kind, inputs)
    arrays = load_npz_checked(blob, max_bytes=MAX_PAYLOAD_BYTES, spec=spec, other_kinds=other_kinds)
    raw = arrays.pop("__json__")
    if raw.size > MAX_JSON_BYTES:
        raise RefusedFile(f"a document of {raw.size:,} bytes, more than the {MAX_JSON_BYTES:,} allowed")
    try:
        doc = json.loads(raw.tobytes().decode("utf-8"))
    except (ValueError, RecursionError):
        raise RefusedFile("a document that is not JSON") from None
    _check_doc(kind, doc)
    return doc, arrays


# --- generic values ---


def get_value(kind: str, inputs: list, *, url: str | None = None) -> tuple[Any, dict, bool] | None:
    """The kept value for ``(kind, inputs)``: (JSON document, arrays, prepared), or None."""
    if not enabled():
        return None
    key = _key(kind, inputs)
    try:
        with store.session(url, read=True) as s:
            row = s.get(StoredResult, key)
            if row is None:
                return None
            blob, used, prepared = row.payload, row.used_at, bool(row.prepared)
        doc, arrays = _unpack(blob, kind, inputs)
        if _now() - used > TOUCH_EVERY:
            with store.session(url) as s:
                s.execute(update(StoredResult).where(StoredResult.key == key).values(used_at=_now()))
        return doc, arrays, prepared
    except RefusedFile as exc:  # a damaged or hostile payload: computed again, and kept in its place
        log.warning("result store: refused a stored %s (%s): computing it again", kind, exc)
        return None
    except Exception as exc:  # noqa: BLE001 (the store is an optimisation: a page computes instead)
        log.warning("result store: could not read a %s: %s", kind, exc)
        return None


def has_value(kind: str, inputs: list, *, url: str | None = None) -> bool:
    """Whether ``(kind, inputs)`` is kept: its key only, no payload read or unpacked (a page may ask on every
    run), and no use time refreshed."""
    if not enabled():
        return False
    try:
        with store.session(url, read=True) as s:
            key = _key(kind, inputs)
            return s.execute(select(StoredResult.key).where(StoredResult.key == key)).first() is not None
    except Exception as exc:  # noqa: BLE001 (the store is an optimisation: a page computes instead)
        log.warning("result store: could not look up a %s: %s", kind, exc)
        return False


def put_value(
    kind: str,
    inputs: list,
    doc: Any,
    arrays: dict[str, np.ndarray] | None = None,
    *,
    prepared: bool = False,
    url: str | None = None,
) -> bool:
    """Keep a value (replacing one with the same key), then evict past the limit (:func:`evict`).

    A value that :func:`get_value` would refuse (over the caps, or not of its kind's layout) is not kept.
    """
    if not enabled():
        return False
    key = _key(kind, inputs)
    try:
        blob = _pack(doc, arrays)
        _unpack(blob, kind, inputs)  # what could not be read back is not worth its room
        now = _now()
        with store.session(url) as s:
            s.execute(delete(StoredResult).where(StoredResult.key == key))
            s.add(
                StoredResult(
                    key=key,
                    kind=kind,
                    code_version=CODE_VERSION,
                    inputs=_plain(inputs),
                    payload=blob,
                    size_bytes=len(blob),
                    created_at=now,
                    used_at=now,
                    prepared=bool(prepared),
                )
            )
        evict(max_bytes(), url=url)
        return True
    except RefusedFile as exc:
        log.warning("result store: not keeping a %s (%s)", kind, exc)
        return False
    except Exception as exc:  # noqa: BLE001
        log.warning("result store: could not keep a %s: %s", kind, exc)
        return False


def evict(limit_bytes: int, *, url: str | None = None) -> int:
    """Delete entries until the payloads fit ``limit_bytes``; returns how many went.

    The least recently used unprepared entries go first; prepared ones (``panda prepare``, a lecture's
    preparation) only when no unprepared entry is left, least recently used first among them.
    """
    with store.session(url) as s:
        total = int(s.scalar(select(func.coalesce(func.sum(StoredResult.size_bytes), 0))) or 0)
        if total <= limit_bytes:
            return 0
        gone: list[str] = []
        order = (StoredResult.prepared.asc(), StoredResult.used_at.asc(), StoredResult.key.asc())
        for key, size in s.execute(select(StoredResult.key, StoredResult.size_bytes).order_by(*order)):
            if total <= limit_bytes:
                break
            gone.append(key)
            total -= int(size)
        s.execute(delete(StoredResult).where(StoredResult.key.in_(gone)))
        return len(gone)


def stats(*, url: str | None = None) -> dict:
    """Entries, bytes and prepared entries in the store."""
    with store.session(url, read=True) as s:
        n, size, prepared = s.execute(
            select(
                func.count(),
                func.coalesce(func.sum(StoredResult.size_bytes), 0),
                func.coalesce(func.sum(case((StoredResult.prepared, 1), else_=0)), 0),
            )
        ).one()
    return {"entries": int(n), "bytes": int(size), "prepared": int(prepared), "limit_bytes": max_bytes()}


# --- which network ---

#: Sources whose network is not a fixed file of the repository: their store keys carry the network's fingerprint.
FINGERPRINTED = ("bbox:", "file:")
#: Between a source and its network's fingerprint in a store key's source.
FINGERPRINT_SEP = "#"
_FINGERPRINT_ARRAYS = (
    ("osm_id", np.int64),
    ("lon", np.float64),
    ("lat", np.float64),
    ("street_count", np.int64),
    ("edge_u", np.int64),
    ("edge_v", np.int64),
    ("edge_length_m", np.float64),
)


def network_fingerprint(net: Any) -> str:
    """The first 16 hex digits of a SHA-256 of a road network's content (its nodes' ids, coordinates and street
    counts, its edges and their lengths), computed once per network object (kept in its ``_cache``)."""
    cache = getattr(net, "_cache", None)
    if isinstance(cache, dict) and "fingerprint" in cache:
        return cache["fingerprint"]
    digest = hashlib.sha256()
    for field, dtype in _FINGERPRINT_ARRAYS:
        values = np.ascontiguousarray(getattr(net, field), dtype=np.dtype(dtype).newbyteorder("<"))
        digest.update(f"{field}:{values.shape}".encode())
        digest.update(values.tobytes())
    fingerprint = digest.hexdigest()[:16]
    if isinstance(cache, dict):
        cache["fingerprint"] = fingerprint
    return fingerprint


def store_key(instance_key: tuple, network: Any) -> tuple:
    """The instance key a view's results are kept under.

    An embedded city's key is the view's own (a fixed file of the repository). A downloaded box's
    (``bbox:w,s,e,n``) or an uploaded file's source gets ``#`` and :func:`network_fingerprint` of the network the
    results are computed on: a box downloaded again with newer OpenStreetMap data, or another server's download
    of it, never matches results of another network. ``network``: the :class:`panda.RoadNetwork`, or a function
    returning it (called only for those sources).
    """
    source = str(instance_key[0])
    if not source.startswith(FINGERPRINTED) or FINGERPRINT_SEP in source:
        return tuple(instance_key)
    net = network() if callable(network) else network
    return (f"{source}{FINGERPRINT_SEP}{network_fingerprint(net)}", *tuple(instance_key)[1:])


def _instance_inputs(instance_key: tuple) -> list:
    source = str(instance_key[0])
    if source.startswith(FINGERPRINTED) and FINGERPRINT_SEP not in source:
        msg = f"The results of {source!r} are kept under its network's fingerprint: pass store_key(instance_key, net)."
        raise ValueError(msg)
    return list(instance_key)


# --- mechanisms ---


def mechanism_key_inputs(instance_key: tuple, name: str, epsilon_per_km: float, options: tuple) -> list:
    """The inputs a mechanism is kept under: an LP's time limit is left out (only solved LPs are kept).

    ``instance_key``: the view's, through :func:`store_key` (a box's or an upload's needs its fingerprint).
    """
    opts = [list(o) for o in options if not (name in TIME_LIMITED and o[0] == "time_limit_s")]
    return [_instance_inputs(instance_key), name, float(epsilon_per_km), opts]


def keepable(name: str, mech: Any) -> bool:
    """Whether a built mechanism may be kept: one that no time limit cut short."""
    if mech.matrix is None:
        return False
    if name == "lp":  # certified: the gap against every mechanism (build_lp's honest gap), not the status
        gap = (mech.details or {}).get("gap")
        return gap is not None and math.isfinite(gap) and gap <= GAP_TARGET
    if name in TIME_LIMITED:
        return mech.status.startswith("solved")
    return True


def put_mechanism(
    instance_key: tuple,
    name: str,
    epsilon_per_km: float,
    options: tuple,
    mech: Any,
    *,
    prepared: bool = False,
    url: str | None = None,
) -> bool:
    """Keep a built mechanism (a :class:`panda.mechanisms.MechanismResult`) if :func:`keepable`."""
    if not keepable(name, mech):
        return False
    doc = {
        "name": mech.name,
        "epsilon_per_km": mech.epsilon_per_km,
        "status": mech.status,
        "build_time_s": mech.build_time_s,
        "loss_m": mech.loss_m,
        "details": mech.details,
    }
    inputs = mechanism_key_inputs(instance_key, name, epsilon_per_km, options)
    return put_value("mechanism", inputs, doc, {"matrix": mech.matrix}, prepared=prepared, url=url)


def has_mechanism(
    instance_key: tuple, name: str, epsilon_per_km: float, options: tuple, *, url: str | None = None
) -> bool:
    """Whether :func:`get_mechanism` would find this mechanism (a key lookup only)."""
    return has_value("mechanism", mechanism_key_inputs(instance_key, name, epsilon_per_km, options), url=url)


def get_mechanism(
    instance_key: tuple, name: str, epsilon_per_km: float, options: tuple, *, url: str | None = None
) -> Any | None:
    """The kept mechanism, or None; ``details["kept"]`` and ``details["prepared"]`` say where it came from."""
    from panda.mechanisms import MechanismResult

    hit = get_value("mechanism", mechanism_key_inputs(instance_key, name, epsilon_per_km, options), url=url)
    if hit is None:
        return None
    doc, arrays, prepared = hit
    details = dict(doc.get("details") or {})
    details.update(kept=True, prepared=prepared)
    return MechanismResult(
        name=doc["name"],
        epsilon_per_km=float(doc["epsilon_per_km"]),
        matrix=arrays["matrix"],
        status=doc["status"],
        build_time_s=float(doc["build_time_s"]),
        loss_m=float(doc["loss_m"]),
        details=details,
    )


# --- curves ---


def curve_key_inputs(instance_key: tuple, method: str, epsilons: tuple, panda_items: tuple, seed: int) -> list:
    """A curve's inputs: what its points depend on.

    No time limit (only complete curves are kept, and a solved point does not depend on it); PAnDA's settings
    only for PAnDA's curves, and never the view's own ε (each point sets its own, panda.compare._build).
    ``instance_key``: the view's, through :func:`store_key`.
    """
    items = [list(kv) for kv in panda_items if kv[0] != "epsilon_per_km"] if method.startswith("panda") else []
    return [_instance_inputs(instance_key), method, [float(e) for e in epsilons], _plain(items), int(seed)]


def curve_complete(rows: list[dict]) -> bool:
    """Every point of the curve solved (no time limit, no skip, no failure)."""
    return bool(rows) and all(r.get("outcome") == "solved" for r in rows)
