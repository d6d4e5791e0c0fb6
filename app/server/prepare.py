"""Lecture preparation: compute every view a list of dashboard links reaches, ahead of the lecture.

``python -m panda prepare LINKS.txt`` (one link per line; ``#`` starts a comment) or ``--link URL`` (the command
line is panda.cli's). For each
link's view (its city or box, K, N, M, seed, loss, prior and ε, read the way the dashboard reads them) it
computes, with no time limit:

* every mechanism of the Lesson's menu at the link's ε (the optimal LP certified to a gap of at most 0.5 %),
  with its exact audit and the Bayes attacker's error;
* the trade-off curve of every default method and of the optimal LP at every ε of the curve.

Each result goes into the result store (app/server/result_store.py) marked *prepared*; the dashboard then shows it at
once. What the store already holds is skipped, so a stopped preparation (Ctrl-C, or a closed laptop) goes on
where it stopped when run again. Progress is printed one line per task.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from app.model import instances
from app.model.params import DEFAULT_PAGE_LOSS, PAGE_LOSS, Params, from_query
from app.server import result_store

__all__ = ["Task", "parse_link", "tasks_for", "read_links", "run", "LESSON_MECHANISMS", "CURVE_LP_LIMIT_S"]

#: The Lesson menu's mechanisms with a matrix (PAnDA's runs are not kept: they take seconds).
LESSON_MECHANISMS = ("laplace", "em", "em-br", "lp-ca", "lp-em", "lp")
#: The page's time limit of an LP-based mechanism (its key leaves the limit out: only solved LPs are kept).
PAGE_LP_LIMIT_S = 20.0
#: No time limit in practice: an hour per LP, per curve point.
PREPARE_LP_LIMIT_S = 3600.0
CURVE_LP_LIMIT_S = PREPARE_LP_LIMIT_S
#: The optimal LP's own gap target when prepared: its stop rule reads the floored LP's bound, and the honest gap
#: (against every mechanism, floor or not) is larger by up to the floor's cost, so this is half ``build_lp``'s
#: default 0.5 % to leave the honest gap room for it.
LP_SOLVER_GAP = 0.0025
#: The page names of the dashboard's paths ("" is the Lesson).
PAGES = {"": "lesson", "explore": "explore", "learn": "learn", "compare": "compare", "audit": "audit"}


@dataclass(frozen=True)
class Task:
    """One thing to compute: a mechanism (and its audit) at one ε, or one method's curve."""

    kind: str  # "mechanism" or "curve"
    instance_key: tuple
    name: str
    epsilon_per_km: float = 0.0

    def label(self) -> str:
        src = self.instance_key[0]
        view = f"{src} K={self.instance_key[1]} seed={self.instance_key[4]}"
        if self.kind == "mechanism":
            return f"{self.name} at ε = {self.epsilon_per_km:g}/km ({view})"
        return f"curve of {self.name} ({view})"


def parse_link(link: str) -> Params:
    """The view of a dashboard link (``http://host:8501/explore?K=300&eps=2``); raises ValueError on a bad one."""
    parts = urlsplit(link.strip())
    page = parts.path.strip("/").rsplit("/", 1)[-1]
    if page not in PAGES:
        raise ValueError(f"{link!r}: not a page of the dashboard (expected one of /, /{', /'.join(list(PAGES)[1:])}).")
    params, problems = from_query(dict(parse_qsl(parts.query)))
    if problems:
        raise ValueError(f"{link!r}: " + "; ".join(problems))
    return params.replace(page_loss=PAGE_LOSS.get(PAGES[page], DEFAULT_PAGE_LOSS))


def tasks_for(params: Params) -> list[Task]:
    """The tasks of one link's view: the Lesson's mechanisms at its ε, then the curves (the optimal LP's last)."""
    from panda.tradeoff import DEFAULT_METHODS

    key = params.instance_key
    eps = float(params.epsilon_per_km)
    out = [Task("mechanism", key, name, eps) for name in LESSON_MECHANISMS]
    out += [Task("curve", key, method) for method in (*DEFAULT_METHODS, "lp")]
    return out


def _options(name: str) -> tuple:
    return (("time_limit_s", PAGE_LP_LIMIT_S),) if name.startswith("lp") else ()


def _curve_inputs(params: Params, method: str, store_key: tuple | None = None) -> tuple[list, tuple, tuple]:
    """The curve's store inputs exactly as the Lesson asks for them (app/state.tradeoff_method).

    ``store_key``: the view's :func:`app.server.result_store.store_key` (needed for a box or an upload; an embedded
    city's is its instance key, the default).
    """
    from app.model.params import to_config
    from panda.tradeoff import DEFAULT_EPSILONS

    key = params.instance_key if store_key is None else store_key
    items = tuple(sorted(to_config(params).to_dict().items()))
    epsilons = tuple(DEFAULT_EPSILONS)
    return result_store.curve_key_inputs(key, method, epsilons, items, params.seed), epsilons, items


def is_done(task: Task, params: Params, network_of: Callable[[str], object] | None = None) -> bool:
    """Whether the store already holds the task's result (for a box or an upload: on the network
    ``network_of(source)`` gives, the one the task is computed on; default :func:`app.model.instances.network_of`)."""
    load = network_of or instances.network_of
    key = result_store.store_key(task.instance_key, lambda: load(task.instance_key[0]))
    if task.kind == "mechanism":
        kept = result_store.get_mechanism(key, task.name, task.epsilon_per_km, _options(task.name))
        return kept is not None
    inputs, _, _ = _curve_inputs(params, task.name, key)
    return result_store.get_value("curve", inputs) is not None


def run_task(task: Task, params: Params, instance_of: Callable[[tuple], object]) -> str:
    """Compute one task with no time limit and keep it; returns a short outcome for the progress line."""
    from panda.mechanisms import BASELINES

    inst = instance_of(task.instance_key)
    key = result_store.store_key(task.instance_key, inst.network)  # type: ignore[attr-defined]
    if task.kind == "mechanism":
        opts = {"time_limit_s": PREPARE_LP_LIMIT_S} if task.name.startswith("lp") else {}
        if task.name == "lp":  # the solver stops on the floored LP's gap: aim lower so that the honest one is <= 0.5 %
            opts["gap"] = LP_SOLVER_GAP
        mech = BASELINES[task.name](inst, task.epsilon_per_km, **opts)
        if task.name == "lp" and not result_store.keepable("lp", mech) and mech.matrix is not None:
            mech = BASELINES["lp"](inst, task.epsilon_per_km, time_limit_s=PREPARE_LP_LIMIT_S, gap=LP_SOLVER_GAP / 5)
        if not result_store.put_mechanism(
            key, task.name, task.epsilon_per_km, _options(task.name), mech, prepared=True
        ):
            return f"not kept: {mech.status}"
        numbers = instances.mechanism_numbers_of(inst, mech, task.epsilon_per_km)
        inputs = result_store.mechanism_key_inputs(key, task.name, task.epsilon_per_km, _options(task.name))
        result_store.put_value("numbers", inputs, numbers, prepared=True)
        gap = (mech.details or {}).get("gap")
        extra = f", gap {100 * gap:.2f} %" if isinstance(gap, float) and gap == gap else ""
        return f"{mech.status}, loss {mech.loss_m:,.0f} m{extra}"
    import panda
    from panda.tradeoff import tradeoff_curve

    inputs, epsilons, items = _curve_inputs(params, task.name, key)
    rows = tradeoff_curve(
        inst,
        (task.name,),
        epsilons,
        panda_config=panda.PandaConfig(**dict(items)),
        seed=params.seed,
        lp_time_limit_s=CURVE_LP_LIMIT_S,
        time_limit_s=PREPARE_LP_LIMIT_S,
        method_budget_s=len(epsilons) * PREPARE_LP_LIMIT_S,
    )
    if not result_store.curve_complete(rows):
        bad = [f"{r['epsilon_per_km']:g}: {r['outcome']}" for r in rows if r.get("outcome") != "solved"]
        return "not kept (points not solved: " + ", ".join(bad) + ")"
    result_store.put_value("curve", inputs, rows, prepared=True)
    return f"{len(rows)} points"


def read_links(lines: Iterable[str]) -> list[str]:
    """Links from a file's lines: blank lines and ``#`` comments skipped."""
    return [ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip()]


def _interruptible() -> None:
    """Let SIGINT stop the preparation (Ctrl-C, ``kill -INT``, the presenter view's Stop) even when it was started
    with SIGINT ignored: a shell starts background jobs that way (``nohup ... &``), the ignoring is inherited, and
    Python then installs no KeyboardInterrupt handler, so the run went on to the end. Main thread only."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def run(links: list[str], *, out=sys.stdout) -> int:  # noqa: ANN001 (a text stream)
    """Prepare every view of ``links``; returns 0 when all is kept, 1 when a task could not be, 2 on bad links."""
    views_: list[tuple[Params, Task]] = []
    seen: set[tuple] = set()
    for link in links:
        try:
            params = parse_link(link)
        except ValueError as exc:
            print(f"Bad link: {exc}", file=out, flush=True)
            return 2
        for task in tasks_for(params):
            ident = (task.kind, task.instance_key, task.name, task.epsilon_per_km)
            if ident not in seen:  # links sharing a view share its work
                seen.add(ident)
                views_.append((params, task))
    networks: dict[str, object] = {}
    built: dict[tuple, object] = {}

    def network_of(source: str) -> object:  # one copy of each network: its fingerprint is the one computed on
        if source not in networks:
            networks[source] = instances.network_of(source)
        return networks[source]

    def instance_of(key: tuple) -> object:
        if key not in built:
            built[key] = instances.build_instance(network_of(key[0]), *key[1:])
        return built[key]

    n, failed, t_all = len(views_), 0, time.perf_counter()
    _interruptible()
    print(f"Preparing {len(links)} link(s): {n} tasks (results go to the result store).", file=out, flush=True)
    try:
        for i, (params, task) in enumerate(views_, 1):
            try:
                done = is_done(task, params, network_of)
            except Exception:  # noqa: BLE001 (its network cannot be loaded: the task's run says why)
                done = False
            if done:
                print(f"[{i}/{n}] {task.label()}: already prepared", file=out, flush=True)
                continue
            t0 = time.perf_counter()
            print(f"[{i}/{n}] {task.label()} ...", file=out, flush=True)
            try:
                outcome = run_task(task, params, instance_of)
            except Exception as exc:  # noqa: BLE001 (one failed task does not stop the others)
                outcome = f"failed: {type(exc).__name__}: {exc}"
            failed += outcome.startswith(("not kept", "failed"))
            print(f"[{i}/{n}] {task.label()}: {outcome} ({time.perf_counter() - t0:.1f} s)", file=out, flush=True)
    except KeyboardInterrupt:
        print("Stopped. What is done is kept: run the same command again to go on.", file=out, flush=True)
        return 130
    print(f"Done in {time.perf_counter() - t_all:.0f} s; {failed} task(s) not kept.", file=out, flush=True)
    return 1 if failed else 0
