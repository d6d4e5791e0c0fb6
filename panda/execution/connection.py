"""The executor's connection to its scheduler, and what keeps it working.

:class:`Connection` holds the ``distributed.Client`` of a local cluster's scheduler
(:class:`~panda.execution.cluster.LocalCluster`) or of a named one (``PANDA_DASK_SCHEDULER``, with the
certificates of :data:`TLS_CONFIG_ENV`), connected on first use. A local scheduler that stopped is
noticed before the next job and replaced by a new local cluster (:meth:`Connection.recover`); a worker
is restarted through the scheduler (:meth:`Connection.restart`: time limits, MemoryError).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from panda.execution.errors import JobClusterLost, JobError, _describe
from panda.execution.worker import EVENT_TOPIC

if TYPE_CHECKING:
    from panda.execution.cluster import LocalCluster

log = logging.getLogger(__name__)

#: Dask's configuration of a client's certificates, as environment variables (a ``tls://`` scheduler).
TLS_CONFIG_ENV = (
    "DASK_DISTRIBUTED__COMM__TLS__CA_FILE",
    "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT",
    "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY",
)
#: Set to 1 to accept a named scheduler on another machine over plain ``tcp://`` (refused otherwise: anyone
#: who can reach such a scheduler can run code on it and on its workers).
ALLOW_PLAINTEXT_ENV = "PANDA_DASK_ALLOW_PLAINTEXT"
#: Seconds to wait for a restarted worker, and for the local scheduler's connection.
START_TIMEOUT_S = 120.0
#: Seconds to wait for a named scheduler's connection (a job then fails with a JobError).
CONNECT_TIMEOUT_S = 10.0


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


class Connection:
    """The client of a local cluster's scheduler or of a named one; a stopped local cluster is replaced.

    Parameters
    ----------
    address
        A named scheduler's address; None with ``cluster`` (its address once :meth:`start` started it).
    cluster
        The local cluster to start and connect to (None: a named scheduler, connected to on first use).
    connect_timeout_s
        Seconds to wait for a named scheduler.
    """

    def __init__(self, address: str | None, cluster: LocalCluster | None, connect_timeout_s: float) -> None:
        self.address: str = address or ""  # a local cluster's: set by start
        self.cluster = cluster
        self.local = cluster is not None
        self.connect_timeout_s = float(connect_timeout_s)
        #: True once :meth:`close` was called.
        self.shut = False
        #: Times the local cluster was started anew after its scheduler stopped.
        self.recoveries = 0
        #: Worker addresses restarted (time limits, MemoryError), oldest first.
        self.restarted: list[str] = []
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._recover_lock = threading.Lock()
        self._restarts: list[threading.Thread] = []
        self._on_event: Callable[[Any], None] = lambda _event: None
        self._on_recover: Callable[[], None] = lambda: None
        #: Why a named scheduler is not connected to (a plain-text one on another machine), or None.
        self.refusal: str | None = None
        if cluster is None and address is not None and _unencrypted_remote(address):
            if os.environ.get(ALLOW_PLAINTEXT_ENV) == "1":
                log.warning(
                    "the computing cluster at %s is reached without TLS: anyone who can reach it can run code "
                    'on it (README "Serving a class": tls:// with certificates)',
                    address,
                )
            else:
                self.refusal = (
                    f"the computing cluster at {address} would be reached without TLS, and anyone who can reach it "
                    'could run code on it: use tls:// with certificates (README "Serving a class"), or set '
                    f"{ALLOW_PLAINTEXT_ENV}=1 to accept that risk"
                )
                log.error("%s", self.refusal)

    def listen(self, on_event: Callable[[Any], None], on_recover: Callable[[], None]) -> None:
        """Hand the workers' job events to ``on_event``; call ``on_recover`` when a new local cluster starts.

        ``on_event`` is called in the client's event loop. ``on_recover`` is called when a new local cluster
        replaces one whose scheduler stopped (the old cluster's jobs are gone).
        """
        self._on_event, self._on_recover = on_event, on_recover

    def start(self) -> None:
        """Start the local cluster and connect to it (a named scheduler is connected to on first use)."""
        if self.cluster is None:
            return
        self.address = self.cluster.start()
        try:
            self._connect()
        except BaseException:
            self.cluster.stop()
            raise

    @property
    def closed(self) -> bool:
        """True after :meth:`close`, or when the connection to a named scheduler is gone for good."""
        if self.shut:
            return True
        return not self.local and self._client is not None and self._client.status in ("closing", "closed")

    @property
    def client(self) -> Any:
        """The ``distributed.Client``, connected on first use (raises JobError if the scheduler is unreachable).

        A local cluster whose scheduler stopped is replaced first (:meth:`recover`). While another thread
        replaces it (the new scheduler runs, but :attr:`address` still names the old one), this waits for
        that thread rather than dial the old address, which would hold the connection lock for
        :data:`START_TIMEOUT_S`.
        """
        for _ in range(2):
            self.recover()
            client = self._client
            if client is None and not self.local:
                self._connect()
                client = self._client
            elif client is None:
                with self._recover_lock:  # no recovery half done
                    if self._client is None and not self.scheduler_gone():
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
            if self.shut:
                msg = "the computing cluster was shut down"
                raise JobError(msg)
            if self.refusal is not None:
                raise JobError(self.refusal)
            timeout = START_TIMEOUT_S if self.local else self.connect_timeout_s
            if not self.local and str(self.address).startswith("tls://") and not _tls_configured():
                msg = (
                    f"the computing cluster at {self.address} needs TLS certificates: set "
                    + ", ".join(TLS_CONFIG_ENV)
                    + ' (README "Serving a class")'
                )
                raise JobError(msg)
            security = self.cluster.security if self.cluster is not None else None
            try:
                client = Client(self.address, set_as_default=False, timeout=timeout, security=security)
            except Exception as exc:  # noqa: BLE001 (OSError, TimeoutError, ...: one readable message)
                msg = f"the computing cluster at {self.address} cannot be reached ({_describe(exc)})"
                raise JobError(msg) from None
            client.subscribe_topic(EVENT_TOPIC, self._on_event)
            self._client = client

    # --- a stopped local scheduler ---------------------------------------------------------------

    def scheduler_gone(self) -> bool:
        """Return True when the local cluster's scheduler (in this process) has stopped, or its client has."""
        if self.cluster is None or self.shut:
            return False
        if not self.cluster.running:
            return True
        return self._client is not None and self._client.status in ("closing", "closed")

    def recover(self) -> None:
        """Start a new local cluster when the scheduler of this one has stopped (called before each job)."""
        if not self.scheduler_gone():
            return
        with self._recover_lock:
            cluster = self.cluster
            if cluster is None or not self.scheduler_gone():
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
            self._on_recover()  # jobs of the old cluster are not joined again
            cluster.kill_workers()
            cluster.stop(cluster_timeout=2)
            self.address = cluster.start()
            self.recoveries += 1
            try:
                self._connect()
            except BaseException:
                cluster.stop()
                raise

    # --- workers and the end -----------------------------------------------------------------------

    def restart(self, address: str | None) -> None:
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

    def close(self, restart_wait_s: float = 30.0) -> None:
        """Disconnect; stop the local cluster (a named scheduler is left running). Restarts finish first."""
        self.shut = True
        deadline = time.monotonic() + restart_wait_s
        for thread in self._restarts:  # let a restart finish before its scheduler goes
            thread.join(max(deadline - time.monotonic(), 0.0))
        if self._client is not None:
            try:
                self._client.close(timeout=10)
            except Exception:  # noqa: BLE001
                pass
        if self.cluster is not None:
            self.cluster.stop()
