"""The tests' own servers on loopback: ``streamlit run app`` on a free 127.0.0.1 port, waited for, stopped cleanly.

:func:`start` runs a command in a process group of its own, its output in a log under test-artifacts/;
:func:`stop` ends a process: SIGTERM, then SIGKILL for what is left (its whole group, when :func:`start`
made it; otherwise its children). :func:`streamlit_server` is the whole life of a dashboard server in a
fixture: started with the tests' environment and the given variables, healthy when it yields, stopped with
its process group afterwards. (browser_support.py re-exports ``streamlit_cmd``, ``free_port`` and ``wait_healthy``,
the last two as ``_free_port`` and ``_wait_healthy``, for the tests that import them from it.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"

#: The processes :func:`start` made leaders of a process group of their own.
_LEADERS: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()


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


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    """Wait until the Streamlit server at ``url`` answers its health check "ok" (an error if ``proc`` exits)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200 and resp.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"streamlit did not become healthy within {timeout_s:.0f} s")


def start(cmd: Sequence[str], log_name: str, env: Mapping[str, str], *, cwd: Path = ROOT) -> subprocess.Popen:
    """Run ``cmd`` in ``cwd`` with exactly ``env``, in a process group of its own; output to ARTIFACTS/``log_name``."""
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / log_name, "wb") as log:  # the process writes to its own copy of the file
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, env=dict(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    _LEADERS.add(proc)
    return proc


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; False when the group has no process left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _kill_children(pid: int) -> None:
    import psutil

    try:
        for child in psutil.Process(pid).children(recursive=True):
            child.kill()
    except psutil.NoSuchProcess:
        pass


def stop(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    """Terminate a process: SIGTERM, and SIGKILL after ``timeout_s`` for it and its group or children.

    A process from :func:`start` leads a process group of its own: when it has gone, what is left of the
    group (workers it spawned) gets SIGTERM, and SIGKILL 5 s later. Any other process: only it is
    signalled, its children (found with psutil) only with SIGKILL after ``timeout_s``.
    """
    own_group = proc in _LEADERS
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        if own_group:
            _signal_group(proc.pid, signal.SIGKILL)
        else:
            _kill_children(proc.pid)
        proc.kill()
        proc.wait(5)
    if own_group and _signal_group(proc.pid, signal.SIGTERM):
        deadline = time.monotonic() + 5
        while _signal_group(proc.pid, 0):
            if time.monotonic() > deadline:
                _signal_group(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.1)


@dataclass(frozen=True)
class Server:
    """A ``streamlit run app`` process on 127.0.0.1:``port``."""

    port: int
    proc: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_streamlit(log_name: str, env: Mapping[str, str] | None = None) -> Server:
    """Start ``streamlit run app`` on a free loopback port (not waited for; :func:`stop` its ``proc``).

    Its environment: the tests' own, ``PYTHONUNBUFFERED=1`` and ``env``.
    """
    port = free_port()
    proc = start(streamlit_cmd(port), log_name, {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    return Server(port, proc)


@contextlib.contextmanager
def streamlit_server(
    log_name: str, env: Mapping[str, str] | None = None, *, timeout_s: float = 90.0
) -> Iterator[Server]:
    """:func:`start_streamlit`, healthy within ``timeout_s`` when it yields; stopped with its group afterwards."""
    server = start_streamlit(log_name, env)
    try:
        wait_healthy(server.url, server.proc, timeout_s)
        yield server
    finally:
        stop(server.proc)
