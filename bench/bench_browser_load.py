"""A class opening the dashboard at once, in real browsers: N headless Chromium pages at the same moment.

    python bench/bench_browser_load.py                   # N = 5 then N = 10, distinct eps per page
    python bench/bench_browser_load.py --sessions 5 --json out.json

Starts ``streamlit run app`` on a loopback port (its own local Dask cluster), warms it up with one page
(cluster start, networks), then per round opens N pages at once in one headless Chromium (one browser
context each, so N separate Streamlit sessions), each with a link of its own never used eps
(``/?eps=2.5``: nothing cached), and times each page from ``goto`` until the Lesson is on screen: its
metric "Error at A" shows, the map's canvas is drawn (present with a non-zero size) and no Streamlit
status widget ("Running...") nor spinner remains. Unlike ``bench/bench_load.py`` (the protocol level)
this includes the browser's own work: loading the frontend bundle, rendering, deck.gl and Plotly.
Reported per round: time-to-ready p50, p95, max, pages that showed an exception or an error box, the
peak RSS of the server and of its child processes (the Dask workers, summed), the load average.

Bounded: at most 20 pages per round, a time limit per round, loopback only; the server and the browser
are stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    EPS_GRID,
    ROOT,
    _free_port,
    _MemoryWatch,
    _wait_healthy,
    fresh_db_url,
    round_summary,
    streamlit_cmd,
)

MAX_PAGES = 20

#: True once the Lesson is complete on screen (evaluated in the page, polled).
READY_JS = """() => {
  const metric = [...document.querySelectorAll('[data-testid="stMetric"]')]
    .some(m => (m.innerText || '').includes('Error at A'));
  const canvas = [...document.querySelectorAll('[data-testid="stDeckGlJsonChart"] canvas, .stDeckGlJsonChart canvas')]
    .some(c => c.width > 0 && c.height > 0 && c.getBoundingClientRect().width > 0);
  const running = document.querySelector('[data-testid="stStatusWidget"]')
    || document.querySelector('[data-testid="stSpinner"]');
  return metric && canvas && !running;
}"""
ERRORS_JS = """() => ({
  exceptions: document.querySelectorAll('[data-testid="stException"]').length,
  errors: [...document.querySelectorAll('[data-testid="stAlert"], [data-testid="stAlertContainer"]')]
    .filter(a => a.querySelector('[data-testid="stAlertContentError"]') || /error/i.test(a.className || '')).length,
})"""


async def _page(browser, url: str, timeout_s: float) -> dict:
    out = {"ready_s": float("nan"), "ok": False, "exceptions": 0, "errors": 0}
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = await context.new_page()
        t0 = time.perf_counter()
        await page.goto(url, timeout=timeout_s * 1000, wait_until="domcontentloaded")
        remaining = max(timeout_s - (time.perf_counter() - t0), 1.0)
        await page.wait_for_function(READY_JS, timeout=remaining * 1000, polling=100)
        out["ready_s"] = time.perf_counter() - t0
        out["ok"] = True
        out.update(await page.evaluate(ERRORS_JS))
    except Exception as exc:  # noqa: BLE001 (a failure is a result of the benchmark)
        out["failure"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        try:
            out.update(await page.evaluate(ERRORS_JS))
        except Exception:  # noqa: BLE001
            pass
    finally:
        await context.close()
    return out


async def _rounds(port: int, counts: list[int], timeout_s: float, pid: int) -> list[dict]:
    from playwright.async_api import async_playwright

    eps_values = iter(EPS_GRID[::-1])  # from 50 down: the soak and bench_load start at the small end
    rows = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            t0 = time.perf_counter()
            warm = await _page(browser, f"http://127.0.0.1:{port}/?eps={next(eps_values):g}", timeout_s)
            print(
                f"warm-up page (cluster start, networks, frontend): {time.perf_counter() - t0:.1f} s, "
                f"ok={warm['ok']} {warm.get('failure', '')}",
                flush=True,
            )
            print(f"{os.cpu_count()} cores, server pid {pid}")
            print(
                f"{'N':>3} {'p50 s':>7} {'p95 s':>7} {'max s':>7} {'ok':>5} {'err':>4} {'server MB':>10} "
                f"{'workers MB':>11} {'load':>5}"
            )
            for n in counts:
                urls = [f"http://127.0.0.1:{port}/?eps={next(eps_values):g}" for _ in range(n)]
                with _MemoryWatch(pid) as mem:
                    results = await asyncio.wait_for(
                        asyncio.gather(*(_page(browser, u, timeout_s) for u in urls)), timeout_s + 60
                    )
                times = [r["ready_s"] for r in results if r["ok"]]
                row = {"pages": n, "eps": [u.rsplit("=", 1)[1] for u in urls], **round_summary(times, results, mem)}
                rows.append(row)
                print(
                    f"{n:3d} {row['p50_s']:7.1f} {row['p95_s']:7.1f} {row['max_s']:7.1f} {row['ready']:2d}/{n:<2d} "
                    f"{row['with_errors']:4d} {row['server_peak_mb']:10.0f} {row['workers_peak_mb']:11.0f} "
                    f"{row['load_average']:5.1f}",
                    flush=True,
                )
                for failure in row["failures"]:
                    print(f"    failure: {failure}")
        finally:
            await browser.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="5,10", help="pages per round (default 5,10)")
    ap.add_argument("--round-timeout", type=float, default=240.0, help="seconds per round (default 240)")
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    args = ap.parse_args()
    counts = [int(n) for n in args.sessions.split(",") if n.strip()]
    if any(n < 1 or n > MAX_PAGES for n in counts):
        ap.error(f"page counts must be within 1..{MAX_PAGES}")
    if sum(counts) + 1 > len(EPS_GRID):
        ap.error("not enough distinct eps values")

    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PANDA_DB_URL": fresh_db_url()}  # nothing kept from a past run
    env.pop("PANDA_DASK_SCHEDULER", None)
    cmd = streamlit_cmd(port)
    log_path = ROOT / "test-artifacts" / "bench-browser-load-server.log"
    log_path.parent.mkdir(exist_ok=True)
    log = open(log_path, "wb")  # noqa: SIM115 (closed in the finally)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    rows: list[dict] = []
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", proc)
        rows = asyncio.run(_rounds(port, counts, args.round_timeout, proc.pid))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
