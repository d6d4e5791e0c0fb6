"""Former home of the dashboard's worker processes; the heavy jobs now run on :mod:`panda.execution` (Dask).

Kept only so that ``from app.worker import WorkerError`` keeps working until every page imports
:class:`panda.execution.JobError` instead; delete this module then.
"""

from panda.execution import JobError as WorkerError
from panda.execution import JobTimeout
from panda.jobs import JOBS

__all__ = ["WorkerError", "JobTimeout", "JOBS"]
