"""Benchmark: planar Laplace's exact matrix (quadrature + exact repair) against its sampled estimate.

Run from the repo root:

    python bench/bench_laplace.py --city neubrandenburg --records 200,500 --repeats 3
    python bench/bench_laplace.py --check      # also the quadrature's error and the exact audit

Every build is timed in the same process (medians over ``--repeats``; the instance's distance
matrix is built once beforehand, as in the dashboard). ``--check`` measures, per (K, eps), the
largest total-variation distance per row between the default quadrature and a 64-node,
``T_CUT = 80`` reference, the largest relative error of an entry, the row sums, what the repair
changed, the exact audit's result, and the repair's time and peak memory at K = 1000.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
from panda.audit import audit_mechanism  # noqa: E402
from panda.mechanisms import build_laplace, repair_mdp  # noqa: E402
from panda.mechanisms._common import local_plane_km  # noqa: E402
from panda.mechanisms.laplace import N_NODES, planar_laplace_matrix  # noqa: E402


def _median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _check(inst, eps: float) -> dict:
    lon, lat = inst.lon, inst.lat
    x, y = local_plane_km(lon, lat, float(np.mean(lon)), float(np.mean(lat)))
    pts = np.stack([x, y], axis=1)
    fast = planar_laplace_matrix(pts, pts[inst.outputs], eps)
    ref = planar_laplace_matrix(pts, pts[inst.outputs], eps, n_nodes=64, t_cut=80.0)
    ok = ref > 1e-280
    built = build_laplace(inst, eps)
    audit = audit_mechanism(built.matrix, inst.d_km, eps)
    return {
        "tv_error_per_row": float(0.5 * np.abs(fast - ref).sum(axis=1).max()),
        "max_rel_entry_error": float(np.abs(fast[ok] / ref[ok] - 1.0).max()),
        "max_row_sum_error": float(np.abs(fast.sum(axis=1) - 1.0).max()),
        "smallest_entry": float(built.matrix.min()),
        "n_floored": built.details["n_floored_entries"],
        "repair": built.details["repair"],
        "audit_violations": audit.n_violations,
        "audit_eps_min": audit.epsilon_min_per_km,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--city", default="neubrandenburg")
    ap.add_argument("--records", default="200,500", help="comma-separated K")
    ap.add_argument("--outputs", type=int, default=100)
    ap.add_argument("--eps", default="0.5,5,50", help="comma-separated budgets, 1/km")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--samples", type=int, default=20_000, help="n_samples of the sampled estimate")
    ap.add_argument("--no-sampled", action="store_true", help="time the exact matrix only")
    ap.add_argument("--check", action="store_true", help="also measure accuracy and the audit")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args()

    net = panda.load_city(args.city)
    eps_list = [float(e) for e in args.eps.split(",")]
    rows = []
    print(f"{args.city}, M = {args.outputs}, medians of {args.repeats}, Gauss-Legendre nodes {N_NODES}")
    print(f"{'K':>5} {'eps/km':>7} {'exact s':>9} {'sampled s':>10} {'TV error':>10} {'rel err':>9} {'audit':>6}")
    for k in (int(v) for v in args.records.split(",")):
        inst = panda.make_instance(net, n_records=k, n_outputs=args.outputs, n_users=min(50, k), seed=0)
        _ = inst.d_km  # built once, as the dashboard's cached instance has it
        for eps in eps_list:
            t_exact, _ = _median_time(lambda eps=eps, inst=inst: build_laplace(inst, eps), args.repeats)
            t_sampled = float("nan")
            if not args.no_sampled:
                t_sampled, _ = _median_time(
                    lambda eps=eps, inst=inst: build_laplace(
                        inst, eps, method="sampled", n_samples=args.samples, rng=0
                    ),
                    args.repeats,
                )
            row = {"K": k, "M": args.outputs, "eps": eps, "exact_s": t_exact, "sampled_s": t_sampled}
            if args.check:
                row.update(_check(inst, eps))
            rows.append(row)
            tv = f"{row['tv_error_per_row']:.1e}" if args.check else "-"
            rel = f"{row['max_rel_entry_error']:.1e}" if args.check else "-"
            aud = ("pass" if row["audit_violations"] == 0 else "FAIL") if args.check else "-"
            print(f"{k:>5} {eps:>7g} {t_exact:>9.3f} {t_sampled:>10.3f} {tv:>10} {rel:>9} {aud:>6}")
    if args.check:
        for row in rows:
            print(
                f"K={row['K']} eps={row['eps']:g}: row sums within {row['max_row_sum_error']:.1e}, "
                f"floored {row['n_floored']}, repair {row['repair']}, audit eps_min {row['audit_eps_min']:.4f}"
            )
        # The repair doing real work: the matrix without the plane's calibration (plane_scale = 1),
        # whose density ratios exceed exp(eps d) by the projection's stretch.
        k = min(1000, net.n_nodes)
        inst = panda.make_instance(net, n_records=k, n_outputs=args.outputs, n_users=50, seed=0)
        x, y = local_plane_km(inst.lon, inst.lat, float(np.mean(inst.lon)), float(np.mean(inst.lat)))
        pts = np.stack([x, y], axis=1)
        d = inst.d_km
        for eps in eps_list:
            raw = planar_laplace_matrix(pts, pts[inst.outputs], eps)
            raw[raw < 1e-300] = 1e-300
            tracemalloc.start()
            t0 = time.perf_counter()
            fixed, info = repair_mdp(raw, d, eps)
            t_rep = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            moved = float(np.abs(fixed - raw).sum(axis=1).max())
            ok = audit_mechanism(fixed, d, eps).passed
            print(
                f"repair_mdp of the uncalibrated matrix, K={k}, M={args.outputs}, eps={eps:g}: {t_rep:.2f} s, "
                f"peak {peak:.0f} MB, {info['passes']} pass(es), log excess before "
                f"{info['max_log_excess_before']:.2e}, mass moved {moved:.1e}, audit {'pass' if ok else 'FAIL'}"
            )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2, default=float))


if __name__ == "__main__":
    main()
