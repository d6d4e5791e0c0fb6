"""The dashboard's optimal-LP job on the local Dask cluster: alone, then two at once.

    python bench/bench_worker_lp.py --reps 5 [--time-limit 20]

Runs ``panda.jobs``' ``baseline`` job with ``"lp"`` exactly as the Lesson and Compare submit it
(Neubrandenburg, K = 500, M = 100, 20 users, seed 0, low priority, ``time_limit_s`` 20): once alone
at 5/km, then at 5 and 3.5/km together (the trade-off curve runs two at a time). Prints each
run's certified gap, loss and bound. Every run gets its own job key (eps moved by 1e-9), so no
run joins another's computation. To compare thread policies, set the environment of this command
(the workers inherit it): e.g. ``NUMBA_NUM_THREADS=1`` gives every job one compiled thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
from panda.execution import LOW, Executor  # noqa: E402
from panda.jobs import baseline_job  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=20.0)
    args = ap.parse_args()
    inst = panda.make_instance(panda.load_city(panda.DEFAULT_CITY), n_records=500, n_outputs=100, n_users=20, seed=0)
    opts = (("time_limit_s", float(args.time_limit)),)
    ex = Executor()
    try:
        ex.wait_for_workers()
        ex.run(baseline_job, inst, "em", 5.0, (), timeout_s=120)  # every import done before the first LP
        gaps: dict[str, list[float]] = {"alone 5/km": [], "together 5/km": [], "together 3.5/km": []}

        def show(label: str, res) -> str:
            d = res.details
            gaps[label].append(100 * d["gap"])
            loss, bound = d["upper_bound_m"], d["lower_bound_m"]
            return f"{label}: gap {100 * d['gap']:.2f} % (loss {loss:.1f} m, bound {bound:.1f} m)"

        for rep in range(args.reps):
            t = time.perf_counter()
            alone = ex.run(baseline_job, inst, "lp", 5.0 + 1e-9 * rep, opts, timeout_s=300, priority=LOW)
            print(f"{show('alone 5/km', alone)} in {time.perf_counter() - t:.1f} s", flush=True)
            shift = 1e-9 * (rep + 1000)
            futures = [ex.submit(baseline_job, inst, "lp", eps + shift, opts, priority=LOW) for eps in (5.0, 3.5)]
            five, three = (ex.result(f, timeout_s=300) for f in futures)
            print(f"  {show('together 5/km', five)}; {show('together 3.5/km', three)}", flush=True)
        for label, values in gaps.items():
            print(f"median gap, {label}: {statistics.median(values):.2f} % of {len(values)}")
    finally:
        ex.close()


if __name__ == "__main__":
    main()
