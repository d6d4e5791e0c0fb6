"""Running a sweep: one unit (an instance and its jobs), the executors, and the resuming driver.

:func:`run_unit` builds one (network, K, repetition) instance and runs its jobs on it (each through
:mod:`panda.experiments.measure`). :func:`run_experiment` is the driver: it skips the rows already in
the output folder's ``rows.csv`` (resume), runs the remaining units on the chosen executor (``"serial"``:
this process; ``"local"``: a ``ProcessPoolExecutor``; ``"dask"`` or a scheduler address: the project's
Dask execution layer :mod:`panda.execution`), appends each finished row the moment it arrives, keeps
``experiment.json`` (specification, seeds, versions, runs) and finally writes the tables and figures.

On Dask every unit is one job of :meth:`panda.execution.Executor.submit` with priority
:data:`~panda.execution.LOW` (it runs on the workers that take long jobs); its rows come back through a
``distributed.Queue`` as they are finished, the units are gathered as they complete
(``distributed.as_completed``), and a unit that runs past :func:`_unit_time_limit` is stopped by the
execution layer (its worker is restarted) and recorded as failed; its finished rows are kept.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import queue as _queue
import sys
import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from panda.execution import SCHEDULER_ENV
from panda.experiments.figures import write_figures
from panda.experiments.measure import (
    _can_isolate,
    _Interrupted,
    _mp_context,
    _run_isolated,
    measure_method,
    use_cores,
)
from panda.experiments.progress import _hms, _Progress
from panda.experiments.results import ROW_KEY, _json_default, _RowWriter, read_rows
from panda.experiments.spec import _SPEC_KEYS_IDENTITY, ExperimentSpec, WorkUnit
from panda.experiments.tables import write_tables
from panda.threads import cores

# ---------------------------------------------------------------------------------------------
# running one unit
# ---------------------------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def run_unit(
    unit: WorkUnit,
    sink: Callable[[dict], None] | None = None,
    *,
    skip: Iterable[tuple[str, ...]] = (),
) -> list[dict]:
    """Build the unit's instance once and run every job on it.

    Parameters
    ----------
    unit
        The (network, K, repetition) and its jobs.
    sink
        Called with each finished row at once (the driver appends it to ``rows.csv``).
    skip
        Row keys already done: their jobs are not run.

    Returns
    -------
    list of dict
        The rows, in job order.
    """
    from panda.compare import PANDA_METHODS
    from panda.instance import make_instance
    from panda.network import load_city

    spec = unit.spec
    done = set(skip)
    jobs = [j for j in unit.jobs if unit.key(j) not in done]
    if not jobs:
        return []
    net = load_city(unit.network)  # cached per process; not part of the instance's time
    t0 = time.perf_counter()
    instance = make_instance(
        net,
        n_records=unit.k,
        n_outputs=min(spec.n_outputs, unit.k),
        n_users=min(spec.n_users, unit.k),
        n_tasks=min(spec.n_tasks, unit.k),
        loss=spec.loss,
        prior=spec.prior,
        metric=spec.metric,
        user_distribution=spec.user_distribution,
        seed=unit.instance_seed,
    )
    instance_time = time.perf_counter() - t0
    isolate = spec.isolate and _can_isolate()
    host = platform.node()
    rows = []
    for job in jobs:
        config = None
        if job.method in PANDA_METHODS:
            config = spec.config_for(job.preset, job.epsilon_per_km, job.delta if job.delta is not None else 0.0)
        t_job = time.perf_counter()
        if isolate:
            metrics = _run_isolated(instance, job, config, spec, unit.method_seed)
        else:
            metrics = measure_method(
                instance, job, config=config, seed=unit.method_seed, audit_sample_pairs=spec.audit_sample_pairs
            )
        row = {
            "network": unit.network,
            "K": unit.k,
            "preset": job.preset,
            "epsilon_per_km": job.epsilon_per_km,
            "delta": "" if job.delta is None else job.delta,
            "method": job.method,
            "repetition": unit.repetition,
            **metrics,
            "wall_time_s": time.perf_counter() - t_job,
            "instance_time_s": instance_time,
            "time_limit_s": job.time_limit_s,
            "limit_enforced": isolate,
            "n_users": instance.n_users,
            "n_outputs": instance.n_outputs,
            "n_tasks": int(instance.tasks.shape[0]),
            "loss": instance.loss,
            "instance_seed": unit.instance_seed,
            "method_seed": unit.method_seed,
            "host": host,
            "finished_at": _now(),
        }
        rows.append(row)
        if sink is not None:
            sink(row)
    return rows


# ---------------------------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepOutcome:
    """What :func:`run_experiment` did.

    Attributes
    ----------
    out_dir
        The output folder.
    n_rows_total, n_rows_skipped, n_rows_written
        Rows of the sweep, rows already present (resumed), rows added by this run.
    n_units_run
        Instances built by this run (0 when everything was already done).
    failed_units
        ``(label, error)`` of units that raised (their finished rows are kept).
    wall_time_s
        Duration of the run, seconds.
    interrupted
        True when the run was stopped by Ctrl-C (finished rows are saved; rerun to resume).
    """

    out_dir: Path
    n_rows_total: int
    n_rows_skipped: int
    n_rows_written: int
    n_units_run: int
    failed_units: tuple[tuple[str, str], ...]
    wall_time_s: float
    interrupted: bool = False


def _package_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in (
        "panda-explorer",
        "numpy",
        "scipy",
        "highspy",
        "networkx",
        "osmnx",
        "pandas",
        "plotly",
        "dask",
        "distributed",
    ):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    import panda

    out["panda.__version__"] = panda.__version__
    return out


def _check_networks(spec: ExperimentSpec, executor: str) -> None:
    from panda.network import CITIES, ROME_PAPER, list_cities

    known = set(CITIES) | {ROME_PAPER}
    unknown = [n for n in spec.networks if n.lower() not in known]
    if unknown:
        msg = f"The 'networks' of the experiment must be names from {sorted(known)}. Got {unknown} instead."
        raise ValueError(msg)
    if executor in ("local", "serial") or (executor == "dask" and not os.environ.get(SCHEDULER_ENV, "").strip()):
        from panda.errors import DataUnavailableError

        missing = [n for n in spec.networks if n.lower() not in list_cities()]
        if missing:
            msg = (
                f"The network(s) {missing} are not on this machine (rome-paper needs ../shared/data/rome-paper "
                "or $PANDA_ROME_PAPER_DIR). Choose an embedded city or run on a cluster that has the data."
            )
            raise DataUnavailableError(msg)


def _dask_address(executor: str) -> str | None:
    for prefix in ("dask://", "tcp://", "tls://", "inproc://", "ws://", "wss://"):
        if executor.startswith(prefix):
            return "tcp://" + executor[len("dask://") :] if prefix == "dask://" else executor
    return None


def _normalise_executor(executor: object) -> str:
    """Return ``"local"``, ``"serial"``, ``"dask"``, a scheduler address, or ``"executor"`` (an Executor given)."""
    from panda.execution import Executor

    if executor is None:
        return "local"
    if isinstance(executor, Executor):
        return "executor"
    if isinstance(executor, str):
        e = executor.strip()
        if e in ("local", "serial", "dask"):
            return e
        address = _dask_address(e)
        if address:
            return address
    else:  # a distributed.Client: the layer connects to its scheduler
        address = getattr(getattr(executor, "scheduler", None), "address", None)
        if isinstance(address, str) and address:
            return address
    msg = (
        "The 'executor' parameter of run_experiment must be 'local', 'serial', 'dask', a dask scheduler address "
        "('tcp://host:8786' or 'dask://host:8786'), a panda.execution.Executor or a distributed.Client. "
        f"Got {executor!r} instead."
    )
    raise ValueError(msg)


def _write_metadata(out: Path, spec: ExperimentSpec, units: Sequence[WorkUnit], run_info: dict) -> None:
    path = out / "experiment.json"
    previous: dict = {}
    if path.exists():
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = {}
    runs = list(previous.get("runs", []))
    # replace the entry of this run (same started_at) or append it
    runs = [r for r in runs if r.get("started_at") != run_info.get("started_at")] + [run_info]
    meta = {
        "spec": spec.to_dict(),
        "config_hash": spec.config_hash(),
        "identity_hash": spec.identity_hash(),
        "row_key": list(ROW_KEY),
        "units": [
            {
                "network": u.network,
                "K": u.k,
                "repetition": u.repetition,
                "instance_seed": u.instance_seed,
                "method_seed": u.method_seed,
                "jobs": len(u.jobs),
            }
            for u in units
        ],
        "packages": _package_versions(),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
        },
        "runs": runs,
        "seed_derivation": "numpy.random.SeedSequence([seed, crc32(network), K, repetition]).generate_state(2)",
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, default=_json_default) + "\n", encoding="utf-8")
    tmp.replace(path)


def _check_identity(out: Path, spec: ExperimentSpec) -> None:
    path = out / "experiment.json"
    if not path.exists() or not (out / "rows.csv").exists():
        return
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    old_spec = previous.get("spec", {})
    new_spec = spec.to_dict()
    diff = {k: (old_spec.get(k), new_spec.get(k)) for k in _SPEC_KEYS_IDENTITY if old_spec.get(k) != new_spec.get(k)}
    if diff:
        msg = (
            f"The folder {str(out)!r} holds rows made with other settings ({diff}, as (old, new)); rows with "
            "the same key would not be comparable. Use another --out folder, or the old settings."
        )
        raise ValueError(msg)


def run_experiment(
    spec: ExperimentSpec,
    out_dir: str | os.PathLike,
    *,
    executor: object = "local",
    workers: int | None = None,
    progress: TextIO | None = sys.stderr,
    tables: bool = True,
    figures: bool = True,
) -> SweepOutcome:
    """Run a sweep into ``out_dir``, resuming whatever is already there.

    Parameters
    ----------
    spec
        What to run.
    out_dir
        Output folder (created). Rows already in its ``rows.csv`` are skipped.
    executor
        ``"local"`` (a ``ProcessPoolExecutor`` of ``workers`` processes, the default), ``"serial"``
        (this process), ``"dask"`` (the process-wide executor of :mod:`panda.execution`: a local Dask
        cluster, or the scheduler named by ``PANDA_DASK_SCHEDULER``), a dask scheduler address
        (``"tcp://host:8786"``, ``"dask://host:8786"``: ``get_executor(address)``), a
        :class:`panda.execution.Executor`, or a ``distributed.Client`` (its scheduler's address).
    workers
        Processes of the local executor (default: the number of CPUs, at most the number of units).
    progress
        Stream for progress lines (``None``: quiet).
    tables, figures
        Also write ``tables.md`` and ``figures/`` at the end (also after an interruption).

    Returns
    -------
    SweepOutcome
        Counts and timing; the rows are in ``out_dir/rows.csv`` (:func:`read_rows`).
    """
    kind = _checked_arguments(spec, executor, workers)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _check_identity(out, spec)
    t_start = time.perf_counter()
    started_at = _now()
    units = spec.units()
    writer = _RowWriter(out / "rows.csv")
    todo_units, todo_rows, n_total, n_skipped = _pending(units, writer.keys)
    prog = _Progress(progress, todo_rows, len(todo_units))
    run_info = {
        "started_at": started_at,
        "executor": kind,
        "command": " ".join(sys.argv),
        "rows_total": n_total,
        "rows_skipped": n_skipped,
        "status": "running",
    }
    _write_metadata(out, spec, units, run_info)
    prog.say(
        f"[experiment] {out}: {n_total} rows in {len(units)} instances; {n_skipped} already done, "
        f"{len(todo_rows)} to run in {len(todo_units)} instances (executor: {run_info['executor']})"
    )

    failed: list[tuple[str, str]] = []
    interrupted = False
    crashed = ""

    def accept(row: Mapping[str, Any]) -> None:
        if writer.write(row):
            prog.row(row)

    try:
        if todo_units:
            _run_units(kind, executor, workers, todo_units, tuple(writer.keys), accept, prog, failed, run_info)
    except KeyboardInterrupt:
        interrupted = True
        prog.say(
            f"[experiment] interrupted: {writer.n_written} new rows saved in {out / 'rows.csv'}; "
            "run the same command again to resume."
        )
    except BaseException as exc:
        crashed = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        writer.close()
        wall = time.perf_counter() - t_start
        run_info.update(
            finished_at=_now(),
            wall_time_s=wall,
            rows_written=writer.n_written,
            units_run=len(todo_units),
            failed_units=[list(f) for f in failed],
            status=_run_status(interrupted, crashed, failed),
        )
        _write_metadata(out, spec, units, run_info)
        _write_outputs(out, spec, tables, figures, prog)
    prog.say(
        f"[experiment] done: {writer.n_written} rows written, {n_skipped} skipped, {len(failed)} failed instances, "
        f"{_hms(wall)}; results in {out}"
    )
    return SweepOutcome(out, n_total, n_skipped, writer.n_written, len(todo_units), tuple(failed), wall, interrupted)


def _checked_arguments(spec: ExperimentSpec, executor: object, workers: int | None) -> str:
    """Check :func:`run_experiment`'s arguments; return the kind of its executor (:func:`_normalise_executor`).

    Raises TypeError, ValueError or :class:`panda.errors.DataUnavailableError` on a bad argument.
    """
    if not isinstance(spec, ExperimentSpec):
        msg = f"The 'spec' parameter of run_experiment must be an ExperimentSpec. Got {type(spec).__name__} instead."
        raise TypeError(msg)
    kind = _normalise_executor(executor)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        msg = f"The 'workers' parameter of run_experiment must be an int >= 1. Got {workers!r} instead."
        raise ValueError(msg)
    _check_networks(spec, kind)
    return kind


def _pending(
    units: Sequence[WorkUnit], done: Container[tuple[str, ...]]
) -> tuple[list[WorkUnit], list[tuple[tuple[str, ...], int]], int, int]:
    """Return the units with rows still to run, those rows' keys (with their K), and the counts of all and done rows."""
    todo_units = []
    todo_rows: list[tuple[tuple[str, ...], int]] = []
    n_total = n_skipped = 0
    for u in units:
        pending = [u.key(j) for j in u.jobs if u.key(j) not in done]
        n_total += len(u.jobs)
        n_skipped += len(u.jobs) - len(pending)
        if pending:
            todo_units.append(u)
            todo_rows.extend((key, u.k) for key in pending)
    return todo_units, todo_rows, n_total, n_skipped


def _run_units(
    kind: str,
    executor: object,
    workers: int | None,
    units: list[WorkUnit],
    skip: tuple,
    accept: Callable[[Mapping[str, Any]], None],
    prog: _Progress,
    failed: list[tuple[str, str]],
    run_info: dict,
) -> None:
    """Run the units on the executor of ``kind`` (the local one's size goes into ``run_info``)."""
    if kind == "serial":
        _run_serial(units, skip, accept, prog, failed)
    elif kind == "local":
        n_workers = min(workers or os.cpu_count() or 1, len(units))
        run_info.update(workers=n_workers, cores_per_worker=max(1, cores() // n_workers))
        _run_local(units, skip, accept, prog, failed, n_workers)
    else:
        _run_dask(kind, executor, units, skip, accept, prog, failed)


def _run_status(interrupted: bool, crashed: str, failed: list) -> str:
    """Return the run's status for ``experiment.json``."""
    if interrupted:
        return "interrupted"
    if crashed:
        return f"crashed: {crashed}"
    return "finished with errors" if failed else "finished"


def _write_outputs(out: Path, spec: ExperimentSpec, tables: bool, figures: bool, prog: _Progress) -> None:
    """Write ``tables.md`` and ``figures/`` from every row in ``out`` (as asked); a figure's failure is only said."""
    rows = read_rows(out)
    if tables:
        write_tables(rows, out / "tables.md", spec=spec)
    if figures:
        try:
            write_figures(rows, out / "figures")
        except Exception as exc:  # figures are a convenience: never lose a run over them
            prog.say(f"[experiment] figures not written: {type(exc).__name__}: {exc}")


# ---------------------------------------------------------------------------------------------
# executors: serial, local process pool, dask
# ---------------------------------------------------------------------------------------------


# Worker-process state of the local executor, set once by the pool's initializer.
_POOL_QUEUE = None


def _pool_init(q, n_cores: int | None = None) -> None:
    import signal

    global _POOL_QUEUE
    _POOL_QUEUE = q
    if n_cores is not None:
        use_cores(n_cores)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and stops the pool


def _pool_run_unit(unit: WorkUnit, skip: tuple) -> list[dict]:
    q = _POOL_QUEUE
    try:
        return run_unit(unit, None if q is None else q.put, skip=skip)
    except _Interrupted:
        return []


class _DaskSink:
    """Picklable sink of a unit on Dask: puts ``("row", row)`` and ``("start", unit id)`` on a ``distributed.Queue``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: Any = None

    def __getstate__(self) -> dict:
        return {"name": self.name}

    def __setstate__(self, state: dict) -> None:
        self.name = state["name"]
        self._queue = None

    def _put(self, item: tuple) -> None:
        if self._queue is None:
            from distributed import Queue

            self._queue = Queue(self.name)
        self._queue.put(item)

    def start(self, unit: WorkUnit) -> None:
        self._put(("start", _unit_id(unit)))

    def __call__(self, row: dict) -> None:
        self._put(("row", row))


def _unit_id(unit: WorkUnit) -> tuple[str, int, int]:
    return (unit.network, unit.k, unit.repetition)


def _dask_run_unit(unit: WorkUnit, skip: tuple, sink: _DaskSink) -> list[dict]:
    """One unit on a Dask worker (a job of :mod:`panda.execution`): announce its start, stream its rows."""
    sink.start(unit)
    try:
        return run_unit(unit, sink, skip=skip)
    except _Interrupted:
        return []


#: Seconds a unit on Dask may take on top of its methods' allowances (loading the network, the instance).
_UNIT_OVERHEAD_S = 600.0


def _unit_time_limit(unit: WorkUnit, skip: Iterable[tuple[str, ...]]) -> float:
    """Seconds a unit may run on Dask before the execution layer stops it and restarts its worker.

    Each pending method gets what its isolated run may take (its limit, the build grace, the audit's
    ``max(60 s, limit)``), so the limit only acts where the methods' own limits could not (Dask workers are
    daemonic processes: the methods run in the unit's process, see :func:`run_unit`).
    """
    from panda.experiments import measure

    done = set(skip)
    jobs = [j for j in unit.jobs if unit.key(j) not in done]
    return _UNIT_OVERHEAD_S + sum(j.time_limit_s + measure._BUILD_GRACE_S + max(60.0, j.time_limit_s) for j in jobs)


def _run_serial(units, skip, accept, prog: _Progress, failed: list) -> None:
    for u in units:
        try:
            for row in run_unit(u, accept, skip=skip):
                accept(row)
        except _Interrupted:
            raise KeyboardInterrupt from None
        except Exception as exc:
            failed.append((u.label, f"{type(exc).__name__}: {exc}"))
            prog.say(f"[experiment] {u.label} failed: {type(exc).__name__}: {exc}")
        prog.units_done += 1


def _drain(q, accept) -> None:
    while True:
        try:
            row = q.get_nowait()
        except _queue.Empty:
            return
        except (EOFError, OSError):  # the queue's manager is gone (interpreter shutting down)
            return
        accept(row)


def _collect(fut, unit, accept, failed: list, prog) -> None:
    """Accept the rows of a finished unit of the local pool; record a failure instead."""
    try:
        for row in fut.result():
            accept(row)
    except Exception as exc:
        failed.append((unit.label, f"{type(exc).__name__}: {exc}"))
        prog.say(f"[experiment] {unit.label} failed: {type(exc).__name__}: {exc}")
    prog.units_done += 1


def _run_local(units, skip, accept, prog: _Progress, failed: list, n_workers: int) -> None:
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = _mp_context()
    q = ctx.Queue()
    # The cores each worker's methods may use (use_cores): no more threads than cores.
    share = max(1, cores() // n_workers)
    pool = ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx, initializer=_pool_init, initargs=(q, share))
    futures = {}
    try:
        futures = {pool.submit(_pool_run_unit, u, skip): u for u in units}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(q, accept)
            for fut in done:
                _collect(fut, futures[fut], accept, failed, prog)
        _drain(q, accept)
        pool.shutdown(wait=True)
    except BaseException:
        for fut in futures:
            fut.cancel()
        procs = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:  # their method children follow (they watch their parent)
            if p.is_alive():
                p.terminate()
        raise
    finally:
        q.close()


def _dask_executor(kind: str, executor: object):
    """Return ``(executor, own)``: the :mod:`panda.execution` executor of ``kind``; ``own``: close it at the end."""
    from panda.execution import Executor, get_executor

    if isinstance(executor, Executor):
        return executor, False
    if kind == "dask":
        return get_executor(), False
    shared = get_executor(kind)
    if shared.address == kind:
        return shared, False
    return Executor(kind), True  # the process-wide executor is another scheduler's: a private one for this sweep


def _run_dask(kind: str, executor: object, units, skip, accept, prog: _Progress, failed: list) -> None:
    import uuid

    from distributed import Queue, as_completed

    from panda.execution import LOW, JobError

    ex, own = _dask_executor(kind, executor)
    name = f"panda-rows-{uuid.uuid4().hex[:12]}"
    q: Any = None
    futures: dict = {}
    try:
        q = Queue(name, client=ex.client)
        sink = _DaskSink(name)
        for u in units:
            key = f"panda-unit-{u.network}-{u.k}-{u.repetition}-{uuid.uuid4().hex[:8]}"
            futures[ex.submit(_dask_run_unit, u, skip, sink, priority=LOW, key=key)] = u
        by_id = {_unit_id(u): fut for fut, u in futures.items()}
        limits = {fut: _unit_time_limit(u, skip) for fut, u in futures.items()}
        started: dict = {}
        collected: set = set()

        def drain() -> None:
            while True:
                batch = q.get(batch=True)
                if not batch:
                    return
                for what, payload in batch:
                    if what == "row":
                        accept(payload)
                    elif (fut := by_id.get(tuple(payload))) is not None:
                        started[fut] = time.monotonic()

        def collect(fut) -> None:
            """Accept a unit's rows, or record why there are none (the layer stops a unit past its limit)."""
            if fut in collected:
                return
            collected.add(fut)
            unit = futures[fut]
            try:
                rows = ex.result(fut, timeout_s=limits[fut])
            except JobError as exc:
                failed.append((unit.label, str(exc)))
                prog.say(f"[experiment] {unit.label} failed: {exc}")
            else:
                for row in rows:
                    accept(row)
            prog.units_done += 1

        finished = as_completed(list(futures), loop=ex.client.loop)
        while not finished.is_empty():
            done = finished.next_batch(block=False)
            drain()
            for fut in done:
                collect(fut)
            now = time.monotonic()
            for fut, t0 in list(started.items()):
                if fut not in collected and not fut.done() and now > t0 + limits[fut]:
                    collect(fut)  # past its limit: the layer cancels it and restarts its worker
            if not done:
                time.sleep(0.3)
        drain()
    except BaseException:
        if futures:
            try:
                ex.client.cancel(list(futures))
            except Exception:  # noqa: BLE001 (the cluster may be gone)
                pass
        raise
    finally:
        if q is not None:
            try:
                q.close()
            except Exception:  # pragma: no cover
                pass
        if own:
            ex.close()
