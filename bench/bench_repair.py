"""Time the optimal LP's exact repair and separation over all pairs against the near pairs only.

    python bench/bench_repair.py --city rome-paper --records 2000 --repeats 3
    python bench/bench_repair.py --records 500

Then the same repair with numba's compiled min-plus loops (:mod:`panda._min_plus`, the default) against
numpy's broadcast sums, on both paths, and whether the matrices are the same to the bit.

``solve_optimal`` repairs each round's point exactly (``exact_repair``: the upper bound) and looks
for violated pair rows (``separate_right``). Both are min-plus products over pairs of records; only
pairs within the floor radius ``ln(1/eta)/eps`` can matter, and ``_Near`` lists them. This runs
each both ways on the same matrix, one after the other in one process, and prints the medians, the
ratio and whether the results agree. The matrix: the exponential mechanism at ``eps`` sharpened
(``z ** 1.5``, rows renormalised; it breaks many pair rows), sources where ``cost < u`` with ``u``
its rows' costs, as ``solve_optimal`` passes them.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _instance import instance_of, instance_parser  # noqa: E402

from panda.mechanisms._common import output_distances_km  # noqa: E402
from panda.mechanisms.em import em_matrix  # noqa: E402
from panda.optimal import _Near, exact_repair, separate_right  # noqa: E402


def _median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    ap = instance_parser(__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    eta = 1e-6
    inst = instance_of(args)
    exponent = args.epsilon * inst.d_km
    cost = inst.prior[:, None] * inst.cost_m
    z = np.maximum(em_matrix(output_distances_km(inst), args.epsilon) ** 1.5, eta)
    z /= z.sum(axis=1, keepdims=True)
    sources = cost < (cost * z).sum(axis=1, keepdims=True)
    a_full = np.where(exponent < np.log(1 / eta), np.exp(np.minimum(exponent, 700.0)), np.inf)
    np.fill_diagonal(a_full, np.inf)
    t = time.perf_counter()
    near = _Near.build(exponent, np.log(2.0 / eta), inst.n_outputs)
    build_s = time.perf_counter() - t
    pairs = sum(int(np.isfinite(e).sum()) for _, _, e in near.chunks)
    per_record = pairs / args.records
    print(f"{args.city}, K = {args.records}, eps = {args.epsilon:g}/km: {per_record:.1f} near records a record")
    print(f"near lists built in {build_s:.3f} s\n")
    print("| step | all pairs (s) | near pairs (s) | ratio | same result |")
    print("|---|---|---|---|---|")

    def repair(nr: _Near | None):
        return lambda: exact_repair(z, exponent, eta=eta, cost=cost, sources=sources, near=nr)

    (t_all, (m_all, _)), (t_near, (m_near, _)) = (_median_time(repair(nr), args.repeats) for nr in (None, near))
    same = bool(np.allclose(m_all, m_near, rtol=1e-12, atol=0))
    print(f"| exact_repair | {t_all:.3f} | {t_near:.3f} | {t_all / t_near:.1f}x | {same} |")

    def separate(nr: _Near | None):
        return lambda: separate_right(z, a_full, near=nr)

    (t_all, r_all), (t_near, r_near) = (_median_time(separate(nr), args.repeats) for nr in (None, near))
    same = all(np.array_equal(np.sort(a), np.sort(b)) for a, b in zip(r_all[:3], r_near[:3], strict=True))
    print(f"| separate_right | {t_all:.3f} | {t_near:.3f} | {t_all / t_near:.1f}x | {same} ({r_all[0].size} rows) |")
    _compiled_against_numpy(repair, near, args.repeats)


def _compiled_against_numpy(repair, near: _Near, repeats: int) -> None:
    """exact_repair with the compiled loops, then with numpy's (the modules' names set to None), side by side."""
    import panda.lp
    import panda.optimal.near
    import panda.optimal.repair

    names = ((panda.lp, "rows_min_plus"), (panda.optimal.near, "chunk_min_plus"), (panda.optimal.repair, "mix_ratio"))
    compiled = [getattr(module, name) for module, name in names]
    if any(fn is None for fn in compiled):
        print("\nnumba does not import here: no compiled loops to compare")
        return
    repair(near)()  # compiled (or loaded from numba's cache) before timing
    print("\n| exact_repair | compiled loops (s) | numpy (s) | ratio | same bits |")
    print("|---|---|---|---|---|")
    for label, nr in (("all pairs", None), ("near pairs", near)):
        t_fast, (m_fast, _) = _median_time(repair(nr), repeats)
        for module, name in names:
            setattr(module, name, None)
        try:
            t_slow, (m_slow, _) = _median_time(repair(nr), repeats)
        finally:
            for (module, name), fn in zip(names, compiled, strict=True):
                setattr(module, name, fn)
        same = m_fast.tobytes() == m_slow.tobytes()
        print(f"| {label} | {t_fast:.3f} | {t_slow:.3f} | {t_slow / t_fast:.1f}x | {same} |")


if __name__ == "__main__":
    main()
