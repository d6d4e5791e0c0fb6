"""The Plan page's answer on its default view: cold (the page's certified ladder), a plain bisection, and warm (the
result store), side by side.

    flock /tmp/panda-bench.lock python bench/bench_planner_page.py --reps 2

The view is the page's default: Neubrandenburg, K = 500 places, M = 100 outputs, N = 20 users, seed 0, the
straight-line loss. The target is computed, not typed: EM's expected loss at ``--epsilon`` (5/km) on that view,
so the threshold lies inside the range. The mechanisms are the page's with "Certify with the optimal LP" on:
planar Laplace, EM and the optimal LP, with the page's limits (app/plan_jobs.py: 60 s per LP solve, 20 s
per other build). Per rep, in alternating order:

* **ladder** (what the page runs when nothing is kept): each LP bisection step warm from its nearest neighbour's
  solver state, and each step climbing the gap ladder 5 %, 0.5 %, optimum until its certificate decides;
* **plain**: the same searches with every LP step solved cold to the optimum (``warm=False``, gaps ``(0,)``);
* **warm**: the page's second visit: the plan read back from a result store (SQLite in a temporary folder) and
  rebuilt (``get_value`` + ``plan_from_record``), as app/plan_jobs.py does.

Prints each run, then the medians and the plain / ladder ratio, and whether both found the same bracket.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
from app.server import result_store  # noqa: E402
from app.plan_jobs import PLAN_BUILD_LIMIT_S, PLAN_LP_LIMIT_S, plan_key_inputs  # noqa: E402
from panda.mechanisms import build_em  # noqa: E402
from panda.plan import plan  # noqa: E402
from panda.plan_record import plan_from_record, plan_record  # noqa: E402

METHODS = ("laplace", "em", "lp")


def _plan(inst, target: float, variant: str):  # noqa: ANN001, ANN202
    options = {"lp_time_limit_s": PLAN_LP_LIMIT_S, "time_limit_s": PLAN_BUILD_LIMIT_S, "seed": 0}
    if variant == "plain":
        options |= {"warm": False, "lp_gaps": (0.0,)}
    t0 = time.perf_counter()
    res = plan(inst, target, methods=METHODS, **options)
    return res, time.perf_counter() - t0


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--epsilon", type=float, default=5.0)
    args = ap.parse_args()
    net = panda.load_city(panda.DEFAULT_CITY)
    inst = panda.make_instance(net, n_records=500, n_outputs=100, n_users=20, seed=0, loss="straight")
    target = float(build_em(inst, args.epsilon).loss_m)
    print(f"{panda.DEFAULT_CITY}, K = 500, M = 100, straight loss; target {target:,.1f} m (EM at {args.epsilon:g}/km)")
    runs: dict[str, list[float]] = {"ladder": [], "plain": [], "warm": []}
    brackets = set()
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'store.db'}"
        key = ("city:" + panda.DEFAULT_CITY, 500, 20, 100, 0, "straight", 1, "uniform")
        inputs = plan_key_inputs(key, target, METHODS, 1, None)
        for rep in range(args.reps):
            for variant in ("ladder", "plain") if rep % 2 == 0 else ("plain", "ladder"):
                res, wall = _plan(inst, target, variant)
                lp = res.of("lp")
                brackets.add((lp.epsilon_low_per_km, lp.epsilon_per_km))
                runs[variant].append(wall)
                per = ", ".join(f"{m.method} {m.time_s:.1f} s" for m in res.mechanisms)
                print(f"  rep {rep} {variant}: {wall:.1f} s ({per}); LP [{lp.epsilon_low_per_km:.4g}, "
                      f"{lp.epsilon_per_km:.4g}] /km {lp.outcome}")  # fmt: skip
                if variant == "ladder":
                    result_store.put_value("plan", inputs, *plan_record(res), url=url)
            t0 = time.perf_counter()
            doc, arrays, _ = result_store.get_value("plan", inputs, url=url)
            plan_from_record(doc, arrays, n_places=inst.n_records)
            runs["warm"].append(time.perf_counter() - t0)
            print(f"  rep {rep} warm: {runs['warm'][-1] * 1000:.1f} ms")
    print("| variant | median s | runs s |")
    print("|---|---|---|")
    med = {v: statistics.median(r) for v, r in runs.items()}
    for v, r in runs.items():
        print(f"| {v} | {med[v]:.3f} | {', '.join(f'{x:.3f}' for x in r)} |")
    print(f"plain / ladder: {med['plain'] / med['ladder']:.2f}; same LP bracket in every run: {len(brackets) == 1}")


if __name__ == "__main__":
    main()
