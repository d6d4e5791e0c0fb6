"""Time a step of restarted PDHG (panda.pdhg) on the optimal LP's spanner rows, by layout and precision.

    python bench/bench_pdhg_step.py --records 500 --seconds 10

The LP is the first one of ``build_lp(start="spanner")`` (Neubrandenburg, M = 100, eps = 5/km):
row sums and the pair rows of a greedy 1.25-spanner. It is run four ways, one after the other in
one process, each for ``--seconds``: entries record-major (column ``r M + y``, rows as generated)
or output-major (column ``y K + r``, rows sorted by output, what ``solve_optimal(method="pdhg")``
uses), each in float64 and float32; and output-major float32 once more with ``blocks=(K, M)``: Halpern's
steps compiled by numba on every core (:mod:`panda._pdhg_blocks`, what ``solve_optimal`` runs).
Prints steps, milliseconds a step and the proven bound reached (``dual_bound`` in float64). To
compare with an older panda.pdhg, run this file from that checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _instance import instance_parser, spanner_rows  # noqa: E402

from panda.optimal import _pair_matrix, dual_bound  # noqa: E402
from panda.pdhg import pdhg  # noqa: E402


def main() -> None:
    ap = instance_parser(__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    eta = 1e-6
    _, cost, (s, x, y), coef = spanner_rows(args, eta)
    k, m = cost.shape
    n = k * m
    by_output = np.lexsort((x, s, y))
    layouts = {
        "record-major": (np.arange(s.size), np.repeat(np.arange(k), m), np.arange(n), cost.ravel(), False),
        "output-major": (by_output, np.tile(np.arange(k), m), np.arange(n), cost.T.ravel(), True),
    }
    print(f"K = {k}, {s.size:,} pair rows, {n:,} entries")
    print("| layout | dtype | steps | steps run by | ms / step | bound (m) |")
    print("|---|---|---|---|---|---|")
    for name, (order, sum_rows, sum_cols, c, om) in layouts.items():
        sums = sp.csr_matrix((np.ones(n), (sum_rows, sum_cols)), shape=(k, n))
        pairs = _pair_matrix(s[order], x[order], y[order], coef[order], m, n, output_major=om)
        a = sp.vstack([sums, -pairs]).tocsr()
        b = np.r_[np.ones(k), np.zeros(s.size)]
        runs = [(np.float64, None), (np.float32, None)] + ([(np.float32, (k, m))] if om else [])
        for dtype, blocks in runs:
            run = pdhg(c, a, b, k, np.full(n, eta), np.ones(n), time_limit_s=args.seconds, dtype=dtype, blocks=blocks)
            lam = np.empty(s.size)
            lam[order] = run.y[k:]
            bound = dual_bound(cost, run.y[:k], lam, s, x, y, coef, eta=eta)[0]
            ms = 1e3 * run.time_s / run.iterations
            print(
                f"| {name} | {np.dtype(dtype).name} | {run.iterations:,} | {run.steps} | {ms:.3f} | {bound:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
