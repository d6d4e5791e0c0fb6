"""The eps planner's certified bisection for the optimal LP: warm-started steps against cold ones, side by side.

    flock /tmp/panda-bench.lock python bench/bench_plan.py --records 200 --reps 3

One instance (``bench/_instance.py``: Neubrandenburg, the default city, M = 100, 50 users; the ``"task"`` loss
unless ``--loss``). The target is computed, not typed: the expected loss of the exponential mechanism at
``--epsilon`` (5/km by default) on the same instance, so the threshold lies inside the default range. Each rep runs
``panda.plan.plan(inst, target, methods=("lp",))`` twice, warm (each bisection step and gap rung from the nearest
solver state) and cold (every solve from scratch), the order alternating from rep to rep; both use the same gap
ladder (``panda.plan.LP_GAPS``) and grid. Per run: the wall time, the process's CPU time, the bisection steps, the
solves, the bracket and the witness's loss. Then the medians side by side with their ratio, and whether both
variants found the same bracket (the certificate does not depend on the start). ``--methods`` adds other
mechanisms, timed once (warm and cold are the same for them). ``--json FILE`` writes every run.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _instance import instance_of, instance_parser  # noqa: E402

import panda  # noqa: E402
from panda.mechanisms import build_em  # noqa: E402
from panda.plan import plan  # noqa: E402


def _instance(args):  # noqa: ANN001, ANN202
    if args.loss == "task":
        return instance_of(args)
    net = panda.load_city(args.city)
    return panda.make_instance(net, n_records=args.records, n_outputs=100, n_users=50, seed=args.seed, loss=args.loss)


def _run(inst, target: float, warm: bool) -> dict:  # noqa: ANN001
    t0, c0 = time.perf_counter(), time.process_time()
    res = plan(inst, target, methods=("lp",), warm=warm)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    lp = res.of("lp")
    return {
        "warm": warm,
        "wall_s": wall,
        "cpu_s": cpu,
        "steps": len(lp.evaluations),
        "solves": sum(e.solves for e in lp.evaluations),
        "bracket_per_km": [lp.epsilon_low_per_km, lp.epsilon_per_km],
        "loss_m": lp.loss_m,
        "bound_at_low_m": lp.lower_bound_at_low_m,
        "outcome": lp.outcome,
        "steps_detail": [
            {"eps": e.epsilon_per_km, "verdict": e.verdict, "time_s": e.time_s, "solves": e.solves, "gap": e.gap_target}
            for e in lp.evaluations
        ],
    }


def main() -> None:
    """Run the benchmark and print the table."""
    ap = instance_parser(__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--loss", default="task", choices=["task", "road", "straight"])
    ap.add_argument("--methods", default="", help="other mechanisms to plan once, comma-separated (e.g. em,laplace)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    inst = _instance(args)
    target = float(build_em(inst, args.epsilon).loss_m)
    print(f"{args.city}, K = {inst.n_records}, M = {inst.n_outputs}, {inst.loss} loss; target {target:,.1f} m "
          f"(EM's loss at {args.epsilon:g}/km)")  # fmt: skip
    runs = []
    for rep in range(args.reps):
        for warm in (True, False) if rep % 2 == 0 else (False, True):
            r = _run(inst, target, warm)
            runs.append(r)
            lo, hi = r["bracket_per_km"]
            print(f"  rep {rep} {'warm' if warm else 'cold'}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, "
                  f"{r['steps']} steps, {r['solves']} solves, bracket [{lo:.4g}, {hi:.4g}] /km, "
                  f"{r['outcome']}")  # fmt: skip
    print("| variant | wall s (runs) | CPU s (runs) | steps | solves | bracket /km |")
    print("|---|---|---|---|---|---|")
    med = {}
    for warm in (True, False):
        mine = [r for r in runs if r["warm"] == warm]
        med[warm] = statistics.median(r["wall_s"] for r in mine)
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in mine)
        cpus = ", ".join(f"{r['cpu_s']:.1f}" for r in mine)
        lo, hi = mine[0]["bracket_per_km"]
        print(f"| {'warm' if warm else 'cold'} | {med[warm]:.1f} ({walls}) | "
              f"{statistics.median(r['cpu_s'] for r in mine):.1f} ({cpus}) | {mine[0]['steps']} | "
              f"{statistics.median(r['solves'] for r in mine):g} | [{lo:.4g}, {hi:.4g}] |")  # fmt: skip
    same = len({tuple(r["bracket_per_km"]) for r in runs}) == 1
    print(f"warm / cold wall: {med[True] / med[False]:.2f}; same bracket in every run: {same}")
    others = [m.strip() for m in args.methods.split(",") if m.strip()]
    if others:
        t0 = time.perf_counter()
        res = plan(inst, target, methods=others)
        for m in res.mechanisms:
            print(f"  {m.method}: {m.time_s:.2f} s, {len(m.evaluations)} builds, eps {m.epsilon_per_km:.4g} /km, "
                  f"{m.outcome} ({m.search})")  # fmt: skip
        print(f"  others: {time.perf_counter() - t0:.1f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps({"target_m": target, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
