"""Benchmark: PAnDA end to end, and the AnPO LP reduced (floor eta) against the monolithic LP.

Run from the repo root (needs the paper's Rome network at ../shared/data/rome-paper or
$PANDA_ROME_PAPER_DIR for --city rome-paper):

    python bench/bench_anpo.py --city rome-paper --records 2000 --repeats 3 --monolithic
    python bench/bench_anpo.py --city rome-paper --records 5000 --repeats 3
    python bench/bench_anpo.py --city rome-paper --records 20000 --repeats 3 --skip-relaxed

Everything is measured in one run, side by side; medians are printed and written as JSON.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
from panda.lp import solve_mdp_lp  # noqa: E402
from panda.phase2 import pair_log_ratio  # noqa: E402


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    rows = []
    for row in _measure(args):
        rows.append(row)
        # One line per repetition as soon as it is measured: a long run shows its progress.
        print(json.dumps(row, default=float), flush=True)
    _print_summary(args, rows)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--city", default="rome-paper")
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--outputs", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", default="artifact", choices=["artifact", "paper"])
    ap.add_argument("--radius", default="all", help="constraint radius km or 'all'")
    ap.add_argument("--monolithic", action="store_true", help="also time the monolithic all-pairs LP (slow)")
    ap.add_argument("--time-limit", type=float, default=1800.0)
    ap.add_argument("--solver", default="simplex")
    ap.add_argument("--mono-solver", default="ipm", help="solver of the monolithic LP")
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--skip-relaxed",
        action="store_true",
        help="time run_panda only (no extra LPs on the run's anchors: scale runs)",
    )
    return ap.parse_args(argv)


def _measure(args: argparse.Namespace) -> Iterator[dict]:
    """Yield one row per repetition: PAnDA end to end, then (unless --skip-relaxed) the LPs on its anchors."""
    net = panda.load_city(args.city)
    radius = None if args.radius == "all" else float(args.radius)
    cfg = panda.preset(args.preset, constraint_radius_km=radius, lp_time_limit_s=args.time_limit, lp_solver=args.solver)
    for rep in range(args.repeats):
        t0 = time.perf_counter()
        inst = panda.make_instance(net, n_records=args.records, n_outputs=args.outputs, n_users=args.users, seed=rep)
        t_inst = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = panda.run_panda(inst, cfg.replace(solve_relaxed=False), seed=rep)
        t_run = time.perf_counter() - t0
        row = {
            "repeat": rep,
            "instance_s": t_inst,
            "run_panda_s": t_run,
            "timings": res.timings_s,
            "anchor_union": res.n_anchors,
            "mean_anchor_set": float(np.mean([a.size for a in res.anchor_sets])),
            "pairs": int(res.pair_i.size),
            "over_budget": int(res.pair_over_budget.sum()),
            "lp_status": res.lp_status,
            "lp_objective_m": res.lp_objective_m,
            "row_groups": res.lp_info.get("row_groups"),
            "user_pair_violation_rate": res.user_pair_violation_rate,
            "peak_rss_mb": _peak_rss_mb(),
        }
        if not args.skip_relaxed:
            row.update(_measure_relaxed(inst, res, cfg, args))
        yield row


def _measure_relaxed(inst, res, cfg, args: argparse.Namespace) -> dict:
    """Time the hard LP on the run's anchors and pairs: reduced (floor eta) and, with --monolithic, all pairs."""
    # The relaxed exponent eps*d (no row contraction).
    union = res.anchor_union
    pi = np.concatenate([res.pair_i, res.pair_j])
    pj = np.concatenate([res.pair_j, res.pair_i])
    b = np.tile(cfg.epsilon_per_km * res.pair_d_km, 2)
    w = inst.prior[union] / inst.prior[union].sum()
    cost = w[:, None] * inst.cost_m[union]
    row = {}
    t0 = time.perf_counter()
    red = solve_mdp_lp(cost, pi, pj, b, eta=cfg.lp_floor, solver=args.solver, time_limit_s=args.time_limit)
    row["relaxed_reduced_s"] = time.perf_counter() - t0
    row["relaxed_reduced_obj_m"] = red.objective
    row["relaxed_reduced_pairs_kept"] = red.n_pairs_kept
    row["relaxed_reduced_status"] = red.lp.status
    # Proven: mixing the unfloored optimum with eta-uniform is feasible for the floored LP, so
    # OPT_eta - OPT_0 <= eta * sum_x p_x sum_y c[x, y]. Report that bound and the sensitivity to eta.
    row["floor_gap_bound_m"] = float(cfg.lp_floor * cost.sum())
    row["floor_gap_bound_rel"] = row["floor_gap_bound_m"] / red.objective
    small = solve_mdp_lp(cost, pi, pj, b, eta=1e-8, solver=args.solver, time_limit_s=args.time_limit)
    row["relaxed_reduced_eta1e-8_s"] = small.lp.time_s + small.build_time_s
    row["relaxed_reduced_eta1e-8_obj_m"] = small.objective
    if red.z is not None:
        excess = pair_log_ratio(red.z[pi], red.z[pj]) - b
        row["relaxed_reduced_max_excess"] = float(excess.max())
    if args.monolithic:
        t0 = time.perf_counter()
        mono = solve_mdp_lp(
            cost, pi, pj, b, eta=0.0, reduce=False, solver=args.mono_solver, time_limit_s=args.time_limit
        )
        row["monolithic_s"] = time.perf_counter() - t0
        row["monolithic_obj_m"] = mono.objective
        row["monolithic_status"] = mono.lp.status
        row["monolithic_rows"] = mono.lp.n_rows
    return row


def _print_summary(args: argparse.Namespace, rows: list[dict]) -> None:
    """Print the medians over the repetitions, and write them with every row to --out."""
    summary = _summary(args, rows)
    print("SUMMARY " + json.dumps(summary, default=float, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, default=float, indent=1))


def _summary(args: argparse.Namespace, rows: list[dict]) -> dict:
    def med(key):
        vals = [r[key] for r in rows if key in r and r[key] == r[key]]
        return statistics.median(vals) if vals else float("nan")

    return {
        "city": args.city,
        "K": args.records,
        "preset": args.preset,
        "radius": args.radius,
        "repeats": args.repeats,
        "median_run_panda_s": med("run_panda_s"),
        "median_instance_s": med("instance_s"),
        "median_anchor_union": med("anchor_union"),
        "median_relaxed_reduced_s": med("relaxed_reduced_s"),
        "median_monolithic_s": med("monolithic_s"),
        "speedup_monolithic_over_reduced": med("monolithic_s") / med("relaxed_reduced_s"),
        "median_objective_gap_rel": statistics.median(
            [
                (r["relaxed_reduced_obj_m"] - r["monolithic_obj_m"]) / r["monolithic_obj_m"]
                for r in rows
                if "monolithic_obj_m" in r
            ]
        )
        if args.monolithic
        else None,
        "median_peak_rss_mb": med("peak_rss_mb"),
        "median_phase_s": {k: statistics.median(r["timings"][k] for r in rows) for k in rows[0]["timings"]},
    }


if __name__ == "__main__":
    main()
