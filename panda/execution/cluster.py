"""The local cluster: a TLS scheduler in this process and ``dask worker`` processes under it.

:class:`LocalCluster` starts, stops and (after its scheduler stopped) kills the cluster the executor owns
when no scheduler is named. Every connection is TLS with a certificate made for the cluster
(``Security.temporary()``; the worker processes read it from a private 0700 folder, removed with the
cluster) that both ends must show, and every listener binds 127.0.0.1: a connection to a scheduler or a
worker runs any Python code as this user. The workers are ``dask worker`` processes started from the
project root, not ``distributed.LocalCluster(processes=True)``: that one starts its workers with
multiprocessing's *spawn*, which re-runs ``sys.modules["__main__"]``, and under Streamlit that is the app
script (the nanny then fails to start).

Also here: the workers' memory limits (:func:`memory_limit_bytes`), their number
(:func:`default_n_workers`) and the environment their nannies start them with
(:func:`worker_pre_spawn_environ`).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from panda.execution.fairness import LONG_RESOURCE
from panda.execution.running import _O_NOFOLLOW
from panda.execution.worker import ADDRESS_SPACE_ENV
from panda.threads import cores

#: Environment variable naming an existing scheduler (``tls://host:port``): connect instead of starting one
#: (:class:`~panda.execution.connection.Connection`; never passed on to the local workers).
SCHEDULER_ENV = "PANDA_DASK_SCHEDULER"
#: Environment variable overriding the number of local worker processes.
WORKERS_ENV = "PANDA_DASK_WORKERS"
#: Share of the machine's memory the local workers may use together, and one worker's absolute cap.
MEMORY_FRACTION = 0.4
MEMORY_CAP_BYTES = 8 * 2**30
#: A local worker exits when its scheduler (this process) has been gone this long, seconds.
DEATH_TIMEOUT_S = 60
#: Messages Dask keeps per connection for debugging (``distributed.admin.low-level-log-length``, default 1000).
#: Every kept message under 1 MB holds its job's pickled arguments whole (an Instance at the dashboard's
#: sizes fits under it), so with the default a classroom server grows for as long as it runs
#: (``bench/bench_load.py --soak`` measures it). Set in this process and in the local workers.
MESSAGE_LOG_LENGTH = 4
MESSAGE_LOG_ENV = "DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH"
#: The project root: local workers run from there (they import ``panda``).
ROOT = Path(__file__).resolve().parents[2]
#: The long workers' nice value (their nanny and worker processes): under load the CPU goes first to the
#: web server and the interactive worker, so a class's sliders stay quick while curves are computed.
LONG_WORKER_NICENESS = 10
#: The HTTP routes of the local cluster's scheduler and workers (Dask's default adds metrics, task and
#: call-stack pages and a proxy; plain HTTP, which any user of the machine can ask on loopback).
HTTP_ROUTES = ("distributed.http.health",)


def worker_pre_spawn_environ() -> dict:
    """Return the environment Dask's nanny sets before it starts a local worker process.

    It is Dask's own (``distributed.nanny.pre-spawn-environ``) without ``MALLOC_TRIM_THRESHOLD_`` (None
    unsets it; see :meth:`LocalCluster._worker_environment`).
    """
    import dask

    return {**dask.config.get("distributed.nanny.pre-spawn-environ", {}), "MALLOC_TRIM_THRESHOLD_": None}


def memory_limit_bytes(n_workers: int = 1) -> int:
    """One worker's memory limit, bytes: the workers together get :data:`MEMORY_FRACTION` of the machine."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return MEMORY_CAP_BYTES
    return int(min(MEMORY_CAP_BYTES, MEMORY_FRACTION * total / max(n_workers, 1)))


def default_n_workers() -> int:
    """Local worker processes: ``PANDA_DASK_WORKERS`` (at least 2), else one per core (at least 2) plus one.

    The first worker takes interactive jobs only; the others take any job.
    """
    value = os.environ.get(WORKERS_ENV, "").strip()
    if value:
        return max(int(value), 2)
    return max(cores(), 2) + 1


def _write_tls_files(security: Any) -> Path:
    """Write a Security's certificate and key to a new private folder (0700, files 0600) and return it.

    The local workers are separate processes: they read the certificate from files, which only this
    user can read.
    """
    folder = Path(tempfile.mkdtemp(prefix="panda-dask-tls-"))  # mode 0700
    try:
        for name, text in (("cert.pem", security.tls_worker_cert), ("key.pem", security.tls_worker_key)):
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def _kill_tree(pid: int) -> None:
    """Kill a process and its children (a worker group that ignored SIGTERM)."""
    try:
        import psutil

        parent = psutil.Process(pid)
        for child in parent.children(recursive=True):
            child.kill()
        parent.kill()
    except Exception:  # noqa: BLE001 (gone already)
        pass


class LocalCluster:
    """A scheduler in this process and two groups of ``dask worker`` processes, all on TLS and loopback.

    The first group is one worker for interactive jobs; the other ``n_workers - 1`` workers have the
    worker resource :data:`~panda.execution.fairness.LONG_RESOURCE` and a lower CPU priority
    (:data:`LONG_WORKER_NICENESS`). :meth:`start` may be called again after :meth:`stop` (a new
    scheduler, new workers, a new certificate).

    Parameters
    ----------
    n_workers
        Worker processes (at least 2).
    memory_limit
        One worker's memory limit, bytes (its nanny restarts a worker that grows past it).
    address_space
        One worker's address-space cap, bytes (0: none; read by :func:`~panda.execution.worker.dask_setup`).
    worker_log
        File for the workers' output (default: discarded).
    """

    def __init__(
        self, n_workers: int, memory_limit: int, address_space: int, worker_log: str | os.PathLike | None = None
    ) -> None:
        self.n_workers = n_workers
        self.memory_limit = memory_limit
        self.address_space = address_space
        self.worker_log = worker_log
        #: The ``distributed.LocalCluster`` that runs the scheduler (without workers of its own); None: stopped.
        self.dask_cluster: Any = None
        #: The cluster's TLS (``distributed.Security``) for a client of this process.
        self.security: Any = None
        #: The folder of the cluster's certificate and key as files for the worker processes.
        self.tls_dir: Path | None = None
        self._procs: list[subprocess.Popen] = []
        self._worker_env: dict[str, str] | None = None  # the workers' environment (kept for a restart)

    @property
    def running(self) -> bool:
        """True while the scheduler (in this process) runs."""
        from distributed.core import Status

        cluster = self.dask_cluster
        return cluster is not None and cluster.scheduler is not None and cluster.scheduler.status == Status.running

    def start(self) -> str:
        """Start a scheduler in this process and the worker processes; return the scheduler's address.

        Every connection is TLS with a certificate made for this cluster (``Security.temporary()``) that
        both ends must show, so another user of the machine cannot reach the scheduler or the workers
        (a connection to them runs any Python code as this user); every listener binds 127.0.0.1.
        """
        import dask
        from distributed import LocalCluster as DaskLocalCluster
        from distributed import Security

        temporary = Security.temporary()
        self.tls_dir = _write_tls_files(temporary)
        tls_files = {"cert": str(self.tls_dir / "cert.pem"), "key": str(self.tls_dir / "key.pem")}
        try:
            # This process reads the same files (held in memory, Dask would write the key to a new temporary
            # file for every connection).
            self.security = Security(
                require_encryption=True,
                tls_ca_file=tls_files["cert"],
                **{
                    f"tls_{role}_{kind}": path
                    for role in ("client", "scheduler", "worker")
                    for kind, path in tls_files.items()
                },
            )
            # Its HTTP routes (plain HTTP, open to every user of the machine on loopback): /health only, not
            # Dask's metrics, task and call-stack pages or its proxy.
            with dask.config.set({"distributed.scheduler.http.routes": list(HTTP_ROUTES)}):
                self.dask_cluster = DaskLocalCluster(
                    n_workers=0,
                    processes=True,
                    host="127.0.0.1",
                    protocol="tls://",
                    security=self.security,
                    scheduler_port=0,
                    dashboard_address=None,
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},  # any free port on loopback
                    silence_logs=logging.ERROR,
                )
        except BaseException:
            self._remove_tls_files()
            raise
        try:
            # A job that kills its worker is tried once more, not the default three times.
            self.dask_cluster.scheduler.allowed_failures = 1
            address = self.dask_cluster.scheduler_address
            self._start_workers(address, tls_files)
        except BaseException:  # (the log file cannot be opened, a worker group cannot be started, ...)
            self.stop()  # its scheduler, the workers started already and the certificate folder
            raise
        return address

    def _worker_environment(self) -> dict[str, str]:
        """Return the worker processes' environment: this process's, with the cluster's settings (made once)."""
        if self._worker_env is None:
            self._worker_env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                ADDRESS_SPACE_ENV: str(self.address_space),
                MESSAGE_LOG_ENV: str(MESSAGE_LOG_LENGTH),
                "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
                "DASK_DISTRIBUTED__WORKER__HTTP__ROUTES": repr(list(HTTP_ROUTES)),
                # Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which turns off glibc's dynamic
                # mmap threshold: every numpy temporary over 128 KB is then mapped and faulted in afresh. None
                # leaves glibc's default (the other entries are Dask's defaults); the statistical profiler serves
                # a dashboard the workers do not have. Both slow a worker's numpy-heavy jobs (the optimal LP)
                # down against a plain process (bench/bench_worker_lp.py runs it as the dashboard does).
                "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON": repr(worker_pre_spawn_environ()),
                "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
            }
            self._worker_env.pop(SCHEDULER_ENV, None)
        return self._worker_env

    def _worker_command(self, address: str, tls_files: dict[str, str]) -> list[str]:
        """Return the ``dask worker`` command line both worker groups share (each adds its name and size)."""
        return [
            sys.executable,
            "-m",
            "distributed.cli.dask_worker",
            address,
            "--nthreads",
            "1",
            "--memory-limit",
            str(self.memory_limit),
            "--death-timeout",
            str(DEATH_TIMEOUT_S),
            "--protocol",
            "tls",
            "--tls-ca-file",
            tls_files["cert"],  # the cluster's one self-signed certificate is its own authority
            "--tls-cert",
            tls_files["cert"],
            "--tls-key",
            tls_files["key"],
            "--no-dashboard",
            # The workers' HTTP routes (/health only, see HTTP_ROUTES) listen even without a dashboard, by
            # default on every interface: loopback only.
            "--dashboard-address",
            "127.0.0.1:0",
            "--host",
            "127.0.0.1",
            "--preload",
            "panda.execution",
        ]

    def _start_workers(self, address: str, tls_files: dict[str, str]) -> None:
        """Start the worker processes (``dask worker`` groups) for the scheduler at ``address``."""
        env = self._worker_environment()
        log_file = open(self.worker_log, "ab") if self.worker_log else None  # noqa: SIM115 (closed below)
        out: Any = log_file if log_file is not None else subprocess.DEVNULL
        common = self._worker_command(address, tls_files)
        groups = [
            ["--nworkers", "1", "--name", "panda-interactive"],
            ["--nworkers", str(self.n_workers - 1), "--name", "panda-long", "--resources", f"{LONG_RESOURCE}=1"],
        ]
        try:
            for extra, niceness in zip(groups, (0, LONG_WORKER_NICENESS), strict=True):
                proc = subprocess.Popen(
                    common + extra,
                    cwd=str(ROOT),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    # Long workers yield the cores to the interactive one and to the web server when both are busy.
                    preexec_fn=functools.partial(os.nice, niceness) if niceness and os.name == "posix" else None,  # noqa: PLW1509
                )
                self._procs.append(proc)
        finally:
            if log_file is not None:
                log_file.close()

    def _remove_tls_files(self) -> None:
        if self.tls_dir is not None:
            shutil.rmtree(self.tls_dir, ignore_errors=True)
            self.tls_dir = None

    def kill_workers(self) -> None:
        """Kill the worker processes at once, after their scheduler stopped.

        Without their scheduler there is nothing to save, and SIGTERM would wait on their reconnection attempts.
        """
        for proc in self._procs:
            _kill_tree(proc.pid)

    def stop(self, cluster_timeout: float = 10) -> None:
        """Stop the worker processes (killed if they ignore SIGTERM), the scheduler and the certificate folder."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                _kill_tree(proc.pid)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        self._procs = []
        if self.dask_cluster is not None:
            try:
                self.dask_cluster.close(timeout=cluster_timeout)
            except Exception:  # noqa: BLE001 (closing anyway)
                pass
            self.dask_cluster = None
        self._remove_tls_files()
