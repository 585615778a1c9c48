"""`ray-dspine check CONFIG`: validate a Serve config and print each pool's capacity and SGLang command.

Exit status: 0 when there is no error (warnings, e.g. placeholder pins, are printed); 1 on any error, or
on any warning with --strict. Findings go to stderr, the report to stdout.
"""

from __future__ import annotations

import shlex
import sys

from ray_dspine.capacity import format_plan

from .check import check_config
from .findings import CheckReport, PoolReport


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "check", help="validate a Serve config (Ray schema, pools, capacity) and print SGLang command lines"
    )
    parser.add_argument("config", help="a Serve YAML such as clusters/prod.yaml")
    parser.add_argument("--strict", action="store_true", help="treat warnings (e.g. placeholder pins) as errors")
    parser.set_defaults(func=check_main)


def format_command(argv: list[str]) -> str:
    """A shell command, one flag (with its value) per line, continued with backslashes."""
    lines: list[str] = []
    for token in argv:
        if token.startswith("--") or not lines:
            lines.append(shlex.quote(token))
        elif lines[-1].startswith("--") and " " not in lines[-1]:
            lines[-1] += " " + shlex.quote(token)
        else:
            lines.append(shlex.quote(token))
    head_end = 3 if len(argv) >= 3 and argv[1] == "-m" else 1
    head = " ".join(lines[:head_end])
    return " \\\n  ".join([head] + lines[head_end:])


def format_pool(pool: PoolReport) -> str:
    if pool.plan is None:
        return f"pool {pool.name}: {pool.engine_kind} engine, no capacity section (sized by its own budgets)"
    parts = [format_plan(pool.name, pool.plan)]
    if pool.command is not None:
        label = "sglang command (drafter on)" if pool.fallback_command is not None else "sglang command"
        parts.append(f"  {label}:\n" + _indent(format_command(pool.command), 4))
    if pool.fallback_command is not None:
        parts.append("  autoregressive fallback (drafter off):\n" + _indent(format_command(pool.fallback_command), 4))
    return "\n".join(parts)


def _indent(text: str, width: int) -> str:
    return "\n".join(" " * width + line for line in text.splitlines())


def print_report(report: CheckReport, strict: bool, out=None, err=None) -> None:
    out, err = out or sys.stdout, err or sys.stderr
    for pool in report.pools:
        print(f"[{pool.app_name}] " + format_pool(pool) + "\n", file=out)
    for finding in report.findings:
        print(finding.format(), file=err)
    verdict = "OK" if report.passed(strict) else "FAILED"
    print(f"{report.config_path}: {verdict} ({len(report.pools)} pools checked, {len(report.errors)} errors, "
          f"{len(report.warnings)} warnings{', strict' if strict else ''})", file=out)  # fmt: skip


def check_main(args) -> int:
    report = check_config(args.config)
    print_report(report, args.strict)
    return 0 if report.passed(args.strict) else 1
