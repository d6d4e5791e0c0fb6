"""The privacy-utility curve (panda.tradeoff.tradeoff_curve): time per method and per point at one K.

    python bench/bench_tradeoff.py --records 200 --repeats 3
    python bench/bench_tradeoff.py --methods lp --repeats 1 --lp-time-limit 20
    python bench/bench_tradeoff.py --methods panda-e,panda-p,panda-l --preset recommended --repeats 1
    python bench/bench_tradeoff.py --dashboard --repeats 3

``--dashboard`` times the dashboard's path instead: ``app.page_jobs.tradeoff_curve`` (one worker job per
method in the worker pool, started cold, caches cleared before each repeat), end to end.

Each method's curve (the default 8-point eps grid) is computed on its own, ``--repeats`` times; the
table gives the median time of the whole curve per method and, per eps, the median time of the
point and its outcome (``ok`` solved, ``TL`` time limit, ``fail``, ``skip``; ``+`` passed the
exact audit, ``-`` failed it, ``~`` not audited). Below: the serial total (one worker) and the
longest-first schedule on two workers (the dashboard's pool on this machine), and the load average
(other jobs on the 2 cores inflate every number).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
from panda.tradeoff import DEFAULT_EPSILONS, DEFAULT_METHODS, tradeoff_curve  # noqa: E402


def _mark(row: dict) -> str:
    code = {"solved": "ok", "time limit": "TL", "failed": "fail", "skipped": "skip"}[row["outcome"]]
    if row["outcome"] == "solved":
        code += "~" if not row["audited"] else ("+" if row["audit_passed"] else "-")
    if row["outcome"] == "time limit" and row["lower_bound_m"] == row["lower_bound_m"]:
        code += f"(>={row['lower_bound_m']:.0f})"
    return code


def _two_workers(times: list[float]) -> float:
    """Makespan of longest-first scheduling on two workers."""
    loads = [0.0, 0.0]
    for t in sorted(times, reverse=True):
        loads[loads.index(min(loads))] += t
    return max(loads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--city", default="neubrandenburg")
    ap.add_argument("--records", type=int, default=200)
    ap.add_argument("--outputs", type=int, default=100)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--preset", default="artifact", help="PAnDA's preset (the dashboard's default: artifact)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lp-time-limit", type=float, default=20.0)
    ap.add_argument("--time-limit", type=float, default=8.0, help="per point, LP baselines and PAnDA")
    ap.add_argument("--budget", type=float, default=20.0, help="per method, LP baselines and PAnDA")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--dashboard", action="store_true", help="time app.page_jobs.tradeoff_curve (worker pool)")
    args = ap.parse_args()
    if args.dashboard:
        _dashboard(args)
        return
    inst = panda.make_instance(
        panda.load_city(args.city), n_records=args.records, n_outputs=args.outputs, n_users=args.users, seed=args.seed
    )
    config = panda.preset(args.preset)
    methods = [m for m in args.methods.split(",") if m]
    print(
        f"{args.city} K={args.records} M={args.outputs} N={args.users} seed={args.seed}, PAnDA preset {args.preset}, "
        f"limits: point {args.time_limit:g} s, method {args.budget:g} s, lp point {args.lp_time_limit:g} s; "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    header = f"{'method':9s} {'median':>7s} " + " ".join(f"{e:>15g}" for e in DEFAULT_EPSILONS)
    print(header)
    medians: dict[str, float] = {}
    everything = []
    for method in methods:
        runs = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            rows = tradeoff_curve(
                inst,
                (method,),
                DEFAULT_EPSILONS,
                panda_config=config,
                seed=args.seed,
                lp_time_limit_s=args.lp_time_limit,
                time_limit_s=args.time_limit,
                method_budget_s=args.budget,
            )
            runs.append((time.perf_counter() - t0, rows))
            everything.extend(rows)
        medians[method] = statistics.median(t for t, _ in runs)
        cells = []
        for i in range(len(DEFAULT_EPSILONS)):
            t_point = statistics.median(rows[i]["time_s"] for _, rows in runs)
            cells.append(f"{t_point:5.1f}s {_mark(runs[-1][1][i]):>8s}")
        print(f"{method:9s} {medians[method]:6.1f}s " + " ".join(f"{c:>15s}" for c in cells), flush=True)
    total = sum(medians.values())
    print(
        f"serial total {total:.1f} s; two workers (longest first) {_two_workers(list(medians.values())):.1f} s; "
        f"load average now {os.getloadavg()[0]:.1f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(everything, default=str, indent=1))


def _dashboard(args: argparse.Namespace) -> None:
    from app import page_jobs, state

    key = (f"city:{args.city}", args.records, args.users, args.outputs, args.seed)
    items = state.config_items(panda.preset(args.preset))
    methods = tuple(m for m in args.methods.split(",") if m)
    print(f"dashboard path, {methods}, {state.N_WORKERS} workers, load average {os.getloadavg()[0]:.1f}", flush=True)
    times = []
    for _ in range(args.repeats):
        state.clear_all()  # cold: new worker processes, empty caches
        t0 = time.perf_counter()
        rows = page_jobs.tradeoff_curve(key, methods, DEFAULT_EPSILONS, items, args.seed, args.lp_time_limit)
        times.append(time.perf_counter() - t0)
        late = [f"{r['method']}@{r['epsilon_per_km']:g}:{r['outcome']}" for r in rows if r["outcome"] != "solved"]
        print(f"  {times[-1]:.1f} s; not solved: {', '.join(late) or 'none'}", flush=True)
        state.panda_worker().close()
    print(f"median {statistics.median(times):.1f} s; load average now {os.getloadavg()[0]:.1f}")
    state.clear_all()


if __name__ == "__main__":
    main()
