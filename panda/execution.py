"""The library's one execution layer: heavy jobs on Dask distributed worker processes.

A process-wide :class:`Executor` (:func:`get_executor`) runs jobs on a Dask cluster:

* **Local by default**: a scheduler in this process and ``max(cores, 2) + 1`` worker processes (one
  thread each: one per core for any job, one more kept for interactive jobs, see *Priorities*), every
  worker under a nanny with a memory limit (:func:`memory_limit_bytes`): a worker
  that grows past it is restarted by its nanny, and an address-space cap set in the worker
  (:func:`dask_setup`) turns one huge allocation into a MemoryError first. The workers are
  ``dask worker`` processes started from the project root, not ``LocalCluster(processes=True)``:
  that one starts its workers with multiprocessing's *spawn*, which re-runs ``sys.modules["__main__"]``,
  and under Streamlit that is the app script (the nanny then fails to start).
  **Toward other users of the machine** (a connection to a scheduler or worker runs any Python code as
  this user): every connection is TLS with a certificate made for the cluster
  (``Security.temporary()``; the worker processes read it from a private 0700 folder, removed with the
  cluster) that both ends must show, and every listener (scheduler, its HTTP routes, nannies, workers,
  the workers' HTTP routes) binds 127.0.0.1. A local scheduler that stopped is replaced by a new local
  cluster on the next job (:attr:`Executor.recoveries`); the executor stays open meanwhile.
* **A cluster when named**: ``PANDA_DASK_SCHEDULER=tls://host:8786`` (or ``Executor(address)``)
  connects to an existing scheduler instead, with the certificates of Dask's own configuration
  (:data:`TLS_CONFIG_ENV`: ``DASK_DISTRIBUTED__COMM__TLS__CA_FILE``, ``..._CLIENT__CERT``,
  ``..._CLIENT__KEY``; README "Serving a class" makes them). Its workers must import ``panda`` (run them
  from the project's checkout or install the package: ``cd /path/to/checkout && PYTHONPATH=. dask
  worker ...``), one thread each (``--nthreads 1``), optionally ``--preload panda.execution`` for the
  address-space cap and warm imports, ``--resources long=1`` on the workers that may run long jobs.

:meth:`Executor.run` returns a job's value or raises :class:`JobError` / :class:`JobTimeout` with a
readable message (never a traceback):

* **Time limit**: counted from the moment a worker starts the job; past it the job is cancelled and its
  worker restarted through the scheduler (``Client.restart_workers``: a running Python task cannot be
  interrupted otherwise). A job no worker starts within ``queue_limit_s`` is withdrawn.
* **Memory**: MemoryError in the job, or the death of its worker (the nanny's memory limit, a crash),
  is a JobError; a worker that saw a MemoryError is restarted. The server never runs the job itself.
* **Server memory**: Dask keeps the last messages of every connection for debugging, each with its
  job's pickled arguments; this layer keeps :data:`MESSAGE_LOG_LENGTH` of them, not Dask's 1000 (at
  1000 a classroom server's memory grows for as long as it runs).
* **Progress**: the job's ``progress(phase, fraction)`` calls become Dask events (``log_event`` on the
  worker, ``subscribe_topic`` here) that ``run`` relays to its ``progress`` callback in the caller's
  thread.
* **Priorities**: :data:`HIGH` (interactive: a PAnDA run, a mechanism matrix, an audit) is scheduled
  before :data:`LOW` (long: sweeps, trade-off curves, the optimal LP), through Dask's ``priority=``.
  Dask never pre-empts a running task, so long jobs are also kept off one worker: they need the worker
  resource ``long`` (the local cluster gives it to all workers but the first; a cluster without any
  ``long`` worker runs long jobs anywhere). A student's slider therefore never waits for another's LP.
  The kept worker is one process more than cores: long jobs still get every core (with only one
  worker per core, one of them kept, they would get one core fewer), and an interactive job shares the
  CPU with them rather than wait for them.
* **Cores**: each running job leaves a file named by its worker's pid in a per-machine folder
  (:data:`RUNNING_DIR_ENV`; used only if it is this user's own folder and not a symlink, narrowed to
  mode 0700, its files made and removed without following links), and the optimal LP's compiled
  steps (:mod:`panda._pdhg_blocks`) use the job's share of the cores (:func:`core_share`), asked
  before every batch of steps: both cores when it runs alone, one each when two jobs run (two
  spinning OpenMP threads per job on 2 cores collapse).
* **Sharing**: a job's Dask key is its name plus a hash of its arguments (:func:`job_key`), so
  identical jobs from different sessions join one computation in flight instead of repeating it.

:meth:`Executor.submit` returns a ``distributed.Future`` (for many jobs at once) and
:meth:`Executor.result` waits for one under the same rules.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import inspect
import logging
import os
import queue
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from panda.threads import cores

__all__ = [
    "default_priority",
    "HIGH",
    "LOW",
    "SCHEDULER_ENV",
    "Executor",
    "JobError",
    "JobTimeout",
    "JobAbandoned",
    "JobBusy",
    "JobClusterLost",
    "close_executor",
    "core_share",
    "dask_setup",
    "get_executor",
    "job_key",
    "memory_limit_bytes",
    "running_jobs",
]

log = logging.getLogger(__name__)

#: Environment variable naming an existing scheduler (``tls://host:port``): connect instead of starting one.
SCHEDULER_ENV = "PANDA_DASK_SCHEDULER"
#: Environment variable overriding the number of local worker processes.
WORKERS_ENV = "PANDA_DASK_WORKERS"
#: Environment variable with a worker's address-space cap in bytes (read by :func:`dask_setup`).
ADDRESS_SPACE_ENV = "PANDA_WORKER_ADDRESS_SPACE"
#: Priority of interactive jobs (someone waits for them) and of long ones.
HIGH = 10
LOW = 0
#: The worker resource long jobs need (when some worker of the cluster has it).
LONG_RESOURCE = "long"
#: Dask event topic of the jobs' start and progress messages.
EVENT_TOPIC = "panda-job"
#: Share of the machine's memory the local workers may use together, and one worker's absolute cap.
MEMORY_FRACTION = 0.4
MEMORY_CAP_BYTES = 8 * 2**30
#: A worker's address space may exceed its memory limit by this much (thread stacks, libraries, maps).
ADDRESS_SPACE_HEADROOM_BYTES = 2 * 2**30
#: Seconds to wait for a restarted worker, and for the local scheduler's connection.
START_TIMEOUT_S = 120.0
#: Seconds to wait for a named scheduler's connection (a job then fails with a JobError).
CONNECT_TIMEOUT_S = 10.0
#: Seconds a job may wait for a worker to start it before it is withdrawn.
QUEUE_LIMIT_S = 300.0
#: Least seconds between two progress messages of one job (phase changes are always sent).
PROGRESS_INTERVAL_S = 0.1
#: A local worker exits when its scheduler (this process) has been gone this long, seconds.
DEATH_TIMEOUT_S = 60
#: Messages Dask keeps per connection for debugging (``distributed.admin.low-level-log-length``, default 1000).
#: Every kept message under 1 MB holds its job's pickled arguments whole (an Instance at the dashboard's
#: sizes fits under it), so with the default a classroom server grows for as long as it runs
#: (``bench/bench_load.py --soak`` measures it). Set in this process and in the local workers.
MESSAGE_LOG_LENGTH = 4
MESSAGE_LOG_ENV = "DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH"
#: The project root: local workers run from there (they import ``panda``).
ROOT = Path(__file__).resolve().parent.parent

#: Environment variable naming the folder where each running job leaves a file named by its worker's
#: pid (default: one folder per user in the temporary directory, shared by every worker of the machine).
RUNNING_DIR_ENV = "PANDA_RUNNING_JOBS_DIR"


def worker_pre_spawn_environ() -> dict:
    """The environment Dask's nanny sets before it starts a local worker process: Dask's own
    (``distributed.nanny.pre-spawn-environ``) without ``MALLOC_TRIM_THRESHOLD_`` (None unsets it; see
    :meth:`Executor._start_workers`)."""
    import dask

    return {**dask.config.get("distributed.nanny.pre-spawn-environ", {}), "MALLOC_TRIM_THRESHOLD_": None}


#: The long workers' nice value (their nanny and worker processes): under load the CPU goes first to the
#: web server and the interactive worker, so a class's sliders stay quick while curves are computed.
LONG_WORKER_NICENESS = 10
#: Jobs one owner (a dashboard session) may have in flight at once; more wait in the owner's own thread.
MAX_JOBS_PER_OWNER = 3
#: Seconds a job nobody waits for any more is kept before it is withdrawn (a reload re-joins it meanwhile).
ABANDON_GRACE_S = 5.0
#: Seconds between two "busy: N ahead of you" messages of a job waiting for a worker.
QUEUE_REPORT_S = 1.0

MEMORY_MESSAGE = "MemoryError: the computation needs more memory than the dashboard allows"
CRASH_MESSAGE = "the computation crashed its process (its worker died; out of memory?)"


class JobError(RuntimeError):
    """A job failed: its exception (as ``"Type: message"``), MemoryError, or the death of its worker."""


class JobTimeout(JobError):
    """A job ran past its time limit (or found no worker); it was stopped and its worker restarted."""


class JobBusy(JobTimeout):
    """No worker started the job within the queue limit (the cluster is busy); it was withdrawn."""


class JobClusterLost(JobError):
    """The computing cluster stopped during the job (a local one is replaced on the next job)."""


class JobAbandoned(JobError):
    """The caller stopped waiting (``keep_waiting`` said no: its session went away); see :meth:`Executor.run`."""


class JobMemoryError(JobError):
    """Raised on the worker for a MemoryError in a job (the client restarts that worker)."""


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


# ---------------------------------------------------------------------------------------------
# Keys: identical jobs share one Dask key
# ---------------------------------------------------------------------------------------------

_NORMALIZERS_REGISTERED = False


def _register_normalizers() -> None:
    """Hash panda's road networks and instances by their public fields (not their lazy ``_cache``)."""
    global _NORMALIZERS_REGISTERED
    if _NORMALIZERS_REGISTERED:
        return
    from dask.base import normalize_token

    from panda.instance import Instance
    from panda.network import RoadNetwork

    def public_fields(obj: Any) -> tuple:
        fields = [f.name for f in dataclasses.fields(obj) if not f.name.startswith("_")]
        return (type(obj).__qualname__, [(name, normalize_token(getattr(obj, name))) for name in fields])

    normalize_token.register((Instance, RoadNetwork))(public_fields)
    _NORMALIZERS_REGISTERED = True


def job_key(label: str, args: tuple, kwargs: dict | None = None) -> str:
    """Return the Dask key of a job: ``"<label>-<hash of the arguments>"``, the same for equal arguments.

    Arguments dask cannot hash deterministically give a unique key (the job is then not shared).
    """
    from dask.base import tokenize

    _register_normalizers()
    try:
        token = tokenize(label, args, kwargs or {}, ensure_deterministic=True)
    except Exception:  # noqa: BLE001 (an unhashable argument: run the job unshared)
        token = uuid.uuid4().hex
    return f"{label}-{token}"


# ---------------------------------------------------------------------------------------------
# On the worker
# ---------------------------------------------------------------------------------------------


def dask_setup(worker: Any) -> None:  # pragma: no cover (runs in the worker process)
    """Dask preload hook (``dask worker ... --preload panda.execution``): cap the address space, import panda.

    The cap is ``PANDA_WORKER_ADDRESS_SPACE`` bytes, else the worker's memory limit plus
    :data:`ADDRESS_SPACE_HEADROOM_BYTES` (none without a memory limit): a single allocation beyond it
    raises MemoryError in the job instead of pushing the machine into swap or the OOM killer.
    """
    value = os.environ.get(ADDRESS_SPACE_ENV, "").strip()
    limit = int(value) if value else 0
    if not limit:
        memory = getattr(getattr(worker, "memory_manager", None), "memory_limit", None)
        limit = int(memory) + ADDRESS_SPACE_HEADROOM_BYTES if memory else 0
    if limit > 0:
        try:
            import resource

            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (limit if hard < 0 else min(limit, hard), hard))
        except (ImportError, ValueError, OSError):
            pass
    import panda  # noqa: F401  (the first job starts warm)


def _running_dir() -> Path:
    folder = os.environ.get(RUNNING_DIR_ENV, "").strip()
    if folder:
        return Path(folder)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"panda-running-jobs-{uid}"


_WARNED_DIRS: set[str] = set()
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _refuse(folder: Path, why: str) -> None:
    """Warn (once per folder and process) that the running-jobs folder is not used."""
    if str(folder) not in _WARNED_DIRS:
        _WARNED_DIRS.add(str(folder))
        log.warning("not using the running-jobs folder %s (%s); jobs are counted as alone", folder, why)


def _open_private_dir(folder: Path, *, create: bool) -> int | None:
    """Open ``folder`` as a private folder of this user and return its descriptor, or None (not used).

    In a shared temporary directory another user may have made the folder, or a symlink in its place:
    the folder is opened without following a symlink (``O_NOFOLLOW``), and used only if it is a
    directory owned by this user; group or other permission bits on it are removed (``fchmod`` of the
    opened folder, so it is that very folder). Markers are then made and removed through the
    descriptor, never through a path a symlink could redirect.
    """
    if create:
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        fd = os.open(folder, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file; EACCES: another user's
        if os.path.islink(folder):
            _refuse(folder, "it is a symbolic link")
        else:
            _refuse(folder, _describe(exc))
        return None
    try:
        st = os.fstat(fd)
        uid = os.getuid() if hasattr(os, "getuid") else st.st_uid
        if not stat.S_ISDIR(st.st_mode):
            _refuse(folder, "not a folder")
        elif st.st_uid != uid:
            _refuse(folder, f"owned by uid {st.st_uid}, not {uid}")
        else:
            if stat.S_IMODE(st.st_mode) & 0o077:
                os.fchmod(fd, 0o700)
            return fd
    except OSError as exc:
        _refuse(folder, _describe(exc))
    os.close(fd)
    return None


def running_jobs(folder: str | os.PathLike | None = None) -> int:
    """Jobs running on this machine now (at least 1): the files of live processes in the running-jobs folder.

    A file whose process is gone (a worker killed mid-job) is not counted, and is removed. A folder
    that is not this user's private folder (see :func:`_open_private_dir`) is not read: 1.
    """
    folder = Path(folder) if folder is not None else _running_dir()
    fd = _open_private_dir(folder, create=False)
    if fd is None:
        return 1
    try:
        names = os.listdir(fd)
        n = 0
        for name in names:
            if not name.isdigit():
                continue
            try:
                if not stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    continue  # only files this layer made are counted (a symlink is neither followed nor counted)
                os.kill(int(name), 0)
            except (ProcessLookupError, OverflowError):  # gone (or never a pid): not counted, cleared
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
                continue
            except PermissionError:  # alive, another user's process
                pass
            except OSError:  # removed meanwhile
                continue
            n += 1
        return max(n, 1)
    except OSError:
        return 1
    finally:
        os.close(fd)


def core_share() -> int:
    """Return a job's share of the cores: the cores this process may use over the jobs running now.

    :data:`panda._pdhg_blocks.thread_policy` in the workers (asked before every compiled step batch).
    """
    return max(1, cores() // running_jobs())


def _make_marker(fd: int, name: str) -> bool:
    """Create the regular file ``name`` in the folder ``fd`` (never through a symlink); False if impossible."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW
    for _ in range(2):
        try:
            os.close(os.open(name, flags, 0o600, dir_fd=fd))
            return True
        except FileExistsError:  # a stale marker (a reused pid) or a planted link: remove the entry itself
            try:
                if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    return False
                os.unlink(name, dir_fd=fd)  # unlink removes a symlink, not its target
            except OSError:
                return False
        except OSError:
            return False
    return False


@contextlib.contextmanager
def _running() -> Iterator[None]:
    """Mark this process as running a job for the length of the block (see :func:`running_jobs`)."""
    name = str(os.getpid())
    fd = _open_private_dir(_running_dir(), create=True)
    if fd is not None and not _make_marker(fd, name):  # no usable folder: the job runs, counted as alone
        os.close(fd)
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
            os.close(fd)


class _Reporter:
    """A job's ``progress(phase, fraction)`` on the worker: throttled Dask events for the client."""

    def __init__(self, worker: Any, key: str) -> None:
        self._worker, self._key = worker, key
        self._phase: str | None = None
        self._last = 0.0

    def __call__(self, phase: str, fraction: float) -> None:
        now = time.monotonic()
        phase = str(phase)
        if phase == self._phase and now - self._last < PROGRESS_INTERVAL_S:
            return
        self._phase, self._last = phase, now
        msg = {"key": self._key, "event": "progress", "phase": phase, "fraction": float(fraction)}
        self._worker.log_event(EVENT_TOPIC, msg)


def default_priority(fn: Callable[..., Any]) -> int:
    """A job's own priority (:func:`panda.jobs.interactive_job`, :func:`panda.jobs.long_job`), HIGH if it has none."""
    return int(getattr(fn, "priority", HIGH))


def _takes_progress(fn: Callable[..., Any]) -> bool:
    try:
        return "progress" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _execute(target: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Run one job on a worker (the Dask task of every job): announce its start, turn failures into JobError."""
    from distributed import get_worker

    worker = get_worker()
    key = str(worker.get_current_task())
    worker.log_event(EVENT_TOPIC, {"key": key, "event": "start", "worker": worker.address, "pid": os.getpid()})
    try:
        fn = target
        if _takes_progress(fn):
            kwargs = {**kwargs, "progress": _Reporter(worker, key)}
        from panda import _pdhg_blocks

        _pdhg_blocks.thread_policy = core_share  # compiled steps share the cores with the other jobs
        with _running():
            return fn(*args, **kwargs)
    except MemoryError:
        raise JobMemoryError(MEMORY_MESSAGE) from None
    except JobError:
        raise
    except Exception as exc:  # reported as a plain message; the worker lives on
        raise JobError(_describe(exc)) from None


# ---------------------------------------------------------------------------------------------
# In the client (the dashboard's server, a script)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class _Flight:
    """One job in flight, shared by every caller waiting for its key."""

    key: str
    submitted: float
    base: str = ""
    future: Any = None
    started: float | None = None
    worker: str | None = None
    stopped: str | None = None
    waiters: list = dataclasses.field(default_factory=list)
    priority: int = 0
    #: Callers that asked for this job and have not finished waiting (a job with none may be withdrawn).
    claims: int = 0
    #: Set once ``future`` is there (or the submission failed): a caller that joins a job in flight waits for it.
    submitted_event: threading.Event = dataclasses.field(default_factory=threading.Event)


class Executor:
    """Jobs on a Dask cluster: a local one started here, or an existing scheduler's.

    Parameters
    ----------
    address
        A scheduler address (``tls://host:port``, with the certificates of :data:`TLS_CONFIG_ENV`) to
        connect to; default: ``PANDA_DASK_SCHEDULER``, else a local cluster. (``tcp://`` to another
        machine works but is warned about: anyone who can reach that scheduler can run code on it.)
    n_workers
        Local worker processes (default :func:`default_n_workers`); ignored for a named scheduler.
    memory_limit
        One local worker's memory limit, bytes (default :func:`memory_limit_bytes`).
    address_space
        One local worker's address-space cap, bytes (default: ``memory_limit`` plus
        :data:`ADDRESS_SPACE_HEADROOM_BYTES`; 0: none).
    queue_limit_s
        Seconds a job may wait for a worker to start it.
    worker_log
        File for the local workers' output (default: discarded).
    connect_timeout_s
        Seconds to wait for a named scheduler (connected on first use).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        n_workers: int | None = None,
        memory_limit: int | None = None,
        address_space: int | None = None,
        queue_limit_s: float = QUEUE_LIMIT_S,
        worker_log: str | os.PathLike | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        import dask
        import distributed  # noqa: F401 (first: its exit handlers are registered before this executor's)

        # Before any connection exists: every BatchedSend reads the length when it is made.
        dask.config.set({"distributed.admin.low-level-log-length": MESSAGE_LOG_LENGTH})
        self.queue_limit_s = float(queue_limit_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}  # by Dask key
        self._owners: dict[tuple[str, str], int] = {}  # (owner, kind) -> jobs in flight (see run's owner)
        self._owner_free = threading.Condition()
        self._owner_freed: dict[tuple[str, str], float] = {}  # (owner, kind) -> when a slot was last given back
        self._current: dict[str, str] = {}  # job key -> Dask key of its flight
        self._reissued: dict[str, int] = {}  # job key -> times it was stopped (a stopped key is not reused)
        self._procs: list[subprocess.Popen] = []
        self._cluster: Any = None
        self._security: Any = None  # the local cluster's TLS (Security.temporary); None: Dask's configuration
        self._tls_dir: Path | None = None  # its certificate and key as files for the worker processes
        self._worker_log = worker_log
        self._worker_env: dict[str, str] | None = None  # the local workers' environment (kept for a restart)
        self._recover_lock = threading.Lock()
        #: Times the local cluster was started anew after its scheduler stopped.
        self.recoveries = 0
        self._closed = False
        self._restarts: list[threading.Thread] = []
        self._long_checked = -1e9
        self._long_available = False
        #: Worker addresses restarted by this executor (time limits, MemoryError), oldest first.
        self.restarted: list[str] = []
        address = address or os.environ.get(SCHEDULER_ENV, "").strip() or None
        if address is None:
            self.n_workers = int(n_workers) if n_workers else default_n_workers()
            self.memory_limit = int(memory_limit) if memory_limit else memory_limit_bytes(self.n_workers)
            self.address_space = (
                int(address_space) if address_space is not None else self.memory_limit + ADDRESS_SPACE_HEADROOM_BYTES
            )
            address = self._start_local(worker_log)
            self.local = True
        else:
            self.n_workers = 0
            self.memory_limit = 0
            self.address_space = 0
            self.local = False
            if _unencrypted_remote(address):
                log.warning(
                    "the computing cluster at %s is reached without TLS: anyone who can reach it can run code "
                    'on it (README "Serving a class": tls:// with certificates)',
                    address,
                )
        self.address = address
        if self.local:
            try:
                self._connect()
            except BaseException:
                self._stop_local()
                raise
        # A named scheduler is connected to on first use: a page never hangs on an unreachable cluster
        # before its first job, and the job then fails with a readable JobError.
        # Registered after distributed's own exit handlers (atexit runs last-in first-out): at exit this
        # executor closes its client and workers before distributed closes the scheduler under them.
        atexit.register(self.close)

    # --- the local cluster ---------------------------------------------------------------------

    def _start_local(self, worker_log: str | os.PathLike | None) -> str:
        """Start a scheduler in this process and the worker processes; return the scheduler's address.

        Every connection is TLS with a certificate made for this cluster (``Security.temporary()``) that
        both ends must show, so another user of the machine cannot reach the scheduler or the workers
        (a connection to them runs any Python code as this user); every listener binds 127.0.0.1.
        """
        import dask
        from distributed import LocalCluster, Security

        temporary = Security.temporary()
        self._tls_dir = _write_tls_files(temporary)
        tls_files = {"cert": str(self._tls_dir / "cert.pem"), "key": str(self._tls_dir / "key.pem")}
        try:
            # This process reads the same files (held in memory, Dask would write the key to a new temporary
            # file for every connection).
            self._security = Security(
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
                self._cluster = LocalCluster(
                    n_workers=0,
                    processes=True,
                    host="127.0.0.1",
                    protocol="tls://",
                    security=self._security,
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
            self._cluster.scheduler.allowed_failures = 1
            address = self._cluster.scheduler_address
            self._start_workers(address, tls_files, worker_log)
        except BaseException:  # (the log file cannot be opened, a worker group cannot be started, ...)
            self._stop_local()  # its scheduler, the workers started already and the certificate folder
            raise
        return address

    def _start_workers(self, address: str, tls_files: dict[str, str], worker_log: str | os.PathLike | None) -> None:
        """Start the local worker processes (``dask worker`` groups) for the scheduler at ``address``."""
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
        log_file = open(worker_log, "ab") if worker_log else None  # noqa: SIM115 (closed below)
        out: Any = log_file if log_file is not None else subprocess.DEVNULL
        common = [
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
        groups = [
            ["--nworkers", "1", "--name", "panda-interactive"],
            ["--nworkers", str(self.n_workers - 1), "--name", "panda-long", "--resources", f"{LONG_RESOURCE}=1"],
        ]
        try:
            for extra, niceness in zip(groups, (0, LONG_WORKER_NICENESS), strict=True):
                proc = subprocess.Popen(
                    common + extra,
                    cwd=str(ROOT),
                    env=self._worker_env,
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
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None

    def _stop_local(self, cluster_timeout: float = 10) -> None:
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
        if self._cluster is not None:
            try:
                self._cluster.close(timeout=cluster_timeout)
            except Exception:  # noqa: BLE001 (closing anyway)
                pass
            self._cluster = None
        self._remove_tls_files()

    def _scheduler_gone(self) -> bool:
        """Return True when the local cluster's scheduler (in this process) has stopped, or its client has."""
        if not self.local or self._closed:
            return False
        from distributed.core import Status

        cluster = self._cluster
        if cluster is None or cluster.scheduler is None or cluster.scheduler.status != Status.running:
            return True
        return self._client is not None and self._client.status in ("closing", "closed")

    def _recover(self) -> None:
        """Start a new local cluster when the scheduler of this one has stopped (called before each job)."""
        if not self._scheduler_gone():
            return
        with self._recover_lock:
            if not self._scheduler_gone():
                return  # another thread did it
            log.warning("the local Dask scheduler at %s stopped; starting a new local cluster", self.address)
            with self._client_lock:
                old, self._client = self._client, None
            if old is not None:
                client_log = logging.getLogger("distributed.client")
                level = client_log.level
                client_log.setLevel(logging.CRITICAL)  # its cancelled reconnection logs a traceback otherwise
                try:
                    with contextlib.suppress(Exception):
                        old.close(timeout=5)
                finally:
                    client_log.setLevel(level)
            with self._lock:  # jobs of the old cluster are not joined again
                self._current.clear()
            for proc in self._procs:  # nothing to save without their scheduler (SIGTERM waits on reconnects)
                _kill_tree(proc.pid)
            self._stop_local(cluster_timeout=2)
            self.address = self._start_local(self._worker_log)
            self.recoveries += 1
            try:
                self._connect()
            except BaseException:
                self._stop_local()
                raise

    # --- the connection --------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The ``distributed.Client``, connected on first use (raises JobError if the scheduler is unreachable).

        A local cluster whose scheduler stopped is replaced first (:meth:`_recover`). While another thread
        replaces it (the new scheduler runs, but :attr:`address` still names the old one), this waits for
        that thread rather than dial the old address, which would hold the connection lock for
        :data:`START_TIMEOUT_S`.
        """
        for _ in range(2):
            self._recover()
            client = self._client
            if client is None and not self.local:
                self._connect()
                client = self._client
            elif client is None:
                with self._recover_lock:  # no recovery half done
                    if self._client is None and not self._scheduler_gone():
                        self._connect()
                    client = self._client
            if client is not None:
                return client
            # The scheduler stopped again, or the recovery another thread made failed: once more.
        msg = "the computing cluster could not be started; try again"
        raise JobClusterLost(msg)

    def _connect(self) -> None:
        from distributed import Client

        with self._client_lock:
            if self._client is not None:
                return
            if self._closed:
                msg = "the computing cluster was shut down"
                raise JobError(msg)
            timeout = START_TIMEOUT_S if self.local else self.connect_timeout_s
            if not self.local and str(self.address).startswith("tls://") and not _tls_configured():
                msg = (
                    f"the computing cluster at {self.address} needs TLS certificates: set "
                    + ", ".join(TLS_CONFIG_ENV)
                    + ' (README "Serving a class")'
                )
                raise JobError(msg)
            try:
                client = Client(self.address, set_as_default=False, timeout=timeout, security=self._security)
            except Exception as exc:  # noqa: BLE001 (OSError, TimeoutError, ...: one readable message)
                msg = f"the computing cluster at {self.address} cannot be reached ({_describe(exc)})"
                raise JobError(msg) from None
            client.subscribe_topic(EVENT_TOPIC, self._on_event)
            self._client = client

    # --- state -----------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after :meth:`close`, or when the connection to a named scheduler is gone for good.

        A local cluster whose scheduler stopped is not closed: the next job starts a new one.
        """
        if self._closed:
            return True
        return not self.local and self._client is not None and self._client.status in ("closing", "closed")

    def worker_info(self) -> dict[str, dict]:
        """Return the scheduler's workers: address -> {"name", "resources", "pid", ...}."""
        return dict(self.client.scheduler_info(n_workers=-1)["workers"])

    def wait_for_workers(self, n: int | None = None, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until ``n`` workers (default: all local ones, else 1) are connected."""
        self.client.wait_for_workers(n or self.n_workers or 1, timeout=timeout_s)

    def _long_resources(self) -> dict | None:
        """``{"long": 1}`` when some worker has that resource (local cluster: always), else None."""
        if self.local:
            return {LONG_RESOURCE: 1}
        now = time.monotonic()
        if now - self._long_checked > 10.0:
            try:
                workers = self.worker_info().values()
                self._long_available = any(LONG_RESOURCE in (w.get("resources") or {}) for w in workers)
            except Exception:  # noqa: BLE001 (unknown: run long jobs anywhere)
                self._long_available = False
            self._long_checked = now
        return {LONG_RESOURCE: 1} if self._long_available else None

    # --- events from the workers -----------------------------------------------------------------

    def _on_event(self, event: tuple) -> None:
        """Hand a job's start or progress event to its waiters (called in the client's event loop)."""
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else event
        if not isinstance(msg, dict):
            return
        with self._lock:
            flight = self._flights.get(str(msg.get("key")))
            if flight is None:
                return
            item: tuple
            if msg.get("event") == "start":
                flight.started = time.monotonic()
                flight.worker = msg.get("worker")
                item = ("start",)
            else:
                item = ("progress", str(msg.get("phase", "")), float(msg.get("fraction", 0.0)))
            waiters = list(flight.waiters)
        for waiter in waiters:
            waiter.put(item)

    def _landed(self, flight: _Flight) -> None:
        """Forget ``flight`` (its future finished, failed or was cancelled) and wake its waiters."""
        with self._lock:
            self._forget(flight)
            waiters = list(flight.waiters)
        for waiter in waiters:
            waiter.put(("done",))

    def _forget(self, flight: _Flight) -> None:
        """Drop ``flight`` from the tables (under the lock)."""
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]
        if self._current.get(flight.base) == flight.key:
            del self._current[flight.base]

    # --- jobs ------------------------------------------------------------------------------------

    def _submit(
        self, target: Callable[..., Any], args: tuple, kwargs: dict, priority: int | None, key: str | None
    ) -> _Flight:
        if self.closed:
            msg = "the computing cluster was shut down"
            raise JobError(msg)
        if not callable(target):
            msg = f"A job is a function the workers can import (panda.jobs); got {target!r}."
            raise TypeError(msg)
        label = getattr(target, "__name__", "job")
        priority = default_priority(target) if priority is None else int(priority)
        self._recover()  # a local cluster whose scheduler stopped: a new one
        client = self.client  # JobError when the cluster cannot be reached
        base = key or job_key(label, args, kwargs)
        with self._lock:
            flight = self._flights.get(self._current.get(base, ""))
            if flight is not None and flight.stopped is None:
                flight.claims += 1
                return flight  # joined: the same job is already in flight
            # A stopped job's key is not submitted again (the scheduler may still be cancelling it).
            reissued = self._reissued.get(base, 0)
            key = f"{base}-r{reissued}" if reissued else base
            flight = _Flight(key=key, base=base, submitted=time.monotonic(), priority=priority, claims=1)
            self._flights[key] = flight
            self._current[base] = key
        # A long job (LOW, or below it: a session's later ones) needs a worker with the long resource. (Dask
        # does not give an interactive one to a worker busy with a long job: tests/panda/test_fairness.py.)
        resources = self._long_resources() if priority <= LOW else None
        try:
            future = client.submit(
                _execute, target, args, kwargs, key=key, priority=priority, resources=resources, retries=0
            )
        except Exception as exc:
            reason = f"the job could not be submitted ({_describe(exc)})"
            with self._lock:
                flight.stopped = reason
                self._forget(flight)
            flight.submitted_event.set()
            raise JobError(reason) from None
        flight.future = future
        flight.submitted_event.set()
        future.add_done_callback(lambda _f, fl=flight: self._landed(fl))
        return flight

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        priority: int | None = None,
        key: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Start job ``fn(*args, **kwargs)`` and return its ``distributed.Future`` at once.

        ``fn`` is a function the workers can import (a module-level function of an importable module, such as
        :mod:`panda.jobs`); if it has a ``progress`` parameter it gets the reporter.
        Equal jobs in flight share one computation (and one key). Wait with :meth:`result`.
        """
        flight = self._submit(fn, args, kwargs, priority, key)
        if flight.future is None:  # joined while its first caller is still submitting it
            flight.submitted_event.wait(self.connect_timeout_s + 60.0)
            if flight.future is None:
                raise JobError(flight.stopped or "the job could not be submitted in time")
        return flight.future

    def result(
        self,
        future: Any,
        *,
        timeout_s: float,
        progress: Callable[[str, float], None] | None = None,
    ) -> Any:
        """Wait for a future of :meth:`submit` under the rules of :meth:`run`."""
        with self._lock:
            flight = self._flights.get(future.key)
        if flight is None:  # already finished (or never seen here): no start time to count from
            flight = _Flight(key=future.key, submitted=time.monotonic(), future=future, started=time.monotonic())
        else:
            with self._lock:
                flight.claims += 1
        return self._wait(flight, float(timeout_s), progress)

    def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        timeout_s: float,
        priority: int | None = None,
        progress: Callable[[str, float], None] | None = None,
        key: str | None = None,
        owner: str | None = None,
        keep_waiting: Callable[[], bool] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run job ``fn(*args, **kwargs)`` on a worker and return its value.

        Parameters
        ----------
        fn
            A module-level function the workers can import (:mod:`panda.jobs`: ``run_panda_job``, ...).
        timeout_s
            Seconds the job may run once a worker has started it; past them it is stopped and its
            worker restarted (:class:`JobTimeout`).
        priority
            :data:`HIGH` (interactive) or :data:`LOW` (long); default: the job's own (:func:`default_priority`).
        progress
            ``progress(phase, fraction)``, called in this thread with the job's progress messages.
        key
            The Dask key (default :func:`job_key`: equal jobs share it and run once).
        owner
            Who asks (a dashboard session's id). An owner has at most :data:`MAX_JOBS_PER_OWNER` interactive
            and as many long jobs in flight (a further call waits here, saying so through ``progress``, for
            as long as they keep finishing: :class:`JobBusy` when none did for ``queue_limit_s``), and
            its n-th job of a kind in flight is queued one priority step below its first: owners are served in
            turn, so a session that opens many jobs does not hold up the others' first ones.
        keep_waiting
            Asked every 0.1 s while waiting; when it says no (the session went away), the wait ends with
            :class:`JobAbandoned`, and a job nobody else waits for is withdrawn after
            :data:`ABANDON_GRACE_S` (a long one that already runs is stopped and its worker restarted; an
            interactive one that runs is left to finish).

        While the job waits for a worker, ``progress("busy: N ahead of you", 0.0)`` says how many of this
        server's jobs go first (N > 0 only).

        Raises
        ------
        JobError
            The job failed (its exception as ``"Type: message"``, MemoryError, its worker died).
        JobTimeout
            Past the time limit (counted from the job's start on a worker).
        JobBusy
            (A JobTimeout.) No worker started it within ``queue_limit_s``, or (``owner``) its wait for a slot
            ran out: the server is busy, not the setting too heavy.
        JobAbandoned
            ``keep_waiting`` said no.
        """
        if owner is None:
            flight = self._submit(fn, args, kwargs, priority, key)
            return self._wait(flight, float(timeout_s), progress, keep_waiting)
        if priority is None:
            priority = default_priority(fn)
        # Interactive and long jobs have slots of their own: a session's slider never waits for its own curve.
        slots = (owner, "interactive" if int(priority) >= HIGH else "long")
        rank = self._enter(slots, progress, keep_waiting)
        try:
            flight = self._submit(fn, args, kwargs, int(priority) - rank, key)
            return self._wait(flight, float(timeout_s), progress, keep_waiting)
        finally:
            self._leave(slots)

    # --- fairness between owners -----------------------------------------------------------------

    def _enter(
        self,
        owner: tuple[str, str],
        progress: Callable[[str, float], None] | None,
        keep_waiting: Callable[[], bool] | None,
    ) -> int:
        """Take one of ``owner``'s job slots (waiting for one if all are taken); return its jobs before it.

        The wait is for the owner's own jobs (a curve's seven methods in three slots), so it goes on for as
        long as they keep finishing: it ends with :class:`JobBusy` (the server is busy, try again; never
        "too heavy") only when none of them gave its slot back for ``queue_limit_s``. It does not count
        against the job's time limit, which starts when a worker starts the job.
        """
        began = time.monotonic()
        told = False
        with self._owner_free:
            while self._owners.get(owner, 0) >= MAX_JOBS_PER_OWNER:
                if keep_waiting is not None and not keep_waiting():
                    msg = "nobody waits for this computation any more"
                    raise JobAbandoned(msg)
                if time.monotonic() > max(began, self._owner_freed.get(owner, began)) + self.queue_limit_s:
                    msg = (
                        f"the computation waited {self.queue_limit_s:.0f} s without a free worker: this session's "
                        f"other {MAX_JOBS_PER_OWNER} computations hold its share and none of them finished "
                        "meanwhile; try again when they have"
                    )
                    raise JobBusy(msg)
                if progress is not None and not told:
                    progress(f"busy: waiting for this session's other {MAX_JOBS_PER_OWNER} computations", 0.0)
                    told = True
                self._owner_free.wait(0.1)
            rank = self._owners.get(owner, 0)
            self._owners[owner] = rank + 1
        return rank

    def _leave(self, owner: tuple[str, str]) -> None:
        with self._owner_free:
            left = self._owners.get(owner, 1) - 1
            if left > 0:
                self._owners[owner] = left
                self._owner_freed[owner] = time.monotonic()
            else:
                self._owners.pop(owner, None)
                self._owner_freed.pop(owner, None)
            self._owner_free.notify_all()

    def jobs_of(self, owner: str) -> int:
        """Jobs ``owner`` has in flight now, interactive and long."""
        with self._owner_free:
            return sum(n for (who, _kind), n in self._owners.items() if who == owner)

    def ahead_of(self, flight: _Flight) -> int:
        """Count this server's jobs that a worker will start before ``flight`` (0 once it runs)."""
        if flight.started is not None:
            return 0
        with self._lock:
            return sum(
                1
                for other in self._flights.values()
                if other is not flight
                and other.started is None
                and other.stopped is None
                and (
                    other.priority > flight.priority
                    or (other.priority == flight.priority and other.submitted < flight.submitted)
                )
            )

    def _abandoned(self, flight: _Flight) -> None:
        """Withdraw ``flight`` if, after the grace period, nobody claims it (see :meth:`run`'s keep_waiting)."""

        def check() -> None:
            with self._lock:
                if flight.claims > 0 or flight.stopped is not None or flight.future is None or flight.future.done():
                    return
                running = flight.started is not None
            reason = "nobody waits for this computation any more"
            if not running:
                self._stop(flight, reason, restart=False, unclaimed_only=True)
            elif flight.priority <= LOW:
                self._stop(flight, reason, unclaimed_only=True)

        timer = threading.Timer(ABANDON_GRACE_S, check)
        timer.daemon = True
        timer.start()

    def _wait(
        self,
        flight: _Flight,
        timeout_s: float,
        progress: Callable[[str, float], None] | None,
        keep_waiting: Callable[[], bool] | None = None,
    ) -> Any:
        """Wait for ``flight`` (one of its claims, given back at the end)."""
        if flight.future is None:  # joined while its first caller is still submitting it
            flight.submitted_event.wait(self.connect_timeout_s + 60.0)
            if flight.future is None:
                with self._lock:
                    flight.claims = max(flight.claims - 1, 0)
                raise JobError(flight.stopped or "the job could not be submitted in time")
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        with self._lock:
            flight.waiters.append(inbox)
        abandoned = False
        told_ahead, told_at = -1, 0.0
        try:
            while not flight.future.done():
                try:
                    item = inbox.get(timeout=0.1)
                except queue.Empty:
                    item = None
                latest = item if item and item[0] == "progress" else None
                while True:  # relay only the newest of a burst
                    try:
                        item = inbox.get_nowait()
                    except queue.Empty:
                        break
                    if item[0] == "progress":
                        latest = item
                if latest is not None and progress is not None:
                    progress(latest[1], latest[2])
                now = time.monotonic()
                if keep_waiting is not None and not keep_waiting():
                    abandoned = True
                    msg = "nobody waits for this computation any more"
                    raise JobAbandoned(msg)
                if progress is not None and flight.started is None and now - told_at >= QUEUE_REPORT_S:
                    ahead = self.ahead_of(flight)
                    if ahead and ahead != told_ahead:
                        progress(f"busy: {ahead} ahead of you", 0.0)
                        told_ahead, told_at = ahead, now
                if flight.stopped is not None and not flight.future.done():
                    raise JobTimeout(flight.stopped)
                if flight.started is not None and now > flight.started + timeout_s:
                    reason = f"the computation did not finish within {timeout_s:.0f} s and was stopped"
                    self._stop(flight, reason)
                    raise JobTimeout(reason)
                if flight.started is None and now > flight.submitted + self.queue_limit_s:
                    reason = (
                        f"the computation waited {self.queue_limit_s:.0f} s without a free worker "
                        "(the computing cluster is busy or has no workers) and was withdrawn"
                    )
                    self._stop(flight, reason)
                    raise JobBusy(reason)
            return self._outcome(flight)
        finally:
            with self._lock:
                if inbox in flight.waiters:
                    flight.waiters.remove(inbox)
                flight.claims = max(flight.claims - 1, 0)
                unclaimed = flight.claims == 0
            if abandoned and unclaimed:
                self._abandoned(flight)

    def _outcome(self, flight: _Flight) -> Any:
        """Return the value of a finished future, or raise the JobError that says why there is none."""
        from distributed import KilledWorker

        future = flight.future
        status = future.status
        if status == "cancelled":
            if flight.stopped:
                raise JobTimeout(flight.stopped)
            reason = getattr(getattr(getattr(future, "_state", None), "exception", None), "reason", None)
            if reason == "scheduler-connection-lost" or self._scheduler_gone():
                msg = "the computing cluster stopped during the computation; try again"
                if self.local:
                    msg += " (a new one is started)"
                raise JobClusterLost(msg)
            raise JobError("the computation was cancelled")
        if status == "finished":
            try:
                return future.result()
            except Exception as lost:  # noqa: BLE001 (the result was lost with its worker)
                raise JobError(f"the result could not be fetched ({_describe(lost)})") from None
        error: BaseException | None
        try:
            error = future.exception()
        except Exception as err:  # noqa: BLE001
            error = err
        if isinstance(error, JobMemoryError):
            self._restart(flight.worker)
            raise JobError(str(error)) from None
        if isinstance(error, JobError):
            raise JobError(str(error)) from None
        if isinstance(error, KilledWorker):
            raise JobError(CRASH_MESSAGE) from None
        raise JobError(_describe(error) if error is not None else f"the computation ended as {status!r}") from None

    def _stop(self, flight: _Flight, reason: str, *, restart: bool = True, unclaimed_only: bool = False) -> None:
        """Cancel a job (for every caller waiting for it) and restart the worker running it.

        ``restart=False``: leave the worker alone (the job has not started); ``unclaimed_only``: do nothing
        if someone has claimed the job meanwhile (checked under the lock that claims take).
        """
        with self._lock:
            if flight.stopped is not None or (unclaimed_only and flight.claims > 0):
                return
            flight.stopped = reason
            self._reissued[flight.base] = self._reissued.get(flight.base, 0) + 1
            self._forget(flight)
        try:
            self.client.cancel([flight.future], reason=reason)
        except Exception:  # noqa: BLE001 (the worker restart below stops it anyway)
            log.debug("cancel of %s failed", flight.key, exc_info=True)
        if restart:
            self._restart(flight.worker)

    def _restart(self, address: str | None) -> None:
        """Restart one worker through the scheduler, in the background (its nanny starts a fresh process)."""
        if not address:
            return
        self.restarted.append(address)

        def restart() -> None:
            try:
                self.client.restart_workers([address], timeout=START_TIMEOUT_S, raise_for_error=False)
            except Exception:  # noqa: BLE001 (the worker may be gone already)
                log.debug("restart of %s failed", address, exc_info=True)

        thread = threading.Thread(target=restart, name="panda-worker-restart", daemon=True)
        thread.start()
        self._restarts.append(thread)

    def close(self) -> None:
        """Disconnect; stop the local cluster's workers and scheduler (a named scheduler is left running)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        deadline = time.monotonic() + 30.0
        for thread in self._restarts:  # let a restart finish before its scheduler goes
            thread.join(max(deadline - time.monotonic(), 0.0))
        if self._client is not None:
            try:
                self._client.close(timeout=10)
            except Exception:  # noqa: BLE001
                pass
        self._stop_local()


#: The HTTP routes of the local cluster's scheduler and workers (Dask's default adds metrics, task and
#: call-stack pages and a proxy; plain HTTP, which any user of the machine can ask on loopback).
HTTP_ROUTES = ("distributed.http.health",)

#: Dask's configuration of a client's certificates, as environment variables (a ``tls://`` scheduler).
TLS_CONFIG_ENV = (
    "DASK_DISTRIBUTED__COMM__TLS__CA_FILE",
    "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT",
    "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY",
)


def _unencrypted_remote(address: str) -> bool:
    """Return True for a ``tcp://`` (or scheme-less) address of another machine than this one."""
    scheme, _, rest = str(address).rpartition("://")
    if scheme not in ("", "tcp"):
        return False
    host = rest.rsplit(":", 1)[0].strip("[]") if ":" in rest else rest
    return host not in ("127.0.0.1", "::1", "localhost") and not host.startswith("127.")


def _tls_configured() -> bool:
    """Return True when Dask's configuration names a certificate authority and a client certificate."""
    from distributed import Security

    sec = Security()
    return bool(sec.tls_ca_file and sec.tls_client_cert)


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


_EXECUTOR: Executor | None = None
_EXECUTOR_LOCK = threading.Lock()


def get_executor(address: str | None = None, **options: Any) -> Executor:
    """Return the process-wide executor, started on first use (see :class:`Executor` for the arguments).

    Later calls return the same executor whatever their arguments, until :func:`close_executor` (or a
    lost connection to a named scheduler) ends it; a local cluster whose scheduler stopped is replaced
    inside the same executor by its next job.
    """
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None or _EXECUTOR.closed:
            if _EXECUTOR is not None:
                _EXECUTOR.close()
            _EXECUTOR = Executor(address, **options)
        return _EXECUTOR


def close_executor(executor: Executor | None = None) -> None:
    """Close ``executor`` (default: the process-wide one); the next :func:`get_executor` starts anew."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        target = executor or _EXECUTOR
        if target is _EXECUTOR:
            _EXECUTOR = None
    if target is not None:
        target.close()
