"""The network caches read their files as hostile and write them private (issue 38).

* Every .npz read from a cache (downloads, uploads, the embedded cities' copies) is checked before it is unpacked:
  the sizes its members declare against the caps, its headers, then its arrays against each other. A refused
  file is a cache miss with one log line, never a traceback.
* Folders the caches create are 0700 and their files 0600; a folder that was there keeps its mode.
"""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import tracemalloc
import zipfile

import numpy as np
import pytest
from area_support import KOTKA_PBF

from panda import network as pn
from panda.network import cache as pn_cache
from panda.network import folders as pn_folders

BOX = (10.0, 50.0, 10.01, 50.01)
LOGGER = "panda.network.cache"


def _members(net: pn.RoadNetwork, **changes) -> dict[str, np.ndarray]:
    meta = {"format": 1, "name": net.name, "attribution": net.attribution, "source": net.source}
    members = {"meta": np.array(json.dumps(meta)), **{k: getattr(net, k) for k in pn_cache._NPZ_ARRAYS}}
    members.update(changes)
    return {k: v for k, v in members.items() if v is not None}


def _write(path, members: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **members)


def _cached(tmp_path) -> pn.RoadNetwork | None:
    return pn.cached_bbox_network(*BOX, cache_dir=tmp_path)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# --- caps read before unpacking ---


def test_the_caps_hold_the_largest_networks_the_library_makes():
    assert pn_cache.MAX_CACHED_NODES >= 10 * pn.MAX_UPLOAD_NODES
    assert pn_cache.MAX_NETWORK_BYTES >= 8 * (4 * pn_cache.MAX_CACHED_NODES + 3 * pn_cache.MAX_CACHED_EDGES)


def test_a_file_unpacking_past_the_cap_is_a_miss_read_unpacked(kotka, tmp_path, monkeypatch, caplog):
    """A bomb: an edge-length member declaring 64 MB of zeros (a few hundred kB on disk), past a cap of 16 MB."""
    monkeypatch.setattr(pn_cache, "MAX_NETWORK_BYTES", 16 * 2**20)
    path = pn.bbox_cache_file(*BOX, cache_dir=tmp_path)
    path.parent.mkdir(parents=True)
    n = 8 * 2**20
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, value in _members(kotka, edge_length_m=None).items():
            with zf.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, value)
        with zf.open("edge_length_m.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (n,)})
            for _ in range(n * 8 // 2**20):
                fh.write(bytes(2**20))
    assert path.stat().st_size < 2**20
    caplog.set_level(logging.WARNING, logger=LOGGER)
    tracemalloc.start()
    try:
        assert _cached(tmp_path) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 1 and "refused" in lines[0] and "\n" not in lines[0], lines


def test_a_header_claiming_more_than_its_member_holds_is_a_miss(kotka, tmp_path):
    path = pn.bbox_cache_file(*BOX, cache_dir=tmp_path)
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, value in _members(kotka, lon=None).items():
            with zf.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, value)
        with zf.open("lon.npy", "w") as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
            fh.write(bytes(64))
    assert _cached(tmp_path) is None


def test_a_file_larger_on_disk_than_the_cap_is_not_opened_as_an_archive(tmp_path, monkeypatch):
    monkeypatch.setattr(pn_cache, "MAX_NETWORK_BYTES", 1000)
    path = pn.bbox_cache_file(*BOX, cache_dir=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(os.urandom(5000))
    with pytest.raises(ValueError, match="bytes on disk"):
        pn_cache._load_network_npz(path)


# --- the layout of a network ---

HOSTILE = {
    "edge-to-no-node": lambda net: {"edge_v": np.full(net.n_edges, net.n_nodes + 5, dtype=np.int64)},
    "negative-edge-end": lambda net: {"edge_u": np.full(net.n_edges, -1, dtype=np.int64)},
    "lengths-differ": lambda net: {"lat": net.lat[:-1]},
    "edges-differ": lambda net: {"edge_length_m": net.edge_length_m[:-1]},
    "coordinates-off-the-globe": lambda net: {"lon": net.lon + 400.0},
    "nan-length": lambda net: {"edge_length_m": np.full(net.n_edges, np.nan)},
    "object-free-but-text-ids": lambda net: {"osm_id": net.osm_id.astype(str)},
    "matrix-not-vector": lambda net: {"lon": np.stack([net.lon, net.lon])},
    "extra-member": lambda net: {"more": np.zeros(3)},
    "missing-member": lambda net: {"street_count": None},
    "meta-not-json": lambda net: {"meta": np.array("{nope")},
    "meta-a-list": lambda net: {"meta": np.array("[1, 2]")},
    "meta-name-a-number": lambda net: {
        "meta": np.array(json.dumps({"format": 1, "name": 3, "attribution": "", "source": ""}))
    },
    "meta-bytes": lambda net: {"meta": np.frombuffer(b"{}", dtype=np.uint8)},
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_file_whose_arrays_make_no_network_is_a_miss(kotka, tmp_path, case):
    path = pn.bbox_cache_file(*BOX, cache_dir=tmp_path)
    _write(path, _members(kotka, **HOSTILE[case](kotka)))
    assert _cached(tmp_path) is None  # never a traceback
    with pytest.raises(ValueError):
        pn_cache._load_network_npz(path)


@pytest.mark.parametrize(
    "data",
    [b"PK\x03\x04" + bytes(200), b"PK\x05\x06" + bytes(18), b"\x93NUMPY" + bytes(50), b"", b"junk" * 100],
    ids=["zip-head-only", "empty-zip-directory", "npy-not-npz", "empty", "junk"],
)
def test_a_damaged_file_is_a_miss(tmp_path, data):
    path = pn.bbox_cache_file(*BOX, cache_dir=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    assert _cached(tmp_path) is None


def test_a_damaged_download_is_downloaded_again_with_a_warning(kotka, tmp_path):
    path = pn.bbox_cache_file(*BOX, cache_dir=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PK\x03\x04" + bytes(200))
    with pytest.warns(pn.PandaWarning, match="unreadable cached network"):
        assert pn._read_cached(path) is None


def test_an_honest_file_still_reads_back(kotka, tmp_path):
    path = pn.bbox_cache_file(*BOX, cache_dir=tmp_path)
    pn._save_network_npz(kotka, path)
    back = _cached(tmp_path)
    assert back is not None and back.n_nodes == kotka.n_nodes and back.n_edges == kotka.n_edges
    np.testing.assert_array_equal(back.edge_u, kotka.edge_u)
    np.testing.assert_array_equal(back.lon, kotka.lon)
    assert back.name == kotka.name


def test_load_npz_checked_refuses_what_the_spec_does_not_name():
    buf = io.BytesIO()
    np.savez(buf, a=np.zeros(3), b=np.zeros(2, dtype=np.int32))
    blob = buf.getvalue()
    assert set(pn_cache.load_npz_checked(blob, max_bytes=10_000)) == {"a", "b"}
    spec = {"a": ("f", (3,))}
    with pytest.raises(pn_cache.RefusedFile, match="expected"):
        pn_cache.load_npz_checked(blob, max_bytes=10_000, spec=spec)
    assert set(pn_cache.load_npz_checked(blob, max_bytes=10_000, spec=spec, other_kinds="i")) == {"a", "b"}
    with pytest.raises(pn_cache.RefusedFile, match="dtype"):
        pn_cache.load_npz_checked(blob, max_bytes=10_000, spec=spec, other_kinds="f")
    with pytest.raises(pn_cache.RefusedFile, match="declaring"):
        pn_cache.load_npz_checked(blob, max_bytes=100)


# --- created private ---


@pytest.fixture
def usual_umask():
    old = os.umask(0o022)  # the usual umask, which alone makes 0644 files and 0755 folders
    yield
    os.umask(old)


def test_network_caches_are_created_private(kotka, tmp_path, usual_umask):
    os.chmod(tmp_path, 0o755)
    root = tmp_path / "cache"
    path = pn.bbox_cache_file(*BOX, cache_dir=root)
    pn._save_network_npz(kotka, path)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700 and _mode(root) == 0o700
    assert _mode(tmp_path) == 0o755  # the folder that was there keeps its mode
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def test_an_existing_cache_folder_keeps_its_mode_and_files_are_private(kotka, tmp_path, usual_umask):
    root = tmp_path / "mine"
    (root / "networks").mkdir(parents=True)
    os.chmod(root / "networks", 0o755)
    path = pn.bbox_cache_file(*BOX, cache_dir=root)
    pn._save_network_npz(kotka, path)
    pn._save_network_npz(kotka, path)  # written again over the first
    assert _mode(root / "networks") == 0o755 and _mode(path) == 0o600


def test_uploads_are_kept_private(tmp_path, usual_umask):
    root = tmp_path / "cache"
    net = pn.network_from_upload(KOTKA_PBF.read_bytes(), "kotka.osm.pbf", cache_dir=root)
    files = list((root / "uploads").iterdir())
    assert len(files) == 1 and _mode(files[0]) == 0o600
    assert _mode(root / "uploads") == 0o700 and _mode(root) == 0o700
    assert pn.load_upload(net.source.partition(":")[2], cache_dir=root).n_nodes == net.n_nodes


def test_make_private_dir_only_sets_the_mode_of_what_it_creates(tmp_path, usual_umask):
    os.chmod(tmp_path, 0o751)
    made = pn_folders.make_private_dir(tmp_path / "a" / "b")
    assert made == tmp_path / "a" / "b"
    assert _mode(tmp_path / "a") == 0o700 and _mode(made) == 0o700 and _mode(tmp_path) == 0o751
    assert pn_folders.make_private_dir(made) == made
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError):
        pn_folders.make_private_dir(tmp_path / "file")


def test_open_private_never_writes_through_what_is_there(tmp_path, usual_umask):
    with pn_folders.open_private(tmp_path / "new") as fh:
        fh.write(b"x")
    assert _mode(tmp_path / "new") == 0o600
    (tmp_path / "target").write_text("keep")
    os.symlink(tmp_path / "target", tmp_path / "link")
    for there in ("new", "link"):
        with pytest.raises(FileExistsError):
            pn_folders.open_private(tmp_path / there)
    assert (tmp_path / "target").read_text() == "keep"
    assert pn_folders.create_private_file(tmp_path / "db") is True
    assert pn_folders.create_private_file(tmp_path / "db") is False and _mode(tmp_path / "db") == 0o600


def test_places_files_and_download_locks_are_private(tmp_path, usual_umask):
    from panda import download_jobs, priors

    file_id, _ = priors.save_places_upload(b"lat,lon\n60.46,26.94\n", folder=tmp_path / "places")
    files = list((tmp_path / "places").rglob("*.csv"))
    assert [f.name for f in files] == [f"{file_id}.csv"] and _mode(files[0]) == 0o600
    assert all(_mode(d) == 0o700 for d in (tmp_path / "places").rglob("*") if d.is_dir())
    assert _mode(files[0].parent) == 0o700
    held = download_jobs._try_lock(tmp_path / "locks" / "box.lock")
    assert held is not None
    assert _mode(tmp_path / "locks" / "box.lock") == 0o600 and _mode(tmp_path / "locks") == 0o700
    held.release()
