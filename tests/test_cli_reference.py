"""docs/commands.md is the CLI reference generated from the parser, and the generator's rules hold."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ray_dspine.cli import build_parser
from ray_dspine.cli_reference import render

REPO = Path(__file__).resolve().parents[1]


def test_commands_page_matches_the_parser():
    page = (REPO / "docs" / "commands.md").read_text()
    fresh = render(build_parser())
    assert page == fresh, (
        "docs/commands.md is out of date with the CLI: run "
        "`python -m ray_dspine.cli_reference > docs/commands.md`"
    )


def _toy_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toy", description="a toy CLI")
    top = parser.add_subparsers(dest="command")
    run = top.add_parser("run", help="run a | b")
    run.add_argument("config", metavar="CONFIG", help="a YAML")
    run.add_argument("--rate", type=float, default=2.5, help="requests per s (default %(default)s)")
    run.add_argument("--mode", choices=["fast", "slow"], default="fast", help="how")
    run.add_argument("--json", action="store_true", help="print\nJSON")
    run.add_argument("--out", default=os.path.join(os.getcwd(), "runs", "x.json"), help="where")
    run.add_argument("--hidden", help=argparse.SUPPRESS)
    top.add_parser("empty", help="takes nothing")
    return parser


def test_one_row_per_argument_in_declared_order():
    page = render(_toy_parser())
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    # Worked out by hand from _toy_parser: the positional first, then the four visible options in
    # declaration order; --help and the suppressed --hidden are left out.
    assert rows == [
        "| `CONFIG` |  |  | a YAML |",
        "| `--rate` | RATE | 2.5 | requests per s (default 2.5) |",
        "| `--mode` | {fast,slow} | fast | how |",
        "| `--json` |  |  | print JSON |",
        "| `--out` | OUT | runs/x.json | where |",
    ]


def test_commands_without_arguments_get_no_section_and_pipes_are_escaped():
    page = render(_toy_parser())
    assert "## `toy run`" not in page  # the generator names the root `ray-dspine`
    assert "## `ray-dspine run`" in page
    assert "empty" not in page  # `empty` takes no arguments
    assert "- [`ray-dspine run`](#ray-dspine-run): run a \\| b" in page


def test_rendering_is_deterministic():
    assert render(build_parser()) == render(build_parser())
