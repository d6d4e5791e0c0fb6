"""``panda plan``: the smallest eps per mechanism that keeps the expected error under a target (:mod:`panda.plan`)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TextIO

from panda.cli import EXIT_OK, _json_default, add_instance_arguments, instance_from_args

__all__ = ["add_plan_parser", "cmd_plan", "plan_lines"]


def add_plan_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``plan`` to the ``panda`` command's subparsers."""
    from panda.plan import DEFAULT_METHODS, DEFAULT_RANGE_PER_KM, DEFAULT_TOLERANCE

    p = subparsers.add_parser(
        "plan",
        help="find each mechanism's smallest eps that keeps the expected error under a target, with the risk there",
        description=(
            "For each mechanism, the most private eps (per km) whose expected loss (metres, under --loss) is at most "
            "--target, by bisection where the loss is shown monotone in eps (the optimal LP with a certified "
            "bracket) and by an ascending scan elsewhere; at that eps the Bayes attacker's error, its chance of "
            "guessing within 100/250/500 m, the worst-off 10 %%, and after --reports-per-day reports."
        ),
        epilog="Example: python -m panda plan --city kotka --records 100 --outputs 30 --loss straight --target 400",
    )
    add_instance_arguments(p)
    p.add_argument("--target", type=float, required=True, metavar="METRES", help="tolerable expected error, metres")
    p.add_argument("--reports-per-day", type=int, default=1, metavar="K", help="reports per person per day (1)")
    p.add_argument("--attacker-floor", type=float, default=None, metavar="METRES", help="least attacker error, m")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma-separated: em, em-br, laplace, lp, ...")
    lo, hi = DEFAULT_RANGE_PER_KM
    p.add_argument("--epsilon-range", type=float, nargs=2, default=[lo, hi], metavar=("LOW", "HIGH"), help="per km")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="largest ratio of grid neighbours")
    p.add_argument("--cold", action="store_true", help="solve every optimal-LP step cold (no warm start)")
    p.add_argument("--lp-time-limit", type=float, default=120.0, metavar="SECONDS", help="per optimal-LP solve")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Handle ``panda plan``."""
    from panda.plan import plan

    out = sys.stdout if out is None else out
    inst = instance_from_args(args)
    result = plan(
        inst, args.target, methods=[m.strip() for m in args.methods.split(",") if m.strip()],
        reports_per_day=args.reports_per_day, attacker_floor_m=args.attacker_floor,
        epsilon_range_per_km=args.epsilon_range, tolerance=args.tolerance, warm=not args.cold,
        lp_time_limit_s=args.lp_time_limit, seed=args.seed,
    )  # fmt: skip
    print(f"{inst.network.name}: K={inst.n_records}, M={inst.n_outputs}; {inst.summary()['loss_label']}", file=out)
    print("\n".join(plan_lines(result)), file=out)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump({"instance": inst.summary(), "plan": result.summary()}, fh, indent=2, default=_json_default)
        print(f"  plan written to {args.json_out}", file=out)
    return EXIT_OK


def plan_lines(result) -> list[str]:  # noqa: ANN001 (a panda.plan.PlanResult, imported when used)
    """Return a plan as lines of text: one row per mechanism, then the certified bracket, the day and the notes."""

    def num(value: float | None, fmt: str = ",.1f") -> str:
        return "n/a" if value is None or not math.isfinite(value) else f"{value:{fmt}}"

    k, grid = result.reports_per_day, result.grid_per_km
    lines = [
        f"target: expected loss <= {result.target_loss_m:,.1f} m; {k} report(s) a day; attacker floor "
        f"{num(result.attacker_floor_m)} m; eps grid {grid[0]:.4g} to {grid[-1]:.4g} /km ({len(grid)} points)",
        f"{'method':<8} {'eps /km':>8} {'a day /km':>9} {'loss m':>8} {'attacker m':>10} {'worst 10% m':>11} "
        f"{'<= 250 m':>8}  outcome",
    ]
    for m in result.mechanisms:
        r = m.risk
        near = 100 * dict(zip(r.radii_m, r.chance_within, strict=True)).get(250.0, math.nan) if r else math.nan
        lines.append(
            f"{m.method:<8} {num(m.epsilon_per_km, '.4g'):>8} {num(m.epsilon_day_per_km, '.4g'):>9} {num(m.loss_m):>8} "
            f"{num(m.adversary_error_m):>10} {num(r.worst_share_error_m if r else None):>11} {num(near):>6} %  "
            f"{m.outcome}{'; attacker below the floor' if m.meets_attacker_floor is False else ''}"
        )
    for m in result.mechanisms:
        if m.method == "lp" and math.isfinite(m.epsilon_low_per_km):
            lines.append(
                f"  lp: certified bracket [{m.epsilon_low_per_km:.4g}, {num(m.epsilon_per_km, '.4g')}] /km: every "
                f"eps-mDP mechanism loses >= {m.lower_bound_at_low_m:,.1f} m at {m.epsilon_low_per_km:.4g} /km"
            )
        if m.day is not None and k > 1:
            lines.append(
                f"  {m.method}: after {k} reports the attacker errs {m.day.error_m[-1]:,.1f} m (+- "
                f"{m.day.stderr_m[-1]:,.1f} m); re-sending the first keeps {m.day.defence_error_m[-1]:,.1f} m"
            )
        lines += [f"  {m.method}: {m.note}"] if m.note else []
    return lines
