"""The optimal-LP benches' shared command line: one city instance (M = 100 outputs, 50 users) and eps."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import panda  # noqa: E402


def instance_parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with ``--city``, ``--records``, ``--seed`` and ``--epsilon``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--city", default="neubrandenburg")
    ap.add_argument("--records", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epsilon", type=float, default=5.0)
    return ap


def instance_of(args: argparse.Namespace) -> panda.Instance:
    """The instance the parsed arguments name."""
    return panda.make_instance(
        panda.load_city(args.city), n_records=args.records, n_outputs=100, n_users=50, seed=args.seed
    )


def spanner_rows(args: argparse.Namespace, eta: float = 1e-6) -> tuple:
    """The instance, its cost (prior times metres) and the first LP's pair rows of ``build_lp(start="spanner")``.

    Returns ``inst, cost, (s, x, y), coef``: the rows ``z[s, y] <= coef z[x, y]`` of a greedy
    1.25-spanner, in the order generated, with ``coef = exp(eps d(s, x))``.
    """
    from panda.mechanisms.lp_full import spanner_seed_rows

    inst = instance_of(args)
    cost = inst.prior[:, None] * inst.cost_m
    s, x, y = spanner_seed_rows(inst, args.epsilon, eta)
    return inst, cost, (s, x, y), np.exp(args.epsilon * inst.d_km[s, x])
