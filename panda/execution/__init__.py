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
  A plain ``tcp://`` scheduler on another machine is refused (a JobError saying why) unless
  ``PANDA_DASK_ALLOW_PLAINTEXT=1`` (:data:`ALLOW_PLAINTEXT_ENV`) accepts the risk; on loopback it is accepted.

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

The package, one job per module:

:mod:`~panda.execution.executor`
    The :class:`Executor` that composes the parts below (:meth:`~Executor.submit`, :meth:`~Executor.run`,
    :meth:`~Executor.result`, :meth:`~Executor.close`), the process-wide :func:`get_executor` and
    :func:`close_executor`.
:mod:`~panda.execution.connection`
    The client of the scheduler (local, or named by :data:`SCHEDULER_ENV` with :data:`TLS_CONFIG_ENV`), a
    stopped local scheduler noticed and its cluster replaced, workers restarted through the scheduler.
:mod:`~panda.execution.cluster`
    The local cluster (:class:`~panda.execution.cluster.LocalCluster`): its TLS scheduler, certificate
    folder and worker processes, started and stopped; memory limits (:func:`memory_limit_bytes`), the
    number of workers (:func:`default_n_workers`), their environment (:func:`worker_pre_spawn_environ`).
:mod:`~panda.execution.flights`
    The jobs in flight, shared by their callers: the workers' events, the wait under the time and queue
    limits, the outcome as a value or a JobError, stopping a job.
:mod:`~panda.execution.fairness`
    Priorities (:data:`HIGH`, :data:`LOW`, :func:`default_priority`, :data:`LONG_RESOURCE`), the owners'
    job slots (:data:`MAX_JOBS_PER_OWNER`) and queue positions.
:mod:`~panda.execution.worker`
    What runs in the worker processes: the preload hook :func:`dask_setup` and the task around every job
    (start and progress events, failures as a JobError).
:mod:`~panda.execution.running`
    The running-jobs folder (:data:`RUNNING_DIR_ENV`, :func:`running_jobs`, :func:`core_share`).
:mod:`~panda.execution.keys`
    The jobs' Dask keys (:func:`job_key`).
:mod:`~panda.execution.errors`
    :class:`JobError` and its kinds, :data:`MEMORY_MESSAGE`, :data:`CRASH_MESSAGE`.

Everything public is importable from ``panda.execution`` itself, and the package is the module a worker
preloads (``--preload panda.execution``: Dask calls its :func:`dask_setup`).
"""

from panda.execution.cluster import SCHEDULER_ENV, memory_limit_bytes
from panda.execution.errors import JobAbandoned, JobBusy, JobClusterLost, JobError, JobTimeout
from panda.execution.executor import Executor, close_executor, get_executor
from panda.execution.fairness import HIGH, LOW, default_priority
from panda.execution.keys import job_key
from panda.execution.running import core_share, running_jobs
from panda.execution.worker import dask_setup

# Public names outside __all__ (settings, messages, helpers that code and tests import from here), re-exported
# explicitly.
# isort: off
from panda.execution.cluster import (
    DEATH_TIMEOUT_S as DEATH_TIMEOUT_S,
    HTTP_ROUTES as HTTP_ROUTES,
    LONG_WORKER_NICENESS as LONG_WORKER_NICENESS,
    MEMORY_CAP_BYTES as MEMORY_CAP_BYTES,
    MEMORY_FRACTION as MEMORY_FRACTION,
    MESSAGE_LOG_ENV as MESSAGE_LOG_ENV,
    MESSAGE_LOG_LENGTH as MESSAGE_LOG_LENGTH,
    ROOT as ROOT,
    WORKERS_ENV as WORKERS_ENV,
    default_n_workers as default_n_workers,
    worker_pre_spawn_environ as worker_pre_spawn_environ,
)
from panda.execution.connection import (
    ALLOW_PLAINTEXT_ENV as ALLOW_PLAINTEXT_ENV,
    CONNECT_TIMEOUT_S as CONNECT_TIMEOUT_S,
    START_TIMEOUT_S as START_TIMEOUT_S,
    TLS_CONFIG_ENV as TLS_CONFIG_ENV,
)
from panda.execution.errors import (
    CRASH_MESSAGE as CRASH_MESSAGE,
    MEMORY_MESSAGE as MEMORY_MESSAGE,
    JobMemoryError as JobMemoryError,
)
from panda.execution.fairness import (
    JOBS_PER_GROUP_ENV as JOBS_PER_GROUP_ENV,
    LONG_RESOURCE as LONG_RESOURCE,
    MAX_JOBS_PER_GROUP as MAX_JOBS_PER_GROUP,
    MAX_JOBS_PER_OWNER as MAX_JOBS_PER_OWNER,
)
from panda.execution.flights import (
    ABANDON_GRACE_S as ABANDON_GRACE_S,
    QUEUE_LIMIT_S as QUEUE_LIMIT_S,
    QUEUE_REPORT_S as QUEUE_REPORT_S,
)
from panda.execution.running import RUNNING_DIR_ENV as RUNNING_DIR_ENV
from panda.execution.worker import (
    ADDRESS_SPACE_ENV as ADDRESS_SPACE_ENV,
    ADDRESS_SPACE_HEADROOM_BYTES as ADDRESS_SPACE_HEADROOM_BYTES,
    EVENT_TOPIC as EVENT_TOPIC,
    PROGRESS_INTERVAL_S as PROGRESS_INTERVAL_S,
)

# Private names that other code reaches through the package (tests/app/test_usability.py,
# tests/panda/test_execution_security.py); not part of the API.
from panda.execution.errors import _describe as _describe
from panda.execution.running import _running as _running

# isort: on

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
