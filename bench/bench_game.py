"""A class round under load: N students join from their phones, then all guess within a window (issues 27, 38).

    python bench/bench_game.py                        # SQLite, then PostgreSQL; 60 students, 2 runs each
    python bench/bench_game.py --students 300 --join-spread 60 --spread 20 --runs 1   # a lecture hall
    python bench/bench_game.py --db sqlite --runs 1 --students 20
    python bench/bench_game.py --db both --json test-artifacts/bench-game.json
    # the lecture hall on several servers (issue 38 item 7): HAProxy from deploy/haproxy.cfg in front
    python bench/bench_game.py --db postgres --servers 2 --students 300 --join-spread 60 --spread 20 --runs 1
    python bench/bench_game.py --db postgres --servers 1 --proxy --students 300 --join-spread 60 --spread 20 --runs 1

Per run: a fresh class database (a new SQLite file in a temporary directory, or a throwaway PostgreSQL 15
cluster from tests/support/pg_server.py), ``streamlit run app`` on a loopback port with ``PANDA_DB_URL`` pointing
at it, a round opened from Python (the lecturer's side: ``rounds.open_game`` on the dashboard's default view,
planar Laplace at 5/km, one report per student). A warm-up student (in a game of their own) joins and loads
the map, so the server's caches (network, instance, mechanism) are filled.

Then N students (at most 300) each open a websocket session (``/_stcore/stream``) the way the browser does:

* the first ``BackMsg.rerun_script`` on page ``play`` with the join link's query ``code=...``;
* the join form submitted: a ``rerun_script`` whose ``widget_states`` carry the "Join code" text input's
  string and the "Join" submit button's trigger (ids from the first run's deltas), spread over
  ``--join-spread`` seconds; the page puts the token into the query (``page_info_changed``, which the client
  keeps as its address, as the browser does) and calls ``st.rerun``: join time = until that run's
  ``script_finished`` with the map (``deck_gl_json_chart``) on the page;
* the page's fragment poll, as the browser runs it: on ``ForwardMsg.auto_rerun`` a timer sends a
  fragment ``rerun_script`` (its ``fragment_id``, ``is_auto_rerun``, all widget states) every 3 s; the
  timers are dropped at the start of every full run (the browser's ``cleanupAutoReruns``);
* every rerun carries ``cached_message_hashes`` (the cacheable messages received), as the browser does.

After a settle pause, every student taps one random place at a random moment within ``--spread`` seconds
(default 10): the deck chart's widget state (its ``id`` from the delta) with the JSON string the browser's
deck.gl selection sends (``PydeckSelectionSerde``: ``{"selection": {"indices": {"places": [i]}, "objects":
{"places": [<the layer's data object i>]}}}``). Timed: from sending that BackMsg to the full run's
``script_finished``; the page must then show "Guess saved: place i".

Afterwards the database is read (SQLAlchemy, ``app.server.db.models.Entry``): every student's entry (found by the
SHA-256 of the token in their address) must hold the place they tapped. Reported per run: guess round trip
p50 / p95 / max, guesses confirmed on the page and stored in the database out of those sent, join time
p50 / p95, fragment polls and their p95, CPU seconds of the server process (and its children: the worker
process; for PostgreSQL also the postgres processes) during the guess window, peak RSS of the server, load
average. Target: guess p95 <= 1 s on 2 cores.

Several servers (``--servers N``, N <= 4, PostgreSQL only; ``--proxy`` for one server behind the proxy): N
``streamlit run app`` servers on loopback ports share the run's PostgreSQL class database, each with
``PANDA_TRUSTED_PROXY=1``, and one ``haproxy`` on a loopback port is in front of them. Its configuration is
deploy/haproxy.cfg itself with only the ``bind 127.0.0.1:8080`` port and the ``server`` lines (one per server)
replaced, so the shipped limits, ``forwardfor``, stickiness and health checks are measured too; it is checked
with ``haproxy -c -f`` and kept as test-artifacts/bench-game-haproxy-<db>-<run>.cfg. The warm-up student joins
each server in turn on its own port; the students connect to the proxy, each from a loopback address of their
own (``127.0.1.1``, ``127.0.1.2``, ...: Linux routes all of 127.0.0.0/8 to loopback) because the shipped
configuration allows an address 30 connections, and the servers count joins per forwarded address. Without
``--servers``/``--proxy`` the students connect straight to the one server from 127.0.0.1, as before. The CPU
seconds and peak RSS are then summed over the servers (each with its children); also reported: the servers'
CPU per student in the guess window (all their processes, ms), each server's CPU seconds and HAProxy's (JSON).

Not simulated: the browser's HTTP fetches of the page's HTML, JavaScript and fonts (static files), and its
rendering; only the websocket traffic that reaches the script runner.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import _free_port, _pct, _wait_healthy, streamlit_cmd  # noqa: E402

MAX_STUDENTS = 300  # an introductory course's lecture hall
TARGET_P95_S = 1.0
PAGE = "play"
SUCCESS_TEXT = "Guess saved"
MAX_SERVERS = 4
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
HAPROXY_TEMPLATE = ROOT / "deploy" / "haproxy.cfg"
ARTIFACTS = ROOT / "test-artifacts"


# ---------------------------------------------------------------------------------------------
# One student's phone


class Student:
    """One phone: a websocket session on the play page, driven like the browser drives it."""

    def __init__(
        self, port: int, code: str, rng: random.Random, timeout_s: float, local_addr: str | None = None
    ) -> None:
        self.port, self.code, self.rng, self.timeout_s = port, code, rng, timeout_s
        self.local_addr = local_addr  # the phone's own source address (behind the proxy), else the kernel's
        self.query = f"code={code}"
        self.page_hash = ""
        self.states: dict[str, object] = {}  # widget id -> WidgetState the browser holds
        self.cached: set[str] = set()  # hashes of the cacheable messages received
        self.runs: asyncio.Queue = asyncio.Queue()  # finished full runs (dicts)
        self.current: dict = self._new_run()
        self.timers: list[asyncio.Task] = []
        self.polls: list[float] = []  # fragment run round trips, s
        self._poll_sent: dict[str, float] = {}
        self.ws = None
        self.failure = ""
        self.join_s = float("nan")
        self.guess_s = float("nan")
        self.place: int | None = None
        self.guess_ok = False
        self.guess_text = ""
        self.guess_sent_at = float("nan")

    @staticmethod
    def _new_run() -> dict:
        return {"elements": [], "alerts": [], "exceptions": 0, "deck": None, "status": None}

    # -- messages ----------------------------------------------------------------------------------

    def _back(self, widget_states: list, fragment_id: str = "", auto: bool = False):  # noqa: ANN202
        from streamlit.proto.BackMsg_pb2 import BackMsg

        back = BackMsg()
        rs = back.rerun_script
        rs.query_string = self.query
        rs.page_name = PAGE if not self.page_hash else ""
        rs.page_script_hash = self.page_hash
        if fragment_id:
            rs.fragment_id = fragment_id
            rs.is_auto_rerun = auto
        for state in widget_states:
            rs.widget_states.widgets.add().CopyFrom(state)
        rs.cached_message_hashes.extend(sorted(self.cached))
        return back

    async def _send(self, back) -> None:  # noqa: ANN001
        await self.ws.send(back.SerializeToString())

    async def _receive(self) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        fss = ForwardMsg.ScriptFinishedStatus
        fragment_run = False
        async for data in self.ws:
            msg = ForwardMsg()
            msg.ParseFromString(data)
            if msg.metadata.cacheable and msg.hash:
                self.cached.add(msg.hash)
            kind = msg.WhichOneof("type")
            if kind == "new_session":
                fragment_run = bool(msg.metadata.run.fragment_ids)
                if not fragment_run:  # a full run: the browser drops its auto-rerun timers
                    for task in self.timers:
                        task.cancel()
                    self.timers = []
                    self.current = self._new_run()
            elif kind == "navigation":  # the page this run shows: the browser's current page from now on
                self.page_hash = msg.navigation.page_script_hash or self.page_hash
            elif kind == "page_info_changed":
                self.query = msg.page_info_changed.query_string  # the browser's address follows
            elif kind == "auto_rerun":
                self.timers.append(asyncio.create_task(self._poll(msg.auto_rerun.fragment_id, msg.auto_rerun.interval)))
            elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element" and not fragment_run:
                el = msg.delta.new_element
                element = el.WhichOneof("type")
                self.current["elements"].append((element, getattr(el, element)))
                if element == "exception":
                    self.current["exceptions"] += 1
                elif element == "alert":
                    self.current["alerts"].append(el.alert.body)
                elif element == "deck_gl_json_chart":
                    self.current["deck"] = el.deck_gl_json_chart
            elif kind == "script_finished":
                status = msg.script_finished
                if status == fss.FINISHED_FRAGMENT_RUN_SUCCESSFULLY:
                    for fid, t0 in list(self._poll_sent.items()):
                        self.polls.append(time.perf_counter() - t0)
                        del self._poll_sent[fid]
                elif status in (fss.FINISHED_SUCCESSFULLY, fss.FINISHED_WITH_COMPILE_ERROR):
                    self.current["status"] = status
                    self.current["t"] = time.perf_counter()
                    # The browser forgets the states of widgets the run did not draw; triggers are one-shot.
                    drawn = {getattr(w, "id", "") for _, w in self.current["elements"]} - {""}
                    self.states = {
                        wid: s
                        for wid, s in self.states.items()
                        if wid in drawn and s.WhichOneof("value") != "trigger_value"
                    }
                    await self.runs.put(self.current)
                # FINISHED_EARLY_FOR_RERUN (st.rerun): the next new_session continues the same page load

    async def _poll(self, fragment_id: str, interval: float) -> None:
        """The browser's setInterval for a run_every fragment: all widget states, this fragment's id."""
        while True:
            await asyncio.sleep(interval)
            self._poll_sent.setdefault(fragment_id, time.perf_counter())
            await self._send(self._back(list(self.states.values()), fragment_id, auto=True))

    async def _full_run(self, back) -> tuple[dict, float]:  # noqa: ANN001
        while not self.runs.empty():
            self.runs.get_nowait()
        t0 = time.perf_counter()
        await self._send(back)
        getter = asyncio.ensure_future(self.runs.get())
        done, _ = await asyncio.wait({getter, self.receiver}, timeout=self.timeout_s, return_when="FIRST_COMPLETED")
        if getter not in done:
            getter.cancel()
            if self.receiver in done:  # the connection ended (or the reader failed): say why
                self.receiver.result()
                raise ConnectionError("the server closed the session")
            raise TimeoutError(f"no script_finished within {self.timeout_s:g} s")
        run = getter.result()
        return run, run["t"] - t0

    # -- the student's moves ----------------------------------------------------------------------

    async def join(self, delay_s: float) -> None:
        """Open the join link, wait ``delay_s``, tap *Join*, follow the page's rerun to the map."""
        import websockets
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        uri = f"ws://127.0.0.1:{self.port}/_stcore/stream"
        # websockets passes local_addr on to loop.create_connection; proxy=None: loopback only, never an
        # HTTP(S)_PROXY of the environment (which would get the local address instead).
        bind = {"local_addr": (self.local_addr, 0)} if self.local_addr else {}
        self.ws = await websockets.connect(
            uri, subprotocols=["streamlit"], max_size=2**28, open_timeout=60, proxy=None, **bind
        )
        self.receiver = asyncio.create_task(self._receive())
        first, _ = await self._full_run(self._back([]))
        text_id = button_id = ""
        for element, w in first["elements"]:
            if element == "text_input" and w.label == "Join code":
                text_id = w.id
            elif element == "button" and w.label == "Join" and w.is_form_submitter:
                button_id = w.id
        if not (text_id and button_id):
            raise RuntimeError("the join form (text input 'Join code', submit button 'Join') was not drawn")
        await asyncio.sleep(delay_s)
        typed = WidgetState(id=text_id, string_value=self.code)
        tap = WidgetState(id=button_id, trigger_value=True)
        self.states[text_id] = typed
        run, self.join_s = await self._full_run(self._back([typed, tap]))
        if run["deck"] is None or "me=" not in self.query:
            raise RuntimeError(f"no map after joining (alerts: {run['alerts'][:2]}, address {self.query!r})")
        self.deck = run["deck"]

    def token(self) -> str:
        return parse_qs(self.query).get("me", [""])[0]

    async def guess(self, delay_s: float, n_places: int) -> None:
        """Tap a random place after ``delay_s``: the deck chart's selection, as deck.gl reports a pick."""
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        await asyncio.sleep(delay_s)
        spec = json.loads(self.deck.json)
        layer = next(layer for layer in spec["layers"] if layer.get("id") == "places")
        data = layer["data"]
        i = self.rng.randrange(min(n_places, len(data)))
        obj = data[i]
        selection = {"selection": {"indices": {"places": [i]}, "objects": {"places": [obj]}}}
        self.place = int(obj["x"])
        state = WidgetState(id=self.deck.id, string_value=json.dumps(selection))
        self.states[self.deck.id] = state
        others = [s for wid, s in self.states.items() if wid != self.deck.id]
        self.guess_sent_at = time.perf_counter()
        run, self.guess_s = await self._full_run(self._back([*others, state]))
        shown = [a for a in run["alerts"] if SUCCESS_TEXT in a]
        self.guess_text = shown[0] if shown else "; ".join(run["alerts"])[:120]
        self.guess_ok = bool(shown) and f"place {self.place}." in shown[0] and not run["exceptions"]

    async def close(self) -> None:
        for task in self.timers:
            task.cancel()
        if self.ws is not None:
            await self.ws.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.receiver, 5)


# ---------------------------------------------------------------------------------------------
# Measuring the server


#: ``--gc-stats``: a sitecustomize for the server process (on its PYTHONPATH only) that logs every
#: generation-2 garbage collection: its thread (a script thread or another) and seconds, one line each.
GC_LOGGER = """
import gc, os, threading, time
_path = os.environ["PANDA_BENCH_GC_LOG"]
_t0 = [0.0]
def _cb(phase, info):
    if info.get("generation") != 2:
        return
    if phase == "start":
        _t0[0] = time.perf_counter()
    else:
        with open(_path, "a") as f:
            f.write(f"{time.time():.3f} {time.perf_counter() - _t0[0]:.6f} {threading.current_thread().name}\\n")
gc.callbacks.append(_cb)
_freeze = float(os.environ.get("PANDA_BENCH_GC_FREEZE_S") or 0)
if _freeze > 0:  # the experiment of a change in the app: gc.freeze() now and then (objects alive move out of GC)
    def _freezer():
        while True:
            time.sleep(_freeze)
            gc.freeze()
    threading.Thread(target=_freezer, daemon=True).start()
"""


def _gc_stats(path: Path, t_start: float, t_end: float) -> dict:
    """Generation-2 collections in the server during the guess window: count, median and total seconds."""
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        wall, secs, thread = line.split(" ", 2)
        if t_start <= float(wall) <= t_end:
            rows.append((float(secs), thread))
    secs = [r[0] for r in rows]
    return {
        "gc2_count": len(secs),
        "gc2_median_ms": statistics.median(secs) * 1e3 if secs else float("nan"),
        "gc2_total_s": sum(secs),
        "gc2_in_script_threads": sum(1 for _, t in rows if t.startswith("ScriptRunner")),
    }


class ProcessWatch:
    """Peak RSS of the server processes, sampled every 0.2 s: their sum, the sum over their children, both.

    The peaks are of sums taken at one moment (the machine's memory in use by the servers at its highest).
    """

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self.procs = [psutil.Process(pid) for pid in pids]
        self.server_peak = 0
        self.children_peak = 0
        self.total_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _sample(self) -> tuple[int, int] | None:
        """The servers' RSS and their children's now, bytes; None once every server has exited."""
        import psutil

        servers = children = alive = 0
        for proc in self.procs:
            try:
                servers += proc.memory_info().rss
                family = proc.children(recursive=True)
            except psutil.Error:
                continue  # this server exited: the others still count
            alive += 1
            for child in family:
                with contextlib.suppress(psutil.Error):
                    children += child.memory_info().rss
        return (servers, children) if alive else None

    def _watch(self) -> None:
        while not self._stop.is_set():
            sample = self._sample()
            if sample is None:
                return
            servers, children = sample
            self.server_peak = max(self.server_peak, servers)
            self.children_peak = max(self.children_peak, children)
            self.total_peak = max(self.total_peak, servers + children)
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_s(proc) -> float:  # noqa: ANN001 (psutil.Process)
    """CPU seconds (user + system) of a process, its reaped children included."""
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def _tree_cpu_s(proc) -> tuple[float, float]:  # noqa: ANN001 (psutil.Process)
    """CPU seconds of a process itself, and of its children (the live ones, recursively, and those it reaped)."""
    import psutil

    t = proc.cpu_times()
    children = t.children_user + t.children_system
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            children += _cpu_s(child)
    return t.user + t.system, children


def _postmaster(pg_port: int):  # noqa: ANN202
    """The PostgreSQL server listening on ``pg_port`` (psutil.Process), or None."""
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == pg_port and conn.pid:
            return psutil.Process(conn.pid)
    return None


def cpu_snapshot(server_pids: list[int], pg_port: int | None, proxy_pid: int | None = None) -> dict[str, float]:
    """CPU seconds so far: the servers (their own processes summed, their children summed, and each server with
    its children as ``s1``, ``s2``, ...), the PostgreSQL server (all its processes), HAProxy (when running)."""
    import psutil

    out = {"server": 0.0, "children": 0.0, "postgres": 0.0}
    for n, pid in enumerate(server_pids, 1):
        own, children = _tree_cpu_s(psutil.Process(pid))
        out["server"] += own
        out["children"] += children
        out[f"s{n}"] = own + children
    if proxy_pid is not None:
        out["haproxy"] = sum(_tree_cpu_s(psutil.Process(proxy_pid)))
    postmaster = _postmaster(pg_port) if pg_port is not None else None
    if postmaster is not None:
        out["postgres"] = sum(_tree_cpu_s(postmaster))
    return out


# ---------------------------------------------------------------------------------------------
# Several servers behind HAProxy


def student_address(i: int) -> str:
    """Student ``i``'s own loopback source address: 127.0.1.1, 127.0.1.2, ... (Linux routes 127.0.0.0/8 to lo)."""
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


def haproxy_config(template: str, port: int, server_ports: list[int]) -> str:
    """deploy/haproxy.cfg with its loopback ``bind`` on ``port`` and one ``server`` line per port of ``server_ports``.

    The template's first active ``server`` line is the pattern of the new ones (name, cookie and port renumbered);
    its other ``server`` lines go. Everything else is the template's: the per-address limits, ``forwardfor``,
    stickiness, health checks and timeouts are what the bench measures.
    """
    out: list[str] = []
    binds = servers = 0
    for line in template.splitlines():
        code = line.split("#", 1)[0]
        if re.match(r"\s*bind\s", code):
            if not re.match(r"\s*bind\s+127\.0\.0\.1:\d+\s*$", code):
                raise ValueError(f"deploy/haproxy.cfg binds beyond loopback ({line.strip()!r}): not for a bench")
            out.append(re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", line))
            binds += 1
        elif re.match(r"\s*server\s", code):
            if servers == 0:
                name = re.escape(code.split()[1])
                for n, server_port in enumerate(server_ports, 1):
                    new = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{server_port}", line)
                    out.append(re.sub(rf"\b{name}\b", f"s{n}", new))
            servers += 1
        else:
            out.append(line)
    if binds != 1 or not servers:
        raise ValueError(f"deploy/haproxy.cfg: expected one active bind and server lines, found {binds} and {servers}")
    return "\n".join(out) + "\n"


def _free_ports(n: int) -> list[int]:
    """``n`` different free loopback ports (the kernel may hand out a port twice before anything binds it)."""
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(_free_port())
    return sorted(ports)


def _stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to all at once (they shut down side by side), then wait; kill those still there after 30 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + 30
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _server_env(url: str, args: argparse.Namespace, proxied: bool) -> tuple[dict, Path | None]:
    """The servers' environment (the class database; behind the proxy, trust its X-Forwarded-For) and the GC log."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PANDA_DB_URL": url}
    if proxied:  # as docs/serving.md runs them: joins are counted per student address, not per proxy
        env["PANDA_TRUSTED_PROXY"] = "1"
    gc_log = None
    if args.gc_stats:  # one log for all servers: the guess window's collections, summed
        gc_dir = Path(tempfile.mkdtemp(prefix="panda-bench-gc-"))
        (gc_dir / "sitecustomize.py").write_text(GC_LOGGER)
        gc_log = gc_dir / "gc.log"
        env["PYTHONPATH"] = os.pathsep.join([str(gc_dir), *filter(None, [env.get("PYTHONPATH")])])
        env["PANDA_BENCH_GC_LOG"] = str(gc_log)
        if args.gc_freeze:
            env["PANDA_BENCH_GC_FREEZE_S"] = str(args.gc_freeze)
    return env, gc_log


@contextlib.contextmanager
def _servers(n: int, env: dict, args: argparse.Namespace, stem: str) -> Iterator[list[tuple[int, subprocess.Popen]]]:
    """``n`` ``streamlit run app`` servers on free loopback ports, started together, then each waited for;
    all stopped on leaving (an error and Ctrl-C included). Yields (port, process) pairs. Logs: test-artifacts."""
    servers: list[tuple[int, subprocess.Popen]] = []
    with contextlib.ExitStack() as logs:
        try:
            for port in _free_ports(n):
                suffix = f"-s{len(servers) + 1}" if n > 1 else ""
                log = logs.enter_context(open(ARTIFACTS / f"{stem}{suffix}.log", "wb"))
                cmd = streamlit_cmd(port) + [f"--{opt}" for opt in args.streamlit_opt]
                proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
                servers.append((port, proc))
            for port, proc in servers:
                _wait_healthy(f"http://127.0.0.1:{port}", proc)
            yield servers
        finally:
            _stop_all([proc for _, proc in servers])


def _wait_proxy(port: int, proc: subprocess.Popen, n_servers: int, timeout_s: float = 30.0) -> None:
    """Until ``n_servers`` health checks in a row pass through the proxy (round robin: one per server)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"haproxy exited with code {proc.returncode} (its log is in {ARTIFACTS})")
        passed = 0
        for _ in range(n_servers):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                    passed += resp.read().strip() == b"ok"
            except OSError:
                break
        if passed == n_servers:
            return
        time.sleep(0.3)
    raise TimeoutError(f"haproxy on port {port} did not pass {n_servers} health checks within {timeout_s:.0f} s")


@contextlib.contextmanager
def _haproxy(server_ports: list[int], stem: str) -> Iterator[tuple[int, subprocess.Popen]]:
    """HAProxy from deploy/haproxy.cfg on a free loopback port in front of the servers; yields (port, process).

    The configuration (test-artifacts/<stem>.cfg) must pass ``haproxy -c`` first; stopped on leaving."""
    port = _free_port()
    cfg = ARTIFACTS / f"{stem}.cfg"
    cfg.write_text(haproxy_config(HAPROXY_TEMPLATE.read_text(), port, server_ports))
    check = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30, check=False)
    if check.returncode != 0:
        raise RuntimeError(f"haproxy -c -f {cfg} refused the configuration: {(check.stdout + check.stderr).strip()}")
    with open(ARTIFACTS / f"{stem}.log", "wb") as log:
        proc = subprocess.Popen([HAPROXY, "-f", str(cfg), "-db"], stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_proxy(port, proc, len(server_ports))
            yield port, proc
        finally:
            _stop_all([proc])


# ---------------------------------------------------------------------------------------------
# One run


def _view() -> list:
    from app.model.params import Params

    return list(Params().instance_key)


async def _class(  # noqa: ANN001 (on_guess_window: a callable)
    port: int, code: str, args: argparse.Namespace, seed: int, on_guess_window, own_addresses: bool = False
) -> list[Student]:
    rng = random.Random(seed)
    students = [
        Student(
            port, code, random.Random(rng.random()), args.run_timeout, student_address(i) if own_addresses else None
        )
        for i in range(args.students)
    ]
    joins = await asyncio.gather(*(s.join(rng.uniform(0, args.join_spread)) for s in students), return_exceptions=True)
    for s, res in zip(students, joins, strict=True):
        if isinstance(res, BaseException):
            s.failure = f"join: {type(res).__name__}: {res}"
    await asyncio.sleep(args.settle)  # the page is open; the fragment polls go on
    n_places = int(_view()[1])
    ready = [s for s in students if not s.failure]
    on_guess_window(True)
    guesses = await asyncio.gather(
        *(s.guess(rng.uniform(0, args.spread), n_places) for s in ready), return_exceptions=True
    )
    on_guess_window(False)
    for s, res in zip(ready, guesses, strict=True):
        if isinstance(res, BaseException):
            s.failure = f"guess: {type(res).__name__}: {res}"
    await asyncio.sleep(args.after)
    await asyncio.gather(*(s.close() for s in students), return_exceptions=True)
    return students


def _stored(url: str, code: str, students: list[Student]) -> tuple[int, int, int]:
    """Entries whose stored guess is the place the student tapped; entries with any guess; players."""
    from sqlalchemy import select

    from app.server.db import store
    from app.server.db.models import Entry, Game, Player

    want = {hashlib.sha256(s.token().encode()).hexdigest(): s.place for s in students if s.place is not None}
    with store.session(url, read=True) as sess:
        game = sess.scalars(select(Game).where(Game.code == code)).one()
        rows = sess.execute(
            select(Player.token_sha256, Entry.guess_place)
            .join(Entry, Entry.player_id == Player.id)
            .where(Player.game_id == game.id)
        ).all()
        n_players = len(sess.scalars(select(Player.id).where(Player.game_id == game.id)).all())
    right = sum(1 for sha, place in rows if sha in want and place == want[sha])
    guessed = sum(1 for _, place in rows if place is not None)
    return right, guessed, n_players


@contextlib.contextmanager
def _database(kind: str):  # noqa: ANN202
    if kind == "postgres":
        from tests.support.pg_server import postgres_server

        with postgres_server(dbname="panda_class") as url:
            yield url
    else:
        with tempfile.TemporaryDirectory(prefix="panda-bench-game-") as tmp:
            yield f"sqlite:///{tmp}/class.db"


def _warm_up(ports: list[int], warm_code: str) -> float:
    """A warm-up student joins each server in turn on its own port and loads the map; seconds in all.

    In turn: the first server builds the round's mechanism and keeps it in the class database's result store,
    where the others find it, instead of every server building it at once.
    """
    t0 = time.perf_counter()
    for port in ports:
        warm = Student(port, warm_code, random.Random(0), 300.0)

        async def warm_up(warm: Student = warm) -> None:
            try:
                await warm.join(0.0)
            finally:
                await warm.close()

        asyncio.run(warm_up())
    return time.perf_counter() - t0


def _run_class(
    port: int,
    code: str,
    args: argparse.Namespace,
    run_no: int,
    pids: list[int],
    pg_port: int | None,
    proxy_pid: int | None,
) -> dict:
    """The class on ``port`` (the server's, or the proxy's: then each student from an address of their own),
    with the servers' memory watched and CPU read at the guess window's ends."""
    watch = ProcessWatch(pids)
    marks: dict[str, dict] = {}

    def on_window(start: bool) -> None:
        marks["start" if start else "end"] = cpu_snapshot(pids, pg_port, proxy_pid)
        marks["t_start" if start else "t_end"] = {"t": time.perf_counter(), "wall": time.time()}

    load_before = os.getloadavg()[0]
    client_t0 = resource.getrusage(resource.RUSAGE_SELF)
    try:
        own = proxy_pid is not None
        students = asyncio.run(_class(port, code, args, args.seed + run_no, on_window, own_addresses=own))
    finally:
        watch.stop()
    client_t1 = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "students": students,
        "watch": watch,
        "marks": marks,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "client_cpu": client_t1.ru_utime + client_t1.ru_stime - client_t0.ru_utime - client_t0.ru_stime,
    }


def run_once(kind: str, run_no: int, args: argparse.Namespace) -> dict:
    """A fresh database, the servers (behind HAProxy when asked), the warm-up, the class; one row of the table."""
    from sqlalchemy.engine import make_url

    from app.game import rounds
    from app.server.db import store

    spec = rounds.RoundSpec("laplace", 5.0, 1, "each")
    proxied = args.servers > 1 or args.proxy
    ARTIFACTS.mkdir(exist_ok=True)
    with _database(kind) as url:
        pg_port = make_url(url).port if kind == "postgres" else None
        code, _key = rounds.open_game(_view(), spec, url=url)
        warm_code, _ = rounds.open_game(_view(), spec, url=url)
        env, gc_log = _server_env(url, args, proxied)
        with contextlib.ExitStack() as stack:  # on leaving: the proxy stops, then the servers
            servers = stack.enter_context(_servers(args.servers, env, args, f"bench-game-server-{kind}-{run_no}"))
            ports = [port for port, _ in servers]
            entry_port, proxy_pid = ports[0], None
            if proxied:
                entry_port, proxy = stack.enter_context(_haproxy(ports, f"bench-game-haproxy-{kind}-{run_no}"))
                proxy_pid = proxy.pid
            warm_s = _warm_up(ports, warm_code)
            pids = [proc.pid for _, proc in servers]
            measured = _run_class(entry_port, code, args, run_no, pids, pg_port, proxy_pid)
        stored = _stored(url, code, measured["students"])
        store.dispose(url)
    return _row(kind, run_no, args, measured, stored, warm_s, gc_log)


def _row(
    kind: str,
    run_no: int,
    args: argparse.Namespace,
    measured: dict,
    stored: tuple[int, int, int],
    warm_s: float,
    gc_log: Path | None,
) -> dict:
    """One row of the table (and of the JSON) from a run's measurements."""
    students, watch, marks = measured["students"], measured["watch"], measured["marks"]
    right, guessed, n_players = stored
    sent = [s for s in students if s.place is not None]
    times = [s.guess_s for s in sent if s.guess_ok]
    # Percentiles over every guess sent: one not confirmed within --run-timeout counts as longer than that.
    everyone = [s.guess_s if s.guess_ok else math.inf for s in sent]
    joins = [s.join_s for s in students if s.join_s == s.join_s]
    polls = [p for s in students for p in s.polls]
    nan = float("nan")
    cpu = {k: marks["end"][k] - marks["start"][k] for k in marks["start"]} if "end" in marks else {}
    window_s = marks["t_end"]["t"] - marks["t_start"]["t"] if "t_end" in marks else nan
    servers_cpu = cpu.get("server", nan) + cpu.get("children", nan)
    return {
        "db": kind,
        "servers": args.servers,
        "proxy": args.servers > 1 or args.proxy,
        "streamlit_opts": list(args.streamlit_opt),
        "gc_freeze_s": args.gc_freeze if args.gc_stats else 0.0,
        "run": run_no,
        "students": args.students,
        "joined": len(joins),
        "join_p50_s": statistics.median(joins) if joins else nan,
        "join_p95_s": _pct(joins, 0.95),
        "guesses_sent": len(sent),
        "guesses_confirmed": len(times),
        "guesses_stored_right": right,
        "entries_with_guess": guessed,
        "players": n_players,
        "guess_p50_s": _finite(statistics.median(everyone) if everyone else math.nan),
        "guess_p95_s": _finite(_pct(everyone, 0.95)),
        "guess_max_s": _finite(max(everyone) if everyone else math.nan),
        "run_timeout_s": args.run_timeout,
        "polls": len(polls),
        "poll_p95_s": _pct(polls, 0.95),
        "guess_window_s": window_s,
        "cpu_server_s": cpu.get("server", nan),
        "cpu_children_s": cpu.get("children", nan),
        "cpu_servers_total_s": servers_cpu,
        "cpu_servers_per_student_ms": servers_cpu / args.students * 1e3,
        "cpu_per_server_s": [cpu[f"s{n}"] for n in range(1, args.servers + 1) if f"s{n}" in cpu],
        "cpu_postgres_s": cpu.get("postgres", nan),
        "cpu_haproxy_s": cpu.get("haproxy", nan) if args.servers > 1 or args.proxy else None,
        "client_cpu_s": measured["client_cpu"],
        "server_peak_rss_mb": watch.server_peak / 2**20,
        "children_peak_rss_mb": watch.children_peak / 2**20,
        "servers_total_peak_rss_mb": watch.total_peak / 2**20,
        "warm_up_s": warm_s,
        "load_before": measured["load_before"],
        "load_after": measured["load_after"],
        **(_gc_stats(gc_log, marks["t_start"]["wall"], marks["t_end"]["wall"]) if gc_log and "t_end" in marks else {}),
        "failures": sorted({s.failure for s in students if s.failure})[:5],
        "not_confirmed": sorted({s.guess_text for s in sent if not s.guess_ok})[:3],
        "guess_times_s": sorted(round(t, 4) for t in times),
    }


def _finite(x: float) -> float | None:
    """None for a guess never confirmed (longer than the run timeout), else the seconds."""
    return None if math.isinf(x) else x


def _s(x: float | None) -> str:
    return "  >max" if x is None else f"{x:6.2f}"


def _print_row(row: dict) -> None:
    proxy_cpu = "-" if row["cpu_haproxy_s"] is None else f"{row['cpu_haproxy_s']:.1f}"
    print(
        f"{row['db']:8} {_servers_label(row):>5} {row['run']:3d} "
        f"{_s(row['guess_p50_s'])} {_s(row['guess_p95_s'])} {_s(row['guess_max_s'])} "
        f"{row['guesses_confirmed']:3d}/{row['guesses_sent']:<3d} "
        f"{row['guesses_stored_right']:3d}/{row['guesses_sent']:<3d} "
        f"{row['join_p50_s']:6.2f} {row['join_p95_s']:6.2f} {row['polls']:5d} {row['poll_p95_s']:6.2f} "
        f"{row['cpu_server_s']:6.1f} {row['cpu_servers_total_s']:6.1f} {row['cpu_servers_per_student_ms']:5.0f} "
        f"{row['cpu_postgres_s']:5.1f} {proxy_cpu:>5} "
        f"{row['server_peak_rss_mb']:6.0f} {row['servers_total_peak_rss_mb']:6.0f} "
        f"{row['load_before']:4.1f}/{row['load_after']:<4.1f}",
        flush=True,
    )
    if "gc2_count" in row:
        print(
            f"    server gen-2 GCs in the guess window: {row['gc2_count']} ({row['gc2_in_script_threads']} after script"
            f" runs), median {row['gc2_median_ms']:.0f} ms, total {row['gc2_total_s']:.1f} s"
        )
    for failure in row["failures"]:
        print(f"    failure: {failure}")
    for text in row["not_confirmed"]:
        print(f"    not confirmed, the page showed: {text!r}")


def _servers_label(row: dict) -> str:
    """``1`` for one server reached directly, ``2+px`` for two servers behind HAProxy."""
    return f"{row['servers']}{'+px' if row['proxy'] else ''}"


#: cpu s: the servers' own processes; all s: with their children; ms/st: all s per student; px s: HAProxy;
#: RSS MB: the servers' own processes; all MB: with their children (peaks of sums over the servers).
HEADER = (
    f"{'db':8} {'srv':>5} {'run':>3} {'p50 s':>6} {'p95 s':>6} {'max s':>6} {'shown':>7} {'stored':>7} "
    f"{'join50':>6} {'join95':>6} {'polls':>5} {'poll95':>6} {'cpu s':>6} {'all s':>6} {'ms/st':>5} "
    f"{'pg s':>5} {'px s':>5} {'RSS MB':>6} {'all MB':>6} load"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--runs", type=int, default=2, help="runs per database, each on a fresh server (default 2)")
    ap.add_argument("--students", type=int, default=MAX_STUDENTS, help=f"students (at most {MAX_STUDENTS})")
    ap.add_argument("--spread", type=float, default=10.0, help="the guesses' window, s (default 10)")
    ap.add_argument("--join-spread", type=float, default=15.0, help="the joins' window, s (default 15)")
    ap.add_argument("--settle", type=float, default=5.0, help="pause between the joins and the guesses, s")
    ap.add_argument("--after", type=float, default=3.0, help="polling after the last guess, s")
    ap.add_argument("--run-timeout", type=float, default=120.0, help="longest wait for one script run, s")
    ap.add_argument(
        "--servers",
        type=int,
        default=1,
        help=f"servers behind HAProxy (deploy/haproxy.cfg), at most {MAX_SERVERS}; above 1 needs --db postgres",
    )
    ap.add_argument(
        "--proxy", action="store_true", help="one server behind HAProxy too (default: students connect to it)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gc-stats", action="store_true", help="log the server's full garbage collections (diagnosis)")
    ap.add_argument(
        "--gc-freeze",
        type=float,
        default=0.0,
        metavar="S",
        help="with --gc-stats: an experiment, the server calls gc.freeze() every S seconds",
    )
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    ap.add_argument(
        "--streamlit-opt",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra server option for an experiment, e.g. runner.postScriptGC=false (repeatable)",
    )
    args = ap.parse_args()
    if not 1 <= args.students <= MAX_STUDENTS or not 1 <= args.runs <= 5:
        ap.error(f"--students within 1..{MAX_STUDENTS}, --runs within 1..5")
    if not 1 <= args.servers <= MAX_SERVERS:
        ap.error(f"--servers within 1..{MAX_SERVERS}")
    if args.servers > 1 and args.db != "postgres":
        ap.error(
            f"--servers {args.servers} runs the servers on one shared PostgreSQL class database: "
            f"use --db postgres (not --db {args.db})"
        )
    proxied = args.servers > 1 or args.proxy
    if proxied and not Path(HAPROXY).exists():
        ap.error("--servers above 1 and --proxy need haproxy (apt-get install haproxy)")
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    print(
        f"{args.students} students, joins over {args.join_spread:g} s, guesses over {args.spread:g} s; "
        f"{args.servers} server{'s' if args.servers > 1 else ''} "
        f"{'behind HAProxy (deploy/haproxy.cfg)' if proxied else 'reached directly'}; "
        f"{os.cpu_count()} cores; target guess p95 <= {TARGET_P95_S:g} s",
        flush=True,
    )
    print(HEADER, flush=True)
    rows = []
    for kind in kinds:
        for run_no in range(1, args.runs + 1):
            row = run_once(kind, run_no, args)
            rows.append(row)
            _print_row(row)
    if any(row["guess_p95_s"] is None for row in rows):
        print(f">max: guesses whose page did not show the confirmation within --run-timeout {args.run_timeout:g} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
