"""The Lesson's timings in real Chromium: first screen (warm server), eps change, mechanism and place switch.

    python bench/bench_lesson_ui.py            # starts `streamlit run app` on a free loopback port
    python bench/bench_lesson_ui.py --first-only --cold-runs 3   # the first screens only

*Cold*: a fresh server (a new process, a new result store) per sample, its first page: the time from the address
typed to the Lesson drawn, with everything the server builds on its first visit. *Warm*: a new browser page on a
server that has shown the view once. Times from the action to the moment the page shows the new "Error at A"
value (the script run's result has arrived); the first screen until that metric shows and the map canvas has
drawn. Medians of 5-6 actions each, printed with every sample. Loopback only; everything stops at the end.
"""

from __future__ import annotations

import io
import os
import re
import statistics
import subprocess
import time

from bench_load import CHROMIUM, CHROMIUM_ARGS, ROOT, _free_port, _wait_healthy, fresh_db_url, streamlit_cmd
from playwright.sync_api import sync_playwright


def _pixel_spread(png: bytes) -> float:
    from PIL import Image, ImageStat

    return float(ImageStat.Stat(Image.open(io.BytesIO(png)).convert("L")).stddev[0])


def _serve() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "PANDA_DB_URL": fresh_db_url()}  # a new result store: nothing kept from a past run
    proc = subprocess.Popen(
        streamlit_cmd(port), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(url, proc)
    return proc, url + "/"


def metric(pg, label):
    return pg.evaluate(
        """(label) => {
            const boxes = [...document.querySelectorAll('[data-testid="stMetric"]')];
            const b = boxes.find(b => b.innerText.startsWith(label));
            return b ? b.innerText : null;
        }""",
        label,
    )


def wait_change(pg, label, before, t0, timeout=60):
    while time.perf_counter() - t0 < timeout:
        v = metric(pg, label)
        if v is not None and v != before:
            return time.perf_counter() - t0
        time.sleep(0.02)
    return float("nan")


def idle(pg):
    for _ in range(400):
        if not pg.evaluate(
            "() => !!document.querySelector('[data-testid=\"stStatusWidget\"]')"
            " || document.querySelectorAll('[data-stale=\"true\"]').length > 0"
        ):
            return
        time.sleep(0.05)


def _first_screen(b, url: str) -> float:
    """Seconds from a new page's address to the Lesson's "Error at A" shown and its map drawn."""
    c = b.new_context(viewport={"width": 1280, "height": 720})
    p = c.new_page()
    t0 = time.perf_counter()
    p.goto(url)
    p.get_by_text("Error at A", exact=True).wait_for(timeout=180000)
    canvas = p.locator('[data-testid="stDeckGlJsonChart"] canvas').first
    while _pixel_spread(canvas.screenshot()) < 5:
        time.sleep(0.05)
    took = time.perf_counter() - t0
    idle(p)
    c.close()
    return took


def _cold(runs: int) -> list[float]:
    out = []
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        for _ in range(runs):
            proc, url = _serve()
            try:
                out.append(_first_screen(b, url))
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        b.close()
    return out


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cold-runs", type=int, default=3, help="fresh servers, one first screen each")
    ap.add_argument("--first-only", action="store_true", help="first screens only (no ε, mechanism, place)")
    args = ap.parse_args()
    cold = _cold(args.cold_runs)
    proc, url = _serve()
    try:
        res = {"first_cold": cold, **_measure(url, first_only=args.first_only)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for k, v in res.items():
        print(f"{k:10s} median {statistics.median(v):.2f} s  samples {[round(x, 2) for x in v]}")


def _measure(url: str, *, first_only: bool = False) -> dict:
    res: dict[str, list[float]] = {"first_warm": [], "eps": [], "mech": [], "place": []}
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        # warm the server
        c = b.new_context(viewport={"width": 1280, "height": 720})
        p = c.new_page()
        p.goto(url)
        p.get_by_text("Error at A", exact=True).wait_for(timeout=120000)
        idle(p)
        c.close()
        for _ in range(5):
            res["first_warm"].append(_first_screen(b, url))
        if first_only:
            b.close()
            return {"first_warm": res["first_warm"]}
        c = b.new_context(viewport={"width": 1280, "height": 720})
        p = c.new_page()
        p.goto(url + "?mech=em")
        p.get_by_text("Error at A", exact=True).wait_for(timeout=120000)
        idle(p)
        time.sleep(1)
        thumb = (
            p.locator('[data-testid="stMain"] [data-testid="stSlider"]')
            .filter(has_text="ε (1/km)")
            .locator('input[type="range"]')
            .first
        )
        for i in range(6):
            before = metric(p, "Error at A")
            thumb.focus()
            t0 = time.perf_counter()
            thumb.press("ArrowLeft" if i % 2 == 0 else "ArrowRight")
            res["eps"].append(wait_change(p, "Error at A", before, t0))
            idle(p)
            time.sleep(0.5)
        for opt in ["EM + remap", "Exponential (EM)", "Planar Laplace", "Exponential (EM)", "EM + remap"]:
            before = metric(p, "Error at A")
            p.locator('[data-testid="stSelectbox"]', has_text="Mechanism").click()
            t0 = time.perf_counter()
            p.get_by_role("option", name=opt, exact=True).click()
            t0 = time.perf_counter()
            res["mech"].append(wait_change(p, "Error at A", before, t0))
            idle(p)
            time.sleep(0.5)
        for place in [10, 200, 300, 400, 50]:
            before = metric(p, "Error at A")
            p.locator('[data-testid="stSelectbox"]', has_text="Place A").click()
            p.keyboard.type(f"Place {place}")
            opt = p.get_by_role("option", name=re.compile(rf"^Place {place}( ·|$)"))  # the number, then its street
            opt.wait_for()
            t0 = time.perf_counter()
            opt.click()
            res["place"].append(wait_change(p, "Error at A", before, t0))
            idle(p)
            time.sleep(0.5)
        b.close()
    return res


if __name__ == "__main__":
    main()
