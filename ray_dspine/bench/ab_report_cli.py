"""`ray-dspine bench ab-report DIR`: per-arm table and one verdict line from a replay run folder.

Reads DIR/records.jsonl (tolerantly: unknown fields ignored, unreadable lines counted, and so is a line
that says not when its request was sent, which every replay record does) and, with
`--config`, each pool's price from the Serve config YAML; the rules are stated in `ab_report.py`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

from ray_dspine.bench.ab_report import AbReport, ArmComparison, ArmStats, PoolPrice, RunRecord, Spread, build_report
from ray_dspine.bench.summary import describe_paired
from ray_dspine.cli_errors import CliError, cli_errors


def load_records(path: str | Path) -> tuple[list[RunRecord], int]:
    """Records from a JSONL file (or a run folder holding records.jsonl); also the number of bad lines."""
    path = Path(path)
    if path.is_dir():
        path = path / "records.jsonl"
    records, num_bad = [], 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = RunRecord.model_validate(json.loads(line))
        except ValueError:
            num_bad += 1
            continue
        if record.start_s is None:  # some other JSON object: counting it would add an empty request to an arm
            num_bad += 1
            continue
        records.append(record)
    return records, num_bad


def load_pool_prices(config_path: str | Path) -> dict[str, PoolPrice]:
    """Pool prices from a Serve config: applications[].args.pools[] (name, gpu_hour_usd, deployment)."""
    document = yaml.safe_load(Path(config_path).read_text()) or {}
    prices: dict[str, PoolPrice] = {}
    for application in document.get("applications") or []:
        for pool in ((application or {}).get("args") or {}).get("pools") or []:
            if not isinstance(pool, dict) or not pool.get("name"):
                continue
            deployment = pool.get("deployment") or {}
            actor = deployment.get("ray_actor_options") or {}
            num_gpus = deployment.get("num_gpus", actor.get("num_gpus", pool.get("num_gpus", 0.0)))
            num_replicas = deployment.get("num_replicas", pool.get("num_replicas"))
            prices[pool["name"]] = PoolPrice(
                name=pool["name"], gpu_hour_usd=pool.get("gpu_hour_usd"), num_gpus=num_gpus or 0.0,
                num_replicas=num_replicas if isinstance(num_replicas, int) else None,
            )
    return prices



def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ci(ci: tuple[float, float] | None, digits: int = 1) -> str:
    return "" if ci is None else f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _spread_row(label: str, arms: list[ArmStats], pick) -> list[str]:
    cells = []
    for arm in arms:
        s: Spread | None = pick(arm)
        cells.append("-" if s is None else f"{s.p50:.1f} / {s.p95:.1f} / {s.p99:.1f}")
    return [label] + cells


_DELTA_LABELS = {"ttft_ms": "TTFT", "ttft_replica_ms": "  in the replica", "ttft_outside_ms": "  outside it",
                 "e2e_ms": "e2e"}


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def render_deltas(comparison: ArmComparison) -> list[str]:
    """Candidate - baseline at p50 and p99, one row per metric, each cell `delta [low, high]` in ms."""
    if not comparison.percentile_deltas:
        return []
    percentiles = sorted({d.percentile for d in comparison.percentile_deltas})
    cells: dict[str, dict[int, str]] = {}
    for d in comparison.percentile_deltas:
        ci = "" if d.delta_ci is None else " [{:+.1f}, {:+.1f}]".format(*d.delta_ci)
        cells.setdefault(d.metric, {})[d.percentile] = f"{d.delta:+.1f}{ci}"
    header = [f"{comparison.candidate} - {comparison.baseline}, ms [95% CI]"] + [f"p{p}" for p in percentiles]
    rows = [[_DELTA_LABELS.get(metric, metric)] + [by_p.get(p, "-") for p in percentiles]
            for metric, by_p in cells.items()]
    lines = _table([header] + rows)
    p99_counts = [min(d.num_candidate, d.num_baseline) for d in comparison.percentile_deltas if d.percentile == 99]
    if p99_counts and min(p99_counts) < 100:
        lines.append(f"  (an arm with {min(p99_counts)} values: its p99 sits between its two largest; "
                     "read the p99 intervals with care)")
    return lines


def render_report(report: AbReport) -> str:
    arms = report.arms
    ttft_split = [  # only when some arm's answers told the replica's share (Server-Timing)
        _spread_row("  in the replica", arms, lambda a: a.ttft_replica_ms),
        _spread_row("  outside it", arms, lambda a: a.ttft_outside_ms),
    ] if any(a.ttft_outside_ms is not None for a in arms) else []
    rows = [
        ["arm"] + [a.name + (" (baseline)" if a.name == report.baseline else "") for a in arms],
        ["pools"] + [", ".join(a.pools) for a in arms],
        ["decode paths"] + [", ".join(f"{k} {v}" for k, v in sorted(a.paths.items())) or "-" for a in arms],
        ["completed / failed"] + [f"{a.num_completed} / {a.num_failed}" for a in arms],
        ["span s"] + [_fmt(a.span_s) for a in arms],
        ["mean prompt tokens"] + [_fmt(a.prompt_tokens_mean, 0) for a in arms],
        ["output tok/s [95% CI]"] + [_fmt(a.output_tok_per_s) + _ci(a.output_tok_per_s_ci) for a in arms],
        ["per-request tok/s mean"] + [
            "-" if a.request_output_tok_per_s is None
            else _fmt(a.request_output_tok_per_s.mean) + _ci(a.request_output_tok_per_s.mean_ci) for a in arms],
        _spread_row("TTFT ms p50/p95/p99", arms, lambda a: a.ttft_ms),
        *ttft_split,
        _spread_row("ITL ms p50/p95/p99", arms, lambda a: a.itl_ms),
        _spread_row("e2e ms p50/p95/p99", arms, lambda a: a.e2e_ms),
        ["acceptance mean [CI]"] + [
            "-" if a.acceptance is None else f"{a.acceptance.mean:.2f}{_ci(a.acceptance.mean_ci, 2)}" for a in arms],
        ["acceptance p10/p50/p90"] + [
            "-" if a.acceptance is None
            else f"{a.acceptance.p10:.2f} / {a.acceptance.p50:.2f} / {a.acceptance.p90:.2f}" for a in arms],
        ["USD per completed req"] + [_fmt(a.cost_per_completed_usd, 5) for a in arms],
    ]
    lines = _table(rows)
    lines += [f"cost: {a.name}: {a.cost_note}" for a in arms]
    for c in report.comparisons:
        lines.append(f"{c.candidate} / {c.baseline}: {c.speed_metric} {_fmt(c.speed_ratio, 2)}x"
                     f"{_ci(c.speed_ratio_ci, 2)}, e2e mean {_fmt(c.e2e_mean_ratio, 2)}x{_ci(c.e2e_mean_ratio_ci, 2)}"
                     f" (spans overlap {_fmt(c.spans_overlap, 2)})")
        lines += render_deltas(c)
    if report.paired:
        lines.append("same turns on both arms:")
        lines += [f"  {describe_paired(p)}" for p in report.paired]
    elif report.comparisons:
        lines.append("each arm answered its own conversations, so these comparisons are between different turns "
                     "(see the mean prompts); `bench replay --each-pool` compares arms on the same turns")
    if report.num_bad_lines:
        lines.append(f"skipped {report.num_bad_lines} unreadable lines of records.jsonl")
    lines.append(f"bootstrap: {report.num_resamples} resamples, seed {report.seed}")
    lines.append(f"verdict: {report.verdict}")
    return "\n".join(lines)


@cli_errors
def _run_command(args: argparse.Namespace) -> int:
    source = Path(args.run_dir)
    if not 100 <= args.resamples <= 100_000:
        raise CliError(f"argument --resamples: must be from 100 to 100000 (got {args.resamples})")
    try:
        records, num_bad = load_records(source)
    except OSError as exc:
        where = source / "records.jsonl" if source.is_dir() else source
        raise CliError(
            f"argument DIR: cannot read {where} ({exc.strerror or exc}); pass the folder `bench replay --out` wrote"
        ) from exc
    try:
        prices = load_pool_prices(args.config) if args.config else None
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise CliError(f"argument --config: cannot read pool prices from {args.config}: {exc}") from exc
    try:
        report = build_report(records, prices=prices, rng=np.random.default_rng(args.seed),
                              num_resamples=args.resamples, seed=args.seed, baseline=args.baseline,
                              source=str(source), num_bad_lines=num_bad)
    except ValueError as exc:  # no readable records, or --baseline names no arm
        flag = "--baseline" if "baseline arm" in str(exc) else "DIR"
        unread = ""
        if not records and num_bad:
            unread = " (1 line is not a replay record)" if num_bad == 1 else f" ({num_bad} lines are not replay records)"
        raise CliError(f"argument {flag}: {exc}{unread}") from exc
    print(report.model_dump_json(indent=2) if args.json else render_report(report))
    if args.plot:
        from ray_dspine.bench.ab_deltas_plot import plot_deltas  # matplotlib only when asked

        try:
            plot_deltas(report, Path(args.plot))
        except ValueError as exc:  # one arm, or no timed requests
            raise CliError(f"argument --plot: {exc}") from exc
        except OSError as exc:
            raise CliError(f"argument --plot: cannot write {args.plot} ({exc.strerror or exc})") from exc
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def register_ab_report(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `ab-report` to a `bench` subcommand group; the parser's `func(args) -> exit code` runs it."""
    parser = subparsers.add_parser(
        "ab-report",
        help="per-arm throughput, latency percentiles, acceptance and cost of a replay run, with a verdict",
        description="Group records.jsonl by arm (else pool); per arm: completed requests, output throughput, "
        "TTFT/ITL/e2e p50/p95/p99, acceptance mean and p10/p50/p90, cost per completed request (prices "
        "from --config); bootstrap 95%% CIs on per-arm means, on candidate/baseline ratios and on "
        "candidate-minus-baseline TTFT and e2e p50/p99; when arms answered the same turns (bench replay "
        "--each-pool), paired TTFT/TPOT/e2e ratios over those turns with a cluster bootstrap; one verdict line.",
    )
    parser.add_argument("run_dir", metavar="DIR", help="replay run folder (or a records.jsonl file)")
    parser.add_argument("--config", default=None,
                        help="Serve config YAML with applications[].args.pools[] prices, e.g. clusters/local.yaml")
    parser.add_argument("--baseline", default=None, help="baseline arm (default: the autoregressive one)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--plot", metavar="FILE", default=None,
                        help="also draw each arm's p50/p99 differences from the baseline, with their intervals, "
                        "as a PNG")
    parser.set_defaults(func=_run_command)
    return parser
