"""A class opening the dashboard at once: N simultaneous sessions at Streamlit's protocol level.

    python bench/bench_load.py                      # N = 1, 10, 30; distinct eps, then identical settings
    python bench/bench_load.py --sessions 1,10 --page explore
    python bench/bench_load.py --scheduler tcp://127.0.0.1:8786   # the server uses that cluster
    python bench/bench_load.py --soak 20            # memory soak: 4 sessions of random moves for 20 minutes

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

``--soak MINUTES`` (at most 120) is a memory soak instead of the rounds: ``--soak-sessions`` users (default
4) keep the Lesson open and make a random move every 2-6 s each: mostly a rerun of their open session with
a new widget value (the Lesson's eps slider on the 0.5 grid, its mechanism among the fast ones laplace,
em, em-br, its place A), sometimes a new link in a new session (random eps, mech, place; one in ten on
the PAnDA page) with the old session closed. The server's RSS and the sum over its child processes are
sampled every 30 s (with Streamlit's cache sizes from ``/_stcore/metrics``); reported: the median of the
first 5 minutes against the median of the last 5 minutes, the maximum, and whether memory stayed flat
within 10 %.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
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
#: The Lesson's eps when the link names none (app.model.params.Params.epsilon_per_km).
DEFAULT_EPS = 5.0


def streamlit_cmd(port: int) -> list[str]:
    """``streamlit run app`` headless on a loopback port (no file watcher, no usage statistics)."""
    return [
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


#: Debian chromium's flags on these machines (no background requests to outside hosts).
CHROMIUM = "/usr/bin/chromium"
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


def round_summary(times: list[float], results: list[dict], mem) -> dict:
    """One round's row: time-to-ready p50/p95/max, sessions with errors, peak memory, load, failures."""
    return {
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


def fresh_db_url() -> str:
    """A new, empty class database and result store (SQLite in a temporary folder) for one benchmark server."""
    import tempfile

    return f"sqlite:///{Path(tempfile.mkdtemp(prefix='panda-bench-')) / 'class.db'}"


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


async def _session(port: int, query: str, page: str, timeout_s: float, headers: dict | None = None) -> dict:
    """One browser-like session: connect, ask for the first script run, wait for it to finish.

    ``headers``: sent with the websocket's handshake (``X-Forwarded-For``: the client address a trusted proxy
    would pass on)."""
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
        async with websockets.connect(
            uri, subprotocols=["streamlit"], max_size=2**28, open_timeout=60, additional_headers=headers
        ) as ws:
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
        self._pid = pid
        self.server_peak = 0.0
        self.workers_peak = 0.0
        self.n_workers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _sample(self) -> None:
        server_mb, workers_mb, n = _rss(self._pid)  # the nanny hosts and the worker processes
        if math.isnan(server_mb):
            return
        self.server_peak = max(self.server_peak, server_mb * 2**20)
        self.workers_peak = max(self.workers_peak, workers_mb * 2**20)
        self.n_workers = n

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


# ---------------------------------------------------------------------------------------------
# Memory soak (--soak MINUTES)

MAX_SOAK_MINUTES = 120
MAX_SOAK_SESSIONS = 10
SOAK_SAMPLE_S = 30.0
#: The Lesson's fast mechanisms (app.model.page_links.LESSON_MECHANISMS) and its widgets' labels (the Lesson page).
FAST_MECHANISMS = ("laplace", "em", "em-br")
LESSON_WIDGETS = {"eps": "ε (1/km)", "mech": "Mechanism", "place": "Place A (red)"}
SOAK_PLACES = 500  # the default view's K (app.model.params.Params.n_records)


def _widget_state(element: str, w) -> object | None:
    """The WidgetState a browser would send back for a widget the server draws: the value the server sets
    (``set_value``), else the widget's default (the browser keeps its own state then: see ``_SoakUser``);
    None for widgets without a value of their own (buttons, charts: their selection stays unset)."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    state = WidgetState(id=w.id)
    if element in ("radio", "selectbox"):
        if w.set_value or w.raw_value:
            state.string_value = w.raw_value
        else:
            if not w.options:
                return None
            default = w.default if isinstance(w.default, int) else (list(w.default) or [0])[0]
            state.string_value = w.options[min(int(default), len(w.options) - 1)]
    elif element == "slider":
        if w.options:  # st.select_slider: the options' labels
            state.string_array_value.data.extend(
                list(w.raw_value) if w.raw_value else [w.options[int(i)] for i in (w.value or w.default)]
            )
        else:
            state.double_array_value.data.extend(list(w.value) if w.value else list(w.default))
    elif element == "number_input":
        state.double_value = w.value if w.set_value else w.default
    elif element == "checkbox":
        state.bool_value = w.value if w.set_value else w.default
    elif element == "button_group":
        state.string_array_value.data.extend(list(w.raw_values))
    else:
        return None
    return state


def _merge_states(previous: dict, drawn: dict) -> dict:
    """The browser's widget states after a run: the widgets the run drew, each with the value the server set,
    else the value the browser held before, else the widget's default."""
    return {
        wid: state if explicit or wid not in previous else previous[wid] for wid, (state, explicit) in drawn.items()
    } or previous


def _random_link(rng: random.Random) -> tuple[str, str]:
    """A new link: random eps on the 0.5 grid, fast mechanism and place; one in ten on the PAnDA page."""
    eps = rng.choice(EPS_GRID)
    if rng.random() < 0.1:
        return f"eps={eps:g}", "explore"
    return f"eps={eps:g}&mech={rng.choice(FAST_MECHANISMS)}&place={rng.randrange(SOAK_PLACES)}", ""


class _SoakUser:
    """One student: an open websocket session on the Lesson, random moves until the deadline."""

    def __init__(
        self,
        port: int,
        rng: random.Random,
        run_timeout_s: float,
        pause_s: tuple[float, float] = (2.0, 6.0),
        headers: dict | None = None,
    ) -> None:
        self.port, self.rng, self.run_timeout_s, self.pause_s = port, rng, run_timeout_s, pause_s
        self.headers = headers  # sent with each websocket handshake (X-Forwarded-For behind a trusted proxy)
        self.moves: list[dict] = []  # kind, seconds to script_finished, ok, applied

    async def _run(self, ws, back, expected: str | None, want_eps: float | None) -> dict:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        t0 = time.perf_counter()
        out = {
            "ready_s": float("nan"),
            "ok": False,
            "applied": want_eps is None,
            "widgets": {},
            "hash": "",
            "states": {},
        }
        await ws.send(back.SerializeToString())
        deadline = t0 + self.run_timeout_s
        metric = False
        while True:
            data = await asyncio.wait_for(ws.recv(), timeout=max(deadline - time.perf_counter(), 0.01))
            msg = ForwardMsg()
            msg.ParseFromString(data)
            kind = msg.WhichOneof("type")
            if kind == "new_session":
                out["hash"] = msg.new_session.page_script_hash
            elif kind == "page_info_changed" and want_eps is not None:
                m = re.search(r"(?:^|&)eps=([0-9.]+)", msg.page_info_changed.query_string)
                out["applied"] = bool(m) and abs(float(m.group(1)) - want_eps) < 1e-9
            if kind == "page_info_changed":
                out["query"] = msg.page_info_changed.query_string
            elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                el = msg.delta.new_element
                element = el.WhichOneof("type")
                widget = getattr(el, element) if element else None
                if getattr(widget, "id", ""):
                    state = _widget_state(element, widget)
                    if state is not None:
                        explicit = bool(getattr(widget, "set_value", False))
                        out["states"][widget.id] = (state, explicit)
                if element in ("slider", "selectbox"):
                    w = getattr(el, element)
                    for name, label in LESSON_WIDGETS.items():
                        if w.label == label:
                            out["widgets"][name] = (w.id, list(w.options))
                elif element == "metric" and el.metric.label == expected:
                    metric = True
            elif kind == "script_finished":
                status = msg.script_finished
                if status == ForwardMsg.ScriptFinishedStatus.FINISHED_SUCCESSFULLY:
                    out["ready_s"] = time.perf_counter() - t0
                    out["ok"] = expected is None or metric
                    return out
                if status == ForwardMsg.ScriptFinishedStatus.FINISHED_WITH_COMPILE_ERROR:
                    return out

    async def run(self, end: float) -> None:
        import websockets
        from streamlit.proto.BackMsg_pb2 import BackMsg

        uri = f"ws://127.0.0.1:{self.port}/_stcore/stream"
        rng = self.rng
        while time.monotonic() < end:  # one open session per pass; a new link ends it
            query, page = _random_link(rng) if self.moves else ("", "")
            try:
                async with websockets.connect(
                    uri, subprotocols=["streamlit"], max_size=2**28, open_timeout=60, additional_headers=self.headers
                ) as ws:
                    back = BackMsg()
                    back.rerun_script.query_string, back.rerun_script.page_name = query, page
                    first = await self._run(ws, back, EXPECTED_METRIC.get(page), None)
                    self.moves.append(
                        {
                            "kind": "link-" + (page or "lesson"),
                            "s": first["ready_s"],
                            "ok": first["ok"],
                            "applied": True,
                        }
                    )
                    widgets, states = first["widgets"], _merge_states({}, first["states"])
                    while time.monotonic() < end:
                        await asyncio.sleep(rng.uniform(*self.pause_s))
                        if time.monotonic() >= end:
                            return
                        if page or not widgets or rng.random() < 0.2:
                            break  # a new link (a new session), or back from the PAnDA page to the Lesson
                        name = rng.choice(sorted(widgets))
                        wid, options = widgets[name]
                        back = BackMsg()
                        back.rerun_script.query_string = query
                        back.rerun_script.page_script_hash = first["hash"]
                        # the browser sends every widget's state: the ones drawn by the last run, this one changed
                        for other_id, other in states.items():
                            if other_id != wid:
                                back.rerun_script.widget_states.widgets.add().CopyFrom(other)
                        state = back.rerun_script.widget_states.widgets.add()
                        state.id = wid
                        want = None
                        if name == "eps":
                            # a new value: the same eps changes no link, so no "applied" message would come
                            now = re.search(r"(?:^|&)eps=([0-9.]+)", query)
                            current = float(now.group(1)) if now else DEFAULT_EPS
                            if options:  # the Lesson's stepped scale (st.select_slider): one of its steps' labels
                                label = rng.choice([o for o in options if abs(float(o) - current) > 1e-9])
                                want = float(label)
                                state.string_array_value.data.append(label)
                            else:
                                want = rng.choice([e for e in EPS_GRID if abs(e - current) > 1e-9])
                                state.double_array_value.data.append(want)
                        elif name == "mech":
                            state.string_value = rng.choice(options[: len(FAST_MECHANISMS)])
                        else:
                            # the selectbox's labels, in place order ("Place 7 · near Gartenstraße")
                            state.string_value = options[rng.randrange(min(SOAK_PLACES, len(options)))]
                        states[wid] = state  # the browser holds the value it sent
                        res = await self._run(ws, back, EXPECTED_METRIC[""], want)
                        widgets.update(res["widgets"])
                        states = _merge_states(states, res["states"])
                        query = res.get("query", query)  # the browser sends its current link
                        self.moves.append(
                            {"kind": name, "s": res["ready_s"], "ok": res["ok"], "applied": res["applied"]}
                        )
            except Exception as exc:  # noqa: BLE001 (a failure is a result of the benchmark)
                self.moves.append(
                    {
                        "kind": "failure",
                        "s": float("nan"),
                        "ok": False,
                        "applied": False,
                        "failure": f"{type(exc).__name__}: {exc}",
                    }
                )
                await asyncio.sleep(2.0)


def _cache_bytes(port: int) -> float:
    """Streamlit's cache sizes (st.cache_data / st.cache_resource / session state), summed, from /_stcore/metrics."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return float("nan")
    total = 0.0
    for line in text.splitlines():
        if line.startswith("cache_memory_bytes{"):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return total


def _rss(pid: int) -> tuple[float, float, int]:
    """RSS of the server and the sum over its child processes (MB, nan when gone), and their number."""
    import psutil

    try:
        server = psutil.Process(pid)
        rss = server.memory_info().rss
        children = server.children(recursive=True)
    except psutil.Error:
        return float("nan"), float("nan"), 0
    total = 0
    for proc in children:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return rss / 2**20, total / 2**20, len(children)


def _soak(port: int, pid: int, minutes: float, n_sessions: int, seed: int, run_timeout_s: float) -> dict:
    rng = random.Random(seed)
    users = [_SoakUser(port, random.Random(rng.random()), run_timeout_s) for _ in range(n_sessions)]
    samples: list[dict] = []
    t_start = time.monotonic()
    end = t_start + minutes * 60.0
    stop = threading.Event()

    def sample() -> None:
        server, workers, n = _rss(pid)
        samples.append(
            {
                "t_min": (time.monotonic() - t_start) / 60.0,
                "server_mb": server,
                "workers_mb": workers,
                "total_mb": server + workers,
                "n_children": n,
                "cache_mb": _cache_bytes(port) / 2**20,
                "load": os.getloadavg()[0],
            }
        )
        s = samples[-1]
        moves = sum(len(u.moves) for u in users)
        print(
            f"  {s['t_min']:5.1f} min  server {s['server_mb']:6.0f} MB  children {s['workers_mb']:6.0f} MB "
            f"({n})  st caches {s['cache_mb']:6.1f} MB  load {s['load']:4.1f}  moves {moves}",
            flush=True,
        )

    def watch() -> None:
        sample()
        while not stop.wait(SOAK_SAMPLE_S):
            sample()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()

    async def all_users() -> None:
        await asyncio.gather(*(u.run(end) for u in users))

    try:
        asyncio.run(asyncio.wait_for(all_users(), timeout=minutes * 60.0 + run_timeout_s + 60.0))
    except TimeoutError:
        print("  (the users were stopped at the soak's time limit)")
    stop.set()
    thread.join()
    sample()
    moves = [m for u in users for m in u.moves]
    return {"samples": samples, "moves": moves}


def _soak_report(result: dict, minutes: float) -> dict:
    samples, moves = result["samples"], result["moves"]
    window = min(5.0, minutes / 4)
    last_t = samples[-1]["t_min"]
    first = [s for s in samples if s["t_min"] <= window]
    last = [s for s in samples if s["t_min"] >= last_t - window]
    report: dict = {"minutes": minutes, "window_min": window, "samples": len(samples)}
    flat = True
    print(f"\nmemory, first {window:g} min median vs last {window:g} min median (samples every {SOAK_SAMPLE_S:g} s):")
    for key in ("server_mb", "workers_mb", "total_mb", "cache_mb"):
        a = statistics.median(s[key] for s in first)
        b = statistics.median(s[key] for s in last)
        peak = max(s[key] for s in samples)
        change = (b - a) / a if a else float("nan")
        report[key] = {"first_median": a, "last_median": b, "max": peak, "change": change}
        if key != "cache_mb":
            flat = flat and abs(change) <= 0.10
        print(f"  {key:11} first {a:7.1f}  last {b:7.1f}  max {peak:7.1f}  change {change * 100:+6.1f} %")
    print(f"  memory flat within 10 % (server, children, total): {flat}")
    report["flat_within_10pct"] = flat
    # The first window includes the warm-up (caches filling, the first script runs): the same comparison
    # from the end of that window on (the window after it against the last one).
    second = [s for s in samples if window < s["t_min"] <= 2 * window]
    if second and last_t >= 3 * window:
        settled = True
        print(f"after the warm-up: minutes {window:g}-{2 * window:g} median vs the last {window:g} min median:")
        for key in ("server_mb", "workers_mb", "total_mb"):
            a = statistics.median(s[key] for s in second)
            b = report[key]["last_median"]
            change = (b - a) / a if a else float("nan")
            report[key]["second_window_median"] = a
            report[key]["change_after_warmup"] = change
            settled = settled and abs(change) <= 0.10
            print(f"  {key:11} {a:7.1f} -> {b:7.1f}  change {change * 100:+6.1f} %")
        report["flat_within_10pct_after_warmup"] = settled
        print(f"  memory flat within 10 % after the warm-up: {settled}")
    times = [m["s"] for m in moves if m["ok"]]
    by_kind: dict[str, int] = {}
    for m in moves:
        by_kind[m["kind"]] = by_kind.get(m["kind"], 0) + 1
    report.update(
        {
            "moves": len(moves),
            "moves_by_kind": by_kind,
            "ok": len(times),
            "eps_moves_not_applied": sum(1 for m in moves if m["kind"] == "eps" and not m["applied"]),
            "move_p50_s": statistics.median(times) if times else float("nan"),
            "move_p95_s": _pct(times, 0.95),
            "move_max_s": max(times) if times else float("nan"),
            "failures": sorted({m["failure"] for m in moves if "failure" in m})[:10],
            "load_average_median": statistics.median(s["load"] for s in samples),
            "series": samples,
        }
    )
    print(
        f"moves: {len(moves)} {by_kind}, ready with the metric {len(times)}, eps moves not applied "
        f"{report['eps_moves_not_applied']}; time to script_finished p50 {report['move_p50_s']:.1f} s, "
        f"p95 {report['move_p95_s']:.1f} s, max {report['move_max_s']:.1f} s; "
        f"load average median {report['load_average_median']:.1f}"
    )
    for failure in report["failures"]:
        print(f"    failure: {failure}")
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="1,10,30", help="session counts per round (default 1,10,30)")
    ap.add_argument("--modes", default="distinct,identical", help="distinct, identical or both")
    ap.add_argument("--page", default="", help="page url path ('' = the Lesson, 'explore' = PAnDA)")
    ap.add_argument("--extra-query", default="", help="more link parameters, e.g. K=200&N=12")
    ap.add_argument("--round-timeout", type=float, default=180.0, help="seconds per round (default 180)")
    ap.add_argument("--scheduler", default="", help="PANDA_DASK_SCHEDULER for the server (default: local)")
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    ap.add_argument("--soak", type=float, default=0.0, metavar="MINUTES", help="memory soak for MINUTES minutes")
    ap.add_argument("--soak-sessions", type=int, default=4, help="sessions during the soak (default 4)")
    ap.add_argument("--seed", type=int, default=0, help="random moves' seed (soak)")
    args = ap.parse_args()
    if not 0 <= args.soak <= MAX_SOAK_MINUTES or not 1 <= args.soak_sessions <= MAX_SOAK_SESSIONS:
        ap.error(f"--soak within 0..{MAX_SOAK_MINUTES} minutes, --soak-sessions within 1..{MAX_SOAK_SESSIONS}")
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
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PANDA_DB_URL": fresh_db_url()}  # nothing kept from a past run
    env.pop("PANDA_DASK_SCHEDULER", None)
    if args.scheduler:
        env["PANDA_DASK_SCHEDULER"] = args.scheduler
    cmd = streamlit_cmd(port)
    log_path = ROOT / "test-artifacts" / ("bench-soak-server.log" if args.soak else "bench-load-server.log")
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
        if args.soak:
            print(f"soak: {args.soak_sessions} sessions, random moves for {args.soak:g} min", flush=True)
            result = _soak(port, proc.pid, args.soak, args.soak_sessions, args.seed, args.round_timeout)
            rows = [_soak_report(result, args.soak)]
            counts, modes = [], []
        header = f"{'mode':9} {'N':>3} {'p50 s':>7} {'p95 s':>7} {'max s':>7} {'ok':>5} {'err':>4}"
        if modes:
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
                row = {"mode": mode, "sessions": n, **round_summary(times, results, mem)}
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
