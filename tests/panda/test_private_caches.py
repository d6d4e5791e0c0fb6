"""Caches whose files are loaded back are read only from a folder of this account's own (issue 38).

* numba's compiled code (loaded with pickle): each case runs a fresh Python, since numba reads its cache
  folder when it is imported.
* osmnx's HTTP cache (a planted response would become a road network).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from conftest import ROOT

from panda.errors import PandaWarning
from panda.network import download

#: Imports panda's compiled loops, compiles (or loads) the repair's, and says where numba keeps them.
PROBE = (
    "import json, os, numba; from panda import _min_plus, _pdhg_blocks; _min_plus.warm_up(); "
    "print(json.dumps([numba.config.CACHE_DIR, os.environ['NUMBA_CACHE_DIR']]))"
)


def _cache_dir_of(folder) -> tuple[str, str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(folder), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    used, inherited = json.loads(out.stdout.strip().splitlines()[-1])
    assert used == inherited  # the Dask workers, started from this process, use the same folder
    return used, out.stderr


def _files_under(folder) -> list[str]:
    return [name for _, _, names in os.walk(folder) for name in names]


def test_a_folder_others_may_write_is_made_private_and_used(tmp_path):
    shared = tmp_path / "numba"
    shared.mkdir()
    shared.chmod(0o777)
    used, _ = _cache_dir_of(shared)
    assert used == str(shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o700
    assert any(name.endswith(".nbi") for name in _files_under(shared))  # the compiled loops are kept there


def test_a_symbolic_link_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "numba"
    link.symlink_to(elsewhere)
    used, log = _cache_dir_of(link)
    assert used not in (str(link), str(elsewhere)) and "symbolic link" in log
    assert stat.S_IMODE(os.stat(used).st_mode) == 0o700
    assert not _files_under(elsewhere)  # nothing written (nor read) through the link


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to give a folder away")
def test_another_users_folder_is_not_used(tmp_path):
    theirs = tmp_path / "numba"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)  # nobody's
    used, log = _cache_dir_of(theirs)
    assert used != str(theirs) and "belongs to uid 65534" in log
    assert not _files_under(theirs)


def test_osmnx_answers_from_a_private_folder_only(tmp_path):
    ox = pytest.importorskip("osmnx")
    before = (ox.settings.use_cache, ox.settings.cache_folder, ox.settings.requests_timeout)
    try:
        shared = tmp_path / "osmnx"
        shared.mkdir(mode=0o777)
        shared.chmod(0o777)
        download._configure_osmnx(shared, 5.0)
        assert ox.settings.use_cache and ox.settings.cache_folder == str(shared)
        assert stat.S_IMODE(shared.stat().st_mode) == 0o700

        link = tmp_path / "link"
        link.symlink_to(shared)
        with pytest.warns(PandaWarning, match="symbolic link"):
            download._configure_osmnx(link, 5.0)
        assert not ox.settings.use_cache  # downloads go on, without answers from that folder
    finally:
        ox.settings.use_cache, ox.settings.cache_folder, ox.settings.requests_timeout = before
