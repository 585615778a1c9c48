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
    parser.add_argument("--strict", action="store_true", help="treat warnings (e.g. placeholder pins) as errors, "
                        "and judge plugin algorithms only if an installed package registers them")
    parser.add_argument("--no-sglang", dest="sglang", action="store_false",
                        help="skip SGLang's own validation of the launch commands (they are then printed as "
                        "'not validated')")  # fmt: skip
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
        parts.append(_indent(format_verdict(pool.command_verdict), 4))
    if pool.fallback_command is not None:
        parts.append("  autoregressive fallback (drafter off):\n" + _indent(format_command(pool.fallback_command), 4))
        parts.append(_indent(format_verdict(pool.fallback_verdict), 4))
    return "\n".join(parts)


def format_verdict(verdict) -> str:
    """SGLang's verdict under a command: `validated by sglang 0.5.23: ok` or its refusal, and what it noticed."""
    if verdict is None:
        return "not validated by sglang (--no-sglang)"
    lines = [verdict.summary()]
    if verdict.where:
        lines.append(f"  at {verdict.where}")
    for name, known in verdict.algorithms.items():
        if known.get("known"):
            lines.append(f"  algorithm {name}: known to sglang ({'built in' if known.get('builtin') else 'plugin'})")
        elif name in verdict.stand_ins:
            lines.append(f"  algorithm {name}: NOT registered here; judged with a stand-in registration")
    for message in verdict.warnings:
        lines.append(f"  sglang warned: {message}")
    if verdict.device_queries:
        asked = ", ".join(f"{name} x{count}" for name, count in sorted(verdict.device_queries.items()))
        lines.append(f"  GPU queries answered from the pool's GPU (no GPU here): {asked}")
    return "\n".join(lines)


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


NOT_JUDGED_HERE = (
    "not judged without a GPU: SGLang's memory sizing at start-up (KV tokens and Mamba slots it allocates), "
    "kernel availability on the device, the drafter worker's construction, weight loading; "
    "`ray-dspine gpu-check CONFIG` runs the commands on a GPU node and compares them with the plan"
)


def check_main(args) -> int:
    report = check_config(args.config, sglang=args.sglang, strict=args.strict)
    if args.sglang and any(pool.command is not None for pool in report.pools):
        print(NOT_JUDGED_HERE + "\n")
    print_report(report, args.strict)
    return 0 if report.passed(args.strict) else 1
