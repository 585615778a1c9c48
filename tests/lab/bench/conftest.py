"""Fixtures for the `bench routing` suites: the CLI called in-process, and the Mooncake trace's presence."""

from __future__ import annotations

import argparse
from typing import Callable

import pytest

from dspine_lab.bench.routing_bench import register
from ray_dspine.bench.traces.loader import NAMED_TRACES, default_traces_dir


@pytest.fixture
def routing_cli() -> Callable[[list[str]], int]:
    """`ray-dspine bench routing ARGV...` in this process: its exit status (output to capsys)."""

    def run(argv: list[str]) -> int:
        parser = argparse.ArgumentParser()
        register(parser.add_subparsers())
        args = parser.parse_args(["routing", *argv])
        return args.func(args)

    return run


@pytest.fixture
def mooncake_trace() -> None:
    """Skips the test when the shared Mooncake trace is not present."""
    if not (default_traces_dir() / NAMED_TRACES["mooncake"]).is_file():
        pytest.skip("the Mooncake trace is not present")
