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
import sys
from collections.abc import Sequence
from typing import TextIO

from panda.errors import PandaError

__all__ = ["main", "build_parser", "cmd_network", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE"]

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
# entry point
# ---------------------------------------------------------------------------------------------


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
