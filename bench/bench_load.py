"""A class opening the dashboard at once: N simultaneous sessions at Streamlit's protocol level.

    python bench/bench_load.py                      # N = 1, 10, 30; distinct eps, then identical settings
    python bench/bench_load.py --sessions 1,10 --page explore
    python bench/bench_load.py --scheduler tcp://127.0.0.1:8786   # the server uses that cluster

Starts ``streamlit run app`` on a loopback port (its own local Dask cluster, or ``--scheduler``'s), warms
it up with one session, then per round opens N websocket sessions at the same moment
(``/_stcore/stream``; each sends the browser's first ``BackMsg.rerun_script`` with a link's query
string) and times each until its ``ForwardMsg.script_finished`` (the script run is over: the page is
complete; it must have shown the page's key metric, "Error at A" on the Lesson, "LP status" on PAnDA).
Rounds with *distinct* settings give every session its own eps (never used before in the run, so
nothing is cached); rounds with *identical* settings give all sessions the same new eps (the cluster
computes it once; Streamlit's caches share it). Reported per round: time-to-ready p50, p95 and max,
sessions that showed an exception or an error box, the peak memory (RSS) of the server and the sum
over its child processes (the local Dask nannies and workers), and the load average (other jobs on the
machine inflate every number).

Bounded: at most 40 sessions per round, a time limit per round, loopback only. ``--json`` writes the
rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_SESSIONS = 40
#: eps values (1/km) on the sidebar's 0.5 grid; each round takes new ones so that nothing is cached.
EPS_GRID = [0.5 * k for k in range(1, 101)]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"streamlit did not become healthy within {timeout_s:.0f} s")


#: A metric each page shows once its numbers are computed (a session counts as ready only with it).
EXPECTED_METRIC = {"": "Error at A", "explore": "LP status"}


async def _session(port: int, query: str, page: str, timeout_s: float) -> dict:
    """One browser-like session: connect, ask for the first script run, wait for it to finish."""
    expected = EXPECTED_METRIC.get(page)
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    t0 = time.perf_counter()
    out = {"ready_s": float("nan"), "ok": False, "exceptions": 0, "errors": 0, "messages": 0, "complete": False}
    back = BackMsg()
    back.rerun_script.query_string = query
    back.rerun_script.page_name = page
    uri = f"ws://127.0.0.1:{port}/_stcore/stream"
    try:
        async with websockets.connect(uri, subprotocols=["streamlit"], max_size=2**28, open_timeout=60) as ws:
            await ws.send(back.SerializeToString())
            deadline = t0 + timeout_s
            while True:
                data = await asyncio.wait_for(ws.recv(), timeout=max(deadline - time.perf_counter(), 0.01))
                msg = ForwardMsg()
                msg.ParseFromString(data)
                out["messages"] += 1
                kind = msg.WhichOneof("type")
                if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                    element = msg.delta.new_element.WhichOneof("type")
                    if element == "exception":
                        out["exceptions"] += 1
                    elif element == "alert" and msg.delta.new_element.alert.format == 1:  # ERROR
                        out["errors"] += 1
                    elif element == "metric" and msg.delta.new_element.metric.label == expected:
                        out["complete"] = True
                if kind == "script_finished":
                    status = msg.script_finished
                    if status == ForwardMsg.ScriptFinishedStatus.FINISHED_SUCCESSFULLY:
                        out["ready_s"] = time.perf_counter() - t0
                        out["ok"] = expected is None or out["complete"]
                        return out
                    if status == ForwardMsg.ScriptFinishedStatus.FINISHED_WITH_COMPILE_ERROR:
                        return out
    except Exception as exc:  # noqa: BLE001 (a websocket failure is a result of the benchmark)
        out["failure"] = f"{type(exc).__name__}: {exc}"
    return out


async def _round(port: int, queries: list[str], page: str, timeout_s: float) -> list[dict]:
    return list(await asyncio.gather(*(_session(port, q, page, timeout_s) for q in queries)))


class _MemoryWatch:
    """Peak RSS of the server process and of all its child processes (the local Dask nannies and workers,
    summed), sampled every 0.25 s."""

    def __init__(self, pid: int) -> None:
        import psutil

        self._psutil = psutil
        self._server = psutil.Process(pid)
        self.server_peak = 0
        self.workers_peak = 0
        self.n_workers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _sample(self) -> None:
        psutil = self._psutil
        try:
            self.server_peak = max(self.server_peak, self._server.memory_info().rss)
            workers = self._server.children(recursive=True)  # the nanny hosts and the worker processes
        except psutil.Error:
            return
        total = 0
        for proc in workers:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        self.n_workers = len(workers)
        self.workers_peak = max(self.workers_peak, total)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.25)

    def __enter__(self) -> _MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(int(round(q * (len(values) - 1))), len(values) - 1)
    return values[k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="1,10,30", help="session counts per round (default 1,10,30)")
    ap.add_argument("--modes", default="distinct,identical", help="distinct, identical or both")
    ap.add_argument("--page", default="", help="page url path ('' = the Lesson, 'explore' = PAnDA)")
    ap.add_argument("--extra-query", default="", help="more link parameters, e.g. K=200&N=12")
    ap.add_argument("--round-timeout", type=float, default=180.0, help="seconds per round (default 180)")
    ap.add_argument("--scheduler", default="", help="PANDA_DASK_SCHEDULER for the server (default: local)")
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    args = ap.parse_args()
    counts = [int(n) for n in args.sessions.split(",") if n.strip()]
    if any(n < 1 or n > MAX_SESSIONS for n in counts):
        ap.error(f"session counts must be within 1..{MAX_SESSIONS}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(modes) - {"distinct", "identical"}:
        ap.error("modes: distinct, identical")
    needed = sum(counts) * ("distinct" in modes) + len(counts) * ("identical" in modes) + 1
    if needed > len(EPS_GRID):
        ap.error(f"the rounds need {needed} distinct eps values; the grid has {len(EPS_GRID)}")

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PANDA_DASK_SCHEDULER", None)
    if args.scheduler:
        env["PANDA_DASK_SCHEDULER"] = args.scheduler
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app",
        "--server.headless=true",
        "--server.address=127.0.0.1",
        f"--server.port={port}",
        "--browser.gatherUsageStats=false",
        "--server.fileWatcherType=none",
    ]
    log_path = ROOT / "test-artifacts" / "bench-load-server.log"
    log_path.parent.mkdir(exist_ok=True)
    log = open(log_path, "wb")  # noqa: SIM115 (closed in the finally)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    eps_values = iter(EPS_GRID)
    extra = f"&{args.extra_query}" if args.extra_query else ""
    rows = []
    try:
        _wait_healthy(url, proc)
        t0 = time.perf_counter()
        warm = asyncio.run(_round(port, [f"eps={next(eps_values):g}{extra}"], args.page, args.round_timeout))[0]
        print(f"warm-up session (cluster start, networks): {time.perf_counter() - t0:.1f} s, ok={warm['ok']}")
        print(f"page {args.page or 'lesson'!r}, {os.cpu_count()} cores, server pid {proc.pid}")
        header = f"{'mode':9} {'N':>3} {'p50 s':>7} {'p95 s':>7} {'max s':>7} {'ok':>5} {'err':>4}"
        print(header + f" {'server MB':>10} {'workers MB':>11} {'load':>5}")
        for mode in modes:
            for n in counts:
                if mode == "distinct":
                    queries = [f"eps={next(eps_values):g}{extra}" for _ in range(n)]
                else:
                    queries = [f"eps={next(eps_values):g}{extra}"] * n
                with _MemoryWatch(proc.pid) as mem:
                    results = asyncio.run(_round(port, queries, args.page, args.round_timeout))
                times = [r["ready_s"] for r in results if r["ok"]]
                row = {
                    "mode": mode,
                    "sessions": n,
                    "p50_s": statistics.median(times) if times else float("nan"),
                    "p95_s": _pct(times, 0.95),
                    "max_s": max(times) if times else float("nan"),
                    "ready": len(times),
                    "with_errors": sum(1 for r in results if r["exceptions"] or r["errors"]),
                    "server_peak_mb": mem.server_peak / 2**20,
                    "workers_peak_mb": mem.workers_peak / 2**20,
                    "n_worker_processes": mem.n_workers,
                    "load_average": os.getloadavg()[0],
                    "failures": sorted({r["failure"] for r in results if "failure" in r}),
                }
                rows.append(row)
                print(
                    f"{mode:9} {n:3d} {row['p50_s']:7.1f} {row['p95_s']:7.1f} {row['max_s']:7.1f} "
                    f"{row['ready']:2d}/{n:<2d} {row['with_errors']:4d} {row['server_peak_mb']:10.0f} "
                    f"{row['workers_peak_mb']:11.0f} {row['load_average']:5.1f}",
                    flush=True,
                )
                for failure in row["failures"]:
                    print(f"    failure: {failure}")
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
