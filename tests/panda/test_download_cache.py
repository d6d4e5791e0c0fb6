"""Live downloads for a server (issue 29, item 3): grid snapping, the bounded cache, jobs on workers.

* Boxes are rounded to a 1e-4 degree grid before they key the cache and the download.
* The download cache (``networks/``, ``osmnx/``) is bounded (``PANDA_DOWNLOAD_CACHE_MB``), least recently
  used first, written atomically; embedded cities and uploads are never evicted. Real files throughout.
* :func:`panda.download_jobs.download_bbox` runs the download on the project's Dask executor (a real local
  cluster here) against the Overpass stand-in on 127.0.0.1: one lock per box, a limit on concurrent
  downloads (held by another process in the tests), a time limit, a fast offline failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import OAKLAND_BBOX, OAKLAND_FILE, ROOT
from overpass_stub import OverpassStub

from panda import download_jobs as dj
from panda import network as pn
from panda.errors import DataUnavailableError, DownloadError, OfflineError, PandaWarning
from panda.network import download as pn_download

MB = 1_000_000


# --------------------------------------------------------------------------------------------
# Grid snapping
# --------------------------------------------------------------------------------------------


def test_a_box_moved_by_a_millionth_of_a_degree_is_the_same_box():
    box = pn.BoundingBox(*OAKLAND_BBOX)
    for shift in (1e-6, -1e-6, 4e-5, -4e-5):
        moved = pn.BoundingBox(*(v + shift for v in OAKLAND_BBOX))
        assert pn.snap_bbox(moved) == pn.snap_bbox(box), shift
        assert pn._cache_name(pn.snap_bbox(moved), "drive") == pn._cache_name(pn.snap_bbox(box), "drive")
    # A move of more than half a grid step (1e-4 degrees, about 11 m) is another box.
    far = pn.BoundingBox(*(v + 6e-5 for v in OAKLAND_BBOX))
    assert pn.snap_bbox(far) != pn.snap_bbox(box)
    # Boxes typed with 4 decimals (the sidebar's inputs, the presets) are not changed.
    assert pn.snap_bbox(pn.BoundingBox(12.2354, 41.6566, 12.8081, 42.0979)).as_tuple() == (
        12.2354,
        41.6566,
        12.8081,
        42.0979,
    )


def test_snapping_is_idempotent_and_never_empties_a_box():
    tiny = pn.snap_bbox(pn.BoundingBox(10.00001, 50.00001, 10.00002, 50.00002))
    assert tiny.as_tuple() == (10.0, 50.0, 10.0001, 50.0001)
    assert pn.snap_bbox(tiny) == tiny
    edge = pn.snap_bbox(pn.BoundingBox(179.99996, 89.99996, 179.99999, 89.99999))
    assert edge.as_tuple() == (179.9999, 89.9999, 180.0, 90.0)
    rng = np.random.default_rng(0)
    for _ in range(200):
        w, s = rng.uniform(-179, 178), rng.uniform(-89, 88)
        b = pn.snap_bbox(pn.BoundingBox(w, s, w + rng.uniform(1e-6, 1), s + rng.uniform(1e-6, 1)))
        assert pn.snap_bbox(b) == b
        assert all(abs(v * 1e4 - round(v * 1e4)) < 1e-6 for v in b.as_tuple())


def test_a_box_moved_by_a_millionth_is_one_download(overpass_stub, tmp_path):
    a = pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=tmp_path)
    b = pn.network_from_bbox(*(v + 1e-6 for v in OAKLAND_BBOX), cache_dir=tmp_path)
    c = pn.network_from_bbox(*(v - 1e-6 for v in OAKLAND_BBOX), cache_dir=tmp_path)
    assert overpass_stub.n_queries == 1
    assert a.n_nodes == b.n_nodes == c.n_nodes == 22
    assert [p.name for p in (tmp_path / "networks").iterdir()] == [
        "bbox_-122.310000_37.800000_-122.280000_37.820000_drive.npz"
    ]


# --------------------------------------------------------------------------------------------
# The bounded cache (real files)
# --------------------------------------------------------------------------------------------


def _file(path: Path, size: int, mtime: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    os.utime(path, (mtime, mtime))
    return path


def _size(root: Path) -> int:
    return sum(p.stat().st_size for f in pn.DOWNLOAD_CACHE_FOLDERS for p in (root / f).rglob("*") if p.is_file())


def test_eviction_removes_the_least_recently_used_first_until_within_the_bound(tmp_path):
    now = time.time()
    files = [
        _file(tmp_path / "networks" / "a.npz", 1 * MB, now - 400),
        _file(tmp_path / "osmnx" / "b.json", 1 * MB, now - 300),
        _file(tmp_path / "networks" / "c.npz", 1 * MB, now - 200),
        _file(tmp_path / "osmnx" / "d.json", 1 * MB, now - 100),
    ]
    deleted = pn.evict_download_cache(tmp_path, max_bytes=int(2.5 * MB))
    assert deleted == files[:2]  # oldest first, across both folders
    assert [p.exists() for p in files] == [False, False, True, True]
    assert _size(tmp_path) == 2 * MB
    # Within the bound: nothing more goes.
    assert pn.evict_download_cache(tmp_path, max_bytes=int(2.5 * MB)) == []


def test_the_file_just_written_is_kept_even_alone_above_the_bound(tmp_path):
    now = time.time()
    old = _file(tmp_path / "networks" / "old.npz", 1 * MB, now - 100)
    big = _file(tmp_path / "networks" / "big.npz", 3 * MB, now - 1000)  # the oldest, but just written
    assert pn.evict_download_cache(tmp_path, keep=big, max_bytes=2 * MB) == [old]
    assert big.exists()


def test_eviction_never_touches_embedded_cities_uploads_or_locks(tmp_path):
    old = time.time() - 10_000
    kept = [
        _file(tmp_path / "cities" / "kotka-0123.npz", MB, old),
        _file(tmp_path / "uploads" / "0123456789abcdef.drive.npz", MB, old),
        _file(tmp_path / "locks" / "slot-0.lock", 0, old),
    ]
    gone = _file(tmp_path / "networks" / "x.npz", MB, old)
    pn.evict_download_cache(tmp_path, max_bytes=0)
    assert all(p.exists() for p in kept) and not gone.exists()
    # The embedded cities' data files are not under the cache folder at all.
    assert all(p.exists() for p in pn.DATA_DIR.glob("*.osm.bz2"))


def test_temporary_files_of_writes_are_left_alone_unless_stale(tmp_path):
    now = time.time()
    fresh = _file(tmp_path / "networks" / ".x.npz.1.2.tmp", MB, now)  # a write in progress
    stale = _file(tmp_path / "networks" / ".y.npz.1.2.tmp", MB, now - 2 * 3600)  # an interrupted one
    pn.evict_download_cache(tmp_path, max_bytes=0)
    assert fresh.exists() and not stale.exists()


def test_a_read_from_the_cache_makes_a_file_recently_used(kotka, tmp_path):
    boxes = [(10.0, 50.0, 10.01, 50.01), (11.0, 50.0, 11.01, 50.01), (12.0, 50.0, 12.01, 50.01)]
    paths = []
    for i, box in enumerate(boxes):
        path = pn.bbox_cache_file(*box, cache_dir=tmp_path)
        pn._save_network_npz(kotka, path)
        os.utime(path, (time.time() - 1000 + i, time.time() - 1000 + i))
        paths.append(path)
    size = paths[0].stat().st_size
    assert pn.cached_bbox_network(*boxes[0], cache_dir=tmp_path).n_nodes == kotka.n_nodes  # the oldest, read now
    assert pn.is_bbox_cached(*boxes[1], cache_dir=tmp_path)  # the second, looked at now
    deleted = pn.evict_download_cache(tmp_path, max_bytes=2 * size + size // 2)
    assert deleted == [paths[2]]
    assert pn.cached_bbox_network(*boxes[2], cache_dir=tmp_path) is None
    assert not pn.is_bbox_cached(*boxes[2], cache_dir=tmp_path)


def test_the_bound_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(pn.DOWNLOAD_CACHE_MB_ENV, raising=False)
    assert pn.download_cache_max_bytes() == 300 * MB
    monkeypatch.setenv(pn.DOWNLOAD_CACHE_MB_ENV, "12.5")
    assert pn.download_cache_max_bytes() == 12_500_000
    for bad in ("lots", "-1", "inf"):
        monkeypatch.setenv(pn.DOWNLOAD_CACHE_MB_ENV, bad)
        with pytest.warns(PandaWarning, match="must be a number of MB >= 0"):
            assert pn.download_cache_max_bytes() == 300 * MB


def test_downloads_keep_the_cache_within_its_bound(overpass_stub, tmp_path, monkeypatch):
    """Three downloads through the stand-in with a bound of one network file plus osmnx's answers."""
    first = pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=tmp_path)
    one = _size(tmp_path)  # one network file and osmnx's cached answer(s)
    monkeypatch.setenv(pn.DOWNLOAD_CACHE_MB_ENV, str(1.5 * one / MB))
    second_box = (-122.3101, 37.7999, -122.2799, 37.8201)
    third_box = (-122.3102, 37.7998, -122.2798, 37.8202)
    pn.network_from_bbox(*second_box, cache_dir=tmp_path)
    pn.network_from_bbox(*third_box, cache_dir=tmp_path)
    assert overpass_stub.n_queries == 3
    assert _size(tmp_path) <= 1.5 * one
    names = {p.name for p in (tmp_path / "networks").iterdir()}
    assert pn._cache_name(pn.BoundingBox(*third_box), "drive") in names  # the newest stays
    assert pn._cache_name(pn.BoundingBox(*OAKLAND_BBOX), "drive") not in names  # the oldest went
    assert first.n_nodes == 22


def test_a_server_process_never_downloads_a_box_itself(overpass_stub, kotka, tmp_path, monkeypatch):
    monkeypatch.setattr(pn_download, "IN_PROCESS_DOWNLOADS", False)
    with pytest.raises(DataUnavailableError, match="not downloaded on this server yet"):
        pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=tmp_path)
    assert overpass_stub.requests == []
    pn._save_network_npz(kotka, pn.bbox_cache_file(*OAKLAND_BBOX, cache_dir=tmp_path))
    assert pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=tmp_path).n_nodes == kotka.n_nodes
    assert overpass_stub.requests == []


# --------------------------------------------------------------------------------------------
# Downloads as jobs on the executor's workers (a real local Dask cluster)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def executor():
    from panda.execution import close_executor, get_executor

    ex = get_executor()
    ex.wait_for_workers()
    yield ex
    close_executor(ex)


@pytest.fixture
def stub(osmnx_settings):
    """The Overpass stand-in for a job's worker: it lives long enough for a cluster's first job."""
    server = OverpassStub(OAKLAND_FILE, max_lifetime_s=300.0, track_clients=True)
    osmnx_settings.overpass_url = server.url
    yield server
    server.stop()


def _hold_locks(paths: list[Path]) -> subprocess.Popen:
    """Another process holding the download locks ``paths`` (as another server would) until killed."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from panda.download_jobs import _try_lock
        held = [_try_lock(Path(p)) for p in {[str(p) for p in paths]!r}]
        print("held" if all(held) else "not held", flush=True)
        time.sleep(120)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_download_job_runs_on_a_worker_and_writes_the_cache(executor, stub, tmp_path):
    start = time.monotonic()
    net = dj.download_bbox(*(v + 1e-6 for v in OAKLAND_BBOX), cache_dir=tmp_path, run=executor.run)
    elapsed = time.monotonic() - start
    print(f"first download through a worker: {elapsed:.2f} s")
    assert stub.n_queries == 1
    assert stub.client_pids and None not in stub.client_pids and os.getpid() not in stub.client_pids  # a worker
    assert net.n_nodes == 22 and stub.url in net.source
    cache_file = pn.bbox_cache_file(*OAKLAND_BBOX, cache_dir=tmp_path)
    assert cache_file.is_file()
    assert not list(cache_file.parent.glob(".*.tmp"))  # written through a temporary file and a rename
    assert not (tmp_path / "osmnx").exists()  # the job keeps no HTTP cache of its own
    # Another call, another box within the grid step: the cache answers, no request, no job.
    again = dj.download_bbox(*OAKLAND_BBOX, cache_dir=tmp_path, run=lambda *a, **k: pytest.fail("a job ran"))
    assert again.n_nodes == 22 and stub.n_queries == 1


def test_every_slot_taken_is_a_plain_busy_message_at_once(executor, stub, tmp_path, monkeypatch):
    monkeypatch.setenv(dj.MAX_DOWNLOADS_ENV, "2")
    holder = _hold_locks([tmp_path / "locks" / "slot-0.lock", tmp_path / "locks" / "slot-1.lock"])
    try:
        start = time.monotonic()
        with pytest.raises(
            dj.DownloadBusy,
            match=r"Another download is running on this server \(at most 2 at a time\); try again in a moment\.",
        ):
            dj.download_bbox(*OAKLAND_BBOX, cache_dir=tmp_path, run=executor.run)
        assert time.monotonic() - start < 2.0
        assert stub.requests == []
    finally:
        holder.kill()
        holder.wait()
    # The other process is gone (and its locks with it): the download goes ahead.
    assert dj.download_bbox(*OAKLAND_BBOX, cache_dir=tmp_path, run=executor.run).n_nodes == 22
    assert stub.n_queries == 1


def test_one_lock_per_box(executor, stub, tmp_path):
    """A download of box A in another process holds up box A only: box B goes ahead."""
    box_a = OAKLAND_BBOX
    box_b = (-122.3105, 37.7995, -122.2795, 37.8205)
    key = lambda box: pn.bbox_cache_file(*box, cache_dir=tmp_path).name  # noqa: E731
    lock_a, lock_b = (
        dj._box_lock_path(tmp_path / "locks", key(box_a)),
        dj._box_lock_path(tmp_path / "locks", key(box_b)),
    )
    assert lock_a != lock_b
    holder = _hold_locks([lock_a])
    waited = []
    try:
        assert dj.download_bbox(*box_b, cache_dir=tmp_path, run=executor.run).n_nodes == 22
        assert stub.n_queries == 1
        start = time.monotonic()
        with pytest.raises(dj.DownloadBusy, match="being downloaded for another person"):
            dj.download_bbox(
                *box_a, cache_dir=tmp_path, run=executor.run, box_wait_s=1.0, on_wait=lambda: waited.append(1)
            )
        assert 1.0 <= time.monotonic() - start < 3.0
        assert waited == [1] and stub.n_queries == 1
    finally:
        holder.kill()
        holder.wait()
    assert dj.download_bbox(*box_a, cache_dir=tmp_path, run=executor.run).n_nodes == 22
    assert stub.n_queries == 2


def test_offline_download_fails_fast_with_a_sentence(executor, osmnx_settings, closed_port_url, tmp_path):
    osmnx_settings.overpass_url = closed_port_url
    start = time.monotonic()
    with pytest.raises(OfflineError, match="Cannot reach the Overpass server") as info:
        dj.download_bbox(*OAKLAND_BBOX, cache_dir=tmp_path, run=executor.run)
    elapsed = time.monotonic() - start
    print(f"offline failure through a worker: {elapsed:.2f} s")
    assert elapsed < 15.0
    assert "Traceback" not in str(info.value) and "embedded city" in str(info.value)
    assert not (tmp_path / "networks").exists()


def test_a_box_without_roads_and_a_server_error_keep_their_kinds(executor, stub, tmp_path):
    with pytest.raises(ValueError, match="holds no 'drive' roads"):
        dj.download_bbox(-122.0, 37.0, -121.99, 37.01, cache_dir=tmp_path, run=executor.run)
    stub.mode = "error"
    with pytest.raises(DownloadError, match="500") as info:
        dj.download_bbox(*OAKLAND_BBOX, cache_dir=tmp_path, run=executor.run)
    assert not isinstance(info.value, (OfflineError, dj.DownloadBusy))
    assert not (tmp_path / "networks").exists()


def test_bad_boxes_are_refused_before_any_job(tmp_path):
    never = lambda *a, **k: pytest.fail("a job ran")  # noqa: E731
    with pytest.raises(ValueError, match="at most 5,000 km"):
        dj.download_bbox(10.0, 45.0, 11.0, 46.0, cache_dir=tmp_path, run=never)
    with pytest.raises(ValueError, match="inverted"):
        dj.download_bbox(10.0, 46.0, 11.0, 45.0, cache_dir=tmp_path, run=never)
    with pytest.raises(ValueError, match="network_type"):
        dj.download_bbox(*OAKLAND_BBOX, network_type="boat", cache_dir=tmp_path, run=never)


def test_a_download_past_its_time_limit_is_stopped(executor, stub, tmp_path):
    """The stand-in answers after 60 s; the job's limit is 4 s: stopped, its worker restarted, a sentence."""
    stub.delay_s = 60.0
    restarted = len(executor.restarted)
    start = time.monotonic()
    with pytest.raises(DownloadError, match=r"did not finish within 4 s and was stopped: choose a smaller box"):
        dj.download_bbox(*OAKLAND_BBOX, cache_dir=tmp_path, run=executor.run, timeout_s=4.0)
    elapsed = time.monotonic() - start
    print(f"time limit 4 s: the page had its answer after {elapsed:.2f} s")
    assert elapsed < 30.0
    assert len(executor.restarted) == restarted + 1
    assert not (tmp_path / "networks").exists()


def test_no_free_worker_in_time_is_a_busy_message_whatever_its_words(stub, tmp_path):
    """The executor's JobBusy (no worker, or no slot of this session's, in time) is "busy", not "too slow"."""
    from panda.execution import JobBusy

    def busy_run(*args, **kwargs):
        raise JobBusy("this session already has 3 long jobs running")

    with pytest.raises(dj.DownloadBusy, match="every computing worker of this server is busy"):
        dj.download_bbox(*OAKLAND_BBOX, cache_dir=tmp_path, run=busy_run)
    assert stub.requests == []
