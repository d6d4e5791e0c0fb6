"""The local cluster toward other users of the machine: TLS with the cluster's own certificate, every
listener on loopback, and a running-jobs folder nobody else can redirect.

The "server" is a separate Python process that starts ``Executor()`` as the dashboard does (a scheduler
in it, worker processes under it), so its sockets and its children's are exactly the cluster's.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import ssl
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import distributed  # noqa: F401 (a runtime dependency: missing, this file fails rather than skips)
import psutil
import pytest
from conftest import ROOT

from panda.execution import RUNNING_DIR_ENV, SCHEDULER_ENV, _running, running, running_jobs

ARTIFACTS = ROOT / "test-artifacts"
LOOPBACK = {"127.0.0.1", "::1"}

SERVER = """
import json, os, sys
from panda.execution import Executor
ex = Executor(n_workers=2, memory_limit=2**30)
ex.wait_for_workers(2, timeout_s=180)
hello = {"address": ex.address, "tls_dir": str(ex._connection.cluster.tls_dir), "pid": ex.run(os.getpid, timeout_s=60)}
print(json.dumps(hello), flush=True)
for line in sys.stdin:
    if line.strip() != "run":
        break
    print(json.dumps({"pid": ex.run(os.getpid, timeout_s=60)}), flush=True)
tls_dir = ex._connection.cluster.tls_dir
ex.close()
print(json.dumps({"closed": True}), flush=True)
"""


class Server:
    def __init__(self, proc: subprocess.Popen, hello: dict) -> None:
        self.proc = proc
        self.address: str = hello["address"]
        self.tls_dir = Path(hello["tls_dir"])
        self.host, port = self.address.split("://")[1].rsplit(":", 1)
        self.port = int(port)

    def ask(self, line: str) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ARTIFACTS.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), RUNNING_DIR_ENV: str(tmp_path_factory.mktemp("running"))}
    env.pop(SCHEDULER_ENV, None)
    log = open(ARTIFACTS / "execution-security-server.log", "wb")  # noqa: SIM115 (closed in the finally)
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line, "the server did not start (test-artifacts/execution-security-server.log)"
        yield Server(proc, json.loads(line))
    finally:
        if proc.poll() is None:
            with_children = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            try:
                proc.stdin.close()
                proc.wait(60)
            except subprocess.TimeoutExpired:
                for p in with_children:
                    p.kill()
                proc.wait(5)
                raise AssertionError("the server did not stop") from None
            finally:
                log.close()
            assert not [p for p in with_children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_every_listener_of_the_server_and_its_workers_is_on_loopback(server):
    """The scheduler, its HTTP routes, the nannies, the workers and the workers' HTTP routes (/health,
    /metrics: on every interface by default, even with --no-dashboard) all bind 127.0.0.1."""
    family = [psutil.Process(server.proc.pid), *psutil.Process(server.proc.pid).children(recursive=True)]
    listening: dict[int, list[tuple[str, int]]] = {}
    for proc in family:
        for conn in proc.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                listening.setdefault(proc.pid, []).append((conn.laddr.ip, conn.laddr.port))
    print(f"\n[security] listeners of the server and its children: {listening}")
    everything = [addr for addrs in listening.values() for addr in addrs]
    assert everything and all(ip in LOOPBACK for ip, _ in everything), everything
    # Not vacuous: the scheduler and its HTTP routes here; a nanny per worker group and two sockets
    # (its comm and its HTTP routes) per worker process.
    assert (server.host, server.port) in listening[server.proc.pid] and len(listening[server.proc.pid]) == 2
    workers = [p for p in family if "multiprocessing.spawn" in " ".join(p.cmdline())]
    assert len(workers) == 2 and all(len(listening.get(p.pid, [])) == 2 for p in workers), listening
    assert len(everything) == 2 + 2 + 2 * 2

    # The plain-HTTP ones (any local user can ask them) answer /health only: no metrics, no task or
    # call-stack pages, no proxy. The others speak TLS only.
    def get(port: int, path: str) -> int | str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (OSError, http.client.HTTPException) as exc:
            return type(exc).__name__

    http_ports = [port for _, port in everything if get(port, "/health") == 200]
    assert len(http_ports) == 3, everything  # the scheduler's and the two workers'
    for port in http_ports:
        for path in ("/metrics", "/info/main/workers.html", "/json/identity.json", "/proxy/8786/127.0.0.1/"):
            assert get(port, path) == 404, (port, path)


def _refused(address: str, **kwargs) -> str:
    """Connect a client and ask the scheduler something; return how it failed (AssertionError if it did not)."""
    from distributed import Client

    try:
        with Client(address, timeout=5, set_as_default=False, **kwargs) as client:
            client.scheduler_info()
    except Exception as exc:  # noqa: BLE001 (how it fails is printed)
        return f"{type(exc).__name__}: {exc}"[:160]
    raise AssertionError(f"a client connected to {address} with {kwargs}")


def test_the_scheduler_refuses_clients_without_the_clusters_certificate(server):
    from distributed import Client, Security

    assert server.address.startswith("tls://127.0.0.1:")
    plain = f"tcp://{server.host}:{server.port}"
    failures = {
        "no security": _refused(server.address),
        "plain tcp": _refused(plain),
        "another temporary certificate": _refused(server.address, security=Security.temporary()),
    }
    # TLS that trusts the cluster's certificate but shows none: the scheduler ends the handshake (measured:
    # SSLError "tlsv13 alert certificate required"). A reset or an EOF would do too; a scheduler that
    # accepted the connection and only waited would not (the socket's timeout, not caught here).
    ctx = ssl.create_default_context(cafile=str(server.tls_dir / "cert.pem"))
    ctx.check_hostname = False
    with socket.create_connection((server.host, server.port), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)) as info:
            with ctx.wrap_socket(raw) as tls:
                tls.sendall(b"\0" * 8)
                if tls.recv(1) == b"":
                    raise ConnectionResetError("closed by the scheduler")
        failures["no client certificate"] = f"{type(info.value).__name__}: {info.value}"[:160]
    print("\n[security] " + "\n[security] ".join(f"{k}: {v}" for k, v in failures.items()))

    # Control: with the cluster's certificate (which only this user can read) a client gets in, and can
    # run code in the server's process: that is what a connection allows.
    cert, key = str(server.tls_dir / "cert.pem"), str(server.tls_dir / "key.pem")
    sec = Security(tls_ca_file=cert, tls_client_cert=cert, tls_client_key=key, require_encryption=True)
    with Client(server.address, timeout=10, set_as_default=False, security=sec) as client:
        assert client.run_on_scheduler(os.getpid) == server.proc.pid
    # The executor's own jobs run all along.
    assert server.ask("run")["pid"] > 0


def test_the_certificate_folder_is_private_and_removed_with_the_cluster(server):
    folder = os.lstat(server.tls_dir)
    assert stat.S_ISDIR(folder.st_mode) and folder.st_uid == os.getuid()
    assert stat.S_IMODE(folder.st_mode) == 0o700
    for name in ("cert.pem", "key.pem"):
        st = os.lstat(server.tls_dir / name)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    # (last in this file: it stops the server)
    server.proc.stdin.close()
    assert json.loads(server.proc.stdout.readline()) == {"closed": True}
    server.proc.wait(60)
    assert not server.tls_dir.exists()


# --- the running-jobs folder in a shared temporary directory -----------------------------------


@pytest.fixture
def running_dir(tmp_path, monkeypatch):
    folder = tmp_path / "running"
    monkeypatch.setenv(RUNNING_DIR_ENV, str(folder))
    monkeypatch.setattr(running, "_WARNED_DIRS", set())
    return folder


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_running_jobs_folder_is_made_private(running_dir):
    with _running():
        assert _mode(running_dir) == 0o700
        marker = running_dir / str(os.getpid())
        assert stat.S_ISREG(os.lstat(marker).st_mode) and _mode(marker) == 0o600
        assert running_jobs() == 1
    assert not marker.exists()
    # Ours but open to everyone (made so before, or by a wide umask): narrowed before use.
    os.chmod(running_dir, 0o777)
    (running_dir / str(os.getppid())).touch()
    assert running_jobs() == 1
    assert _mode(running_dir) == 0o700
    with _running():
        assert running_jobs() == 2


def test_a_running_jobs_folder_of_another_user_is_not_used(running_dir, caplog):
    if os.getuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    running_dir.mkdir(mode=0o700)
    (running_dir / str(os.getppid())).touch()
    os.chown(running_dir, 65534, 65534)
    with caplog.at_level(logging.WARNING, logger="panda.execution"):
        assert running_jobs() == 1  # not read
        with _running():
            pass
    assert sorted(os.listdir(running_dir)) == [str(os.getppid())]  # nothing written into it
    assert _mode(running_dir) == 0o700  # nor its mode changed
    assert "owned by uid 65534" in caplog.text


def test_a_symlinked_running_jobs_folder_is_not_followed(running_dir, tmp_path, caplog):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (elsewhere / str(os.getppid())).touch()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (elsewhere / str(dead.pid)).touch()
    running_dir.symlink_to(elsewhere)
    with caplog.at_level(logging.WARNING, logger="panda.execution"):
        assert running_jobs() == 1  # not read through the link
        with _running():
            pass
    assert sorted(os.listdir(elsewhere)) == sorted([str(os.getppid()), str(dead.pid)])  # nothing made or removed
    assert _mode(elsewhere) == 0o755  # nor its mode changed
    assert running_dir.is_symlink()
    assert "symbolic link" in caplog.text


def test_marker_symlinks_are_neither_followed_nor_removed_through(running_dir, tmp_path):
    running_dir.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    before = os.stat(victim)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (running_dir / str(dead.pid)).symlink_to(victim)  # a dead pid's entry, pointing out
    (running_dir / str(os.getppid())).symlink_to(victim)  # a live pid's entry, a link: not a marker
    assert running_jobs() == 1
    (running_dir / str(os.getpid())).symlink_to(victim)  # this process's marker, planted as a link
    with _running():
        marker = running_dir / str(os.getpid())
        assert stat.S_ISREG(os.lstat(marker).st_mode)  # replaced by a file of ours, not written through
        assert running_jobs() == 1
    assert not os.path.lexists(marker)
    after = os.stat(victim)
    assert victim.read_text() == "keep" and (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)


def test_a_named_scheduler_without_tls_on_another_machine_is_refused_unless_allowed(caplog, monkeypatch):
    from panda.execution import ALLOW_PLAINTEXT_ENV, Executor, JobError

    monkeypatch.delenv(ALLOW_PLAINTEXT_ENV, raising=False)
    remote = "tcp://192.0.2.7:8786"  # TEST-NET-1: never answers
    ex = Executor(remote, connect_timeout_s=1.0)
    try:
        with pytest.raises(JobError, match=f"without TLS.*{ALLOW_PLAINTEXT_ENV}=1"):
            ex.run(os.getpid, timeout_s=5)  # refused before any connection attempt
    finally:
        ex.close()

    monkeypatch.setenv(ALLOW_PLAINTEXT_ENV, "1")
    cases = ((remote, True), ("tcp://127.0.0.1:8786", False), ("tls://192.0.2.7:8786", False))
    for address, warned in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="panda.execution"):
            ex = Executor(address, connect_timeout_s=1.0)  # connects on first use only
            ex.close()
        assert ("reached without TLS" in caplog.text) is warned, address
