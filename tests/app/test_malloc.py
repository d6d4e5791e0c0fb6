"""app.server.malloc: glibc's allocator settings for the web server (Linux with glibc, as in CI and Docker)."""

from __future__ import annotations

import sys
import threading

import pytest

from app.server import malloc

glibc = pytest.mark.skipif(malloc._glibc() is None, reason="needs glibc")


@glibc
def test_tune_sets_both_options_once():
    assert malloc.tune() is True
    assert malloc.tune(arena_max=64) is True  # later calls change nothing and report the first result


@glibc
def test_trimmer_is_one_daemon_thread():
    assert malloc.start_trimmer(interval_s=3600.0) is True
    assert malloc.start_trimmer() is True
    trimmers = [t for t in threading.enumerate() if t.name == "panda-malloc-trim"]
    assert len(trimmers) == 1 and trimmers[0].daemon and trimmers[0].is_alive()


@glibc
def test_trim_returns_the_holes_of_the_heap():
    """Free every other block of 128 MiB written in 64 KiB blocks: glibc keeps the holes, trim returns them."""
    import psutil

    proc = psutil.Process()
    for _attempt in range(3):  # a trimmer thread started elsewhere in the session may trim first
        blocks = [b"x" * (64 * 1024) for _ in range(2048)]
        del blocks[::2]  # 64 MiB of holes between live blocks
        before = proc.memory_info().rss
        assert malloc.trim() is True
        after = proc.memory_info().rss
        del blocks
        if before - after >= 32 * 2**20:
            break
    assert before - after >= 32 * 2**20, (before / 2**20, after / 2**20)


def test_other_systems_do_nothing(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert malloc._glibc() is None
    assert malloc.trim() is False


def test_refreeze_freezes_the_heap_and_still_frees_cyclic_garbage():
    import gc
    import time
    import weakref

    class Node:
        pass

    try:
        assert malloc.refreeze() > 1000  # the interpreter's modules, functions and caches
        # A cycle that dies after the freeze is still freed by the next refreeze.
        a, b = Node(), Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        malloc.refreeze()  # a and b are alive now: frozen
        del a, b
        gc.collect()
        assert alive() is not None  # frozen objects are not walked by ordinary collections ...
        malloc.refreeze()
        assert alive() is None  # ... but the next refreeze collects them
        # After a freeze a full collection walks only the new objects: faster than one over the whole heap.
        junk = [[Node() for _ in range(10)] for _ in range(20_000)]
        gc.unfreeze()
        t = time.process_time()
        gc.collect()
        full = time.process_time() - t
        gc.freeze()
        t = time.process_time()
        gc.collect()
        frozen = time.process_time() - t
        del junk
        assert frozen < full
    finally:
        gc.unfreeze()


def test_gc_freezer_is_one_daemon_thread():
    import threading

    malloc.start_gc_freezer(interval_s=3600)
    again = malloc.start_gc_freezer(interval_s=3600)
    assert not again  # once per process
    names = [t.name for t in threading.enumerate() if t.name == "panda-gc-freeze"]
    assert len(names) == 1
