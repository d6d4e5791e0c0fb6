"""A class at work on one server (issue 29): a busy class, and a class with a few hostile students.

    python bench/bench_class.py busy --minutes 5            # 30 students, a move every 3-8 s each
    python bench/bench_class.py hostile --minutes 3         # 25 students alone, then with two hostile ones

Each student is a protocol-level Streamlit session on the Lesson (``bench_load._SoakUser``): a move is a
rerun of the open session with a new widget value (eps on the 0.5 grid, a fast mechanism, place A), or now
and then a new link in a new session; its time runs from the request to the run's ``script_finished``, and
it must show the Lesson's "Error at A" (a move that does not, fails or is not applied is *lost*).

``busy``: ``--students`` (default 30) students for ``--minutes``; reported: p50/p95/max per move, moves lost.
Target: p95 ≤ 2 s, nothing lost.

``hostile``: two phases on two fresh servers of ``--minutes`` each: 25 ordinary students alone (the quiet
class), then the same 25 (same random moves) with two hostile students, each at an address of their own:

* one keeps ``--tabs`` (default 20) tabs busy: each opens Lesson links with the trade-off curve open
  (``ltab=curve``) and a new seed, one after another, each session left as soon as its run ends (or after
  30 s);
* the other uploads hostile OpenStreetMap files in a real Chromium page, one after another (the sidebar's
  "OSM file (upload)"): a PBF of a few kB holding one way of 3 million node references, a PBF of 2 million
  nodes and a bz2 of 300,000 ways that are no roads, each refused with a sentence.

The servers run as behind the class's proxy (``PANDA_TRUSTED_PROXY=1``): every student's handshake carries
an ``X-Forwarded-For`` address of their own (all of the tabs' one address, the uploader's another). The
server's RSS is sampled every 0.5 s. Reported: the ordinary students' p95 in both phases and their ratio
(target: within 2x), the links opened and files refused, and the server's RSS: its median in the quiet
phase and its peak with the hostile student (target: within 200 MB of quiet).

Loopback only; each server gets a fresh class database and result store; everything stops at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import bz2
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_load import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    _free_port,
    _pct,
    _rss,
    _session,
    _SoakUser,
    _wait_healthy,
    fresh_db_url,
    streamlit_cmd,
)

sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "support")]
from area_support import long_way_pbf, many_nodes_pbf, many_ways_pbf  # noqa: E402 (the tests' hostile files)

HOSTILE_RUN_S = 30.0
#: The hostile students' addresses (TEST-NET-2: the tabs', the uploader's), and the ordinary students' (TEST-NET-3).
HOSTILE_ADDRESS = "198.51.100.66"
UPLOADER_ADDRESS = "198.51.100.67"
UPLOAD_WAIT_S = 120.0


def _forwarded(address: str) -> dict:
    return {"X-Forwarded-For": address}


def _hostile_files(folder: Path) -> list[Path]:
    """Tiny on disk, huge once read: the upload bombs of tests/panda/test_upload_bounds.py, larger."""
    xml = many_ways_pbf(folder / "ways.osm", 300_000)  # the writer's format follows the suffix: XML
    bomb = folder / "ways.osm.bz2"
    bomb.write_bytes(bz2.compress(xml.read_bytes()))
    return [
        long_way_pbf(folder / "long_way.osm.pbf", 3_000_000),
        many_nodes_pbf(folder / "nodes.osm.pbf", 2_000_000),
        bomb,
    ]


class _RssWatch:
    """The server process's RSS (MB), sampled every 0.5 s in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.samples = pid, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            mb = _rss(self.pid)[0]
            if mb == mb:  # not NaN
                self.samples.append(mb)
            self._stop.wait(0.5)

    def __enter__(self) -> _RssWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _serve() -> tuple[subprocess.Popen, int]:
    port = _free_port()
    env = {**os.environ, "PANDA_DB_URL": fresh_db_url(), "PANDA_TRUSTED_PROXY": "1"}
    proc = subprocess.Popen(
        streamlit_cmd(port), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    _wait_healthy(f"http://127.0.0.1:{port}", proc)
    first = asyncio.run(_session(port, "", "", 300.0))  # warm: the default view computed once
    if not first["ok"]:
        proc.terminate()
        msg = f"the server's first Lesson run failed: {first}"
        raise SystemExit(msg)
    return proc, port


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


async def _hostile_tab(port: int, end: float, seed0: int, opened: list[int]) -> None:
    """Open curve links with a new seed, one after another, each session left when its run ends."""
    seed = seed0
    while time.monotonic() < end:
        seed += 1
        await _session(port, f"ltab=curve&seed={seed}", "", HOSTILE_RUN_S, headers=_forwarded(HOSTILE_ADDRESS))
        opened.append(seed)


async def _uploader(port: int, end: float, files: list[Path], refused: list[str]) -> None:
    """Upload the hostile files in a real page, one after another, each in a new session; ``refused`` gets the
    sentence each one got (or what went wrong)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(
                viewport={"width": 1280, "height": 800}, extra_http_headers=_forwarded(UPLOADER_ADDRESS)
            )
            i = 0
            while time.monotonic() < end:
                path = files[i % len(files)]
                i += 1
                page = await context.new_page()
                try:
                    await page.goto(f"http://127.0.0.1:{port}/", timeout=60_000)
                    await page.get_by_text("OSM file (upload)").click(timeout=60_000)
                    # The OSM file's uploader (the sidebar has the places file's too).
                    osm = page.locator('[data-testid="stFileUploader"]', has_text="OpenStreetMap extract")
                    await osm.locator('input[type="file"]').set_input_files(str(path))
                    alert = page.locator('[data-testid="stSidebar"] [data-testid="stAlert"]').first
                    await alert.wait_for(timeout=UPLOAD_WAIT_S * 1000)
                    refused.append(f"{path.name}: {(await alert.inner_text()).splitlines()[0][:120]}")
                except Exception as exc:  # noqa: BLE001 (a failure is a result of the benchmark)
                    refused.append(f"{path.name}: FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                finally:
                    await page.close()
        finally:
            await browser.close()


def _class(
    port: int, pid: int, minutes: float, n_ordinary: int, tabs: int, files: list[Path], seed: int, pause_s: tuple
) -> dict:
    rng = random.Random(seed)
    users = [
        _SoakUser(port, random.Random(rng.random()), 120.0, pause_s=pause_s, headers=_forwarded(f"203.0.113.{i + 1}"))
        for i in range(n_ordinary)
    ]
    end = time.monotonic() + minutes * 60.0
    opened: list[int] = []
    refused: list[str] = []

    async def everyone() -> None:
        await asyncio.gather(
            *(u.run(end) for u in users),
            *(_hostile_tab(port, end, 1000 * (i + 1), opened) for i in range(tabs)),
            *([_uploader(port, end, files, refused)] if files else []),
        )

    t0 = time.monotonic()
    with _RssWatch(pid) as rss:
        try:
            asyncio.run(asyncio.wait_for(everyone(), timeout=minutes * 60.0 + 180.0))
        except TimeoutError:
            print("  (stopped at the time limit)")
    moves = [m for u in users for m in u.moves]
    times = [m["s"] for m in moves if m["ok"] and m["applied"]]
    lost = [m for m in moves if not (m["ok"] and m["applied"])]
    return {
        "students": n_ordinary,
        "hostile_tabs": tabs,
        "minutes": minutes,
        "wall_s": time.monotonic() - t0,
        "moves": len(moves),
        "lost": len(lost),
        "lost_kinds": sorted({m["kind"] + (": " + m["failure"] if "failure" in m else "") for m in lost})[:5],
        "p50_s": _pct(times, 0.5),
        "p95_s": _pct(times, 0.95),
        "max_s": max(times) if times else float("nan"),
        "hostile_links": len(opened),
        "uploads": refused,
        "server_rss_median_mb": statistics.median(rss.samples) if rss.samples else float("nan"),
        "server_rss_peak_mb": max(rss.samples, default=float("nan")),
        "load_1min": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("busy", "hostile"))
    ap.add_argument("--minutes", type=float, default=5.0, help="minutes per class (at most 30)")
    ap.add_argument("--students", type=int, default=30, help="busy: students (at most 40)")
    ap.add_argument("--tabs", type=int, default=20, help="hostile: the hostile student's tabs (at most 40)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    args = ap.parse_args()
    minutes = min(max(args.minutes, 0.5), 30.0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode == "busy":
            phases = [(min(max(args.students, 1), 40), 0, [])]
        else:
            files = _hostile_files(Path(tmp))
            phases = [(25, 0, []), (25, min(max(args.tabs, 0), 40), files)]
        for n_ordinary, tabs, upload_files in phases:
            proc, port = _serve()
            try:
                row = _class(port, proc.pid, minutes, n_ordinary, tabs, upload_files, args.seed, (3.0, 8.0))
            finally:
                _stop(proc)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.mode == "hostile":
        quiet, hostile = rows
        print(f"ordinary students' p95 with the hostile ones / alone: {hostile['p95_s'] / quiet['p95_s']:.2f}")
        rise = hostile["server_rss_peak_mb"] - quiet["server_rss_median_mb"]
        print(
            f"server RSS: quiet median {quiet['server_rss_median_mb']:.0f} MB, peak with the hostile ones "
            f"{hostile['server_rss_peak_mb']:.0f} MB (+{rise:.0f} MB); files refused: {len(hostile['uploads'])}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
