"""A link's bounding box in a real server (`streamlit run app`, Chromium): the link asks nothing, the click does.

In a running server the web server process never downloads (``panda.network.download.IN_PROCESS_DOWNLOADS`` is
off there, which AppTest cannot show): the download is a job on a Dask worker. The server gets the
Overpass stand-in (``PANDA_OVERPASS_URL``) and a cache folder of its own (``PANDA_CACHE_DIR``); the
stand-in records which process sent each request.
"""

from __future__ import annotations

import time

import pytest
from browser_support import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, _wait_idle, sync_api
from conftest import OAKLAND_FILE
from overpass_stub import OverpassStub
from server_support import streamlit_server

pytestmark = pytest.mark.browser

LINK = "bbox=-122.31,37.8,-122.28,37.82&K=20&N=5&M=10"


@pytest.fixture(scope="module")
def stub():
    server = OverpassStub(OAKLAND_FILE, max_lifetime_s=600.0, track_clients=True)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server(stub, tmp_path_factory):
    """`streamlit run app` with the stand-in and an empty cache folder; yields (url, the server's pid)."""
    env = {"PANDA_OVERPASS_URL": stub.url, "PANDA_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    with streamlit_server("streamlit-download-server.log", env) as server:
        yield server.url, server.proc.pid


def test_a_link_asks_nothing_and_the_click_downloads_on_a_worker(server, stub):
    url, server_pid = server
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(f"{url}/explore?{LINK}", wait_until="domcontentloaded")
            button = page.get_by_role("button", name="Download this area (≈ 5.9 km²)")
            button.wait_for(timeout=180_000)
            page.get_by_text("LP status", exact=True).wait_for(timeout=180_000)
            _wait_idle(page, timeout_s=120)
            assert page.get_by_text("not downloaded on this server yet").count() == 1
            assert stub.requests == []  # the link alone asked the OpenStreetMap server nothing
            start = time.monotonic()
            button.click()
            page.get_by_text("22 nodes", exact=False).first.wait_for(timeout=180_000)
            _wait_idle(page, timeout_s=120)
            print(f"click to the downloaded network shown: {time.monotonic() - start:.1f} s")
            page.screenshot(path=str(ARTIFACTS / "download-after-click.png"))
            assert stub.n_queries == 1
            assert stub.client_pids and None not in stub.client_pids
            assert server_pid not in stub.client_pids  # a worker process downloaded, not the web server
            assert page.get_by_role("button", name="Download this area (≈ 5.9 km²)").count() == 0
            assert "bbox=-122.31%2C37.8%2C-122.28%2C37.82" in page.url or "bbox=-122.31,37.8,-122.28,37.82" in page.url
        finally:
            browser.close()
