"""Benchmark: the safety-margin search against the former search (kept in tests/support/margins_reference.py).

    python bench/bench_margins.py --city rome-paper --records 10000 --repeats 3
    python bench/bench_margins.py --city rome-paper --records 20000 --repeats 3 --run-panda

Both run in the same process on the same anchor pairs (preset ``artifact``, all anchor pairs),
alternating, so the ratio is measured side by side; margins and flags must agree bit for bit.
With ``--run-panda`` the whole ``run_panda`` is timed instead (seeds 0..repeats-1, as in
bench_anpo.py's scale run), once as shipped and once with the former margin search and the former
all-pairs d_max (the largest distance, which sets gamma); the margins of both runs must agree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import margins_reference  # noqa: E402

import panda  # noqa: E402
import panda.margins as pm  # noqa: E402
from panda.anchors import SelectionModel, sample_anchor_sets  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--city", default="rome-paper")
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", default="artifact", choices=["artifact", "paper", "recommended"])
    ap.add_argument("--skip-former", action="store_true", help="time the current search only")
    ap.add_argument("--run-panda", action="store_true", help="time run_panda end to end, current vs former")
    args = ap.parse_args()
    if args.run_panda:
        _run_panda(args)
        return
    inst = panda.make_instance(panda.load_city(args.city), n_records=args.records, n_users=args.users, seed=0)
    cfg = panda.preset(args.preset, constraint_radius_km=None)
    model = SelectionModel.build(inst, cfg)
    sets = sample_anchor_sets(model, inst.users, rng=np.random.default_rng(0))
    union = np.unique(np.concatenate(sets))
    i, j = np.triu_indices(union.size, 1)
    x, x2 = union[i], union[j]
    print(f"{args.city} K={args.records} ({args.preset}): {union.size} anchors, {x.size:,} anchor pairs", flush=True)
    variants = {"current": pm.safety_margins}
    if not args.skip_former:
        variants["former"] = margins_reference.safety_margins
    times: dict[str, list[float]] = {name: [] for name in variants}
    results = {}
    for _ in range(args.repeats):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            results[name] = fn(model, x, x2)
            times[name].append(time.perf_counter() - t0)
            print(f"  {name}: {times[name][-1]:.2f} s", flush=True)
    if "former" in results:
        for field in ("xi_hat", "target", "bayes_prob", "unreachable", "fallback_used"):
            np.testing.assert_array_equal(getattr(results["current"], field), getattr(results["former"], field))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"  {k:8s} median {med[k]:.2f} s  ({', '.join(f'{t:.2f}' for t in v)})")
    if "former" in med:
        print(f"  speed-up {med['former'] / med['current']:.1f}x; margins and flags bit-identical")


def _former_d_max(inst) -> float:
    """The former all-pairs maximum (blocks of 4 M distances)."""
    value, k = 0.0, inst.n_records
    step = max(1, 4_000_000 // k)
    for start in range(0, k, step):
        value = max(value, float(inst.distances_km(slice(start, start + step)).max()))
    return value


def _run_panda(args) -> None:
    import panda.pipeline as pipeline

    net = panda.load_city(args.city)
    cfg = panda.preset(args.preset, constraint_radius_km=None).replace(solve_relaxed=False)
    times: dict[str, list[float]] = {"current": [], "former": []}
    margins: dict[str, list[float]] = {"current": [], "former": []}
    shipped = pipeline.safety_margins
    for rep in range(args.repeats):
        results = {}
        for name in ("current", "former"):
            inst = panda.make_instance(net, n_records=args.records, n_users=args.users, seed=rep)
            pipeline.safety_margins = shipped if name == "current" else margins_reference.safety_margins
            t0 = time.perf_counter()
            if name == "former":
                inst._cache["d_max_km"] = _former_d_max(inst)
            results[name] = panda.run_panda(inst, cfg, seed=rep)
            times[name].append(time.perf_counter() - t0)
            margins[name].append(results[name].timings_s["margins"])
            print(
                f"  seed {rep} {name}: run_panda {times[name][-1]:.2f} s (margins {margins[name][-1]:.2f} s)",
                flush=True,
            )
        pipeline.safety_margins = shipped
        a, b = results["current"], results["former"]
        np.testing.assert_array_equal(a.pair_xi, b.pair_xi)
        np.testing.assert_array_equal(a.pair_unreachable, b.pair_unreachable)
        assert a.lp_objective_m == b.lp_objective_m or (np.isnan(a.lp_objective_m) and np.isnan(b.lp_objective_m))
    print(f"{args.city} K={args.records} ({args.preset}, all anchor pairs), run_panda, {args.repeats} seeds:")
    for name in times:
        med, mm = statistics.median(times[name]), statistics.median(margins[name])
        print(
            f"  {name:8s} median {med:.2f} s ({', '.join(f'{t:.2f}' for t in times[name])}); margins median {mm:.2f} s"
        )
    print(f"  speed-up {statistics.median(times['former']) / statistics.median(times['current']):.1f}x")


if __name__ == "__main__":
    main()
