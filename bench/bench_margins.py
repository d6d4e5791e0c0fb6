"""Benchmark: the safety-margin search, per-segment bucketed sort against the former global two-pass sort.

    python bench/bench_margins.py --city rome-paper --records 10000 --repeats 3

Both variants run in the same process on the same anchor pairs, alternating, so the ratio is
measured side by side; the margins must agree exactly.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
import panda.margins as pm  # noqa: E402
from panda.anchors import SelectionModel, sample_anchor_sets  # noqa: E402


def _two_global_sorts(value: np.ndarray, counts: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """The former ordering: a stable argsort by value, then a stable argsort by segment."""
    seg = np.repeat(np.arange(counts.size), counts)
    order = np.argsort(value, kind="stable")
    return order[np.argsort(seg[order], kind="stable")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--city", default="rome-paper")
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    inst = panda.make_instance(panda.load_city(args.city), n_records=args.records, n_users=args.users, seed=0)
    cfg = panda.preset("artifact", constraint_radius_km=None)
    model = SelectionModel.build(inst, cfg)
    sets = sample_anchor_sets(model, inst.users, rng=np.random.default_rng(0))
    union = np.unique(np.concatenate(sets))
    i, j = np.triu_indices(union.size, 1)
    x, x2 = union[i], union[j]
    print(f"{args.city} K={args.records}: {union.size} anchors, {x.size:,} anchor pairs")
    times: dict[str, list[float]] = {"bucketed": [], "two global sorts": []}
    results = {}
    new = pm._segment_order
    for _ in range(args.repeats):
        for name, fn in (("bucketed", new), ("two global sorts", _two_global_sorts)):
            pm._segment_order = fn
            t0 = time.perf_counter()
            results[name] = pm.safety_margins(model, x, x2).xi_hat
            times[name].append(time.perf_counter() - t0)
    pm._segment_order = new
    np.testing.assert_array_equal(results["bucketed"], results["two global sorts"])
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"  {k:17s} median {med[k]:.2f} s  ({', '.join(f'{t:.2f}' for t in v)})")
    print(f"  speed-up {med['two global sorts'] / med['bucketed']:.2f}x; margins identical")


if __name__ == "__main__":
    main()
