"""The lab's `ray-dspine` commands, handed to the core's CLI through the entry point group
`ray_dspine.commands` (pyproject.toml): `bench routing`, `bench routing-memory`, `bench autoscaling`,
`tune autoscaling`.

Rule: register_bench(s) adds routing, then routing-memory, then autoscaling, to the `bench` group's subparsers s;
register_tune(s) adds autoscaling to the `tune` group's. Each command's own module is imported here,
when the parser is built; its heavy imports stay inside the command.
"""

from __future__ import annotations

import argparse


def register_bench(subparsers: argparse._SubParsersAction) -> None:
    from dspine_lab.autoscale import bench_cli
    from dspine_lab.bench import routing_bench, routing_memory

    routing_bench.register(subparsers)
    routing_memory.register(subparsers)
    bench_cli.register(subparsers)


def register_tune(subparsers: argparse._SubParsersAction) -> None:
    from dspine_lab.autoscale import tune_cli

    tune_cli.register(subparsers)
