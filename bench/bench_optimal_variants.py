"""Variants of the certified optimal LP measured for issue 11 (see docs/benchmarks.md, "Optimal LP").

Two studies, each printing one table row per measurement with the 1-minute load average:

* ``rowset``: the cost of ONE solve when the row set is (nearly) perfect. A long certified run
  (``--make-rows SECONDS``, or a saved ``--rows-from FILE.npz`` with keys ``s, x, y, lam``) gives
  the pair rows of its last relaxation; the rows with a positive multiplier (optionally plus those
  within a relative slack ``--margin``) are solved cold with warm-start-free dual simplex (Devex)
  and with interior point without crossover. Each point is certified like ``solve_optimal`` does:
  ``exact_repair`` (upper bound, audited over all pairs) and ``dual_bound`` from the solve's own
  duals (lower bound over the whole floored LP)::

      python bench/bench_optimal_variants.py rowset --records 200 --seed 0 --make-rows 900 --save /tmp/rows200.npz
      python bench/bench_optimal_variants.py rowset --records 500 --seed 0 --rows-from /tmp/rows500.npz

* ``multilevel``: solve nested record subsets K/4 -> K/2 -> K of one instance (the outputs are in
  every level; a coarse record carries the prior of the fine records nearest to it) and seed each
  level with the previous level's binding rows ``(s, x, y)`` mapped to ``(s', x', y)`` for ``s'``
  in ``{s}`` plus its ``--neighbours`` nearest records and ``x'`` in the fine records nearest to
  ``x`` (``solve_optimal(seed_rows=...)``); then the usual row generation. ``--plain`` runs
  ``solve_optimal`` on the full level afterwards in the same process, ``--cones N`` one seeded
  with every row ``(s, x, y)`` whose left end ``s`` is among the N cheapest records of output
  ``y`` (at K = 200, 96 % of the optimum's sources are among the 40 cheapest)::

      python bench/bench_optimal_variants.py multilevel --records 500 --seed 0 --time-limit 300

* ``drop``: today's row generation against ``solve_optimal(drop_share=...)`` (slack rows deleted
  whenever they are more than that share of the LP), per seed, one after the other::

      python bench/bench_optimal_variants.py drop --records 500 --seeds 0 1 2 --time-limit 30

* ``constant``: ``build_lp`` (the shipped default path) with one of ``panda.optimal``'s tuning
  constants set to each given value (Python literals: ``None``, ``0.5``, ``True``), the values
  alternating in order from seed to seed, one process::

      python bench/bench_optimal_variants.py constant PDHG_DROP_SLACK None 0.5 --seeds 0 1 2 --time-limit 30
      python bench/bench_optimal_variants.py constant CERTIFICATE_SHARE 0.25 0.1 --epsilon 1
      python bench/bench_optimal_variants.py constant pdhg.BLOCK_STEPS False True --time-limit 30
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import panda  # noqa: E402
from panda.audit import audit_mechanism  # noqa: E402
from panda.lp import build_highs  # noqa: E402
from panda.optimal import _pair_matrix, dual_bound, exact_repair, separate_right, solve_optimal  # noqa: E402


def last_rows(res) -> int:  # noqa: ANN001
    """Rows of the last LP of a ``solve_optimal`` result (0 if no round ran)."""
    return res.rounds[-1]["rows"] if res.rounds else 0


def load1() -> float:
    """The 1-minute load average (the machine is shared)."""
    return os.getloadavg()[0]


def instance(args: argparse.Namespace) -> tuple[panda.Instance, np.ndarray]:
    """The instance and its cost matrix (prior times utility cost)."""
    net = panda.load_city(args.city)
    inst = panda.make_instance(net, n_records=args.records, n_outputs=args.outputs, n_users=50, seed=args.seed)
    return inst, inst.prior[:, None] * inst.cost_m


def a_matrix(d: np.ndarray, eps: float, eta: float) -> np.ndarray:
    """``exp(eps d)`` on the pairs to constrain, ``inf`` on the diagonal and on implied pairs."""
    e = eps * d
    a = np.where(e < -np.log(eta), np.exp(np.minimum(e, 700.0)), np.inf)
    np.fill_diagonal(a, np.inf)
    return a


def solve_rows(cost, d, eps, eta, s, x, y, method):  # noqa: ANN001, ANN201 (bench helper)
    """One cold HiGHS solve on the row sums and the given pair rows, then its certificate."""
    k, m = cost.shape
    n = k * m
    a_full = a_matrix(d, eps, eta)
    pairs = _pair_matrix(s, x, y, a_full[s, x], m, n)
    sums = sp.csr_matrix((np.ones(n), (np.repeat(np.arange(k), m), np.arange(n))), shape=(k, n))
    a = sp.vstack([sums, pairs]).tocsr()
    n_p = pairs.shape[0]
    opts = {"simplex_dual_edge_weight_strategy": 1} if method == "simplex" else {"run_crossover": "off"}
    h = build_highs(
        cost.ravel(),
        a,
        np.r_[np.ones(k), np.full(n_p, -np.inf)],
        np.r_[np.ones(k), np.zeros(n_p)],
        np.full(n, eta),
        np.ones(n),
        solver="simplex" if method == "simplex" else "ipm",
        options=opts,
    )
    t0 = time.perf_counter()
    h.run()
    solve_s = time.perf_counter() - t0
    sol = h.getSolution()
    z = np.asarray(sol.col_value, dtype=float).reshape(k, m)
    du = np.asarray(sol.row_dual, dtype=float)
    t1 = time.perf_counter()
    lb, _ = dual_bound(cost, du[:k], -du[k:], s, x, y, a_full[s, x], eta=eta)
    matrix, repair = exact_repair(z, eps * d, eta=eta, cost=cost)
    ub = float((cost * matrix).sum())
    cert_s = time.perf_counter() - t1
    return {
        "status": h.modelStatusToString(h.getModelStatus()),
        "solve_s": solve_s,
        "cert_s": cert_s,
        "objective": float(h.getInfo().objective_function_value),
        "lower": lb,
        "upper": ub,
        "gap": (ub - lb) / ub,
        "violated_right": int(separate_right(z, a_full)[0].size),
        "audit": bool(audit_mechanism(matrix, d, eps).passed),
        "repair": repair.get("kind"),
    }


def rowset(args: argparse.Namespace) -> None:
    """One solve on a near-perfect row set: simplex vs IPM without crossover, both certified."""
    inst, cost = instance(args)
    d, eps, eta = inst.d_km, args.epsilon, 1e-6
    if args.rows_from:
        saved = np.load(args.rows_from)
        s, x, y, lam = saved["s"], saved["x"], saved["y"], saved["lam"]
        z = saved["z"] if "z" in saved else None
        print(
            f"rows from {args.rows_from}: {s.size} rows, "
            f"{ {key: float(saved[key]) for key in ('t', 'lb', 'ub') if key in saved} }"
        )
    else:
        t0 = time.perf_counter()
        res = solve_optimal(
            cost, d, eps, eta=eta, gap=args.make_gap, time_limit_s=args.make_rows, seed_sources=inst.outputs
        )
        s, x, y, lam = res.info["last_pair_rows"]
        z = None
        print(
            f"long run: {time.perf_counter() - t0:.1f} s, {len(res.rounds)} rounds, {res.reason}, "
            f"upper {res.upper_bound:.4f}, lower {res.lower_bound:.4f}, gap {100 * res.gap:.4f} %, load {load1():.2f}"
        )
        if args.save:
            np.savez(args.save, s=s, x=x, y=y, lam=lam, lb=res.lower_bound, ub=res.upper_bound)
    sel = lam > 1e-12
    if args.margin > 0 and z is not None:
        a = a_matrix(d, eps, eta)[s, x]
        sel |= a * z[x, y] - z[s, y] <= args.margin * a * z[x, y]
    print(
        f"rows with a positive multiplier{' or within the margin' if args.margin > 0 else ''}: "
        f"{int(sel.sum())} of {s.size}"
    )
    print(
        "| K | seed | rows | method | solve (s) | certificate (s) | status | upper (m) | lower (m) | gap "
        "| violated right entries | audit | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for method in args.methods:
        r = solve_rows(cost, d, eps, eta, s[sel], x[sel], y[sel], method)
        print(
            f"| {args.records} | {args.seed} | {int(sel.sum())} | {method} | {r['solve_s']:.1f} | "
            f"{r['cert_s']:.1f} | {r['status']} | "
            f"{r['upper']:.4f} | {r['lower']:.4f} | {100 * r['gap']:.3f} % | {r['violated_right']} | "
            f"{r['audit']} | {load1():.2f} |",
            flush=True,
        )


def multilevel(args: argparse.Namespace) -> None:
    """K/4 -> K/2 -> K on nested record subsets, each level seeded with the last one's binding rows."""
    inst, _ = instance(args)
    k, eps = args.records, args.epsilon
    d = inst.d_km
    out = np.asarray(inst.outputs)
    others = np.random.default_rng(1234).permutation(np.setdiff1d(np.arange(k), out))
    sizes = sorted({max(out.size, k >> (args.levels - 1 - i)) for i in range(args.levels)})
    subsets = [np.r_[out, others[: n - out.size]] for n in sizes]  # nested, outputs first

    def level(sub: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        near = np.argmin(d[:, sub], axis=1)
        prior = np.bincount(near, weights=inst.prior, minlength=sub.size)
        return prior[:, None] * inst.cost_m[sub], d[np.ix_(sub, sub)]

    def mapped(rows: tuple, coarse: np.ndarray, fine: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s, x, y, lam = rows
        keep = lam > 1e-12
        cs, cx, yy = s[keep], x[keep], y[keep]  # positions in coarse
        fpos = np.full(k, -1)
        fpos[fine] = np.arange(fine.size)
        cell = np.argmin(d[np.ix_(fine, coarse)], axis=1)  # fine position -> coarse position
        members = [np.flatnonzero(cell == c) for c in range(coarse.size)]
        nbr = np.argsort(d[np.ix_(fine, fine)], axis=1)[:, : 1 + args.neighbours]
        parts = []
        for si, xi, yi in zip(cs, cx, yy, strict=True):
            ss, xs = nbr[fpos[coarse[si]]], members[xi]
            parts.append((np.repeat(ss, xs.size), np.tile(xs, ss.size), np.full(ss.size * xs.size, yi)))
        return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]

    print(f"levels {sizes}, seed {args.seed}, method {args.method}, load {load1():.2f}")
    print(
        "| variant | K | seed | time (s) | rounds | seed rows | last LP rows | upper (m) | lower (m) | gap "
        "| stop | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def solve_level(label: str, sub: np.ndarray, seed_rows: tuple | None, time_limit: float):
        """Solve the level of records ``sub`` from ``seed_rows`` (or none); print its table row."""
        cost, dd = level(sub)
        t0 = time.perf_counter()
        res = solve_optimal(
            cost,
            dd,
            eps,
            gap=args.gap,
            time_limit_s=time_limit,
            method=args.method,
            seed_sources=np.arange(out.size),
            seed_rows=seed_rows,
        )
        n_seed = 0 if seed_rows is None else seed_rows[0].size
        print(
            f"| {label} | {sub.size} | {args.seed} | {time.perf_counter() - t0:.1f} | {len(res.rounds)} | {n_seed} | "
            f"{last_rows(res)} | {res.upper_bound:.3f} | {res.lower_bound:.3f} | {100 * res.gap:.3f} % | "
            f"{res.reason} | {load1():.2f} |",
            flush=True,
        )
        return res

    t_all = time.perf_counter()
    rows = None
    res = None
    for li, sub in enumerate(subsets):
        if time.perf_counter() - t_all >= args.time_limit:
            print(f"| multilevel level | {sub.size} | {args.seed} | not started: time limit | | | | | | | | |")
            break
        seed_rows = mapped(rows, subsets[li - 1], sub) if rows is not None else None
        left = max(1e-3, args.time_limit - (time.perf_counter() - t_all))
        res = solve_level("multilevel level", sub, seed_rows, left)
        rows = res.info["last_pair_rows"]
    assert res is not None
    audit = audit_mechanism(res.matrix, level(subsets[-1])[1], eps).passed if res.matrix is not None else None
    print(
        f"multilevel total {time.perf_counter() - t_all:.1f} s, gap {100 * res.gap:.3f} %, audit {audit}, "
        f"load {load1():.2f}"
    )

    if args.cones:
        cost, _ = level(subsets[-1])
        cheap = np.argsort(cost, axis=0)[: args.cones]  # (n, M): the cheapest records of every output
        cs = cheap.T.ravel()  # output-major: y's n sources
        cy = np.repeat(np.arange(cost.shape[1]), args.cones)
        cones = (np.repeat(cs, k), np.tile(np.arange(k), cs.size), np.repeat(cy, k))
        solve_level(f"cones of the {args.cones} cheapest", subsets[-1], cones, args.time_limit)
    if args.plain:
        solve_level("plain", subsets[-1], None, args.time_limit)


def drop(args: argparse.Namespace) -> None:
    """Today's row generation with and without deleting slack rows, side by side per seed."""
    print("| variant | K | seed | time (s) | rounds | last LP rows | upper (m) | lower (m) | gap | audit | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        args.seed = seed
        inst, cost = instance(args)
        for share in args.shares:
            t0 = time.perf_counter()
            res = solve_optimal(
                cost,
                inst.d_km,
                args.epsilon,
                gap=args.gap,
                time_limit_s=args.time_limit,
                seed_sources=inst.outputs,
                drop_share=share,
            )
            audit = audit_mechanism(res.matrix, inst.d_km, args.epsilon).passed if res.matrix is not None else None
            print(
                f"| drop_share={share:g} | {args.records} | {seed} | {time.perf_counter() - t0:.1f} | "
                f"{len(res.rounds)} | "
                f"{last_rows(res)} | {res.upper_bound:.3f} | {res.lower_bound:.3f} | {100 * res.gap:.3f} % | "
                f"{audit} | {load1():.2f} |",
                flush=True,
            )


def constant(args: argparse.Namespace) -> None:
    """``build_lp`` with a ``panda.optimal`` constant at each value, alternating per seed; then the medians.

    ``module.NAME`` names a constant of another module of ``panda`` (``pdhg.BLOCK_STEPS``).
    """
    import ast
    import importlib

    from panda.mechanisms import build_lp

    module_name, _, name = args.name.rpartition(".")
    module = importlib.import_module(f"panda.{module_name or 'optimal'}")
    if not hasattr(module, name):
        raise SystemExit(f"{module.__name__} has no constant {name!r}")
    values = [ast.literal_eval(v) for v in args.values]
    gaps: dict[int, list[float]] = {i: [] for i in range(len(values))}
    head = "K | eps | seed | time (s) | rounds | last LP rows | upper (m) | lower (m) | gap | audit | load"
    print(f"| {args.name} | {head} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n, seed in enumerate(args.seeds):
        inst = panda.make_instance(
            panda.load_city(args.city), n_records=args.records, n_outputs=args.outputs, n_users=args.users, seed=seed
        )
        for i in range(len(values)) if n % 2 == 0 else reversed(range(len(values))):
            setattr(module, name, values[i])
            t0 = time.perf_counter()
            res = build_lp(inst, args.epsilon, time_limit_s=args.time_limit)
            d = res.details
            gaps[i].append(100 * d["gap"])
            print(
                f"| {values[i]!r} | {args.records} | {args.epsilon:g} | {seed} | {time.perf_counter() - t0:.1f} | "
                f"{d['row_generation']['n_rounds']} | {d['lp_rows']} | {d['upper_bound_m']:.2f} | "
                f"{d['lower_bound_m']:.2f} | {100 * d['gap']:.2f} % | {d.get('audit_passed')} | {load1():.2f} |",
                flush=True,
            )
    for i, value in enumerate(values):
        per_seed = ", ".join(f"{g:.2f}" for g in gaps[i])
        print(f"{args.name} = {value!r}: median gap {np.median(gaps[i]):.2f} % ({per_seed} %)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="study", required=True)
    for name in ("rowset", "multilevel", "drop", "constant"):
        p = sub.add_parser(name)
        p.add_argument("--city", default="neubrandenburg")
        p.add_argument("--records", type=int, default=500)
        p.add_argument("--outputs", type=int, default=100)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--epsilon", type=float, default=5.0)
    r = sub.choices["rowset"]
    r.add_argument("--rows-from", type=Path, default=None)
    r.add_argument("--make-rows", type=float, default=900.0, help="time limit of the long run, s")
    r.add_argument("--make-gap", type=float, default=0.0002)
    r.add_argument("--save", type=Path, default=None)
    r.add_argument("--margin", type=float, default=0.0, help="also rows within this relative slack (needs z)")
    r.add_argument("--methods", nargs="+", default=["simplex", "ipm"])
    m = sub.choices["multilevel"]
    m.add_argument("--levels", type=int, default=3)
    m.add_argument("--neighbours", type=int, default=1)
    m.add_argument("--gap", type=float, default=0.005)
    m.add_argument("--time-limit", type=float, default=300.0)
    m.add_argument("--method", default="simplex", choices=["simplex", "ipm"])
    m.add_argument("--plain", action="store_true")
    m.add_argument(
        "--cones", type=int, default=0, help="also: seed with the whole cones of the N cheapest records per output"
    )
    dr = sub.choices["drop"]
    dr.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    dr.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.5])
    dr.add_argument("--gap", type=float, default=0.005)
    dr.add_argument("--time-limit", type=float, default=30.0)
    c = sub.choices["constant"]
    c.add_argument("name", help="a constant of panda.optimal (PDHG_DROP_SLACK) or of another module (pdhg.BLOCK_STEPS)")
    c.add_argument("values", nargs="+", help="Python literals")
    c.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    c.add_argument("--users", type=int, default=50)
    c.add_argument("--time-limit", type=float, default=30.0)
    args = ap.parse_args()
    {"rowset": rowset, "multilevel": multilevel, "drop": drop, "constant": constant}[args.study](args)


if __name__ == "__main__":
    main()
