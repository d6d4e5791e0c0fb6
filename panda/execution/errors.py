"""How a job fails: :class:`JobError` and its kinds, with the readable messages the pages show.

A job never ends in a traceback: the worker turns its exception into ``"Type: message"``
(:func:`_describe`), a MemoryError into :data:`MEMORY_MESSAGE`, and the death of its worker becomes
:data:`CRASH_MESSAGE` in the client.
"""

from __future__ import annotations

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


def _describe(exc: BaseException) -> str:
    """Return ``"Type: message"`` for an exception (its type alone when it has no message)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
