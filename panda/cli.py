"""Command line interface: ``python -m panda COMMAND ...`` (or the ``panda`` script).

Each subcommand is one ``_add_<name>_parser(subparsers)`` function that registers its options and
``set_defaults(func=<handler>)``, and one handler ``cmd_<name>(args) -> int``. :func:`main`
parses, dispatches and turns the library's expected failures into a message on stderr and an
exit status, never a traceback:

- 0: success;
- 1: the work could not be done (:class:`panda.errors.PandaError`: offline, download failed,
  data not on this machine);
- 2: bad usage or a bad argument (argparse's own errors, ``ValueError``, ``TypeError``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from panda.errors import PandaError

__all__ = [
    "main",
    "build_parser",
    "cmd_network",
    "cmd_run",
    "cmd_compare",
    "cmd_prepare",
    "cmd_plan",
    "EXIT_OK",
    "EXIT_FAILURE",
    "EXIT_USAGE",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("panda-explorer")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """Build the ``panda`` argument parser with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="panda",
        description=(
            "PAnDA Explorer: anchor-based metric differential privacy for geo-locations on real road "
            "networks. Road data (c) OpenStreetMap contributors, ODbL 1.0."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_network_parser(subparsers)
    _add_run_parser(subparsers)
    _add_compare_parser(subparsers)
    add_plan_parser(subparsers)
    _add_experiment_parser(subparsers)
    _add_prepare_parser(subparsers)
    return parser


# ---------------------------------------------------------------------------------------------
# network
# ---------------------------------------------------------------------------------------------


def _add_network_parser(subparsers: argparse._SubParsersAction) -> None:
    from panda.network import CITIES, DEFAULT_CITY, DEFAULT_TIMEOUT_S, NETWORK_TYPES

    p = subparsers.add_parser(
        "network",
        help="load a road network (embedded city, file or live download) and describe it",
        description=(
            "Load a road network and print its size, bounding box and attribution. Embedded cities "
            f"work offline ({', '.join(CITIES)}; default {DEFAULT_CITY}); --bbox downloads from "
            "OpenStreetMap's Overpass API once and then reads the cached copy."
        ),
        epilog="Example: python -m panda network --bbox 26.93 60.52 26.97 60.54 --network-type drive --json",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--city", metavar="NAME", help=f"an embedded city (default {DEFAULT_CITY}), or rome-paper")
    source.add_argument(
        "--bbox",
        nargs=4,
        type=float,
        metavar=("WEST", "SOUTH", "EAST", "NORTH"),
        help="download the roads in this box (WGS84 degrees) via osmnx; cached under data/cache/",
    )
    source.add_argument("--file", metavar="PATH", help="an OSM XML (.osm, .osm.bz2) or GraphML file")
    source.add_argument("--list", action="store_true", help="list the embedded cities and exit")
    p.add_argument(
        "--network-type",
        choices=NETWORK_TYPES,
        default="drive",
        help="road types to download with --bbox (default: drive)",
    )
    p.add_argument("--cache-dir", metavar="DIR", help="cache folder of --bbox downloads (default: data/cache)")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long osmnx waits for the Overpass server (default: {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument("--overpass-url", metavar="URL", help="another Overpass API endpoint (osmnx.settings.overpass_url)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=cmd_network)


def cmd_network(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Handle ``panda network``: load the network the options name and print its summary."""
    from panda import network as pn

    out = sys.stdout if out is None else out
    if args.list:
        cities = [{"name": name, "description": desc} for name, (_, desc) in pn.CITIES.items()]
        if pn.ROME_PAPER in pn.list_cities():
            cities.append({"name": pn.ROME_PAPER, "description": "Rome, IT: the network of the PAnDA paper"})
        if args.json:
            print(json.dumps(cities, indent=2), file=out)
        else:
            for city in cities:
                print(f"{city['name']:<16} {city['description']}", file=out)
        return EXIT_OK
    if args.bbox is not None:
        if args.overpass_url:
            import osmnx as ox

            ox.settings.overpass_url = args.overpass_url
        west, south, east, north = args.bbox
        net = pn.network_from_bbox(
            west, south, east, north, network_type=args.network_type, cache_dir=args.cache_dir, timeout_s=args.timeout
        )
    elif args.file is not None:
        net = pn.network_from_file(args.file)
    else:
        net = pn.load_city(args.city or pn.DEFAULT_CITY)
    summary = net.summary()
    if args.json:
        print(json.dumps(summary, indent=2), file=out)
        return EXIT_OK
    box = net.bbox
    w, s, e, n = box.as_tuple()
    print(f"{net.name}", file=out)
    print(f"  nodes:          {net.n_nodes:,}", file=out)
    print(f"  directed edges: {net.n_edges:,}", file=out)
    print(f"  roads:          {net.edge_length_m.sum() / 1000.0:,.1f} km (sum of directed edges)", file=out)
    print(f"  bbox (W S E N): {w:.5f} {s:.5f} {e:.5f} {n:.5f} (about {box.area_km2:,.1f} km^2)", file=out)
    print(f"  source:         {net.source}", file=out)
    print(f"  {net.attribution}", file=out)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------


def add_instance_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by ``run`` and ``compare``: which network and instance."""
    p.add_argument("--city", default=None, help="embedded city (default: neubrandenburg) or rome-paper")
    p.add_argument("--records", type=int, default=1000, help="K, the size of the secret domain (default 1000)")
    p.add_argument("--users", type=int, default=50, help="N users (default 50)")
    p.add_argument("--outputs", type=int, default=100, help="|Y| outputs (default 100)")
    p.add_argument(
        "--loss",
        default="task",
        choices=["road", "straight", "task"],
        help="the utility loss: road or straight-line distance from the place to its report, or the paper's "
        "task cost (default task)",
    )
    p.add_argument("--tasks", type=int, default=1, help="tasks in the task loss (default 1)")
    p.add_argument(
        "--prior",
        default="uniform",
        choices=["uniform", "street_count", "road_density", "poi"],
        help="how people are spread over the places (poi: the embedded city's points of interest)",
    )
    p.add_argument("--metric", default="haversine", choices=["haversine", "road"])
    p.add_argument("--seed", type=int, default=0, help="seed of the instance and of the mechanism (default 0)")
    p.add_argument("--json", dest="json_out", default=None, metavar="PATH", help="write the summary as JSON to PATH")


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    """PAnDA configuration options (each overrides the preset)."""
    p.add_argument(
        "--preset", default="paper", choices=["paper", "artifact", "recommended"], help="named configuration"
    )
    p.add_argument("--epsilon", type=float, default=None, help="privacy budget eps, 1/km")
    p.add_argument("--delta", type=float, default=None, help="failure probability delta")
    p.add_argument("--alpha", type=float, default=None, help="selection scale alpha in (0, 1)")
    p.add_argument("--lambda", dest="lambda_", type=float, default=None, help="decay rate lambda, 1/km")
    p.add_argument("--gamma", type=float, default=None, help="threshold gamma, km (default: from the preset)")
    p.add_argument("--decay", default=None, choices=["exponential", "power", "logistic"])
    p.add_argument("--neighbours", type=int, default=None, help="Gamma, neighbours per anchor for the margin")
    p.add_argument("--radius", default=None, help="constraint radius in km, or 'all' for every anchor pair")
    p.add_argument("--time-limit", type=float, default=None, help="LP time limit, seconds")


def config_from_args(args: argparse.Namespace):
    """Build the PandaConfig the options describe."""
    from panda.config import preset

    overrides: dict = {}
    for opt, field in (
        ("epsilon", "epsilon_per_km"),
        ("delta", "delta"),
        ("alpha", "alpha"),
        ("lambda_", "lambda_per_km"),
        ("gamma", "gamma_km"),
        ("decay", "decay"),
        ("neighbours", "neighbourhood_size"),
        ("time_limit", "lp_time_limit_s"),
    ):
        value = getattr(args, opt, None)
        if value is not None:
            overrides[field] = value
    if args.radius is not None:
        if str(args.radius).lower() in ("all", "none"):
            overrides["constraint_radius_km"] = None
        else:
            try:
                overrides["constraint_radius_km"] = float(args.radius)
            except ValueError:
                msg = f"--radius must be a number of km or 'all'. Got {args.radius!r} instead."
                raise ValueError(msg) from None
    return preset(args.preset, **overrides)


def instance_from_args(args: argparse.Namespace):
    """Load the network and draw the instance the options describe."""
    from panda import network as pn
    from panda.instance import make_instance

    net = pn.load_city(args.city or pn.DEFAULT_CITY)
    return make_instance(
        net,
        n_records=args.records,
        n_outputs=args.outputs,
        n_users=args.users,
        n_tasks=args.tasks,
        prior=args.prior,
        metric=args.metric,
        loss=args.loss,
        seed=args.seed,
    )


def _add_run_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run PAnDA on an instance and print (or save) the summary",
        description="Run PAnDA end to end: anchors, exact Phase-I cost, safety margins, AnPO LP, Phase II.",
    )
    add_instance_arguments(p)
    add_config_arguments(p)
    p.set_defaults(func=cmd_run)


def _fmt(value: float, unit: str = "", digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


def cmd_run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Handle ``panda run``."""
    from panda.pipeline import result_to_jsonable, run_panda

    out = sys.stdout if out is None else out
    config = config_from_args(args)
    inst = instance_from_args(args)
    result = run_panda(inst, config, seed=args.seed)
    s = result.summary()
    split = s["budget_split"]
    bound = s["relaxed_lower_bound_m"]
    relaxed_note = "" if bound == bound else f" ({s['lp'].get('relaxed_status', 'not computed')})"
    lines = [
        f"PAnDA on {inst.network.name}: K={inst.n_records}, N={inst.n_users}, |Y|={inst.n_outputs}, "
        f"eps={config.epsilon_per_km}/km, delta={config.delta:g}, preset={args.preset}, decay={config.decay}",
        f"  loss: {inst.summary()['loss_label']}",
        f"  gamma {s['gamma_km'] * 1000:,.0f} m, far selection probability {s['far_value']:.3g}",
        f"  anchors: union {s['n_anchor_union']}, mean set {s['anchor_set_size_mean']:.1f}, "
        f"empty sets {s['n_empty_anchor_sets']}",
        f"  pairs constrained {s['n_constrained_pairs']:,}, over budget {s['n_over_budget_pairs']:,}, "
        f"unreachable delta target {s['n_unreachable_target_pairs']:,}",
        f"  LP: {s['lp_status']}, objective {_fmt(s['lp_objective_m'], ' m')}, lower bound "
        f"{_fmt(s['relaxed_lower_bound_m'], ' m')}"
        f"{relaxed_note}"
        f", ratio {_fmt(s['approximation_ratio'], '', 3)}",
        f"  utility loss at true records: expected {_fmt(s['loss_expected_m'], ' m')}, "
        f"sampled {_fmt(s['loss_sampled_m'], ' m')}",
        f"  user pairs violating eps-mDP (measured): {_fmt(100 * s['user_pair_violation_rate'], ' %')}",
    ]
    if split.get("n_finite"):
        lines.append(
            f"  budget split (median share of eps*d): Phase I {split['phase1_share_median']:.2f}, "
            f"margin {split['margin_share_median']:.2f}, Phase II {split['phase2_share_median']:.2f}"
        )
    else:
        lines.append("  budget split: no pair has a finite safety margin")
    t = s["timings_s"]
    lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in t.items()))
    print("\n".join(lines), file=out)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(result_to_jsonable(result), fh, indent=2, default=_json_default)
        print(f"  summary written to {args.json_out}", file=out)
    return EXIT_OK


def _json_default(value: object) -> object:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


# ---------------------------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------------------------


def _add_compare_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare",
        help="run several mechanisms on one shared instance and tabulate utility, privacy and time",
        description=(
            "Build each method on the same instance (same X, Y, users, tasks, prior), audit it exactly "
            "and print utility loss (m), violation rate, smallest satisfied epsilon, adversary error (m), time."
        ),
    )
    add_instance_arguments(p)
    add_config_arguments(p)
    p.add_argument(
        "--methods",
        default="em,em-br,lp-ca,panda-e",
        help="comma-separated: em, em-br, laplace, lp, lp-ca, lp-bd, lp-em, panda-e, panda-p, panda-l",
    )
    p.add_argument("--method-time-limit", type=float, default=1800.0, help="per-method time limit, seconds")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Handle ``panda compare``."""
    from panda.compare import compare

    out = sys.stdout if out is None else out
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    config = config_from_args(args)
    inst = instance_from_args(args)
    rows = compare(inst, methods, config=config, seed=args.seed, time_limit_s=args.method_time_limit)
    header = (
        f"{'method':<9} {'loss (m)':>10} {'viol. rate':>10} {'eps_min (1/km)':>14} {'adv. err (m)':>12} "
        f"{'time (s)':>9}  status"
    )
    print(
        f"{inst.network.name}: K={inst.n_records}, N={inst.n_users}, |Y|={inst.n_outputs}, "
        f"eps={config.epsilon_per_km}/km, seed={args.seed}; loss: {inst.summary()['loss_label']}",
        file=out,
    )
    print(header, file=out)
    for r in rows:
        print(
            f"{r['method']:<9} {_fmt(r.get('utility_loss_m', float('nan'))):>10} "
            f"{_fmt(100 * r.get('violation_rate', float('nan')), ' %'):>10} "
            f"{_fmt(r.get('epsilon_min_per_km', float('nan')), '', 2):>14} "
            f"{_fmt(r.get('adversary_error_m', float('nan'))):>12} {_fmt(r.get('time_s', float('nan')), '', 2):>9}  "
            f"{r['status']}",
            file=out,
        )
    for r in rows:
        if r["method"].startswith("panda") and r.get("pmdp_user_rate_over_delta") == r.get("pmdp_user_rate_over_delta"):
            print(
                f"  {r['method']}: user pairs whose violation probability exceeds delta: "
                f"{100 * r['pmdp_user_rate_over_delta']:.1f} %; "
                f"loss at users' true records {_fmt(r['users_loss_m'], ' m')}",
                file=out,
            )
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(
                {"instance": inst.summary(), "config": config.to_dict(), "rows": rows},
                fh,
                indent=2,
                default=_json_default,
            )
        print(f"  table written to {args.json_out}", file=out)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# experiment
# ---------------------------------------------------------------------------------------------


def _csv_list(kind: type, name: str):
    """Argparse type: a comma-separated list of ``kind``."""

    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        try:
            return [kind(t) for t in items]
        except ValueError:
            msg = f"{name} must be a comma-separated list of {kind.__name__} values, got {text!r}"
            raise argparse.ArgumentTypeError(msg) from None

    return parse


def _add_experiment_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "experiment",
        help="run a resumable, parallel sweep (networks x K x methods x presets x budgets x repetitions)",
        description=(
            "Run every method on shared instances, one per (network, K, repetition), and write rows.csv "
            "(one row per network, K, preset, epsilon, delta, method, repetition; appended as each row "
            "finishes), experiment.json (settings, seeds, versions, hash), tables.md (paper's Tables 2 and 4 "
            "shape) and figures/. Rerunning into the same --out folder resumes. Options override --config; "
            "defaults in parentheses."
        ),
        epilog=(
            "Examples: python -m panda experiment --networks kotka --K 40,60 --methods em,em-br,panda-e "
            "--repeats 2 --outputs 20 --users 10 --out results/smoke; "
            "python -m panda experiment --config experiments/reproduction.toml"
        ),
    )
    p.add_argument("--config", metavar="TOML", help="experiment file ([experiment] and [run] tables)")
    p.add_argument("--networks", metavar="NAMES", type=_csv_list(str, "--networks"), help="networks (default kotka)")
    p.add_argument("--K", dest="k_values", metavar="LIST", type=_csv_list(int, "--K"), help="domain sizes (100,200)")
    p.add_argument(
        "--methods", metavar="NAMES", type=_csv_list(str, "--methods"), help="methods (em,em-br,lp-ca,panda-e)"
    )
    p.add_argument("--preset", dest="presets", metavar="NAMES", type=_csv_list(str, "--preset"), help="(artifact)")
    p.add_argument(
        "--epsilon", dest="epsilons_per_km", metavar="LIST", type=_csv_list(float, "--epsilon"), help="1/km (5)"
    )
    p.add_argument("--delta", dest="deltas", metavar="LIST", type=_csv_list(float, "--delta"), help="(1e-7)")
    p.add_argument("--users", dest="n_users", metavar="N", type=int, help="users per instance (50)")
    p.add_argument("--outputs", dest="n_outputs", metavar="M", type=int, help="outputs per instance (100)")
    p.add_argument(
        "--loss", choices=["road", "straight", "task"], help="utility loss: road, straight or the paper's task (task)"
    )
    p.add_argument("--tasks", dest="n_tasks", metavar="T", type=int, help="tasks in the task loss (1)")
    p.add_argument("--repeats", metavar="R", type=int, help="repetitions (instances) per network and K (1)")
    p.add_argument("--seed", type=int, help="base seed (0)")
    p.add_argument("--time-limit", dest="time_limit_s", metavar="SECONDS", type=float, help="per method (1800)")
    p.add_argument("--out", metavar="DIR", help="output folder (results/experiment)")
    p.add_argument(
        "--executor",
        metavar="WHERE",
        help=(
            "local (process pool, default), serial, dask (the Dask execution layer: a local cluster, or "
            "$PANDA_DASK_SCHEDULER), or a dask scheduler address tcp://host:8786 / dask://host:8786"
        ),
    )
    p.add_argument("--workers", metavar="N", type=int, help="processes of the local executor (CPU count)")
    p.add_argument("--no-isolate", action="store_true", help="run methods in the unit's process (no hard limit)")
    p.add_argument("--tables-only", action="store_true", help="only rewrite tables.md and figures/ from rows.csv")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_experiment)


def cmd_experiment(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Handle ``panda experiment``."""
    from panda import experiments as ex

    out = sys.stdout if out is None else out
    data: dict = {}
    run: dict = {}
    if args.config:
        spec0, run = ex.load_spec(args.config)
        data = spec0.to_dict()
    else:
        data = {"networks": ["kotka"], "k_values": [100, 200], "methods": ["em", "em-br", "lp-ca", "panda-e"]}
    for name in (
        "networks",
        "k_values",
        "methods",
        "presets",
        "epsilons_per_km",
        "deltas",
        "n_users",
        "n_outputs",
        "n_tasks",
        "loss",
        "repeats",
        "seed",
        "time_limit_s",
    ):
        value = getattr(args, name, None)
        if value is not None:
            data[name] = value
    if args.no_isolate:
        data["isolate"] = False
    spec = ex.ExperimentSpec.from_mapping(data)
    folder = args.out or run.get("out") or "results/experiment"
    if args.tables_only:
        rows = ex.read_rows(folder)
        ex.write_tables(rows, f"{folder}/tables.md", spec=spec)
        files = ex.write_figures(rows, f"{folder}/figures")
        print(f"{len(rows)} rows: wrote {folder}/tables.md and {len(files)} figure file(s)", file=out)
        return EXIT_OK
    outcome = ex.run_experiment(
        spec,
        folder,
        executor=args.executor or run.get("executor", "local"),
        workers=args.workers or run.get("workers"),
        progress=None if args.quiet else sys.stderr,
    )
    print(
        f"{outcome.n_rows_written} rows written, {outcome.n_rows_skipped} already present, "
        f"{len(outcome.failed_units)} failed instance(s), {outcome.wall_time_s:.1f} s: {outcome.out_dir}/rows.csv, "
        f"tables.md, experiment.json",
        file=out,
    )
    for label, error in outcome.failed_units:
        print(f"  failed: {label}: {error}", file=out)
    if outcome.interrupted:
        return 130
    return EXIT_FAILURE if outcome.failed_units else EXIT_OK


# ---------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# prepare (the dashboard's command: it runs where the dashboard is, the project's folder)
# ---------------------------------------------------------------------------------------------


def _add_prepare_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "prepare",
        help="compute a lecture's dashboard views ahead of class (run it in the project's folder)",
        description=(
            "Compute, with no time limit, every mechanism, exact audit and curve the dashboard shows at each "
            "link, and keep them in the dashboard's result store (data/class.db, or PANDA_DB_URL), so the "
            "lecture's views open at once. Ctrl-C stops; the same command resumes. It needs the dashboard, "
            "so run it in the project's folder (where `streamlit run app` runs)."
        ),
        epilog="Example: python -m panda prepare lecture-links.txt --link 'http://127.0.0.1:8501/?eps=2'",
    )
    p.add_argument("links_file", nargs="?", metavar="LINKS.txt", help="a text file with one dashboard link per line")
    p.add_argument("--link", action="append", default=[], metavar="URL", help="a dashboard link (repeatable)")
    p.set_defaults(func=cmd_prepare)


#: The dashboard's module behind ``panda prepare``: the library's one mention of the dashboard, loaded by name
#: only when that command runs (tests/project/test_dependencies.py allows this and nothing else).
DASHBOARD_PREPARE = "app.server.prepare"


def _dashboard_prepare():  # noqa: ANN202 (the dashboard's module, typed there)
    """Import the dashboard's :data:`DASHBOARD_PREPARE` from the project's folder.

    That folder is the one this library was imported from (a checkout, or an editable install), else the
    working directory. The library never needs the dashboard; only this command does, and a PandaError says
    where to run it when the dashboard is not there.
    """
    import importlib

    from panda.network import DATA_DIR, IN_CHECKOUT

    for folder in ([DATA_DIR.parent] if IN_CHECKOUT else []) + [Path.cwd()]:
        if folder.joinpath(*DASHBOARD_PREPARE.split(".")).with_suffix(".py").is_file() and (folder / "panda").is_dir():
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
            return importlib.import_module(DASHBOARD_PREPARE)
    raise PandaError(
        "prepare computes the dashboard's views and needs the dashboard: run it in the project's folder "
        "(where `streamlit run app` runs)"
    )


def cmd_prepare(args: argparse.Namespace) -> int:
    """Handle ``panda prepare``: read the links and compute their views into the dashboard's result store."""
    prepare = _dashboard_prepare()
    links = list(args.link)
    if args.links_file:
        try:
            with open(args.links_file, encoding="utf-8") as fh:
                links += prepare.read_links(fh)
        except OSError as exc:
            raise PandaError(f"cannot read {args.links_file}: {exc.strerror}") from None
    if not links:
        raise ValueError("give a file of links or --link URL")
    return int(prepare.run(links))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors: argparse already printed
        if exc.code is None:
            return EXIT_OK
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return int(args.func(args))
    except PandaError as exc:
        _print_error(args.command, exc)
        return EXIT_FAILURE
    except (ValueError, TypeError) as exc:
        _print_error(args.command, exc)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("panda: interrupted", file=sys.stderr)
        return 130


def _print_error(command: str, exc: BaseException) -> None:
    print(f"panda {command}: error: {exc}", file=sys.stderr)
