"""The full LP baseline (panda.mechanisms.build_lp, row generation) at one K: time, rounds, loss, audit.

    python bench/bench_full_lp.py --city rome-paper --records 2000 --time-limit 1800

Prints one JSON line: status, wall time, loss (m), the exact audit's verdict and each round's
rows, HiGHS status and time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
from panda.audit import audit_mechanism  # noqa: E402
from panda.mechanisms import build_lp  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--city", default="rome-paper")
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--outputs", type=int, default=100)
    ap.add_argument("--epsilon", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=1800.0)
    args = ap.parse_args()
    inst = panda.make_instance(
        panda.load_city(args.city), n_records=args.records, n_outputs=args.outputs, n_users=args.users, seed=args.seed
    )
    t0 = time.perf_counter()
    result = build_lp(inst, args.epsilon, time_limit_s=args.time_limit)
    wall = time.perf_counter() - t0
    out = {
        "city": args.city,
        "K": args.records,
        "status": result.status,
        "wall_s": wall,
        "loss_m": result.loss_m,
        "n_pairs": result.details.get("n_pairs"),
        "row_generation": result.details.get("row_generation"),
    }
    if result.matrix is not None:
        audit = audit_mechanism(result.matrix, inst.d_km, args.epsilon)
        out.update(audit_passed=audit.passed, epsilon_min_per_km=audit.epsilon_min_per_km)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
