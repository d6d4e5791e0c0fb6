"""Work a page starts beside its script run, so that the page renders meanwhile.

:class:`Job` runs a (cached) function of :mod:`app.state` in a thread that carries the script run's context;
:func:`call_with_progress` waits for one and relays its progress messages to the script thread, where they may
update Streamlit elements. :func:`tradeoff_curve` runs the methods of one privacy-utility curve side by side,
one worker job each (cached per method in :func:`app.state.tradeoff_method`), so that adding a method or
reopening the page recomputes nothing already known. The optimal LP ("lp") is a separate call, started on
request: on one worker it takes up to len(epsilons) x its time limit, longer than the other methods together.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

from app import state
from panda.execution import JobBusy

__all__ = ["Job", "start", "call_with_progress", "tradeoff_curve", "start_tradeoff_curve"]


class Job:
    """A cached computation running in a worker thread (so the page can render meanwhile).

    The worker carries the script run's context, so cached functions work there; it never calls
    ``st.*`` itself. If the script run is interrupted (a rerun), the worker still finishes and fills
    the cache for the next run.
    """

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.messages: queue.SimpleQueue = queue.SimpleQueue()
        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(
            target=self._work, args=(fn, args, kwargs), name="panda-dashboard-job", daemon=True
        )
        ctx = get_script_run_ctx(suppress_warning=True)
        if ctx is not None:
            add_script_run_ctx(self._thread, ctx)
        self._thread.start()

    def _work(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        try:
            self._box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # relayed to the script thread by result()
            self._box["error"] = exc

    def done(self) -> bool:
        """True when the computation has finished (or failed)."""
        return not self._thread.is_alive()

    def result(self, on_progress: Callable[[str, float], None] | None = None) -> Any:
        """Wait for the value (relaying progress messages); raise the computation's exception."""
        while True:
            self._thread.join(0.05)
            last = None
            while not self.messages.empty():
                last = self.messages.get()
            if last is not None and on_progress is not None:
                on_progress(*last)
            if not self._thread.is_alive():
                break
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


def start(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Job:
    """Start ``fn(*args, **kwargs)`` in a worker thread; ``Job.result()`` waits for it."""
    return Job(fn, *args, **kwargs)


def call_with_progress(
    fn: Callable[..., Any], *args: Any, on_progress: Callable[[str, float], None], **kwargs: Any
) -> Any:
    """Call ``fn(*args, _progress=..., **kwargs)`` in a worker thread; relay its progress here.

    ``on_progress(phase, fraction)`` runs in the calling (script) thread, so it may update
    Streamlit elements; a cached ``fn`` that hits its cache reports nothing. Exceptions of ``fn`` are
    raised again here.
    """
    messages: queue.SimpleQueue = queue.SimpleQueue()
    job = Job(fn, *args, _progress=lambda phase, fraction: messages.put((phase, fraction)), **kwargs)
    job.messages = messages
    return job.result(on_progress)


def tradeoff_curve(
    instance_key: tuple,
    methods: tuple,
    epsilons: tuple,
    panda_items: tuple,
    seed: int,
    lp_time_limit_s: float,
    _progress: Callable[[str, float], None] | None = None,
) -> list[dict]:
    """The privacy-utility curve of a view: panda.tradeoff.tradeoff_curve rows, methods in the given order.

    Each method's rows come from :func:`app.state.tradeoff_method` (cached: computed once for all
    sessions); each uncached method is a worker job, started together, of which at most
    ``panda.execution.MAX_JOBS_PER_OWNER`` of one session run at once (the others wait their turn).
    ``panda_items`` (:func:`app.state.config_items`) only matter to PAnDA, ``lp_time_limit_s`` only to "lp": both
    are left out of the other methods' cache keys. A method whose worker job fails (time limit, memory,
    crash) gives rows with ``outcome == "failed"`` and the reason, and is not cached (a rerun tries
    again). ``_progress`` gets ``(message, fraction of the whole curve)`` from several threads.
    """
    from panda.tradeoff import HARDER_AS_EPS_FALLS, status_rows

    methods = tuple(methods)
    eps = tuple(sorted({float(e) for e in epsilons}))
    lock = threading.Lock()
    fractions = dict.fromkeys(methods, 0.0)
    results: dict[str, list[dict]] = {}

    def relay(method: str) -> Callable[[str, float], None]:
        def report(message: str, fraction: float) -> None:
            with lock:
                fractions[method] = float(fraction)
                total = sum(fractions.values()) / max(len(fractions), 1)
            if _progress is not None:
                _progress(message, total)

        return report

    def work(method: str) -> None:
        items = tuple(panda_items) if method.startswith("panda") else ()
        limit = float(lp_time_limit_s) if method == "lp" else 0.0
        try:
            results[method] = state.tradeoff_method(
                instance_key, method, eps, items, int(seed), limit, _progress=relay(method)
            )
        except JobBusy:  # the class's queue, not the method: say so, and the next visit tries again
            results[method] = status_rows(method, eps, "busy: every worker was taken; open the curve again")
        except Exception as exc:  # noqa: BLE001 (a worker failure is a row, never the page's exception)
            results[method] = status_rows(method, eps, f"failed: {exc}")
        relay(method)("done", 1.0)

    # Slow methods first, so they take the free workers while the quick ones queue behind them.
    order = sorted(set(methods), key=lambda m: (m != "lp", m not in HARDER_AS_EPS_FALLS, methods.index(m)))
    ctx = get_script_run_ctx(suppress_warning=True)
    threads = []
    for method in order:
        thread = threading.Thread(target=work, args=(method,), name=f"panda-tradeoff-{method}", daemon=True)
        if ctx is not None:
            add_script_run_ctx(thread, ctx)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return [row for method in dict.fromkeys(methods) for row in results[method]]


def start_tradeoff_curve(
    instance_key: tuple, methods: tuple, epsilons: tuple, panda_items: tuple, seed: int, lp_time_limit_s: float
) -> Job:
    """Start :func:`tradeoff_curve` in a background Job whose ``result(on_progress)`` relays its progress."""
    messages: queue.SimpleQueue = queue.SimpleQueue()
    job = Job(
        tradeoff_curve,
        tuple(instance_key),
        tuple(methods),
        tuple(epsilons),
        tuple(panda_items),
        int(seed),
        float(lp_time_limit_s),
        _progress=lambda message, fraction: messages.put((message, fraction)),
    )
    job.messages = messages
    return job
