"""A class at work on one server (issue 29): a busy class, and a class with a few hostile students.

    python bench/bench_class.py busy --minutes 5            # 30 students, a move every 3-8 s each
    python bench/bench_class.py hostile --minutes 3         # 25 students alone, then with 5 hostile ones

Each student is a protocol-level Streamlit session on the Lesson (``bench_load._SoakUser``): a move is a
rerun of the open session with a new widget value (eps on the 0.5 grid, a fast mechanism, place A), or now
and then a new link in a new session; its time runs from the request to the run's ``script_finished``, and
it must show the Lesson's "Error at A" (a move that does not, fails or is not applied is *lost*).

``busy``: ``--students`` (default 30) students for ``--minutes``; reported: p50/p95/max per move, moves lost.
Target: p95 ≤ 2 s, nothing lost.

``hostile``: two phases on two fresh servers of ``--minutes`` each: 25 ordinary students alone (the quiet
class), then the same 25 (same random moves) with 5 hostile students, each opening Lesson links with the
trade-off curve open (``ltab=curve``) and a new seed, one after another, each session left as soon as its
run ends (or after 30 s). Reported: the ordinary students' p95 in both phases and their ratio (target:
within 2x), and how many links the hostile students opened.

Loopback only; each server gets a fresh class database and result store; everything stops at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import time
from pathlib import Path

from bench_load import ROOT, _free_port, _pct, _session, _SoakUser, _wait_healthy, fresh_db_url, streamlit_cmd

HOSTILE_RUN_S = 30.0


def _serve() -> tuple[subprocess.Popen, int]:
    port = _free_port()
    env = {**os.environ, "PANDA_DB_URL": fresh_db_url()}
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


async def _hostile(port: int, end: float, seed0: int, opened: list[int]) -> None:
    """Open curve links with a new seed, one after another, each session left when its run ends."""
    seed = seed0
    while time.monotonic() < end:
        seed += 1
        await _session(port, f"ltab=curve&seed={seed}", "", HOSTILE_RUN_S)
        opened.append(seed)


def _class(port: int, minutes: float, n_ordinary: int, n_hostile: int, seed: int, pause_s: tuple) -> dict:
    rng = random.Random(seed)
    users = [_SoakUser(port, random.Random(rng.random()), 120.0, pause_s=pause_s) for _ in range(n_ordinary)]
    end = time.monotonic() + minutes * 60.0
    opened: list[int] = []

    async def everyone() -> None:
        await asyncio.gather(
            *(u.run(end) for u in users),
            *(_hostile(port, end, 1000 * (i + 1), opened) for i in range(n_hostile)),
        )

    t0 = time.monotonic()
    try:
        asyncio.run(asyncio.wait_for(everyone(), timeout=minutes * 60.0 + 180.0))
    except TimeoutError:
        print("  (stopped at the time limit)")
    moves = [m for u in users for m in u.moves]
    times = [m["s"] for m in moves if m["ok"] and m["applied"]]
    lost = [m for m in moves if not (m["ok"] and m["applied"])]
    return {
        "students": n_ordinary,
        "hostile": n_hostile,
        "minutes": minutes,
        "wall_s": time.monotonic() - t0,
        "moves": len(moves),
        "lost": len(lost),
        "lost_kinds": sorted({m["kind"] + (": " + m["failure"] if "failure" in m else "") for m in lost})[:5],
        "p50_s": _pct(times, 0.5),
        "p95_s": _pct(times, 0.95),
        "max_s": max(times) if times else float("nan"),
        "hostile_links": len(opened),
        "load_1min": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("busy", "hostile"))
    ap.add_argument("--minutes", type=float, default=5.0, help="minutes per class (at most 30)")
    ap.add_argument("--students", type=int, default=30, help="busy: students (at most 40)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    args = ap.parse_args()
    minutes = min(max(args.minutes, 0.5), 30.0)
    rows = []
    if args.mode == "busy":
        phases = [(min(max(args.students, 1), 40), 0)]
    else:
        phases = [(25, 0), (25, 5)]
    for n_ordinary, n_hostile in phases:
        proc, port = _serve()
        try:
            row = _class(port, minutes, n_ordinary, n_hostile, args.seed, (3.0, 8.0))
        finally:
            _stop(proc)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.mode == "hostile":
        print(f"ordinary students' p95 with the hostile ones / alone: {rows[1]['p95_s'] / rows[0]['p95_s']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
