"""The optimal LP across the curve's eps ladder: cold against warm from the neighbouring eps, side by side.

    python bench/bench_warm_start.py --records 500 --reps 3 --direction down

One instance (``bench/_instance.py``: Neubrandenburg by default, M = 100, 50 users), the curve's budgets
(``panda.tradeoff.DEFAULT_EPSILONS`` unless ``--epsilons``). Each solve is what ``build_lp``'s certified
default runs (``start="auto"``: PDHG from the exponential mechanism on the spanner's rows on dense
instances, dual simplex from the outputs' rows on sparse ones; :func:`solve_optimal` directly, so the warm
start can be passed) to the gap ``--gap`` (the floored LP's, what stops the solver) within ``--time-limit``.

First one cold solve per eps gives the neighbours (``--direction down``: each eps warm from the next larger
one, as a curve solved from the loose end down; ``up``: from the next smaller one). Then, ``--reps`` times,
for every eps but the ladder's first: a cold solve and a warm solve (``warm=`` the neighbour's result),
interleaved, the order alternating from rep to rep. Every matrix is audited exactly (all pairs). Prints one
line per solve, then per eps the medians of cold and warm time to the gap (the time limit where it was not
reached), their ratio, the gap at the stop and PDHG steps.
``--json FILE`` writes the runs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from _instance import instance_of, instance_parser  # noqa: E402

import panda  # noqa: E402
from panda.audit import audit_mechanism  # noqa: E402
from panda.mechanisms.lp_full import (  # noqa: E402
    PDHG_BATCH,
    SIMPLEX_BATCH,
    auto_start,
    em_matrix,
    mean_floor_neighbours,
    output_distances_km,
    spanner_seed_rows,
)
from panda.optimal import OptimalResult, solve_optimal  # noqa: E402
from panda.tradeoff import DEFAULT_EPSILONS  # noqa: E402

ETA = 1e-6


def solve(inst: panda.Instance, eps: float, gap: float, limit: float, warm: OptimalResult | None) -> OptimalResult:
    """One certified solve as ``build_lp(start="auto")`` sets it up (the spanner counts in its time)."""
    t0 = time.perf_counter()
    cost = inst.prior[:, None] * inst.cost_m
    start = auto_start(mean_floor_neighbours(inst.d_km, eps, ETA), gap)
    if start == "spanner":
        options = {
            "method": "pdhg",
            "seed_rows": spanner_seed_rows(inst, eps, ETA),
            "start_matrix": em_matrix(output_distances_km(inst), eps),
            "batch": PDHG_BATCH,
        }
    else:
        options = {"seed_sources": inst.outputs, "batch": SIMPLEX_BATCH}
    left = max(limit - (time.perf_counter() - t0), 0.0)
    res = solve_optimal(cost, inst.d_km, eps, eta=ETA, gap=gap, time_limit_s=left, warm=warm, **options)
    res.info["wall_s"] = time.perf_counter() - t0
    return res


def record(inst: panda.Instance, eps: float, kind: str, rep: int, res: OptimalResult) -> dict:
    """One line of the table (and of the JSON)."""
    audit = audit_mechanism(res.matrix, inst.d_km, eps) if res.matrix is not None else None
    steps = sum(int(r.get("iterations", 0)) for r in res.rounds)
    row = {
        "eps": eps,
        "kind": kind,
        "rep": rep,
        "time_s": res.info["wall_s"],
        "solved": res.solved,
        "gap": res.gap,
        "upper_m": res.upper_bound,
        "lower_m": res.lower_bound,
        "rounds": len(res.rounds),
        "pdhg_steps": steps,
        "method": res.info["method"],
        "audit": None if audit is None else bool(audit.passed),
        "warm": res.info.get("warm"),
    }
    print(
        f"eps {eps:5g}  {kind:4s} rep {rep}  {row['time_s']:7.2f} s  solved {str(res.solved):5s}  gap {res.gap:.4%}"
        f"  upper {res.upper_bound:8.3f}  lower {res.lower_bound:8.3f}  rounds {row['rounds']:2d}  steps {steps:6d}"
        f"  {row['method']:7s}  audit {row['audit']}",
        flush=True,
    )
    return row


def main() -> None:
    ap = instance_parser(__doc__.splitlines()[0])
    ap.add_argument("--epsilons", type=float, nargs="+", default=list(DEFAULT_EPSILONS))
    ap.add_argument("--direction", choices=("down", "up"), default="down")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gap", type=float, default=0.005)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument(
        "--prep-time-limit", type=float, default=None, help="the neighbours' cold solves (default: --time-limit)"
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    inst = instance_of(args)
    ladder = sorted(set(args.epsilons), reverse=args.direction == "down")
    print(f"{args.city} K = {args.records}, M = 100, seed {args.seed}; ladder {ladder}; load {os.getloadavg()}")
    neighbours: dict[float, OptimalResult] = {}
    rows = []
    for eps in ladder[:-1]:
        neighbours[eps] = res = solve(inst, eps, args.gap, args.prep_time_limit or args.time_limit, None)
        rows.append(record(inst, eps, "prep", 0, res))
    for rep in range(args.reps):
        for prev, eps in zip(ladder[:-1], ladder[1:], strict=True):
            kinds = ("cold", "warm") if (rep + ladder.index(eps)) % 2 == 0 else ("warm", "cold")
            for kind in kinds:
                res = solve(inst, eps, args.gap, args.time_limit, neighbours[prev] if kind == "warm" else None)
                rows.append(record(inst, eps, kind, rep, res))
    print(f"\nload after {os.getloadavg()}")
    head = (
        "| eps | from | cold s (runs) | warm s (runs) | warm / cold | cold gap at stop | warm gap at stop"
        " | cold steps | warm steps | solved c/w | audits |"
    )
    print(head)
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for prev, eps in zip(ladder[:-1], ladder[1:], strict=True):
        cold = [r for r in rows if r["eps"] == eps and r["kind"] == "cold"]
        warm = [r for r in rows if r["eps"] == eps and r["kind"] == "warm"]
        mc, mw = (statistics.median(r["time_s"] for r in v) for v in (cold, warm))
        ratios.append(mw / mc)
        sc, sw = (statistics.median(r["pdhg_steps"] for r in v) for v in (cold, warm))
        gc, gw = (statistics.median(r["gap"] for r in v) for v in (cold, warm))
        runs = [", ".join(f"{r['time_s']:.1f}" for r in v) for v in (cold, warm)]
        solved = f"{sum(r['solved'] for r in cold)}/{sum(r['solved'] for r in warm)} of {len(cold)}"
        audits = all(r["audit"] for r in cold + warm)
        print(
            f"| {eps:g} | {prev:g} | {mc:.2f} ({runs[0]}) | {mw:.2f} ({runs[1]}) | {mw / mc:.2f} | {gc:.2%} | {gw:.2%}"
            f" | {sc:.0f} | {sw:.0f}"
            f" | {solved} | {'pass' if audits else 'FAIL'} |"
        )

    def total(kind: str) -> float:
        return sum(
            statistics.median(r["time_s"] for r in rows if r["eps"] == e and r["kind"] == kind) for e in ladder[1:]
        )

    total_c, total_w = total("cold"), total("warm")
    n = len(ladder) - 1
    print(f"\nsum of medians over {n} eps: cold {total_c:.1f} s, warm {total_w:.1f} s, ratio {total_w / total_c:.2f}")
    print(f"median of the per-eps ratios: {statistics.median(ratios):.2f}")
    if args.json:
        for r in rows:
            r["warm"] = None if r["warm"] is None else {k: v for k, v in r["warm"].items()}
        Path(args.json).write_text(json.dumps(rows, indent=1, default=float))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
