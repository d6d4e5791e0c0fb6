"""The web server's CPU per script run of a view that is already computed (issue 29: ≤ 150 ms).

    python bench/bench_rerun_cpu.py                    # the Lesson, PAnDA, Learn, Compare pages
    python bench/bench_rerun_cpu.py --pages "" --runs 20
    python bench/bench_rerun_cpu.py --root /tmp/base   # another checkout (git worktree add /tmp/base REV)

Starts ``streamlit run app`` on a loopback port (its own local Dask cluster and a fresh result store),
computes each page's default view once with one protocol-level session (``bench_load._session``), then
opens ``--runs`` new sessions on the same link one after another, each waiting for its
``script_finished``. For each run it reads the server process's own CPU time (user + system, from
``psutil``; the Dask workers are child processes and are not counted: their jobs are cached) before and
after, with nothing else talking to the server. Reported per page: median, p90 and max CPU seconds per run,
and the wall time to ready. A new session is what a class does when 30 students open one link; it costs
at least what a rerun inside a session costs (session state, widgets and all elements are sent again).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import threading
import time
from pathlib import Path

import psutil
from bench_load import ROOT, _free_port, _session, _wait_healthy, fresh_db_url, streamlit_cmd

PAGES = {"": "the Lesson", "explore": "PAnDA", "learn": "Learn", "compare": "Compare"}


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _hold(port: int, stop: threading.Event) -> threading.Thread:
    """One session kept open for the whole benchmark, as in a class: Streamlit clears its compiled
    scripts whenever the last session leaves, which one-at-a-time sessions would otherwise pay for."""

    async def hold() -> None:
        import websockets
        from streamlit.proto.BackMsg_pb2 import BackMsg

        back = BackMsg()
        back.rerun_script.query_string = ""
        back.rerun_script.page_name = "learn"
        async with websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"]) as ws:
            await ws.send(back.SerializeToString())
            while not stop.is_set():
                try:
                    await asyncio.wait_for(ws.recv(), timeout=0.5)
                except TimeoutError:
                    pass

    thread = threading.Thread(target=lambda: asyncio.run(hold()), daemon=True)
    thread.start()
    return thread


def measure(port: int, pid: int, page: str, runs: int, timeout_s: float) -> dict:
    server = psutil.Process(pid)
    first = asyncio.run(_session(port, "", page, timeout_s))
    if not first["ok"]:
        return {"page": page, "error": f"the first run did not finish: {first}"}
    time.sleep(1.0)  # let the first run's background work settle
    cpu, wall, failed = [], [], 0
    for _ in range(runs):
        c0 = _cpu(server)
        out = asyncio.run(_session(port, "", page, timeout_s))
        time.sleep(0.3)  # the session's last messages and its close are part of its cost
        cpu.append(_cpu(server) - c0)
        wall.append(out["ready_s"])
        failed += 0 if out["ok"] else 1
    cpu.sort()
    return {
        "page": PAGES.get(page, page),
        "runs": runs,
        "failed": failed,
        "cpu_median_s": statistics.median(cpu),
        "cpu_p90_s": cpu[int(0.9 * (len(cpu) - 1))],
        "cpu_max_s": cpu[-1],
        "ready_median_s": statistics.median(wall),
        "first_ready_s": first["ready_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", default=",explore,learn,compare", help="url paths ('' = the Lesson)")
    ap.add_argument("--runs", type=int, default=15, help="runs per page after the first (default 15)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout to serve (e.g. a worktree of main)")
    args = ap.parse_args()
    port = _free_port()
    env = {**os.environ, "PANDA_DB_URL": fresh_db_url()}
    proc = subprocess.Popen(
        streamlit_cmd(port), cwd=args.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    rows = []
    stop = threading.Event()
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", proc)
        holder = _hold(port, stop)
        time.sleep(3.0)
        for page in args.pages.split(","):
            row = measure(port, proc.pid, page, args.runs, args.timeout)
            row["load_1min"] = os.getloadavg()[0]
            row["root"] = str(args.root)
            rows.append(row)
            print(json.dumps(row), flush=True)
        stop.set()
        holder.join(5)
    finally:
        stop.set()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
