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

The gap column is against ``lower_bound_m``, a bound on every eps-mDP mechanism; ``floored gap``
is against the floored LP's bound (``gap_floored_lp``: what stops the solver at ``--gap``). With
``--memory`` each row also gives the peak resident memory of the build (this process's VmHWM,
reset just before the build through /proc/self/clear_refs, so it includes the instance already
in memory; numba and HiGHS threads live in this process), the peak once the bench's own audit
is done too (``ru_maxrss``, which the same reset clears on Linux, or a child process's if
larger), and the load average when the build ended.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
from panda.audit import audit_mechanism  # noqa: E402
from panda.mechanisms import build_lp  # noqa: E402

METHODS = ("certified", "outputs", "spanner", "exact")


def _reset_peak_rss() -> bool:
    """Reset this process's peak resident set (VmHWM) to its current size; ``False`` where Linux cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_gb() -> float:
    """This process's peak resident set since the last reset (VmHWM), GB (``nan`` off Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


def _maxrss_gb() -> float:
    """Peak resident set of this process and, separately counted, of its children, GB: the larger."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    return max(own, kids)


def run_one(
    inst: panda.Instance, eps: float, method: str, gap: float, time_limit: float, *, audit: bool = True
) -> dict:
    """Build one mechanism and measure it."""
    reset = _reset_peak_rss()
    t0 = time.perf_counter()
    if method != "exact":
        start = "auto" if method == "certified" else method
        res = build_lp(inst, eps, gap=gap, time_limit_s=time_limit, method="certified", start=start)
    else:
        res = build_lp(inst, eps, time_limit_s=time_limit, method="exact")
    wall = time.perf_counter() - t0
    build_peak = _peak_rss_gb() if reset else float("nan")
    load = os.getloadavg()
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
        "gap_floored_lp": det.get("gap_floored_lp", float("nan")),
        "lower_floored_lp_m": det.get("lower_bound_floored_lp_m", float("nan")),
        "cost_bound_m": det.get("cost_bound_m", float("nan")),
        "stop_reason": det.get("stop_reason"),
        "rounds": det.get("row_generation", {}).get("n_rounds"),
        "round_log": det.get("row_generation", {}).get("rounds"),
        "lp_rows": det.get("lp_rows"),
        "start": det.get("start"),
        "build_audit": det.get("audit_passed"),
        "audit": None,
        "peak_rss_build_gb": build_peak,
        "load_1_5_15": [round(x, 2) for x in load],
    }
    if res.matrix is not None and audit:
        audit = audit_mechanism(res.matrix, inst.d_km, eps)
        row["audit"] = bool(audit.passed)
    row["peak_rss_process_gb"] = _maxrss_gb()
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
    ap.add_argument("--memory", action="store_true", help="print peak resident memory and load per row")
    ap.add_argument(
        "--no-audit",
        action="store_true",
        help="skip the bench's second exact audit (build_lp audits every certified matrix itself: column 'audit' then "
        "shows that one)",
    )
    ap.add_argument(
        "--round-steps-max",
        type=int,
        default=None,
        help="cap on a PDHG round's steps (panda.optimal.PDHG_ROUND_STEPS_MAX; 0: no cap, 2 K steps, the rule before "
        "the cap; default: the library's)",
    )
    args = ap.parse_args()
    if args.round_steps_max is not None:
        from panda import optimal

        optimal.PDHG_ROUND_STEPS_MAX = args.round_steps_max or None
    net = panda.load_city(args.city)
    rows = []
    header = "| instance | K | eps | seed | method | time (s) | upper (m) | lower (m) | gap | rounds | audit | status |"
    if args.memory:
        header += " floored gap | peak RSS build (GB) | peak RSS process (GB) | load 1/5/15 min |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for k in args.records:
        for eps in args.epsilon:
            for seed in args.seeds:
                inst = panda.make_instance(net, n_records=k, n_outputs=args.outputs, n_users=args.users, seed=seed)
                for method in args.methods:
                    row = {"instance": args.city, "K": k, "eps": eps, "seed": seed}
                    row.update(run_one(inst, eps, method, args.gap, args.time_limit, audit=not args.no_audit))
                    if args.no_audit:
                        row["audit"] = row["build_audit"]
                    rows.append(row)
                    line = (
                        f"| {args.city} | {k} | {eps:g} | {seed} | {method} | {row['time_s']:.1f} | "
                        f"{fmt(row['upper_m'], '.2f')} | {fmt(row['lower_m'], '.2f')} | "
                        f"{fmt(100 * row['gap'], '.2f')} % | {row['rounds']} | {row['audit']} | {row['status']} "
                        f"(start {row['start']}) |"
                    )
                    if args.memory:
                        gf = row["gap_floored_lp"]
                        line += (
                            f" {fmt(100 * gf if isinstance(gf, float) else float('nan'), '.2f')} % | "
                            f"{fmt(row['peak_rss_build_gb'], '.2f')} | {fmt(row['peak_rss_process_gb'], '.2f')} | "
                            f"{' '.join(f'{x:.2f}' for x in row['load_1_5_15'])} |"
                        )
                    print(line, flush=True)
                    if args.json:  # after every run: a long sweep stopped early keeps what it measured
                        args.json.write_text(json.dumps(rows, indent=1, default=str))
    for k in args.records:
        for eps in args.epsilon:
            for method in args.methods:
                sel = [r for r in rows if r["K"] == k and r["eps"] == eps and r["method"] == method]
                if len(sel) > 1:
                    print(
                        f"median {args.city} K={k} eps={eps:g} {method}: "
                        f"time {statistics.median(r['time_s'] for r in sel):.1f} s, "
                        f"gap {100 * statistics.median(r['gap'] for r in sel):.2f} %"
                        + (
                            f", peak RSS {statistics.median(r['peak_rss_build_gb'] for r in sel):.2f} GB"
                            if args.memory
                            else ""
                        )
                    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
