"""One method on one instance: build it and measure it (one row's metrics), here or in a child process.

:func:`measure_method` builds one method and audits it. :func:`_run_isolated` runs it in a child
process so that its time limit is a hard wall-clock limit (a method that reaches it is stopped and
recorded as ``"unsolved: time limit ..."``) and so that a crash (for example for lack of memory) is
recorded as a failure instead of ending the sweep.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable

from panda.experiments.results import _STR_COLUMNS, ROW_COLUMNS, ROW_KEY, _json_default
from panda.experiments.spec import ExperimentSpec, Job

# ---------------------------------------------------------------------------------------------
# measuring one method
# ---------------------------------------------------------------------------------------------


def _nan_row() -> dict:
    return {c: float("nan") for c in ROW_COLUMNS if c not in _STR_COLUMNS and c not in ROW_KEY}


def measure_method(
    instance,
    job: Job,
    *,
    config=None,
    seed: int | None,
    audit_sample_pairs: int = 20_000,
    on_built: Callable[[dict], None] | None = None,
) -> dict:
    """Build one method on an instance and measure it: the metrics of one row.

    Follows :func:`panda.compare.compare` (same builders, same audits), and also keeps what the
    sweep tables need: the loss at the users' true records for every method, the LP time, and for
    PAnDA the anchor union, pair counts and budget split.

    Parameters
    ----------
    instance
        The unit's :class:`panda.Instance`.
    job
        Which method (and budget).
    config
        The :class:`panda.PandaConfig` of the job (PAnDA methods; ignored by baselines).
    seed
        Mechanism seed.
    audit_sample_pairs
        See :func:`panda.compare.compare`.
    on_built
        Called with ``{"status", "time_s", "utility_loss_m"}`` once the mechanism is built, before the
        audits (the isolated runner uses it to separate the build's time limit from the audit's).

    Returns
    -------
    dict
        Metric columns of :data:`ROW_COLUMNS` (missing ones are written empty).
    """
    from panda.compare import PANDA_METHODS, _build, audit_columns
    from panda.config import PandaConfig

    cfg = config if config is not None else PandaConfig(epsilon_per_km=job.epsilon_per_km)
    row = _nan_row()
    t0 = time.perf_counter()
    c0 = time.process_time()
    try:
        # PAnDA's relaxed lower bound when the job's config asks for it (the default): the sweep tables'
        # approximation ratio. Its time is not the mechanism's (build_panda leaves it out).
        mech = _build(job.method, instance, cfg, seed, job.time_limit_s, relaxed_bound=cfg.solve_relaxed)
    except Exception as exc:  # a broken builder must not end the sweep: record it
        return _build_failed(row, exc, t0, on_built)
    row.update(status=mech.status, time_s=float(mech.build_time_s), utility_loss_m=float(mech.loss_m))
    row["cpu_time_s"] = time.process_time() - c0  # all threads of this process: robust to a busy machine
    if on_built is not None:
        on_built({"status": mech.status, "time_s": row["time_s"], "utility_loss_m": row["utility_loss_m"]})
    details = {k: v for k, v in mech.details.items() if k != "panda"}
    lp_time = details.get("lp_time_s")
    if isinstance(lp_time, (int, float)):
        row["lp_time_s"] = float(lp_time)

    t_audit = time.perf_counter()
    row.update(audit_columns(instance, job.method, mech, audit_sample_pairs=audit_sample_pairs, seed=seed))
    if "audit_note" in row:
        details["audit_note"] = row.pop("audit_note")
    if job.method in PANDA_METHODS and "panda" in mech.details:
        _panda_columns(row, details, mech.details["panda"])
    row["audit_time_s"] = time.perf_counter() - t_audit
    from panda import threads

    details["cores"] = threads.THREADS  # the cores the method could use (use_cores)
    row["details"] = json.dumps(details, default=_json_default, sort_keys=True)
    return row


def _build_failed(row: dict, exc: Exception, t0: float, on_built: Callable[[dict], None] | None) -> dict:
    """Return ``row`` as the record of a builder that raised ``exc`` (its traceback in the details)."""
    row.update(status=f"failed: {type(exc).__name__}: {exc}", time_s=time.perf_counter() - t0)
    row["details"] = json.dumps({"traceback": traceback.format_exc(limit=8)})
    if on_built is not None:
        on_built({"status": row["status"], "time_s": row["time_s"], "utility_loss_m": float("nan")})
    return row


def _panda_columns(row: dict, details: dict, res) -> None:
    """Fill PAnDA's own columns of ``row`` (anchors, pairs, budget split, phase times) from its ``PandaResult``."""
    s = res.summary()
    row.update(
        anchor_union=s["n_anchor_union"],
        anchor_set_size_mean=s["anchor_set_size_mean"],
        n_empty_anchor_sets=s["n_empty_anchor_sets"],
        n_constrained_pairs=s["n_constrained_pairs"],
        n_over_budget_pairs=s["n_over_budget_pairs"],
        n_unreachable_target_pairs=s["n_unreachable_target_pairs"],
        gamma_km=s["gamma_km"],
        far_value=s["far_value"],
        lp_objective_m=s["lp_objective_m"],
        relaxed_lower_bound_m=s["relaxed_lower_bound_m"],
        approximation_ratio=s["approximation_ratio"],
        user_pair_violation_rate=s["user_pair_violation_rate"],
    )
    split = s["budget_split"]
    row["budget_pairs_finite"] = split.get("n_finite", 0)
    for part in ("phase1", "margin", "phase2"):
        for stat in ("median", "mean"):
            row[f"{part}_share_{stat}"] = split.get(f"{part}_share_{stat}", float("nan"))
    t = res.timings_s
    row["lp_time_s"] = float(t.get("anpo_lp", float("nan")))
    row["time_phase1_cost_s"] = float(t.get("phase1_cost", float("nan")))
    row["time_margins_s"] = float(t.get("margins", float("nan")))
    row["time_relaxed_lp_s"] = float(t.get("relaxed_lp", 0.0))  # the lower bound: a diagnostic, not the mechanism
    details["panda_timings_s"] = dict(t)
    details["lp_status"] = res.lp_status


# ---------------------------------------------------------------------------------------------
# running one method in a child process (hard time limit)
# ---------------------------------------------------------------------------------------------


_BUILD_GRACE_S = 10.0

#: The cores a method of this process may use (:func:`use_cores`; ``None``: all of them). Passed on to the
#: method's own process.
_CORE_SHARE: int | None = None


def use_cores(n: int) -> None:
    """Let the methods of this process use ``n`` cores.

    Their threads are those of :func:`panda.threads.thread_map` and of the compiled PDHG steps
    (:data:`panda._pdhg_blocks.thread_policy`).

    The local executor runs one process per core, so each gets one: with every core's PDHG threads in each
    process, the processes' threads outnumber the cores and wait for each other at every step's barrier,
    which makes each solve several times slower (docs/benchmarks.md, "Rome at scale").
    """
    global _CORE_SHARE
    from panda import _pdhg_blocks, threads

    n = max(1, int(n))
    _CORE_SHARE = n
    threads.THREADS = min(threads.THREADS, n)
    _pdhg_blocks.thread_policy = lambda: n


def _mp_context():
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        # Import the library once in the fork server; children are forked from it ready to work.
        ctx.set_forkserver_preload(["__main__", "panda.experiments", "panda.compare"])
    return ctx


def _can_isolate() -> bool:
    return not multiprocessing.current_process().daemon


def _watch_parent() -> None:
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        while parent.is_alive():
            time.sleep(1.0)
        os._exit(1)  # the unit's process is gone: nobody will read the result

    threading.Thread(target=watch, daemon=True).start()


def _child_main(
    conn, instance, job: Job, config, seed: int, audit_sample_pairs: int, memory_limit_gb, cores: int | None = None
) -> None:
    try:
        _watch_parent()
        if cores is not None:
            use_cores(cores)
        if memory_limit_gb:
            try:
                import resource

                limit = int(memory_limit_gb * 2**30)
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX
                pass
        row = measure_method(
            instance,
            job,
            config=config,
            seed=seed,
            audit_sample_pairs=audit_sample_pairs,
            on_built=lambda info: conn.send(("built", info)),
        )
        conn.send(("row", row))
    except KeyboardInterrupt:
        os._exit(130)
    except BaseException as exc:  # noqa: BLE001 - report anything, the parent writes the row
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=8)))
        except Exception:  # pragma: no cover
            pass
    finally:
        conn.close()


class _Interrupted(Exception):
    """A method's child process was stopped by Ctrl-C: stop the unit, write nothing."""


def _receive(conn, proc, deadline: float):
    """Next message from the child, ``("timeout",)`` at the deadline, ``("died", code)`` if it ended."""
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return ("timeout",)
        if conn.poll(min(remaining, 0.5)):
            try:
                return conn.recv()
            except (EOFError, OSError):
                proc.join(5.0)
                return ("died", proc.exitcode)
        if not proc.is_alive() and not conn.poll(0):
            return ("died", proc.exitcode)


def _stop(proc) -> None:
    if proc.is_alive():
        proc.kill()
    proc.join(10.0)


def _died_status(code: int | None) -> str:
    if code == 130:
        raise _Interrupted
    if code is not None and code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        if -code == signal.SIGINT:
            raise _Interrupted
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"failed: method process killed by {name}{hint}"
    return f"failed: method process ended with exit code {code} without a result"


def _run_isolated(instance, job: Job, config, spec: ExperimentSpec, seed: int) -> dict:
    ctx = _mp_context()
    recv, send = ctx.Pipe(duplex=False)
    slim = dataclasses.replace(instance, _cache={})  # d_km is rebuilt in the child, not pickled
    proc = ctx.Process(
        target=_child_main,
        args=(send, slim, job, config, seed, spec.audit_sample_pairs, spec.memory_limit_gb, _CORE_SHARE),
        daemon=True,
        name=f"panda-{job.method}",
    )
    t0 = time.perf_counter()
    proc.start()
    send.close()
    limit = job.time_limit_s
    try:
        msg = _receive(recv, proc, t0 + limit + _BUILD_GRACE_S)
        row = _nan_row()
        if msg[0] == "timeout":
            _stop(proc)
            row.update(status=f"unsolved: time limit {limit:g} s reached (stopped)", time_s=time.perf_counter() - t0)
            return row
        if msg[0] == "died":
            row.update(status=_died_status(msg[1]), time_s=time.perf_counter() - t0)
            return row
        if msg[0] == "error":
            row.update(
                status=f"failed: {msg[1]}", time_s=time.perf_counter() - t0, details=json.dumps({"traceback": msg[2]})
            )
            return row
        built = msg[1] if msg[0] == "built" else None
        if msg[0] == "built":
            audit_start = time.perf_counter()
            msg = _receive(recv, proc, audit_start + max(60.0, limit))
        if msg[0] == "row":
            return msg[1]
        assert built is not None
        if msg[0] == "died":
            status = _died_status(msg[1])
            what = f"audit failed ({status.removeprefix('failed: ')})"
        elif msg[0] == "timeout":
            _stop(proc)
            what = f"audit stopped after {max(60.0, limit):g} s"
        else:
            what = f"audit failed: {msg[1]}"
        row.update(status=built["status"], time_s=built["time_s"], utility_loss_m=built["utility_loss_m"])
        row["details"] = json.dumps({"audit": what})
        return row
    finally:
        recv.close()
        if proc.is_alive():
            _stop(proc)
        else:
            proc.join(1.0)
