"""Uploads read on a worker and bounded while reading (issue 38, item 2).

* The reader counts what it reads and stops at a cap with a sentence, at once: a way of millions of node
  references, millions of nodes, hundreds of thousands of ways (tiny files: pyosmium's writer, into tmp_path).
* The dashboard's path: ``network_from_upload(..., read=upload_jobs.reader(run))`` reads the file in a job
  (:func:`panda.jobs.upload_network_job`) on a worker process under its memory and time limits; the calling
  process (the web server) only hashes the bytes, sends them and keeps the network in the upload cache. A job
  that fails (time, memory) is a sentence too.
* Every temporary file an upload makes is removed, whether it gives a network or a sentence.
* Streamlit's ``server.maxUploadSize`` is the code's own cap.
"""

from __future__ import annotations

import bz2
import math
import tempfile
import tomllib
import tracemalloc

import pytest
from area_support import KOTKA_PBF, KOTKA_XML, ROADS, long_way_pbf, many_nodes_pbf, many_ways_pbf
from conftest import ROOT
from executor_support import local_cluster

from panda import jobs, upload_jobs
from panda import network as pn
from panda.execution import MEMORY_MESSAGE, JobBusy, JobError, JobTimeout
from panda.network import uploads as pn_uploads

#: A way of this many node references: about 2 kB as PBF; read naively, a few hundred MB of Python lists and sets.
HOSTILE_REFS = 2_000_000
#: Bytes of Python allocations the refusal of that file may take in the calling process (tracemalloc's peak; a
#: list and a set of its references would take over 100 MiB).
CALLER_PEAK_BOUND = 8 * 2**20


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def long_way(tmp_path_factory):
    return long_way_pbf(tmp_path_factory.mktemp("hostile") / "long_way.osm.pbf", HOSTILE_REFS)


@pytest.fixture(scope="module", autouse=True)
def warm(tmp_path_factory):
    """Read a small upload once: the first read imports osmnx and osmium (tens of MB the peaks below leave out)."""
    pn.network_from_upload(ROADS, "warm.osm", cache_dir=tmp_path_factory.mktemp("warm"))


def _peak_while(fn):
    """``fn()``'s outcome and the peak of Python allocations while it ran (tracemalloc), bytes."""
    tracemalloc.start()
    try:
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 (handed to the test)
            out = exc
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------------------------
# 1. The reader stops at its caps, at once
# --------------------------------------------------------------------------------------------


def test_a_way_of_millions_of_node_refs_is_refused_at_once(long_way, cache):
    data = long_way.read_bytes()
    assert len(data) < 10_000  # tiny on disk
    out, peak = _peak_while(lambda: pn.network_from_upload(data, "long_way.osm.pbf", cache_dir=cache))
    assert isinstance(out, ValueError), out
    cap = pn_uploads.MAX_UPLOAD_WAY_REFS
    assert f"holds a way of more than {cap:,} nodes" in str(out)
    assert str(out).endswith(".") and "Traceback" not in str(out)
    # Refused at its length: no list of its references was made (read naively: hundreds of MB).
    assert peak < CALLER_PEAK_BOUND, f"peak {peak / 2**20:.0f} MiB"


def test_millions_of_nodes_are_refused_at_the_node_cap(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(pn_uploads, "MAX_UPLOAD_READ_NODES", 20_000)  # the cap, small for the test's file
    data = many_nodes_pbf(tmp_path / "nodes.osm.pbf", 50_000).read_bytes()
    with pytest.raises(ValueError, match=r"holds more than 20,000 nodes \(of any kind\), the limit here") as info:
        pn.network_from_upload(data, "nodes.osm.pbf", cache_dir=cache)
    assert str(info.value).endswith(".")


def test_many_ways_that_are_no_roads_are_refused_at_the_way_cap(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(pn_uploads, "MAX_UPLOAD_READ_WAYS", 10_000)
    data = many_ways_pbf(tmp_path / "ways.osm.pbf", 30_000).read_bytes()
    xml = bz2.compress(many_ways_pbf(tmp_path / "ways.osm", 30_000).read_bytes())
    for name, payload in (("ways.osm.pbf", data), ("ways.osm.bz2", xml)):
        with pytest.raises(ValueError, match=r"holds more than 10,000 ways \(roads or not\), the limit here"):
            pn.network_from_upload(payload, name, cache_dir=cache)


def test_the_caps_leave_room_for_the_fixtures_and_embedded_sources():
    """The caps are far above what real extracts hold (the largest way of the test extract: 221 nodes)."""
    assert pn_uploads.MAX_UPLOAD_WAY_REFS >= 5 * 2_000  # OpenStreetMap's API refuses ways of more than 2,000 nodes
    assert pn_uploads.MAX_UPLOAD_READ_NODES >= 10 * pn_uploads.MAX_UPLOAD_NODES
    assert pn_uploads.MAX_UPLOAD_READ_WAYS >= pn_uploads.MAX_UPLOAD_READ_NODES // 10


# --------------------------------------------------------------------------------------------
# 2. Temporary files: none left behind
# --------------------------------------------------------------------------------------------


def test_an_upload_leaves_no_temporary_file(tmp_path, cache, long_way, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    xml = bz2.decompress(KOTKA_XML.read_bytes())
    cases = [
        (bz2.compress(xml), "kotka.osm.bz2", None),  # decompressed to a temporary file, then read
        (KOTKA_PBF.read_bytes(), "kotka.osm.pbf", None),
        (long_way.read_bytes(), "long_way.osm.pbf", "holds a way of more than"),
        (bz2.compress(b"\0" * 3_000_000), "bomb.osm.bz2", "decompresses to more than"),
        (b"not really pbf" * 10, "x.osm.pbf", "could not be read as OSM PBF"),
        (bz2.compress(xml)[:5_000], "cut.osm.bz2", "not a valid .bz2 archive|could not be read"),
    ]
    monkeypatch.setattr(pn_uploads, "MAX_UPLOAD_DECOMPRESSED_BYTES", 2_000_000)
    monkeypatch.setitem(pn.network_from_upload.__kwdefaults__, "max_decompressed_bytes", 2_000_000)
    for data, name, refused in cases:
        if refused is None:
            assert pn.network_from_upload(data, name, cache_dir=cache).n_nodes > 0
        else:
            with pytest.raises(ValueError, match=refused):
                pn.network_from_upload(data, name, cache_dir=cache)
        assert list(tmp.iterdir()) == [], (name, list(tmp.iterdir()))


# --------------------------------------------------------------------------------------------
# 3. On a worker: the calling process sends the bytes and keeps the network
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    with local_cluster(tmp_path_factory, n_workers=2, memory_limit=2**30) as ex:
        yield ex


def test_the_upload_is_read_by_the_job_on_a_worker_and_cached_here(executor, cache, long_way, monkeypatch):
    def not_here(*args, **kwargs):
        raise AssertionError("the calling process read the file itself")

    monkeypatch.setattr(pn_uploads, "read_upload", not_here)  # this process only: the worker has its own
    calls = []

    def run(fn, *args, **kwargs):
        calls.append(fn)
        return executor.run(fn, *args, **kwargs)

    data = KOTKA_PBF.read_bytes()
    net = pn.network_from_upload(data, "kotka.osm.pbf", cache_dir=cache, read=upload_jobs.reader(run))
    assert calls == [jobs.upload_network_job]
    assert net.n_nodes == 224 and net.name == "kotka"
    file_id = net.source.removeprefix("file:")
    assert pn.load_upload(file_id, cache_dir=cache).n_nodes == 224  # kept in this process's upload cache
    again = pn.network_from_upload(data, "kotka.osm.pbf", cache_dir=cache, read=upload_jobs.reader(run))
    assert calls == [jobs.upload_network_job] and again.n_nodes == 224  # from the cache: no second job

    # The hostile file: its sentence comes back from the worker; this process only sent a few kB.
    hostile = long_way.read_bytes()
    out, peak = _peak_while(
        lambda: pn.network_from_upload(hostile, "long_way.osm.pbf", cache_dir=cache, read=upload_jobs.reader(run))
    )
    assert isinstance(out, ValueError), out
    assert "holds a way of more than" in str(out) and "Traceback" not in str(out)
    assert peak < CALLER_PEAK_BOUND, f"peak {peak / 2**20:.0f} MiB"
    assert calls[-1] is jobs.upload_network_job


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (JobError(MEMORY_MESSAGE), "This file is too large to read here: it needs more memory"),
        (JobError("the computation crashed its process"), "This file is too large to read here: it needs more memory"),
        (JobTimeout("past its time limit"), "This file is too large to read here: reading it takes longer than"),
        (JobBusy("no worker"), "every computing worker of this server is busy"),
    ],
)
def test_a_failed_job_is_a_sentence(error, expected, cache):
    """The job's time or memory limit (a JobError) is a sentence for the person, not the job's words."""

    def run(fn, *args, **kwargs):
        raise error

    with pytest.raises(ValueError, match=expected) as info:
        pn.network_from_upload(KOTKA_PBF.read_bytes(), "kotka.osm.pbf", cache_dir=cache, read=upload_jobs.reader(run))
    assert str(info.value).endswith(".") and "Error" not in str(info.value)
    assert not (cache / "uploads").exists() or not list((cache / "uploads").iterdir())


# --------------------------------------------------------------------------------------------
# 4. Streamlit's upload size is the code's
# --------------------------------------------------------------------------------------------


def test_streamlit_max_upload_size_is_the_code_cap():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    mb = config["server"]["maxUploadSize"]
    assert mb == pn_uploads.UPLOAD_SIZE_MB == math.ceil(pn_uploads.MAX_UPLOAD_BYTES / 2**20)  # Streamlit's MB: 2**20
    assert mb * 2**20 >= pn_uploads.MAX_UPLOAD_BYTES
