"""Every mechanism of the Lesson's menu on the Lesson's default view: build time, where it goes, audit.

    python bench/bench_lesson_mechanisms.py                     # every menu mechanism, eps 1, 3, 5, 10 /km
    python bench/bench_lesson_mechanisms.py --methods lp-em,lp-ca --before be8f409

The view is ``app.model.params.Params()`` with the Lesson's loss (road distance): its instance is built as the
dashboard builds it (``app.model.instances.build_instance``). Each mechanism runs what its job runs: for the
baselines ``panda.mechanisms.BASELINES[name](instance, eps, **options)`` with the Lesson's options (an LP
time limit of LP_TIME_LIMIT_S; the optimal LP's first certified mechanism within LIVE_FIRST_S), then the exact
audit ``panda.audit.mechanism_numbers`` (the job ``panda.jobs.baseline_numbers_job``); for PAnDA
``panda.run_panda`` with the view's config. Not counted: the Dask queue, pickling and the page's drawing
(``bench/bench_lesson_ui.py``).

``--before REV`` also runs LP + EM and LP on cells as they were at git revision ``REV`` (their modules read
with ``git show``), in the same run, for side-by-side figures. Medians of ``--repeats`` runs (wall and
process CPU seconds); a point that stops at its time limit is run once. ``uptime``'s load is printed
before and after: the figures are only comparable at a similar load.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import panda  # noqa: E402
from app.model import instances, lesson_numbers  # noqa: E402
from app.model.params import PAGE_LOSS, Params, parse_source, to_config  # noqa: E402
from app.widgets.mechanism_rows import LIVE_FIRST_S, LP_TIME_LIMIT_S  # noqa: E402
from panda.audit import mechanism_numbers  # noqa: E402
from panda.mechanisms import BASELINES  # noqa: E402

#: The Lesson's options per mechanism (app/widgets/mechanism_rows.py: LP_TIME_LIMIT_S, LIVE_FIRST_S).
LESSON_OPTIONS = {
    "laplace": {},
    "em": {},
    "em-br": {},
    "lp-ca": {"time_limit_s": LP_TIME_LIMIT_S},
    "lp-em": {"time_limit_s": LP_TIME_LIMIT_S},
    "lp": {"time_limit_s": LIVE_FIRST_S},
}


def load_at(rev: str, rel: str, name: str):
    """A module of this repository as it was at git revision ``rev`` (its imports: today's package)."""
    text = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lesson_view() -> tuple[Params, panda.Instance]:
    """The Lesson's default view and its instance (as the dashboard builds them)."""
    params = Params(page_loss=PAGE_LOSS["lesson"])
    key = params.instance_key
    _, city = parse_source(key[0])
    return params, instances.build_instance(panda.load_city(str(city)), *key[1:])


def breakdown(details: dict) -> str:
    """Where an LP mechanism's time went, from its details."""
    if not isinstance(details, dict):
        return ""
    parts = []
    for key, label in (("build_s", "model"), ("lp_time_s", "HiGHS"), ("repair_s", "repair")):
        if isinstance(details.get(key), (int, float)):
            parts.append(f"{label} {details[key]:.2f}")
    rg = details.get("row_generation")
    if isinstance(rg, dict) and rg.get("rounds") and details.get("lp_rows_full"):
        parts.append(
            f"{len(rg['rounds'])} rounds, {rg['rounds'][-1]['rows']:,} of {details.get('lp_rows_full', 0):,} rows"
        )
    elif details.get("lp_rows"):
        parts.append(f"{details['lp_rows']:,} rows")
    return ", ".join(parts)


def run_point(label: str, build, inst: panda.Instance, eps: float, repeats: int) -> dict:
    walls, cpus, audits = [], [], []
    mech = numbers = None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        mech = build()
        t1 = time.perf_counter()
        numbers = mechanism_numbers(inst, mech, eps) if hasattr(mech, "matrix") else None
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        audits.append(time.perf_counter() - t1)
        if str(getattr(mech, "status", "")).startswith("unsolved"):
            break  # stopped at its time limit: once is enough
    row = {
        "method": label,
        "epsilon_per_km": eps,
        "runs": len(walls),
        "wall_s": statistics.median(walls),
        "cpu_s": statistics.median(cpus),
        "audit_s": statistics.median(audits),
    }
    if hasattr(mech, "matrix"):
        row.update(
            status=mech.status,
            loss_m=float(mech.loss_m),
            passed=(numbers or {}).get("passed"),
            where=breakdown(mech.details),
        )
    else:  # a PandaResult
        row.update(status="ran", loss_m=float("nan"), passed=mech.user_pair_violation_rate == 0, where="")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=",".join(lesson_numbers.MECHANISMS))
    ap.add_argument("--epsilons", default="1,3,5,10")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", default=None, help="git revision: also run LP + EM and LP on cells as they were")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    load_before = os.getloadavg()
    params, inst = lesson_view()
    print(f"view: {params.instance_key}; K = {inst.n_records}, M = {inst.n_outputs}; load before {load_before}")
    methods = args.methods.split(",")
    old = {}
    if args.before:
        old["lp-em"] = load_at(args.before, "panda/mechanisms/lp_em.py", "lp_em_before").build_lp_em
        old["lp-ca"] = load_at(args.before, "panda/mechanisms/lp_ca.py", "lp_ca_before").build_lp_ca
    rows = []
    for eps in (float(e) for e in args.epsilons.split(",")):
        for name in methods:
            jobs = []
            if name in lesson_numbers.PANDA_KEYS:
                config = to_config(params.replace(decay=lesson_numbers.PANDA_KEYS[name], epsilon_per_km=eps))
                jobs.append((name, lambda c=config: panda.run_panda(inst, c, seed=params.seed)))
            else:
                opts = LESSON_OPTIONS[name]
                if name in old:
                    jobs.append((f"{name} (before)", lambda f=old[name], o=opts, e=eps: f(inst, e, **o)))
                jobs.append((name, lambda n=name, o=opts, e=eps: BASELINES[n](inst, e, **o)))
            for label, build in jobs:
                row = run_point(label, build, inst, eps, args.repeats)
                rows.append(row)
                print(
                    f"{eps:>5g} {label:<16} wall {row['wall_s']:6.2f} s  cpu {row['cpu_s']:6.2f} s  "
                    f"(audit {row['audit_s']:.2f} s, {row['runs']} runs)  {row['status']:<34} "
                    f"loss {row['loss_m']:8.2f} m  audit {'pass' if row['passed'] else 'FAIL'}  {row['where']}",
                    flush=True,
                )
    load_after = os.getloadavg()
    print(f"load after {load_after}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"view": list(params.instance_key), "load": [load_before, load_after], "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
