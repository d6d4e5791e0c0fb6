"""Two dashboard servers behind a real HAProxy with sticky sessions (docs/serving.md, issue 29).

Starts a ``dask scheduler`` and one ``dask worker`` on loopback (as tests/browser/test_scale_out.py does), two
``streamlit run app`` servers on free 127.0.0.1 ports that share that scheduler and one SQLite class
database (``PANDA_DB_URL``; the result store is a table of it, so they share that too), and Debian's
``haproxy`` with a configuration made from deploy/haproxy.cfg (only its ports changed; a stats socket
and a capture of the User-Agent added so the test can see where each request went). Then two Chromium
contexts open the dashboard through the proxy only:

* each renders the Lesson page with no exception, console error or failed request, and asks nothing of
  anyone but the proxy;
* each holds the proxy's stickiness cookie (SRV), the two name different servers, and the proxy's
  request log shows that every request of a context, its websocket (/_stcore/stream) included, went to
  the server its cookie names; while the pages are open, haproxy holds a connection to both servers;
* the lecturer (context A) starts a class round in the presenter view, through its server; the student
  (context B) joins it through the other server and sees round 1; the lecturer's screen, polling through
  its own server, counts that student.

Also: haproxy and both servers listen on 127.0.0.1 only. Everything is stopped at teardown. Logs:
test-artifacts/proxy-*.log; screenshots test-artifacts/proxy-*.png.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from browser_support import _metric, _wait_idle, browser  # noqa: F401 (fixture and helpers of the browser test)
from conftest import LECTURER_KEY
from server_support import ARTIFACTS, ROOT, free_port, start_streamlit, stop, wait_healthy

pytest.importorskip("distributed")
psutil = pytest.importorskip("psutil")

from panda.execution import MESSAGE_LOG_ENV, MESSAGE_LOG_LENGTH  # noqa: E402

pytestmark = pytest.mark.browser

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TEMPLATE = ROOT / "deploy" / "haproxy.cfg"
if not Path(HAPROXY).exists():
    pytest.skip("haproxy is not installed (apt-get install haproxy)", allow_module_level=True)

#: Each context's User-Agent starts with its tag: the proxy's log (which captures it) tells the contexts apart.
AGENT = "{tag} Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome Safari/537.36"
#: An httplog line: "... frontend backend/server timers status ... {captured User-Agent} ... "METHOD URI ..."
LOG_LINE = re.compile(
    r" (?P<backend>\S+)/(?P<server>\S+) \S+ (?P<status>-?\d+) .*"
    r"\{(?P<agent>[^} ]*)[^}]*\} \"(?P<method>\S+) (?P<uri>\S+)"
)


#: Streamlit's front end probes a page opened at its own path as a base path (as in test_browser_game).
PROBE = r"/play/_stcore/(health|host-config)"


def _listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs a process listens on (TCP and UDP sockets bound without a peer)."""
    found = set()
    for conn in psutil.Process(pid).net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN or (conn.type == socket.SOCK_DGRAM and not conn.raddr):
            found.add((conn.laddr.ip, conn.laddr.port))
    return found


def proxy_config(template: str, port: int, servers: list[int], stats_socket: Path) -> str:
    """deploy/haproxy.cfg with the proxy on 127.0.0.1:``port`` and its first server lines on ``servers``.

    Also adds a stats socket (a Unix socket, no port) and a capture of the User-Agent (it shows in each
    request's log line). Everything else, stickiness, timeouts and health checks, is the template's.
    """
    out: list[str] = []
    binds = servers_seen = 0
    for line in template.splitlines():
        code = line.split("#", 1)[0]
        if re.match(r"\s*bind\s", code):
            assert re.match(r"\s*bind\s+127\.0\.0\.1:\d+\s*$", code), f"the template binds beyond loopback: {line!r}"
            line = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", line)
            binds += 1
            out.append(line)
            out.append("    http-request capture req.fhdr(User-Agent) len 24")
            continue
        if re.match(r"\s*server\s", code):
            if servers_seen >= len(servers):
                continue  # a server the test does not run
            line = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{servers[servers_seen]}", line)
            servers_seen += 1
        out.append(line)
        if line.strip() == "global":
            out.append(f"    stats socket {stats_socket} mode 600 level user")
    assert binds == 1 and servers_seen == len(servers), (binds, servers_seen)
    return "\n".join(out) + "\n"


def _show_stat(sock_path: Path) -> list[dict]:
    """HAProxy's ``show stat`` over its stats socket, one dict per proxy/server row."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(sock_path))
        sock.sendall(b"show stat\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    text = data.decode().lstrip("# ")
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture(scope="module")
def cluster():
    """``dask scheduler`` + one one-thread ``dask worker`` on loopback; yields the scheduler's address."""
    from distributed import Client

    ARTIFACTS.mkdir(exist_ok=True)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    }
    env.pop("PANDA_DASK_SCHEDULER", None)
    log = open(ARTIFACTS / "proxy-cluster.log", "wb")  # noqa: SIM115 (closed in the finally)
    dask_cli = [sys.executable, "-m", "dask"]
    # --no-dashboard alone left the HTTP routes on every interface (0.0.0.0:8787 and a worker's random port)
    loopback_http = ["--no-dashboard", "--dashboard-address", "127.0.0.1:0"]
    scheduler_env = {
        **env,
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1",
        MESSAGE_LOG_ENV: str(MESSAGE_LOG_LENGTH),
    }
    procs = [
        subprocess.Popen(
            [*dask_cli, "scheduler", "--host", "127.0.0.1", "--port", str(port), *loopback_http],
            cwd=ROOT,
            env=scheduler_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    ]
    worker = [*dask_cli, "worker", address, "--nworkers", "1", "--nthreads", "1", *loopback_http]
    worker += ["--host", "127.0.0.1", "--preload", "panda.execution", "--name", "proxy-worker"]
    procs.append(subprocess.Popen(worker, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    try:
        with Client(address, timeout=60, set_as_default=False) as client:
            client.wait_for_workers(1, timeout=120)
        family = [q for proc in procs for q in (psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True))]
        listening = {addr for q in family for addr in _listening(q.pid)}
        assert listening and {ip for ip, _ in listening} == {"127.0.0.1"}, f"the cluster listens on {listening}"
        yield address
    finally:
        for proc in reversed(procs):  # the worker first, then the scheduler
            stop(proc)
        log.close()


@pytest.fixture(scope="module")
def class_servers(cluster, tmp_path_factory):
    """Two ``streamlit run app`` servers on free loopback ports, one scheduler, one class database."""
    db_url = f"sqlite:///{tmp_path_factory.mktemp('proxy-db') / 'class.db'}"
    env = {"PANDA_DASK_SCHEDULER": cluster, "PANDA_DB_URL": db_url}
    servers: list[tuple[int, subprocess.Popen]] = []
    try:
        for n in (1, 2):  # both start, then both are waited for
            server = start_streamlit(f"proxy-streamlit-s{n}.log", env)
            servers.append((server.port, server.proc))
        for port, proc in servers:
            wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield servers, db_url
    finally:
        for _, proc in servers:
            stop(proc)


@pytest.fixture(scope="module")
def proxy(class_servers, tmp_path_factory):
    """``haproxy -f cfg -db`` from deploy/haproxy.cfg in front of the two servers; yields its facts."""
    servers, _ = class_servers
    tmp = tmp_path_factory.mktemp("proxy")
    port = free_port()
    stats_socket = tmp / "haproxy.sock"
    cfg = tmp / "haproxy.cfg"
    cfg.write_text(proxy_config(TEMPLATE.read_text(), port, [p for p, _ in servers], stats_socket))
    check = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    log_path = ARTIFACTS / "proxy-haproxy.log"
    log = open(log_path, "wb")  # noqa: SIM115 (closed in the finally)
    proc = subprocess.Popen([HAPROXY, "-f", str(cfg), "-db"], stdout=log, stderr=subprocess.STDOUT)
    try:
        # Both servers UP by the template's own health check (GET /_stcore/health, "ok").
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"haproxy exited with code {proc.returncode}: {log_path.read_text()}")
            try:
                rows = [r for r in _show_stat(stats_socket) if r["svname"] in ("s1", "s2")]
            except OSError:
                rows = []
            if len(rows) == 2 and all(r["status"] == "UP" and r["check_status"] == "L7OK" for r in rows):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"haproxy did not see both servers up: {rows}")
            time.sleep(0.3)
        yield {
            "url": f"http://127.0.0.1:{port}",
            "proc": proc,
            "log": log_path,
            "stats": stats_socket,
            "cfg": cfg,
            "servers": {f"s{n}": p for n, (p, _) in enumerate(servers, 1)},
        }
    finally:
        stop(proc)
        log.close()


def _no_exception(page, where: str, errors: list[str], failed: list[str]) -> None:
    body = page.inner_text("body")
    assert "Traceback" not in body, f"{where}: {body[:2000]}"
    assert page.locator('[data-testid="stException"]').count() == 0, where
    assert not errors, f"{where}: {errors}"
    assert not failed, f"{where}: {failed}"


def _log_requests(path: Path) -> list[dict]:
    return [m.groupdict() for line in path.read_text(errors="replace").splitlines() if (m := LOG_LINE.search(line))]


def test_two_servers_behind_haproxy_with_sticky_sessions(proxy, class_servers, browser):  # noqa: F811
    from app.game import rounds
    from app.server import lecturer
    from app.server.db import store

    url = proxy["url"]
    (_, s1_proc), (_, s2_proc) = class_servers[0]
    _, db_url = class_servers

    # Loopback only: the proxy and both servers.
    for name, pid in (("haproxy", proxy["proc"].pid), ("s1", s1_proc.pid), ("s2", s2_proc.pid)):
        listening = _listening(pid)
        assert listening, f"{name} listens nowhere"
        assert {ip for ip, _ in listening} == {"127.0.0.1"}, f"{name} listens on {listening}"
    assert _listening(proxy["proc"].pid) == {("127.0.0.1", int(urlsplit(url).port))}

    contexts, pages = {}, {}
    errors: dict[str, list[str]] = {"A": [], "B": []}
    failed: dict[str, list[str]] = {"A": [], "B": []}
    timings: dict[str, float] = {}
    elsewhere: list[str] = []  # requests that did not go to the proxy

    def _elsewhere(request_url: str) -> bool:
        return not request_url.startswith((f"{url}/", "data:", "blob:", "about:"))

    t_start = time.perf_counter()
    try:
        for tag in ("A", "B"):
            ctx = browser.new_context(
                viewport={"width": 1280, "height": 720}, user_agent=AGENT.format(tag=f"panda-client-{tag}")
            )
            page = ctx.new_page()
            page.on(
                "console",
                lambda m, t=tag: (
                    errors[t].append(f"{m.text} ({m.location.get('url', '')})") if m.type == "error" else None
                ),
            )
            page.on("pageerror", lambda exc, t=tag: errors[t].append(f"page error: {exc}"))
            page.on("response", lambda r, t=tag: failed[t].append(f"{r.status} {r.url}") if r.status >= 400 else None)
            page.on("request", lambda r: elsewhere.append(r.url) if _elsewhere(r.url) else None)
            contexts[tag], pages[tag] = ctx, page

        # 1. Both open the Lesson through the proxy (A as the lecturer, in the presenter view); side by side.
        pages["A"].goto(f"{url}/?present=1&lecturer={LECTURER_KEY}", wait_until="domcontentloaded")
        pages["B"].goto(url, wait_until="domcontentloaded")
        for tag in ("A", "B"):
            pages[tag].get_by_text("Error at A", exact=True).wait_for(timeout=120_000)
            _wait_idle(pages[tag], timeout_s=120)
            assert _metric(pages[tag], "Error at A").strip()
            _no_exception(pages[tag], f"the Lesson in context {tag}", errors[tag], failed[tag])
            timings[f"Lesson {tag}"] = time.perf_counter() - t_start
        pages["B"].screenshot(path=str(ARTIFACTS / "proxy-lesson-B.png"))

        # 2. Each context holds the stickiness cookie; they name different servers.
        srv = {}
        for tag in ("A", "B"):
            cookies = {c["name"]: c for c in contexts[tag].cookies()}
            assert "SRV" in cookies, f"context {tag} has no SRV cookie: {list(cookies)}"
            assert cookies["SRV"]["httpOnly"], cookies["SRV"]
            srv[tag] = cookies["SRV"]["value"]
        assert set(srv.values()) == {"s1", "s2"}, srv
        # haproxy holds a connection (the pages' websockets) to both servers.
        peers = {
            c.raddr.port
            for c in psutil.Process(proxy["proc"].pid).net_connections(kind="tcp")
            if c.raddr and c.status == psutil.CONN_ESTABLISHED
        }
        assert set(proxy["servers"].values()) <= peers, (proxy["servers"], peers)

        # 3. The lecturer (A) starts a class round through its server ...
        t = time.perf_counter()
        host = pages["A"]
        host.get_by_role("button", name="Class round").click()
        host.get_by_role("button", name="Start a round").click()
        host.wait_for_url(re.compile(r"/host\?"), timeout=90_000)
        host.get_by_text("Class round 1: where was").wait_for(timeout=90_000)
        _wait_idle(host, timeout_s=90)
        query = parse_qs(urlsplit(host.url).query)
        code = query["code"][0]
        assert "key" not in query
        key = lecturer.round_token(code)  # both servers share the lecturer key (PANDA_LECTURER_KEY)
        assert _metric(host, "Players") == "0"
        _no_exception(host, "the lecturer's screen", errors["A"], failed["A"])
        timings["round opened"] = time.perf_counter() - t

        # ... the student (B) joins it through the other server and gets round 1 ...
        t = time.perf_counter()
        phone = pages["B"]
        phone.goto(f"{url}/play?code={code}", wait_until="domcontentloaded")
        phone.get_by_role("button", name="Join").wait_for(timeout=90_000)
        _wait_idle(phone, timeout_s=90)
        phone.get_by_role("button", name="Join").click()
        phone.wait_for_url(re.compile(r"me="), timeout=60_000)
        phone.get_by_text(re.compile(r"^Round 1: where was")).wait_for(timeout=90_000)
        _wait_idle(phone, timeout_s=90)
        # Streamlit's base-path probes of /play: two 404s and their two console lines.
        failed["B"] = [f for f in failed["B"] if not re.search(PROBE + "$", f)]
        errors["B"] = [e for e in errors["B"] if not re.search(PROBE + r"\)$", e)]
        _no_exception(phone, "the student's page", errors["B"], failed["B"])
        phone.screenshot(path=str(ARTIFACTS / "proxy-play-B.png"))

        # ... and the lecturer's screen, polling through its own server, counts them.
        deadline = time.monotonic() + 30
        while _metric(host, "Players") != "1":
            assert time.monotonic() < deadline, f"the lecturer's screen shows {_metric(host, 'Players')} players"
            host.wait_for_timeout(300)
        timings["student seen"] = time.perf_counter() - t
        host.screenshot(path=str(ARTIFACTS / "proxy-host-A.png"))
        assert rounds.host_view(code, key, url=db_url).n_players == 1  # the shared database, read from here
        store.dispose(db_url)
        assert not elsewhere, f"the pages asked for something past the proxy: {elsewhere[:5]}"
        for tag in ("A", "B"):  # the cookie never changed: the contexts stayed on their servers
            assert {c["name"]: c["value"] for c in contexts[tag].cookies()}["SRV"] == srv[tag]
    finally:
        for ctx in contexts.values():
            ctx.close()  # the websockets close: haproxy logs their requests now

    # 4. The proxy's log: every request of a context went to the server its cookie names, websockets included.
    deadline = time.monotonic() + 15
    while True:
        requests = _log_requests(proxy["log"])
        streams = {r["agent"] for r in requests if r["uri"].startswith("/_stcore/stream")}
        if {"panda-client-A", "panda-client-B"} <= streams or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    by_client: dict[str, set[str]] = {}
    for r in requests:
        by_client.setdefault(r["agent"], set()).add(r["server"])
    for tag in ("A", "B"):
        mine = [r for r in requests if r["agent"] == f"panda-client-{tag}"]
        kinds = {r["uri"].split("?")[0] for r in mine}
        assert "/_stcore/stream" in kinds, f"no websocket of context {tag} in the proxy's log: {sorted(kinds)}"
        assert by_client[f"panda-client-{tag}"] == {srv[tag]}, (tag, srv[tag], by_client)
        # Nothing failed but Streamlit's base-path probes of /play (404 by design).
        bad = [r for r in mine if r["status"][0] not in "123" and not re.fullmatch(PROBE, r["uri"])]
        assert not bad, bad
    print(
        "\n[proxy] "
        + "; ".join(f"{k} {v:.1f} s" for k, v in timings.items())
        + f"; cookies {srv}; requests per context "
        + ", ".join(f"{tag}: {sum(r['agent'] == f'panda-client-{tag}' for r in requests)}" for tag in ("A", "B"))
        + f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )


def test_a_students_page_survives_the_loss_of_its_server(proxy, class_servers, browser):  # noqa: F811
    """Stop the server a student's page is on: the proxy sends the page's reconnect to the other server.

    The template's ``option redispatch``: the cookie names a server that is gone, so the reconnect goes to
    the other one (and the cookie is rewritten); Streamlit there starts a new session, whose run finds the
    student in the shared class database by the token in the page's address. (Runs after the test above:
    it stops one of the module's servers.)
    """
    from app.game import rounds
    from app.server.db import store

    url = proxy["url"]
    servers, db_url = class_servers
    view = ["city:neubrandenburg", 500, 20, 100, 0, "road", 1, "uniform"]
    code, _ = rounds.open_game(view, rounds.RoundSpec("laplace", 5.0), url=db_url)
    store.dispose(db_url)
    ctx = browser.new_context(
        viewport={"width": 390, "height": 844},
        is_mobile=True,
        has_touch=True,
        user_agent=AGENT.format(tag="panda-phone"),
    )
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))

    def cookie() -> str:
        return {c["name"]: c["value"] for c in ctx.cookies()}.get("SRV", "")

    try:
        page.goto(f"{url}/play?code={code}", wait_until="domcontentloaded")
        page.get_by_role("button", name="Join").wait_for(timeout=90_000)
        _wait_idle(page, timeout_s=90)
        page.get_by_role("button", name="Join").tap()
        page.wait_for_url(re.compile(r"me="), timeout=60_000)
        page.get_by_text(re.compile(r"^Round 1: where was")).wait_for(timeout=90_000)
        _wait_idle(page, timeout_s=90)
        token = parse_qs(urlsplit(page.url).query)["me"][0]
        assert "You are player 1" in page.inner_text("body")
        before = cookie()
        assert before in proxy["servers"], before
        (other,) = set(proxy["servers"]) - {before}

        # The student's server stops (SIGTERM: Streamlit closes its websockets, the page reconnects).
        stop(servers[int(before[1:]) - 1][1])
        t0 = time.perf_counter()
        deadline = time.monotonic() + 60
        while cookie() != other:
            assert time.monotonic() < deadline, f"the page did not move to {other}: cookie {cookie()!r}"
            page.wait_for_timeout(200)
        page.get_by_text(re.compile(r"^Round 1: where was")).wait_for(timeout=60_000)
        _wait_idle(page, timeout_s=60)
        failover_s = time.perf_counter() - t0
        body = page.inner_text("body")
        assert "You are player 1" in body and "Traceback" not in body, body[:2000]
        assert parse_qs(urlsplit(page.url).query)["me"][0] == token
        assert not errors, errors
        page.screenshot(path=str(ARTIFACTS / "proxy-failover.png"))
    finally:
        ctx.close()
    # The proxy's log: the phone's websocket went first to its server, then to the other one.
    deadline = time.monotonic() + 15
    while True:
        streams = [
            r["server"]
            for r in _log_requests(proxy["log"])
            if r["agent"] == "panda-phone" and r["uri"].startswith("/_stcore/stream") and r["status"] == "101"
        ]
        if other in streams or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert before in streams and other in streams, streams
    rows = {r["svname"]: r for r in _show_stat(proxy["stats"])}
    print(
        f"\n[proxy] failover from {before} to {other} in {failover_s:.1f} s; haproxy: {before} {rows[before]['status']}"
    )
