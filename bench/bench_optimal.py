"""The optimal eps-mDP LP with a certificate: time, upper bound, lower bound and gap per method.

    python bench/bench_optimal.py --city neubrandenburg --records 500 --seeds 0 1 2 --time-limit 300
    python bench/bench_optimal.py --city rome-paper --records 2000 --seeds 0 --methods certified

Methods (run one after the other on the same instance, so their times compare):

* ``certified``: ``build_lp(instance, eps, gap=GAP)``, the default: ``start="auto"`` picks one of
  the next two by the instance's density (a certificate after every round either way);
* ``outputs``: ``start="outputs"`` (row generation per right entry, warm dual simplex);
* ``spanner``: ``start="spanner"`` (the first LP on a greedy 1.25-spanner's rows, restarted PDHG
  rounds, warm from round to round);
* ``exact``: ``build_lp(instance, eps, method="exact")``, the earlier row generation (no bound until
  it finishes; its last finished round's optimum when it does not).

Every returned matrix is audited exactly (all pairs). Prints one table row per run (instance, K,
eps, seed, method, time, upper, lower, gap, audit) and, with ``--json FILE``, writes the rows.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
from panda.audit import audit_mechanism  # noqa: E402
from panda.mechanisms import build_lp  # noqa: E402

METHODS = ("certified", "outputs", "spanner", "exact")


def run_one(inst: panda.Instance, eps: float, method: str, gap: float, time_limit: float) -> dict:
    """Build one mechanism and measure it."""
    t0 = time.perf_counter()
    if method != "exact":
        start = "auto" if method == "certified" else method
        res = build_lp(inst, eps, gap=gap, time_limit_s=time_limit, method="certified", start=start)
    else:
        res = build_lp(inst, eps, time_limit_s=time_limit, method="exact")
    wall = time.perf_counter() - t0
    det = res.details
    upper = det.get("upper_bound_m", float("nan"))
    lower = det.get("lower_bound_m", float("nan"))
    row = {
        "method": method,
        "time_s": wall,
        "status": res.status,
        "upper_m": upper,
        "lower_m": lower,
        "gap": (upper - lower) / upper if upper == upper and lower == lower else float("nan"),
        "rounds": det.get("row_generation", {}).get("n_rounds"),
        "start": det.get("start"),
        "audit": None,
    }
    if res.matrix is not None:
        audit = audit_mechanism(res.matrix, inst.d_km, eps)
        row["audit"] = bool(audit.passed)
    return row


def fmt(x: float, spec: str) -> str:
    """Format a number, ``-`` for nan."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--city", default="neubrandenburg")
    ap.add_argument("--records", type=int, nargs="+", default=[500])
    ap.add_argument("--epsilon", type=float, nargs="+", default=[5.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--outputs", type=int, default=100)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--methods", nargs="+", default=["certified"], choices=METHODS)
    ap.add_argument("--gap", type=float, default=0.005)
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = ap.parse_args()
    net = panda.load_city(args.city)
    rows = []
    header = "| instance | K | eps | seed | method | time (s) | upper (m) | lower (m) | gap | rounds | audit | status |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for k in args.records:
        for eps in args.epsilon:
            for seed in args.seeds:
                inst = panda.make_instance(net, n_records=k, n_outputs=args.outputs, n_users=args.users, seed=seed)
                for method in args.methods:
                    row = {"instance": args.city, "K": k, "eps": eps, "seed": seed}
                    row.update(run_one(inst, eps, method, args.gap, args.time_limit))
                    rows.append(row)
                    print(
                        f"| {args.city} | {k} | {eps:g} | {seed} | {method} | {row['time_s']:.1f} | "
                        f"{fmt(row['upper_m'], '.2f')} | {fmt(row['lower_m'], '.2f')} | "
                        f"{fmt(100 * row['gap'], '.2f')} % | {row['rounds']} | {row['audit']} | {row['status']} "
                        f"(start {row['start']}) |",
                        flush=True,
                    )
    for k in args.records:
        for eps in args.epsilon:
            for method in args.methods:
                sel = [r for r in rows if r["K"] == k and r["eps"] == eps and r["method"] == method]
                if len(sel) > 1:
                    print(
                        f"median {args.city} K={k} eps={eps:g} {method}: "
                        f"time {statistics.median(r['time_s'] for r in sel):.1f} s, "
                        f"gap {100 * statistics.median(r['gap'] for r in sel):.2f} %"
                    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
