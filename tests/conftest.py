"""Shared fixtures: small offline road networks, osmnx settings hygiene, the Overpass stand-in."""

from __future__ import annotations

import copy
import os
import socket
import sys
import tempfile
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = Path(__file__).resolve().parent
#: What a process needs on PYTHONPATH to import a test module by name (the Dask workers of the execution tests
#: unpickle its functions by reference): the test folders, the support modules (pyproject.toml's pytest
#: ``pythonpath``) and this folder (conftest).
TEST_IMPORT_PATH = os.pathsep.join(
    str(TESTS_DIR / folder) for folder in ("panda", "app", "browser", "project", "support", ".")
)
if str(ROOT) not in sys.path:  # `pytest` (not `python -m pytest`) from anywhere, package not installed
    sys.path.insert(0, str(ROOT))

from overpass_stub import OverpassStub  # noqa: E402

# The class database and result store of this test session: a file of its own (never data/class.db), shared by
# the servers the tests start (they inherit the environment). A test needing an empty one sets its own URL.
if not os.environ.get("PANDA_DB_URL"):
    _SESSION_DB = Path(tempfile.mkdtemp(prefix="panda-tests-")) / "class.db"
    os.environ["PANDA_DB_URL"] = f"sqlite:///{_SESSION_DB}"

# The lecturer key of this test session (app/server/lecturer.py), known to the tests and inherited by the servers
# they start; a test of the key file removes it.
LECTURER_KEY = os.environ.setdefault("PANDA_LECTURER_KEY", "lecturer-key-of-the-tests")

from panda import network as pn  # noqa: E402

#: 22 nodes / 51 directed edges after the strongly connected reduction: the smoke-test network.
OAKLAND_FILE = TESTS_DIR / "data" / "west_oakland_drive.osm.bz2"
#: A box holding the whole West Oakland fixture (west, south, east, north).
OAKLAND_BBOX = (-122.31, 37.80, -122.28, 37.82)


@pytest.fixture(scope="session")
def kotka() -> pn.RoadNetwork:
    """The embedded Kotka/Karhula drive network (224 nodes): fast, real, strongly connected."""
    return pn.load_city("kotka")


@pytest.fixture(scope="session")
def oakland() -> pn.RoadNetwork:
    """The West Oakland test fixture (22 nodes), loaded with network_from_file."""
    return pn.network_from_file(OAKLAND_FILE)


@pytest.fixture
def db(tmp_path, monkeypatch):
    """A SQLite class database (and result store) of this test alone, through ``PANDA_DB_URL``: nothing is read
    from an earlier test, and its engine is disposed of afterwards."""
    from app.server.db import store

    url = f"sqlite:///{tmp_path / 'class.db'}"
    monkeypatch.setenv(store.ENV_URL, url)
    yield url
    store.dispose(url)


def _settings_snapshot(settings: types.ModuleType) -> dict:
    return {
        k: copy.deepcopy(v)
        for k, v in vars(settings).items()
        if not k.startswith("_") and not isinstance(v, (types.ModuleType, types.FunctionType, type))
    }


@pytest.fixture
def osmnx_settings():
    """Yield ``osmnx.settings``; afterwards restore every setting and ``socket.getaddrinfo``.

    osmnx keeps its configuration in module globals and, on a download, replaces
    ``socket.getaddrinfo`` to pin the server's address: a test must leave neither changed.
    """
    import osmnx as ox

    before = _settings_snapshot(ox.settings)
    getaddrinfo = socket.getaddrinfo
    try:
        yield ox.settings
    finally:
        socket.getaddrinfo = getaddrinfo
        for key in set(_settings_snapshot(ox.settings)) - set(before):
            delattr(ox.settings, key)
        for key, value in before.items():
            setattr(ox.settings, key, value)


@pytest.fixture
def overpass_stub(osmnx_settings):
    """An Overpass stand-in on 127.0.0.1 serving the West Oakland fixture, wired into osmnx.

    ``osmnx.settings.overpass_url`` points at it for the test; the server stops at teardown (and
    by itself after 60 s at the latest).
    """
    stub = OverpassStub(OAKLAND_FILE, max_lifetime_s=60.0)
    osmnx_settings.overpass_url = stub.url
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture
def closed_port_url() -> str:
    """An Overpass URL on a loopback port nothing listens on (connection refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/api"


@pytest.fixture(autouse=True)
def _keep_the_main_module():
    """Give ``sys.modules["__main__"]`` back after each test.

    Streamlit's AppTest runs a script as a fresh ``__main__`` module and leaves it there; a process pool
    started later (the experiment runner's) then re-runs that script in every child it spawns.
    """
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def _downloads_allowed_in_the_test_process():
    """Every test starts with in-process downloads allowed, as in a library user's process.

    ``app/widgets/area_picker.py`` turns them off for good when it is imported under a Streamlit runtime (a web server
    downloads only through worker jobs); AppTest runs in this process, so without this the tests after the
    first AppTest would see a server's setting. A test of the server's behaviour turns it off itself.
    """
    from panda.network import download

    download.IN_PROCESS_DOWNLOADS = True
    yield
    download.IN_PROCESS_DOWNLOADS = True
