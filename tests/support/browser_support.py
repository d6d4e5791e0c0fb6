"""What the browser tests share: Chromium's path and flags, the server and browser fixtures, waiting helpers.

A test file in tests/browser imports what it uses, fixtures included (``from browser_support import browser,
server``: each file gets its own module-scoped server and browser). Importing this module skips the importing
file when /usr/bin/chromium or the playwright package is missing.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from server_support import free_port, streamlit_cmd, streamlit_server, wait_healthy  # noqa: F401 (re-exported)

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")


# The server helpers live in server_support.py; the short names stay here for the tests that import them.
_free_port, _wait_healthy = free_port, wait_healthy


@pytest.fixture(scope="module")
def server():
    """`streamlit run app` on a free loopback port; stopped with its process group at teardown."""
    with streamlit_server("streamlit-server.log") as srv:
        yield srv.url


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def _pixel_spread(png: bytes) -> float:
    """Standard deviation of the grey levels of a PNG (0 for a blank, single-colour image)."""
    from PIL import Image, ImageStat

    img = Image.open(io.BytesIO(png)).convert("L")
    return float(ImageStat.Stat(img).stddev[0])


def _metric(page, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]').filter(has=page.get_by_text(label, exact=True))
    return box.locator('[data-testid="stMetricValue"]').inner_text()


_BUSY_JS = """() => !!document.querySelector('[data-testid="stStatusWidget"]')
    || document.querySelectorAll('[data-stale="true"]').length > 0
    || document.querySelectorAll('[data-testid="stSpinner"]').length > 0"""


def _wait_idle(page, timeout_s: float = 60.0) -> None:
    """Wait until the script run is over: no 'Running...' widget, no stale element, no spinner, for 0.45 s.

    (Streamlit shows its status widget only about 0.5 s into a run, but marks the elements of the
    previous run stale at once; both, and the page's own spinners, must be gone.)
    """
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while quiet < 3:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the page was still busy after {timeout_s:.0f} s")
        quiet = 0 if page.evaluate(_BUSY_JS) else quiet + 1
        page.wait_for_timeout(150)


def _wait_map_drawn(page, timeout_s: float = 60.0) -> float:
    canvas = page.locator('[data-testid="stDeckGlJsonChart"] canvas').first
    canvas.wait_for(state="visible", timeout=timeout_s * 1000)
    deadline = time.monotonic() + timeout_s
    spread = 0.0
    while time.monotonic() < deadline:
        spread = _pixel_spread(canvas.screenshot())
        if spread > 5.0:
            return spread
        time.sleep(0.2)
    return spread
