"""Uploaded OpenStreetMap files read on a worker process, for a server: :func:`reader`.

The dashboard's upload (``app/widgets/area_picker.py``) calls :func:`panda.network.network_from_upload` with
``read=reader(run)``: the server checks the file's size, hashes it and looks in the upload cache; a file not in
it is sent to :func:`panda.jobs.upload_network_job` on a worker process, which reads it
(:func:`panda.network.uploads.read_upload`, with the reader's caps) under the worker's memory limit and
:data:`UPLOAD_TIMEOUT_S`. The network comes back to the server, which keeps it in its upload cache. A job past
its limits is a sentence ("This file is too large to read here: ...").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from panda.network.roads import RoadNetwork
from panda.network.uploads import _upload_label

__all__ = ["UPLOAD_TIMEOUT_S", "reader"]

#: Seconds the upload job may run on its worker: the reader's caps are seconds of reading, osmnx's graph of
#: :data:`panda.network.MAX_UPLOAD_NODES` road nodes tens of seconds more.
UPLOAD_TIMEOUT_S = 180.0


def reader(run: Callable[..., Any], *, timeout_s: float = UPLOAD_TIMEOUT_S) -> Callable[..., RoadNetwork]:
    """Return a ``read`` for :func:`panda.network.network_from_upload` that reads the file on a worker.

    Parameters
    ----------
    run
        ``run(fn, *args, timeout_s=..., priority=..., key=...)`` that runs a job on a worker
        (:meth:`panda.execution.Executor.run`; the dashboard passes its session's).
    timeout_s
        Seconds the job may run on its worker.

    Returns
    -------
    Callable
        ``read(data, filename, network_type, max_decompressed_bytes, max_nodes)``: the network, or a ValueError
        with a sentence (the file's own, from the worker; or the job's time or memory limit; or a busy server).
    """

    def read(data: bytes, filename: str, *args: Any) -> RoadNetwork:
        return _read_on_worker(run, float(timeout_s), data, filename, args)

    return read


def _read_on_worker(run: Callable[..., Any], timeout_s: float, data: bytes, filename: str, args: tuple) -> RoadNetwork:
    import numpy as np

    from panda import jobs
    from panda.execution import HIGH, MEMORY_MESSAGE, JobBusy, JobError, JobTimeout

    label = _upload_label(filename)
    # The job's key from the file's sha256: Dask's own (a hash of the arguments) copies the bytes many times over.
    token = hashlib.sha256(repr((hashlib.sha256(data).hexdigest(), filename, *args)).encode()).hexdigest()[:32]
    # As an array of bytes (no copy): Dask sends an array's buffer as it is, where it would pickle bytes into the
    # task's message (several copies of a 50 MB file in the server).
    buffer = np.frombuffer(data, dtype=np.uint8)
    try:
        out = run(
            jobs.upload_network_job,
            buffer,
            filename,
            *args,
            timeout_s=timeout_s,
            priority=HIGH,
            key=f"upload_network_job-{token}",
        )
    except JobBusy:  # no worker (or no slot of this session's) in time: the file is not the cause
        msg = (
            f"The file {label!r} could not be read now: every computing worker of this server is busy. Try again "
            "in a moment."
        )
        raise ValueError(msg) from None
    except JobTimeout:
        msg = (
            f"This file is too large to read here: reading it takes longer than {timeout_s:,.0f} s. Cut a smaller "
            "area out of it (for example with osmium extract) or use an embedded city."
        )
        raise ValueError(msg) from None
    except JobError as exc:
        text = str(exc)
        if MEMORY_MESSAGE in text or "crashed" in text or "died" in text:
            msg = (
                "This file is too large to read here: it needs more memory than this server allows one file. Cut "
                "a smaller area out of it (for example with osmium extract) or use an embedded city."
            )
        else:  # a failure of the worker the file did not cause (its words go to the details line)
            msg = f"The file {label!r} could not be read on this server's worker process ({text})."
        raise ValueError(msg) from None
    if "error" in out:
        raise ValueError(out["error"])
    return out["network"]
