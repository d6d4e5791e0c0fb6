"""The Lesson's Optimal (LP) live in real Chromium: from the choice to the first certified mechanism and the optimum.

    python bench/bench_lesson_live_lp.py                   # the default view, 3 runs
    python bench/bench_lesson_live_lp.py --query "?eps=1"  # another view (a Lesson link's query)

Each run starts `streamlit run app` on a free loopback port with a fresh result store (nothing kept from a
run before), opens the Lesson at 1280x720, shows EM + remap once (the server is warm, as in a lesson), then
chooses Optimal (LP). Times from the click on the option to the page's note "a first certified mechanism,
average error ..." (the mechanism on the page), and to "optimal (gap <= ...)" (the background solve done and
the page updated by itself). Targets (issue 28): about 3 s, and 60 s. Loopback only; the server stops after
each run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

from bench_lesson_ui import idle
from bench_load import CHROMIUM, CHROMIUM_ARGS, ROOT, _free_port, _wait_healthy, fresh_db_url, streamlit_cmd
from playwright.sync_api import sync_playwright

FIRST = "a first certified mechanism, average error"
OPTIMAL = "optimal (gap ≤"


def _choose(page, label: str, option: str) -> float:
    """Open the select box ``label`` and click ``option``; returns the click's time (perf_counter)."""
    page.locator('[data-testid="stSelectbox"]', has_text=label).click()
    item = page.get_by_role("option", name=option, exact=True)
    item.wait_for()
    t0 = time.perf_counter()
    item.click()
    return t0


def one_run(browser, query: str) -> tuple[float, float]:
    port = _free_port()
    env = {**os.environ, "PANDA_DB_URL": fresh_db_url()}
    cmd = streamlit_cmd(port)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
        page.goto(f"{url}/{query}")
        page.get_by_text("Error at A", exact=True).wait_for(timeout=180_000)
        idle(page)
        _choose(page, "Mechanism", "EM + remap")
        idle(page)
        time.sleep(1.0)
        t0 = _choose(page, "Mechanism", "Optimal (LP)")
        page.get_by_text(FIRST, exact=False).first.wait_for(timeout=120_000)
        first = time.perf_counter() - t0
        page.get_by_text(OPTIMAL, exact=False).first.wait_for(timeout=300_000)
        optimal = time.perf_counter() - t0
        page.context.close()
        return first, optimal
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--query", default="", help='a Lesson link\'s query, e.g. "?eps=1"')
    args = ap.parse_args()
    print(f"load average before {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; view /{args.query}")
    firsts, optima = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            for i in range(args.runs):
                first, optimal = one_run(browser, args.query)
                firsts.append(first)
                optima.append(optimal)
                print(f"run {i}: first certified mechanism {first:.2f} s, optimal {optimal:.1f} s", flush=True)
        finally:
            browser.close()
    print(f"median: first certified {statistics.median(firsts):.2f} s, optimal {statistics.median(optima):.1f} s")
    print(f"load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
