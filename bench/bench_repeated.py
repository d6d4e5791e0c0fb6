"""Benchmark: the attacker's error after k independent reports (panda.repeated.attacker_error_vs_k).

Run from the repo root:

    python bench/bench_repeated.py                                  # K = 500, M = 100, ks = 1..20, EM at 5/km
    python bench/bench_repeated.py --records 200,500,1000 --sequences 300,600,1200 --repeats 5

Times the Lesson's view (the default city, ``make_instance(net, n_records=K, n_outputs=M, seed=0)``,
EM's matrix, distances ``d_km * 1000``; the instance's distances are built once beforehand, as the
dashboard's cached instance has them) as the median of ``--repeats`` runs, wall time and this
process's CPU time (on a busy machine the CPU time with ``OPENBLAS_NUM_THREADS=1`` is the figure
that other work does not inflate), and prints the curve of the last run with its standard errors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
from panda.mechanisms import build_em  # noqa: E402
from panda.repeated import DEFAULT_N_SEQUENCES, attacker_error_vs_k  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--city", default="neubrandenburg")
    ap.add_argument("--records", default="500", help="comma-separated K")
    ap.add_argument("--outputs", type=int, default=100)
    ap.add_argument("--eps", type=float, default=5.0, help="EM's budget per report, 1/km")
    ap.add_argument("--sequences", default=str(DEFAULT_N_SEQUENCES), help="comma-separated n_sequences")
    ap.add_argument("--kmax", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args()

    net = panda.load_city(args.city)
    ks = list(range(1, args.kmax + 1))
    rows = []
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"{args.city}, M = {args.outputs}, EM at {args.eps:g}/km, ks = 1..{args.kmax}, medians of {args.repeats}")
    print(f"load average {load}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    head = "error k=1 / k=2 / k=5 / k=20 (m, ± stderr)"
    print(f"{'K':>5} {'S':>6} {'median s':>9} {'min s':>7} {'max s':>7} {'CPU s':>7}  {head}")
    for k in (int(v) for v in args.records.split(",")):
        inst = panda.make_instance(net, n_records=k, n_outputs=args.outputs, seed=0)
        dist_m = np.asarray(inst.d_km, dtype=float) * 1000.0
        matrix = build_em(inst, args.eps).matrix
        for s in (int(v) for v in args.sequences.split(",")):
            times, cpu, res = [], [], None
            for rep in range(args.repeats):
                c0 = time.process_time()
                t0 = time.perf_counter()
                res = attacker_error_vs_k(
                    matrix, inst.prior, dist_m, ks, n_sequences=s, epsilon_per_km=args.eps, rng=rep
                )
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            assert res is not None
            by_k = dict(zip(res.ks, zip(res.error_m, res.stderr_m, strict=True), strict=True))
            picks = [kk for kk in (1, 2, 5, 20) if kk in by_k]
            curve = " / ".join(f"{by_k[kk][0]:.1f}±{by_k[kk][1]:.1f}" for kk in picks)
            med, med_cpu = statistics.median(times), statistics.median(cpu)
            print(f"{k:>5} {s:>6} {med:>9.3f} {min(times):>7.3f} {max(times):>7.3f} {med_cpu:>7.3f}  {curve}")
            row = {"K": k, "M": args.outputs, "S": s, "median_s": med, "times_s": times, "median_cpu_s": med_cpu}
            rows.append(row | res.summary())
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
