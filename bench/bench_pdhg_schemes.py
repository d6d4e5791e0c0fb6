"""PDHG's schemes side by side on the optimal LP's spanner rows: steps to a bound, and the time of a step.

    python bench/bench_pdhg_schemes.py --records 500 --steps 16384 --repeats 3

The LP is the first one of ``build_lp(start="spanner")`` (Neubrandenburg, M = 100, eps = 5/km; the
output-major float32 layout ``solve_optimal(method="pdhg")`` uses), solved from zero by each scheme
of :func:`panda.pdhg.pdhg` in turn, ``--repeats`` times alternating, in one process. Steps are
counted, not timed, so the bounds do not depend on the machine: every 2,048 steps the table shows
the proven bound of the dual point (``dual_bound`` in float64) and the objective of the primal
point. The last table gives the median milliseconds a step of each scheme and their ratio.
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

SCHEMES = ("adaptive", "halpern")
EVERY = 2048


def main() -> None:
    ap = instance_parser(__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=16384)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    eta = 1e-6
    _, cost, (s, x, y), coef = spanner_rows(args, eta)
    k, m = cost.shape
    n = k * m
    order = np.lexsort((x, s, y))
    s, x, y, coef = s[order], x[order], y[order], coef[order]
    sums = sp.csr_matrix((np.ones(n), (np.tile(np.arange(k), m), np.arange(n))), shape=(k, n))
    a = sp.vstack([sums, -_pair_matrix(s, x, y, coef, m, n, output_major=True)]).tocsr()
    b = np.r_[np.ones(k), np.zeros(s.size)]
    c = cost.T.ravel()
    print(f"K = {k}, eps = {args.epsilon}/km, {s.size:,} pair rows, {n:,} entries, seed {args.seed}")
    ms: dict[str, list[float]] = {name: [] for name in SCHEMES}
    path: dict[str, list[tuple[float, float]]] = {}
    for rep in range(args.repeats):
        for name in SCHEMES if rep % 2 == 0 else SCHEMES[::-1]:
            points: list[tuple[float, float]] = []

            def record(xx: np.ndarray, yy: np.ndarray, points: list = points) -> bool:
                points.append((dual_bound(cost, yy[:k], yy[k:], s, x, y, coef, eta=eta)[0], float(c @ xx)))
                return False

            run = pdhg(
                c,
                a,
                b,
                k,
                np.full(n, eta),
                np.ones(n),
                time_limit_s=1e9,
                max_iterations=args.steps,
                on_check=record,
                callback_every_steps=EVERY,
                dtype=np.float32,
                scheme=name,
            )
            ms[name].append(1e3 * run.time_s / run.iterations)
            path[name] = points  # the same every repeat: the steps do not depend on the clock
    print("\n| steps | " + " | ".join(f"{name}: bound / objective (m)" for name in SCHEMES) + " |")
    print("|---|" + "---|" * len(SCHEMES))
    for i in range(len(path[SCHEMES[0]])):
        cells = " | ".join(f"{path[name][i][0]:.2f} / {path[name][i][1]:.2f}" for name in SCHEMES)
        print(f"| {EVERY * (i + 1):,} | {cells} |")
    med = {name: float(np.median(v)) for name, v in ms.items()}
    print("\n| scheme | ms a step (median) | runs |")
    print("|---|---|---|")
    for name in SCHEMES:
        print(f"| {name} | {med[name]:.3f} | {', '.join(f'{t:.3f}' for t in ms[name])} |")
    print(f"\nratio halpern / adaptive: {med['halpern'] / med['adaptive']:.2f}")


if __name__ == "__main__":
    main()
