"""`ray-dspine bench replay`: replay a trace against an endpoint and write records, summary, plots and
a receipt. `register(subparsers)` adds the command to a `bench` subparser group and returns its
parser (so other options, e.g. an upload flag, can be added); functions in `AFTER_WRITE` (or passed
to `register`) run as `hook(out_dir, args)` after the files are written.
Exit codes: 0 done, 1 endpoint unreachable, 2 bad arguments, 130 interrupted by Ctrl-C (after writing
everything measured so far).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import ValidationError

from .endpoint import EndpointUnreachable
from .replay_run import ReplayOptions, ReplayOutcome, UnknownPools, load_trace_for, run_replay
from .summary import ReplaySummary, describe_paired
from .tool_agreement import describe as describe_agreement
from .traces.loader import NAMED_TRACES, TraceNotFoundError
from .traces.tools import NoToolsInTrace

AfterWrite = Callable[[Path, argparse.Namespace], None]
AFTER_WRITE: list[AfterWrite] = []
ENDPOINT_ENV = "DSPINE_ENDPOINT"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value:g}")
    return value


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text.rstrip("/")


def _pool_list(text: str) -> list[str]:
    pools = [name.strip() for name in text.split(",") if name.strip()]
    if len(pools) < 2 or len(set(pools)) != len(pools):
        raise argparse.ArgumentTypeError(f"expected two or more distinct pool names separated by commas, got {text!r}")
    return pools


def add_arguments(parser: argparse.ArgumentParser) -> None:
    names = "|".join(NAMED_TRACES)
    parser.add_argument("--endpoint", type=_url, default=os.environ.get(ENDPOINT_ENV, "http://127.0.0.1:8000"),
                        help=f"server base URL (default: env {ENDPOINT_ENV} or %(default)s)")
    parser.add_argument("--trace", required=True, metavar="NAME|FILE", help=f"{names}, or a trace file")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="output folder")
    loop = parser.add_mutually_exclusive_group()
    loop.add_argument("--concurrency", type=_positive_int, metavar="N",
                      help="closed loop: N conversations in flight (default 8; on each pool with --each-pool)")
    loop.add_argument("--arrivals", action="store_true", help="open loop: send at the trace's arrival times")
    parser.add_argument("--time-scale", type=_positive_float, metavar="X",
                        help="with --arrivals: multiply arrival times by X (0.1 = 10x faster; default 1)")
    parser.add_argument("--max-in-flight", type=_positive_int, metavar="N",
                        help="with --arrivals: cap on open requests")
    parser.add_argument("--session-rate", type=_positive_float, metavar="R",
                        help="conversations started per second for traces without times (default: all at once)")
    parser.add_argument("--skip-conversations", type=_non_negative_int, metavar="K", default=0,
                        help="leave out the trace's first K conversations (a tuning set apart from a report's)")
    parser.add_argument("--max-conversations", type=_positive_int, metavar="N",
                        help="replay only the first N conversations (after --skip-conversations)")
    parser.add_argument("--max-requests", type=_positive_int, metavar="N", help="replay only the first N requests")
    parser.add_argument("--max-tokens-cap", type=_positive_int, metavar="N", help="cap each request's max_tokens")
    parser.add_argument("--max-prompt-tokens", type=_positive_int, metavar="N",
                        help="clamp prompts to ~N tokens (recorded in the receipt)")
    pools = parser.add_mutually_exclusive_group()
    pools.add_argument("--pool", metavar="NAME", help="force a pool (x-dspine-pool header)")
    pools.add_argument("--each-pool", metavar="A,B", type=_pool_list,
                       help="replay every conversation on each of these pools at the same time, each with its own "
                       "--concurrency, and compare them turn by turn (paired ratios)")
    parser.add_argument("--model", metavar="NAME", help="model name (default: first of /v1/models)")
    parser.add_argument("--api", choices=("chat", "completions", "messages", "responses"), default="chat",
                        help="route: OpenAI's chat, completions or responses, or Anthropic's messages "
                        "(default %(default)s)")
    parser.add_argument("--tool-calls", choices=("native", "flatten"), default="native",
                        help="send tool calls as OpenAI messages or flatten them to text (default %(default)s)")
    parser.add_argument("--tools", choices=("none", "from-trace"), default="none",
                        help="send every request with the tools the trace's calls name, as an agent declares its "
                        "tools, and count how often the answers call what the agent called (default %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0, greedy)")
    parser.add_argument("--warmup", type=_non_negative_int, default=0, metavar="N", help="unmeasured warm-up requests")
    parser.add_argument("--repetitions", type=_positive_int, default=1, metavar="N", help="replay the trace N times")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="seed (arrival spread, bootstrap)")
    parser.add_argument("--traces-dir", type=Path, metavar="PATH",
                        help="folder of named traces (default: env DSPINE_TRACES_DIR or ../shared/data/traces)")
    parser.add_argument("--timeout-s", type=_positive_float, default=600.0, metavar="SECONDS",
                        help="per-request timeout (default %(default)s)")
    parser.add_argument("--baseline-arm", metavar="ARM", help="arm the ratios divide by")
    parser.add_argument("--bootstrap-resamples", type=_positive_int, default=1000, metavar="N",
                        help="bootstrap resamples for CIs (default %(default)s)")
    parser.add_argument("--keep-text", action="store_true", help="store generated text in records.jsonl")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--json", action="store_true", help="print the summary JSON instead of the short summary")


def options_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ReplayOptions:
    if not args.arrivals and args.time_scale is not None:
        parser.error("argument --time-scale: only valid with --arrivals")
    if not args.arrivals and args.max_in_flight is not None:
        parser.error("argument --max-in-flight: only valid with --arrivals")
    if args.tools != "none" and args.api == "completions":
        parser.error("argument --tools: tools are a chat field; use --api chat, messages or responses")
    try:
        return ReplayOptions(
            endpoint=args.endpoint, trace=args.trace, out_dir=args.out, traces_dir=args.traces_dir,
            mode="open" if args.arrivals else "closed", concurrency=args.concurrency or 8,
            time_scale=args.time_scale or 1.0, max_in_flight=args.max_in_flight,
            skip_conversations=args.skip_conversations, max_conversations=args.max_conversations,
            max_requests=args.max_requests, max_tokens_cap=args.max_tokens_cap,
            max_prompt_tokens=args.max_prompt_tokens,
            session_rate_per_s=args.session_rate, pool=args.pool, each_pool=args.each_pool or [],
            model=args.model, api=args.api,
            tool_calls=args.tool_calls, tools=args.tools, temperature=args.temperature, warmup=args.warmup,
            repetitions=args.repetitions, seed=args.seed, timeout_s=args.timeout_s, keep_text=args.keep_text,
            baseline_arm=args.baseline_arm, num_resamples=args.bootstrap_resamples,
            progress=not args.no_progress and not args.json, plots=not args.no_plots,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        flag = "--" + str(error["loc"][0]).replace("_", "-") if error["loc"] else "arguments"
        parser.error(f"argument {flag}: {error['msg']}")
        raise  # parser.error exits; this keeps type checkers content


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def format_summary(summary: ReplaySummary, outcome_dir: Path) -> str:
    o = summary.overall
    errors = ", ".join(f"{k}={v}" for k, v in o.errors_by_kind.items())
    lines = [
        f"replay: {o.num_requests} requests, {o.num_ok} ok, {o.num_errors} errors"
        + (f" ({errors})" if errors else "") + f", wall {summary.wall_s:.2f} s"
        + (" [INTERRUPTED]" if summary.interrupted else ""),
        f"output throughput {o.output_throughput_tok_s or 0:.1f} tok/s, "
        f"request throughput {o.request_throughput_req_s or 0:.2f} req/s",
    ]
    rows = [("TTFT", o.ttft_s)]
    if o.ttft_outside_replica_s.count:
        rows += [("  replica", o.ttft_in_replica_s), ("  outside", o.ttft_outside_replica_s)]
    rows += [("ITL/chunk", o.itl_s), ("TPOT", o.tpot_s), ("E2E", o.e2e_s)]
    for label, d in rows:
        lines.append(f"{label:>9} ms  mean {_ms(d.mean)}  p50 {_ms(d.p50)}  p95 {_ms(d.p95)}  p99 {_ms(d.p99)}")
    if o.ttft_outside_replica_s.count:
        lines.append(f"(replica / outside: the TTFT of the {o.ttft_outside_replica_s.count} answers with a "
                     "Server-Timing header, in the replica's engine and outside it: HTTP, proxy, ingress, router, Ray)")
    for arm, g in summary.by_arm.items():
        a = g.acceptance
        accept = "n/a" if a.p50 is None else f"p10/p50/p90 {a.p10:.2f}/{a.p50:.2f}/{a.p90:.2f}"
        prompt = f"mean prompt {g.prompt_tokens / g.num_ok:,.0f} tokens, " if g.num_ok else ""
        lines.append(f"arm {arm}: {g.num_ok} ok, {g.num_errors} errors, {g.output_throughput_tok_s or 0:.1f} tok/s, "
                     f"{prompt}acceptance {accept}")
    for ratio in summary.arm_ratios:
        if ratio.metric in ("tpot_s", "e2e_s", "accept_length"):
            r = ratio.ratio
            lines.append(f"{ratio.metric} {ratio.arm}/{ratio.baseline_arm} = {r.estimate:.3f} "
                         f"[{r.low:.3f}, {r.high:.3f}] ({r.confidence:.0%} CI over conversations)")
    if summary.arm_ratios and not summary.paired_ratios:
        lines.append("(each arm answered its own conversations, so these ratios compare different turns; "
                     "--each-pool sends every conversation to every pool and pairs the turns)")
    lines += [describe_paired(paired) for paired in summary.paired_ratios]
    if summary.tool_calls is not None:
        lines.append(describe_agreement(summary.tool_calls))
        lines += [describe_agreement(found, f"  arm {arm}") for arm, found in summary.tool_calls_by_arm.items()
                  if len(summary.tool_calls_by_arm) > 1]  # fmt: skip
    lines.append(f"wrote {outcome_dir}")
    return "\n".join(lines)


def run_from_args(
    args: argparse.Namespace, parser: argparse.ArgumentParser, after_write: Sequence[AfterWrite] = ()
) -> int:
    options = options_from_args(args, parser)
    try:
        trace = load_trace_for(options)
    except TraceNotFoundError as exc:
        parser.error(f"argument --trace: {exc}")
    except NoToolsInTrace as exc:
        parser.error(f"argument --tools: {exc}")
    except (ValueError, OSError) as exc:
        parser.error(f"argument --trace: cannot read {options.trace}: {exc}")
    if options.api == "completions" and any(r.messages is not None for r in trace.requests):
        parser.error("argument --api: this trace holds chat messages; use --api chat, messages or responses")
    if not trace.requests:
        parser.error("argument --trace: the trace (after limits) has no requests")
    if options.out_dir.exists() and not options.out_dir.is_dir():
        parser.error(f"argument --out: {options.out_dir} is a file; name a folder for the run's files")
    try:
        options.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"argument --out: cannot create {options.out_dir} ({exc.strerror or exc}); "
                     "name a folder in a writable place")
    try:
        outcome: ReplayOutcome = run_replay(options, trace=trace)
    except EndpointUnreachable as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    except UnknownPools as exc:
        parser.error(f"argument --each-pool: {exc}")
    for hook in [*AFTER_WRITE, *after_write]:
        hook(outcome.out_dir, args)
    if args.json:
        print(outcome.summary.model_dump_json(indent=2))
    else:
        print(format_summary(outcome.summary, outcome.out_dir))
    return 130 if outcome.interrupted else 0


def register(
    subparsers: argparse._SubParsersAction, after_write: Sequence[AfterWrite] = ()
) -> argparse.ArgumentParser:
    """Add `replay` to a `bench` subparser group; `args.func(args)` runs it and returns the exit code."""
    parser = subparsers.add_parser(
        "replay",
        help="replay a trace against an endpoint",
        description="Replay a recorded trace against an OpenAI-compatible endpoint and write records.jsonl, "
        "summary.json, plots/*.png and receipt.json into --out.",
    )
    add_arguments(parser)
    parser.set_defaults(func=lambda args: run_from_args(args, parser, after_write))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    top = argparse.ArgumentParser(prog="ray-dspine bench")
    register(top.add_subparsers(dest="command", required=True))
    args = top.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
