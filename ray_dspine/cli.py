"""`ray-dspine`: plan capacity, check configs, benchmark, tune, render manifests.

Each subcommand lives with the code it drives and registers itself here; heavy imports happen
only when that subcommand runs. Installed packages add commands through the entry point group
`ray_dspine.commands`: an entry point named "<group>.<name>" (a group of `ray-dspine`, such as
"bench") or "<name>" (a top-level command) points at a function that takes the group's subparsers
and adds its commands.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import entry_points

# (group, module, function) that adds subcommands; a group of None adds top-level commands.
REGISTRARS = [
    (None, "ray_dspine.capacity_cli", "register"),
    (None, "ray_dspine.deploy.check_cli", "register"),
    (None, "ray_dspine.deploy.gpu_check", "register"),
    (None, "ray_dspine.drill.cli", "register"),
    ("bench", "ray_dspine.bench.commands", "register"),
    ("render", "ray_dspine.deploy.render_cli", "register"),
]

COMMAND_GROUP = "ray_dspine.commands"  # entry point group of the registrars other packages add

GROUP_HELP = {
    "bench": "benchmarks: engine, replay, equivalence, ab-report, and those installed packages add",
    "tune": "tune policies on the simulator",
    "render": "render deployment manifests",
}


def installed_registrars() -> list[tuple[str | None, str, str]]:
    """(group, module, function) for each entry point in COMMAND_GROUP, in name order."""
    found = []
    for point in sorted(entry_points(group=COMMAND_GROUP), key=lambda p: p.name):
        group, _, _name = point.name.rpartition(".")
        module, _, function = point.value.partition(":")
        found.append((group or None, module.strip(), function.strip() or "register"))
    return found


def _group_rank(registrar: tuple[str | None, str, str]) -> int:
    """Top-level commands first, then the groups in GROUP_HELP's order, then any other group (a stable
    sort: within a group, REGISTRARS' order, then the entry points')."""
    group = registrar[0]
    if group is None:
        return 0
    order = list(GROUP_HELP)
    return 1 + (order.index(group) if group in order else len(order))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ray-dspine", description=__doc__.splitlines()[0])
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for group, module_name, function in sorted(REGISTRARS + installed_registrars(), key=_group_rank):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] in ("ray_dspine", module_name.split(".")[0]):
                continue  # a component this installation does not ship
            raise
        if group is None:
            getattr(module, function)(top)
            continue
        if group not in groups:
            group_parser = top.add_parser(group, help=GROUP_HELP.get(group, f"{group} commands"))
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
