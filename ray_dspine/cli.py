"""`ray-dspine`: plan capacity, check configs, benchmark, tune, render manifests.

Each subcommand lives with the code it drives and registers itself here; heavy imports happen
only when that subcommand runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (group, module, function) that adds subcommands; a group of None adds top-level commands.
REGISTRARS = [
    (None, "ray_dspine.capacity_cli", "register"),
    (None, "ray_dspine.deploy.check_cli", "register"),
    (None, "ray_dspine.deploy.gpu_check", "register"),
    ("bench", "ray_dspine.bench.commands", "register"),
    ("bench", "ray_dspine.bench.routing_bench", "register"),
    ("bench", "ray_dspine.autoscale.bench_cli", "register"),
    ("tune", "ray_dspine.autoscale.tune_cli", "register"),
    ("render", "ray_dspine.deploy.render_cli", "register"),
]

GROUP_HELP = {
    "bench": "benchmarks: engine, replay, equivalence, ab-report, routing, autoscaling",
    "tune": "tune policies on the simulator",
    "render": "render deployment manifests",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ray-dspine", description=__doc__.splitlines()[0])
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for group, module_name, function in REGISTRARS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("ray_dspine"):
                continue  # a component this installation does not ship
            raise
        if group is None:
            getattr(module, function)(top)
            continue
        if group not in groups:
            group_parser = top.add_parser(group, help=GROUP_HELP[group])
            groups[group] = group_parser.add_subparsers(dest=f"{group}_command", metavar="COMMAND")
            group_parser.set_defaults(func=lambda _args, p=group_parser: (p.print_help(), 2)[1])
        getattr(module, function)(groups[group])
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
