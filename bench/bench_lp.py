"""Time the full optimal LP: row generation, every floor-reduced pair row, the monolithic all-pairs LP.

    python bench/bench_lp.py --city kotka --records 60 --outputs 25 --repeats 3
    python bench/bench_lp.py --city rome-paper --records 500 --outputs 100 --solver simplex \
        --variants rowgen,reduced --repeats 3

Row generation (``rowgen``, the default of :func:`panda.mechanisms.build_lp`): the reduced LP
solved from each record's 4 nearest pairs, adding violated rows until none is left.

Reduced: pairs farther than ln(1/eta)/eps are implied by the floor eta and left out
(:func:`panda.mechanisms.mdp_pairs` + :func:`panda.lp.solve_mdp_lp` with ``reduce=True``).
Monolithic: every ordered pair, ``eta = 0``, ``reduce=False``. Both are timed end to end (pair
generation, build, HiGHS); the HiGHS time alone is printed too. Not a test: keep instances small.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from panda import load_city, make_instance  # noqa: E402
from panda.lp import solve_mdp_lp  # noqa: E402
from panda.mechanisms import mdp_pairs  # noqa: E402


def run_once(instance, eps: float, *, variant: str, eta: float, time_limit_s: float, solver: str) -> dict:
    t0 = time.perf_counter()
    cost = instance.prior[:, None] * instance.cost_m
    if variant != "monolithic":
        pi, pj, b, _ = mdp_pairs(instance.d_km, eps, eta=eta)
        res = solve_mdp_lp(
            cost, pi, pj, b, eta=eta, time_limit_s=time_limit_s, solver=solver, row_generation=variant == "rowgen"
        )
    else:
        k = instance.n_records
        pi, pj = np.nonzero(~np.eye(k, dtype=bool))
        b = eps * instance.d_km[pi, pj]
        res = solve_mdp_lp(cost, pi, pj, b, eta=0.0, time_limit_s=time_limit_s, solver=solver, reduce=False)
    return {
        "wall_s": time.perf_counter() - t0,
        "highs_s": sum(r["time_s"] for r in res.extra["row_generation"]["rounds"])
        if "row_generation" in res.extra
        else res.lp.time_s,
        "status": res.lp.status,
        "objective_m": res.objective,
        "pairs": res.n_pairs_kept,
        "rows": res.lp.n_rows,
        "capped": res.extra.get("n_pairs_capped", 0),
        "rounds": res.extra.get("row_generation", {}).get("n_rounds", 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--city", default="kotka")
    parser.add_argument("--records", type=int, default=60)
    parser.add_argument("--outputs", type=int, default=25)
    parser.add_argument("--epsilon", type=float, default=5.0, help="privacy budget, 1/km")
    parser.add_argument("--eta", type=float, default=1e-6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds per solve")
    parser.add_argument("--solver", default="ipm", choices=["ipm", "simplex", "choose", "pdlp"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default="rowgen,reduced,monolithic", help="comma-separated, first is the base")
    args = parser.parse_args(argv)

    network = load_city(args.city)
    instance = make_instance(
        network,
        n_records=args.records,
        n_outputs=args.outputs,
        n_users=min(10, args.records),
        seed=args.seed,
    )
    _ = instance.d_km  # built once, outside the timings
    print(
        f"{args.city}: K={instance.n_records} M={instance.n_outputs} eps={args.epsilon}/km "
        f"eta={args.eta:g} solver={args.solver} d_max={instance.d_max_km:.2f} km, {args.repeats} repeats"
    )
    runs: dict[str, list[dict]] = {v: [] for v in args.variants.split(",")}
    for _ in range(args.repeats):
        for name in runs:
            runs[name].append(
                run_once(
                    instance,
                    args.epsilon,
                    variant=name,
                    eta=args.eta,
                    time_limit_s=args.time_limit,
                    solver=args.solver,
                )
            )
    header = (
        f"{'':12s} {'median wall s':>14s} {'median HiGHS s':>15s} {'pairs':>9s} {'LP rows':>10s} "
        f"{'objective m':>13s} {'rounds':>6s}  status"
    )
    print(header)
    med = {}
    for name, rs in runs.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        highs = statistics.median(r["highs_s"] for r in rs)
        med[name] = (wall, highs)
        last = rs[-1]
        print(
            f"{name:12s} {wall:14.3f} {highs:15.3f} {last['pairs']:9,d} {last['rows']:10,d} "
            f"{last['objective_m']:13.4f} {last['rounds']:6d}  {last['status']}"
        )
    base = next(iter(runs))
    for name in list(runs)[1:]:
        print(
            f"{name} / {base}: wall x{med[name][0] / med[base][0]:.1f}, "
            f"HiGHS x{med[name][1] / max(med[base][1], 1e-9):.1f}, "
            f"objective {runs[name][-1]['objective_m'] - runs[base][-1]['objective_m']:+.3e} m"
        )
    print(f"floor bound eta*M*max cost = {args.eta * instance.n_outputs * instance.cost_m.max():.3e} m")
    if "monolithic" in runs and runs["monolithic"][-1]["capped"]:
        print(
            f"note: the monolithic LP lowered {runs['monolithic'][-1]['capped']:,} exponents to ln(1e12) "
            "(panda.lp.MAX_EXPONENT): tighter than eps*d, so its objective can exceed the reduced one"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
