"""The result store reads its payloads as hostile, keeps the prepared results longest, and its database file is
private (issue 38): caps on the decompressed size read before unpacking, a schema check of every payload, prepared
entries evicted last, the SQLite file 0600 in folders created 0700."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import tracemalloc
import zipfile
from datetime import timedelta

import numpy as np
import pytest
from pg_fixture import pg_url  # noqa: F401 (fixture)
from sqlalchemy import select, update

from app.model.params import RANGES
from app.server import result_store as rs
from app.server.db import store
from app.server.db.models import StoredResult

KEY = ("city:kotka", 40, 10, 20, 0, "road", 1, "uniform")
K, M = KEY[1], KEY[3]
LOGGER = "app.server.result_store"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path, monkeypatch):
    u = f"sqlite:///{tmp_path / 'store.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    monkeypatch.setenv(store.ENV_URL, u)
    if request.param == "postgresql":  # a shared server: start from an empty table
        with store.session(u) as s:
            s.execute(StoredResult.__table__.delete())
    yield u
    store.dispose(u)


@pytest.fixture
def sqlite_url(db):
    return db


def _doc(**changes) -> dict:
    doc = {"name": "em", "epsilon_per_km": 3.0, "status": "solved", "build_time_s": 0.1, "loss_m": 120.0}
    doc["details"] = {"exponent": 1.5}
    doc.update(changes)
    return doc


def _npz(**members: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **members)
    return buf.getvalue()


def _json(doc) -> np.ndarray:
    return np.frombuffer(json.dumps(doc).encode(), dtype=np.uint8)


def _replace_payload(url: str, blob: bytes) -> None:
    with store.session(url) as s:
        s.execute(update(StoredResult).values(payload=blob))


def _keep_a_mechanism(url: str) -> list:
    matrix = np.full((K, M), 1.0 / M)
    assert rs.put_value("mechanism", rs.mechanism_key_inputs(KEY, "em", 3.0, ()), _doc(), {"matrix": matrix})
    assert rs.get_mechanism(KEY, "em", 3.0, ()) is not None  # the honest payload is read
    return rs.mechanism_key_inputs(KEY, "em", 3.0, ())


def _bomb(member: str, n_bytes: int, doc: dict) -> bytes:
    """An .npz whose ``member`` unpacks to ``n_bytes`` of zeros (a few hundred kB stored), honestly declared."""
    buf = io.BytesIO()
    count = n_bytes // 8
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("__json__.npy", "w") as fh:
            np.lib.format.write_array(fh, _json(doc))
        with zf.open(f"{member}.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (count,)})
            chunk = bytes(2**20)
            left = count * 8
            while left:
                fh.write(chunk[: min(left, len(chunk))])
                left -= min(left, len(chunk))
    return buf.getvalue()


# --- 1. caps on the decompressed size, read before anything is unpacked ---


def test_the_caps_derive_from_the_largest_view():
    assert rs.MAX_MATRIX_BYTES == int(RANGES["n_records"][1]) * int(RANGES["n_outputs"][1]) * 8
    assert rs.MAX_PAYLOAD_BYTES > rs.MAX_MATRIX_BYTES + rs.MAX_JSON_BYTES


def test_a_payload_unpacking_past_the_cap_is_refused_unread(sqlite_url, caplog):
    """A 200 MB bomb (a few hundred kB stored): refused from the sizes its members declare, one log line."""
    rs.put_value("numbers", ["bomb"], {"ok": 1})
    blob = _bomb("pad", 200 * 2**20, {"ok": 2})
    assert len(blob) < 2**20
    _replace_payload(sqlite_url, blob)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    tracemalloc.start()
    try:
        assert rs.get_value("numbers", ["bomb"]) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak  # nothing near the declared 200 MB was decompressed
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 1 and "refused" in lines[0] and "\n" not in lines[0], lines


def test_a_header_claiming_more_than_its_member_holds_is_refused(sqlite_url):
    """The .npy header's shape is read before any allocation: a header claiming 8 TB is refused, not allocated."""
    inputs = _keep_a_mechanism(sqlite_url)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("__json__.npy", "w") as fh:
            np.lib.format.write_array(fh, _json(_doc()))
        with zf.open("matrix.npy", "w") as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)})
            fh.write(bytes(64))
    _replace_payload(sqlite_url, buf.getvalue())
    assert rs.get_value("mechanism", inputs) is None
    assert rs.get_mechanism(KEY, "em", 3.0, ()) is None


def test_the_largest_view_s_matrix_is_kept_and_read(sqlite_url):
    k, m = int(RANGES["n_records"][1]), int(RANGES["n_outputs"][1])
    key = ("city:kotka", k, 10, m, 0, "road", 1, "uniform")
    inputs = rs.mechanism_key_inputs(key, "em", 3.0, ())
    assert rs.put_value("mechanism", inputs, _doc(), {"matrix": np.zeros((k, m))})
    doc, arrays, _ = rs.get_value("mechanism", inputs)
    assert arrays["matrix"].shape == (k, m) and doc["status"] == "solved"


def test_a_value_past_the_caps_is_not_kept(sqlite_url, monkeypatch, caplog):
    monkeypatch.setattr(rs, "MAX_PAYLOAD_BYTES", 2**20)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert rs.put_value("numbers", ["big"], {"a": 1}, {"pad": np.zeros(2**18)}) is False  # 2 MB unpacked
    assert not rs.has_value("numbers", ["big"])
    assert any("not keeping" in r.getMessage() for r in caplog.records if r.name == LOGGER)


# --- 1. the schema: members, dtypes, shapes, status, details ---

HOSTILE_MECHANISMS = {
    "matrix-of-another-view": {"__json__": _json(_doc()), "matrix": np.full((K + 1, M), 1.0 / M)},
    "matrix-not-2d": {"__json__": _json(_doc()), "matrix": np.full(K * M, 1.0 / M)},
    "matrix-of-ints": {"__json__": _json(_doc()), "matrix": np.zeros((K, M), dtype=np.int64)},
    "extra-member": {"__json__": _json(_doc()), "matrix": np.full((K, M), 1.0 / M), "more": np.zeros(3)},
    "no-matrix": {"__json__": _json(_doc())},
    "no-document": {"matrix": np.full((K, M), 1.0 / M)},
    "unknown-status": {"__json__": _json(_doc(status="<script>")), "matrix": np.full((K, M), 1.0 / M)},
    "status-not-text": {"__json__": _json(_doc(status=["solved"])), "matrix": np.full((K, M), 1.0 / M)},
    "details-a-list": {"__json__": _json(_doc(details=["x"])), "matrix": np.full((K, M), 1.0 / M)},
    "loss-a-string": {"__json__": _json(_doc(loss_m="120")), "matrix": np.full((K, M), 1.0 / M)},
    "document-a-list": {"__json__": _json([1, 2]), "matrix": np.full((K, M), 1.0 / M)},
    "document-not-json": {"__json__": np.frombuffer(b"{not json", dtype=np.uint8), "matrix": np.zeros((K, M))},
    "document-not-bytes": {"__json__": np.zeros(4), "matrix": np.full((K, M), 1.0 / M)},
}


@pytest.mark.parametrize("case", sorted(HOSTILE_MECHANISMS))
def test_a_mechanism_not_of_its_layout_is_a_miss(sqlite_url, caplog, case):
    inputs = _keep_a_mechanism(sqlite_url)
    _replace_payload(sqlite_url, _npz(**HOSTILE_MECHANISMS[case]))
    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert rs.get_mechanism(KEY, "em", 3.0, ()) is None  # never a traceback
    assert rs.get_value("mechanism", inputs) is None
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 2 and all("refused" in line for line in lines), lines


@pytest.mark.parametrize(
    ("kind", "doc"),
    [("curve", {"rows": 1}), ("curve", [1, 2]), ("numbers", [1]), ("numbers", "text")],
)
def test_numbers_and_curves_not_of_their_layout_are_a_miss(sqlite_url, kind, doc):
    good = [{"outcome": "solved"}] if kind == "curve" else {"loss_m": 1.0}
    assert rs.put_value(kind, ["x"], good)
    _replace_payload(sqlite_url, _npz(__json__=_json(doc)))
    assert rs.get_value(kind, ["x"]) is None


def test_a_damaged_payload_is_a_miss(sqlite_url):
    inputs = _keep_a_mechanism(sqlite_url)
    blob = bytearray(_npz(__json__=_json(_doc()), matrix=np.full((K, M), 1.0 / M)))
    blob[len(blob) // 3] ^= 0xFF  # a flipped byte inside the compressed matrix
    _replace_payload(sqlite_url, bytes(blob))
    assert rs.get_value("mechanism", inputs) is None
    _replace_payload(sqlite_url, b"PK\x03\x04" + bytes(100))
    assert rs.get_value("mechanism", inputs) is None


# --- 2. prepared results are evicted last ---


def test_prepared_results_are_evicted_only_when_nothing_else_is_left(url):
    """Students' views (unprepared, used later) go before the lecturer's prepared ones (used earlier)."""
    for i in range(6):
        pad = {"pad": np.random.default_rng(i).random(2000)}
        rs.put_value("numbers", ["entry", i], {"i": i}, pad, prepared=i < 3)
    hours_after = {0: 1, 1: 2, 2: 3, 3: 10, 4: 11, 5: 12}  # the prepared ones (0, 1, 2) least recently used
    with store.session(url) as s:
        rows = s.scalars(select(StoredResult)).all()
        base = min(r.used_at for r in rows)
        for r in rows:
            used = base + timedelta(hours=hours_after[r.inputs[1]])
            s.execute(update(StoredResult).where(StoredResult.key == r.key).values(used_at=used))
        one = max(r.size_bytes for r in rows)

    def kept() -> list[int]:
        return [i for i in range(6) if rs.has_value("numbers", ["entry", i])]

    assert rs.evict(4 * one + one // 2) == 2  # room for four: the two least recently used unprepared go
    assert kept() == [0, 1, 2, 5]
    assert rs.evict(3 * one + one // 2) == 1  # room for the prepared three: the last unprepared one goes
    assert kept() == [0, 1, 2]
    assert rs.evict(one + one // 2) == 2  # nothing else left: the prepared ones, least recently used first
    assert kept() == [2]
    assert rs.stats()["prepared"] == 1


def test_an_unprepared_value_never_pushes_out_a_prepared_one(sqlite_url, monkeypatch):
    pad = {"pad": np.random.default_rng(0).random(200_000)}  # 1.6 MB: the limit is at least 1 MB
    rs.put_value("numbers", ["lecture"], {"i": 0}, pad, prepared=True)
    one = rs.stats()["bytes"]
    monkeypatch.setenv(rs.ENV_MAX_MB, str(1.5 * one / 2**20))  # room for one entry
    rs.put_value("numbers", ["student"], {"i": 1}, pad)
    assert rs.has_value("numbers", ["lecture"]) and not rs.has_value("numbers", ["student"])


# --- 3. the SQLite file and its folder are private ---


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_sqlite_database_is_created_private(tmp_path, monkeypatch):
    old = os.umask(0o022)  # the usual umask, which alone would make 0644 files and 0755 folders
    try:
        os.chmod(tmp_path, 0o755)
        path = tmp_path / "srv" / "panda" / "class.db"
        url = f"sqlite:///{path}"
        monkeypatch.setenv(store.ENV_URL, url)
        try:
            rs.put_value("numbers", ["x"], {"a": 1})
            assert rs.get_value("numbers", ["x"]) is not None
            assert _mode(path) == 0o600
            assert _mode(path.parent) == 0o700 and _mode(path.parent.parent) == 0o700
            assert _mode(tmp_path) == 0o755  # a folder that was there keeps its mode
            for extra in (path.with_name("class.db-wal"), path.with_name("class.db-shm")):
                if extra.exists():
                    assert _mode(extra) == 0o600, extra
        finally:
            store.dispose(url)
    finally:
        os.umask(old)


def test_an_existing_database_keeps_its_mode(tmp_path, monkeypatch):
    path = tmp_path / "class.db"
    path.touch()
    os.chmod(path, 0o640)
    url = f"sqlite:///{path}"
    monkeypatch.setenv(store.ENV_URL, url)
    try:
        assert rs.put_value("numbers", ["x"], {"a": 1})
        assert _mode(path) == 0o640
    finally:
        store.dispose(url)
