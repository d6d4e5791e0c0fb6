"""The dashboard's heavy computations as job functions, run by :mod:`panda.execution` on Dask workers.

A job is a module-level function submitted itself (``executor.run(run_panda_job, instance, ...)``): plain,
picklable arguments (instances, config items as sorted ``(field, value)`` tuples, numbers), a
``progress(phase, fraction)`` callback last, and a picklable return value. The workers import this module
(``panda.jobs``), so it imports neither streamlit nor the dashboard: on a cluster of several machines every
worker runs from the project's checkout (or an installed ``panda``) of the same version as the server.

Each job says its default priority: :func:`interactive_job` (a student waits for it after moving a slider:
:data:`panda.execution.HIGH`) or :func:`long_job` (sweeps, trade-off curves: :data:`panda.execution.LOW`); a
caller may override it per call (the optimal-LP baseline is long).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from panda.execution import HIGH, LOW

__all__ = [
    "interactive_job",
    "long_job",
    "instance_job",
    "upload_network_job",
    "run_panda_job",
    "delta_sweep_job",
    "baseline_job",
    "baseline_numbers_job",
    "audit_panda_job",
    "tradeoff_curve_job",
    "plan_job",
    "relaxed_lower_bound_job",
    "repeated_reports_job",
    "attacker_errors_job",
    "mechanism_numbers_job",
    "users_numbers_job",
    "score_round_job",
]

_Job = TypeVar("_Job", bound=Callable[..., Any])


def interactive_job(fn: _Job) -> _Job:
    """Mark a job interactive: someone waits for it (its default priority is :data:`panda.execution.HIGH`)."""
    fn.priority = HIGH  # type: ignore[attr-defined]
    return fn


def long_job(fn: _Job) -> _Job:
    """Mark a job long (sweeps, curves): it yields to interactive ones (:data:`panda.execution.LOW`)."""
    fn.priority = LOW  # type: ignore[attr-defined]
    return fn


@interactive_job
def instance_job(network, n_records, n_users, n_outputs, seed, loss, n_tasks, prior, progress):
    """Draw a view's instance (:func:`panda.make_instance`) and return its fields, all but the network.

    The distance tables (one shortest-path search per output or task, a table of K x M losses) are built here,
    under the worker's memory and time limits; the caller, which already holds ``network``, puts the instance
    together with ``panda.Instance(network=network, **fields)``, so the network does not travel back.
    ``prior``: a name of :data:`panda.instance.PRIORS` or a per-node weight array.
    """
    import dataclasses

    import panda

    progress("drawing places, outputs and their distances", 0.0)
    inst = panda.make_instance(
        network,
        n_records=n_records,
        n_users=n_users,
        n_outputs=n_outputs,
        n_tasks=n_tasks,
        loss=loss,
        prior=prior,
        seed=seed,
    )
    return {f.name: getattr(inst, f.name) for f in dataclasses.fields(inst) if f.name not in ("network", "_cache")}


@interactive_job
def run_panda_job(instance, items, seed, progress):
    """One PAnDA run; ``items``: the config as ``(field, value)`` pairs."""
    import panda

    return panda.run_panda(instance, panda.PandaConfig(**dict(items)), seed=seed, progress=progress)


@long_job
def delta_sweep_job(instance, items, seed, deltas, progress):
    """PAnDA at several delta values (no lower bound): violation rate, flagged pairs and loss per delta."""
    import panda

    base = panda.PandaConfig(**dict(items))
    rows = []
    for k, delta in enumerate(deltas):
        progress(f"δ = {delta:g}", k / max(len(deltas), 1))
        res = panda.run_panda(instance, base.replace(delta=float(delta), solve_relaxed=False), seed=seed)
        n_pairs = max(int(res.pair_i.size), 1)
        rows.append(
            {
                "delta": float(delta),
                "violation_rate": res.user_pair_violation_rate,
                "over_budget_share": float(res.pair_over_budget.sum()) / n_pairs,
                "unreachable_share": float(res.pair_unreachable.sum()) / n_pairs,
                "loss_m": res.loss_expected_m,
            }
        )
    return rows


@interactive_job
def baseline_job(instance, name, epsilon_per_km, options, progress):
    """Build a baseline mechanism (``panda.mechanisms.BASELINES[name]``); ``options``: keywords as pairs."""
    from panda.mechanisms import BASELINES

    progress(f"building {name}", 0.0)
    return BASELINES[name](instance, epsilon_per_km, **dict(options))


@interactive_job
def baseline_numbers_job(instance, name, epsilon_per_km, options, progress):
    """Build a baseline mechanism and measure it (:func:`panda.audit.mechanism_numbers`) in one job.

    What the Lesson shows of a new mechanism: one trip through the queue, and the matrix is not sent back.
    """
    from panda.audit import mechanism_numbers

    mech = baseline_job(instance, name, epsilon_per_km, options, progress)
    progress("the exact audit of every pair", 0.9)
    return mech, mechanism_numbers(instance, mech, epsilon_per_km)


@interactive_job
def audit_panda_job(result, instance, n_record_pairs, progress):
    """Audit a PAnDA run exactly for (eps, delta)-PmDP (``panda.pmdp.audit_panda``)."""
    from panda.pmdp import audit_panda

    progress("exact PmDP audit", 0.0)
    return audit_panda(result, instance, n_record_pairs=n_record_pairs, seed=0)


@long_job
def plan_job(instance, target_loss_m, methods, reports_per_day, attacker_floor_m, options, progress):
    """``panda.plan.plan``: the smallest eps per mechanism meeting the target.

    ``options``: its keyword settings as ``(name, value)`` pairs. Progress: the share of the mechanisms planned.
    """
    from panda.plan import plan

    methods = tuple(methods)
    done = []

    def step(message: str) -> None:
        progress(message, len(done) / max(len(methods), 1))
        done.append(message)

    return plan(
        instance,
        float(target_loss_m),
        methods=methods,
        reports_per_day=int(reports_per_day),
        attacker_floor_m=attacker_floor_m,
        progress=step,
        **dict(options),
    )


@long_job
def tradeoff_curve_job(instance, methods, epsilons, panda_items, seed, lp_time_limit_s, options, progress):
    """``panda.tradeoff.tradeoff_curve``; ``options``: its keyword settings as ``(name, value)`` pairs."""
    import panda
    from panda.tradeoff import tradeoff_curve

    config = panda.PandaConfig(**dict(panda_items)) if panda_items else None
    return tradeoff_curve(
        instance,
        tuple(methods),
        tuple(epsilons),
        panda_config=config,
        seed=seed,
        lp_time_limit_s=float(lp_time_limit_s),
        progress=progress,
        **dict(options),
    )


@interactive_job
def relaxed_lower_bound_job(cost, pairs_i, pairs_j, exponent, eta, time_limit_s, solver, progress):
    """Solve the Relaxed AnPO of a PAnDA view (``panda.lp.solve_mdp_lp`` on its anchor pairs); metres."""
    import time

    from panda.lp import solve_mdp_lp

    progress("relaxed lower bound", 0.0)
    t0 = time.perf_counter()
    rel = solve_mdp_lp(cost, pairs_i, pairs_j, exponent, eta=eta, time_limit_s=time_limit_s, solver=solver)
    return {"status": rel.lp.status, "objective_m": float(rel.objective), "time_s": time.perf_counter() - t0}


@interactive_job
def repeated_reports_job(instance, matrices, epsilon_per_km, seed, progress):
    """Measure the Bayes attacker's error after 1..20 reports (``panda.repeated``) per ``(name, matrix)``."""
    from panda.repeated import attacker_error_vs_k

    distance_m = instance.d_km * 1000.0
    out = []
    for i, (name, matrix) in enumerate(matrices):
        progress(f"{name}: 1 to 20 reports", i / max(len(matrices), 1))
        out.append(
            (name, attacker_error_vs_k(matrix, instance.prior, distance_m, epsilon_per_km=epsilon_per_km, rng=seed))
        )
    return out


@interactive_job
def attacker_errors_job(instance, matrix, true_prior, attacker_priors, progress):
    """Measure the attacker's error (m) on one matrix, people spread by ``true_prior``, per belief.

    The attacker believes each of ``attacker_priors`` in turn (the prior changes the attacker's
    knowledge, not the mechanism).
    """
    from panda.audit import adversary_error_m

    progress("the attacker's error with each belief", 0.0)
    distance_m = instance.d_km * 1000.0
    return [float(adversary_error_m(matrix, true_prior, distance_m, attacker_prior=q)) for q in attacker_priors]


@interactive_job
def mechanism_numbers_job(instance, mechanism, epsilon_per_km, progress):
    """Audit a mechanism exactly, with its attacker's error and loss (:func:`panda.audit.mechanism_numbers`)."""
    from panda.audit import mechanism_numbers

    progress("the exact audit of every pair", 0.0)
    return mechanism_numbers(instance, mechanism, epsilon_per_km)


@interactive_job
def users_numbers_job(instance, users, rows, epsilon_per_km, progress):
    """Measure a mechanism at the users' true records (the Compare page's columns), uniform over the users.

    ``users``: ``(N',)`` positions in X of the users' records; ``rows``: ``(N', M)`` the mechanism's output
    distribution at each of them. Returns plain floats: ``loss_m`` (mean expected cost), ``adversary_error_m``
    (the Bayes-optimal attacker who knows that the true record is one of the users', uniformly),
    ``violation_rate`` and ``epsilon_min_per_km`` (the exact eps-mDP audit of the user pairs; NaN below two
    users). The same arithmetic as ``app.model.panda_numbers.mechanism_at_users`` plus ``panda.audit.audit_mechanism``
    at the users (tests/app/test_compare_jobs.py checks that the numbers are equal).
    """
    import numpy as np

    from panda.audit import adversary_error_m, audit_mechanism

    nan = float("nan")
    out = {"loss_m": nan, "adversary_error_m": nan, "violation_rate": nan, "epsilon_min_per_km": nan}
    users = np.asarray(users, dtype=np.int64)
    rows = np.asarray(rows, dtype=float)
    if users.size == 0:
        return out
    progress("the loss and the attacker's error at the users", 0.0)
    out["loss_m"] = float((rows * instance.cost_m[users]).sum(axis=1).mean())
    prior = np.full(users.size, 1.0 / users.size)
    guess_m = 1000 * instance.distances_km(users, None)
    out["adversary_error_m"] = float(adversary_error_m(rows, prior, guess_m))
    if users.size >= 2:
        progress("the exact audit of the user pairs", 0.5)
        audit = audit_mechanism(rows, instance.distances_km(users, users), epsilon_per_km)
        out["violation_rate"] = float(audit.violation_rate)
        out["epsilon_min_per_km"] = float(audit.epsilon_min_per_km)
    return out


@interactive_job
def score_round_job(prior, matrix, distance_m, entries, n_reports, seed, progress):
    """Score a class round's entries (:func:`panda.class_round.score_round`) with ``numpy.random.default_rng(seed)``.

    ``seed``: drawn by the server (``secrets.randbits(64)``) for each reveal.
    """
    import numpy as np

    from panda.class_round import score_round

    progress("scoring the class's guesses", 0.0)
    return score_round(prior, matrix, distance_m, list(entries), int(n_reports), rng=np.random.default_rng(seed))


@interactive_job
def upload_network_job(data, filename, network_type, max_decompressed_bytes, max_nodes, progress):
    """Read an uploaded OpenStreetMap file's road network (:func:`panda.network.uploads.read_upload`).

    Here, not in the web server: a small file may unpack to gigabytes of nodes (a PBF block holds tens of
    millions), and only the worker's memory and time limits bound that. The reader's caps give a sentence first
    in most cases. Returns ``{"network": RoadNetwork}`` or ``{"error": sentence}`` (the file's fault: the server
    raises it as a ValueError); the server keeps the network in its upload cache.
    """
    from panda.network.uploads import read_upload

    progress("reading the uploaded file", 0.0)
    try:
        return {"network": read_upload(data, filename, network_type, max_decompressed_bytes, max_nodes)}
    except ValueError as exc:
        return {"error": str(exc)}
