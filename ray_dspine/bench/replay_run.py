"""One replay from options to files: load the trace, ask the endpoint what it serves, replay, and
write `records.jsonl` (as requests finish), `summary.json`, `plots/*.png` and `receipt.json`.

Ctrl-C: asyncio cancels the replay, in-flight requests are recorded as "cancelled", and the summary,
plots and receipt are still written from what was measured (`interrupted: true` in both JSON files).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from .client import ClientSettings, StreamingClient
from .endpoint import EndpointUnreachable, api_key_from_env, fetch_engine_info, fetch_models
from .plots import write_plots
from .receipt import (
    Receipt,
    distribution_versions,
    files_sha256,
    git_state,
    hardware,
    package_version,
    trace_info,
    utc_iso,
)
from .records import RecordWriter
from .replay import ReplayConfig, ReplaySink, replay
from .summary import ReplaySummary, summarize
from .traces.loader import load_trace
from .traces.model import ToolCallMode, ToolsMode, Trace

RECORDS_FILE = "records.jsonl"
SUMMARY_FILE = "summary.json"
RECEIPT_FILE = "receipt.json"
PLOTS_DIR = "plots"
CONNECT_TIMEOUT_S = 30.0


class UnknownPools(ValueError):
    """--each-pool names a pool the endpoint does not serve (nothing was sent)."""


class ReplayOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint: str = Field(default="http://127.0.0.1:8000", description="Base URL of the OpenAI-compatible server.")
    trace: str = Field(description="Trace name (tau-bench, mooncake, azure-code, azure-conv) or file path.")
    out_dir: Path = Field(description="Folder for records, summary, plots and receipt.")
    traces_dir: Path | None = Field(default=None, description="Folder of named traces.")
    mode: Literal["closed", "open"] = "closed"
    concurrency: int = Field(
        default=8, ge=1, description="Conversations in flight (closed loop; on each pool with each_pool)."
    )
    time_scale: float = Field(default=1.0, gt=0.0, description="Multiplier on arrival times (open loop).")
    max_in_flight: int | None = Field(default=None, ge=1)
    skip_conversations: int = Field(default=0, ge=0, description="Conversations dropped from the trace's start.")
    max_conversations: int | None = Field(default=None, ge=1)
    max_requests: int | None = Field(default=None, ge=1)
    max_tokens_cap: int | None = Field(default=None, ge=1, description="Upper bound on each request's max_tokens.")
    max_prompt_tokens: int | None = Field(default=None, ge=1, description="Clamp on prompt length, in tokens.")
    session_rate_per_s: float | None = Field(default=None, gt=0.0, description="Start rate for untimed traces.")
    pool: str | None = Field(default=None, description="Force a pool via the x-dspine-pool header.")
    each_pool: list[str] = Field(
        default_factory=list,
        description="Replay every conversation on each of these pools (two or more), at the same time.",
    )
    model: str | None = Field(default=None, description="Model name; default: first id of /v1/models.")
    api: Literal["chat", "completions", "messages", "responses"] = "chat"
    tool_calls: ToolCallMode = "native"
    tools: ToolsMode = Field(default="none", description="Which tools the requests carry (traces/tools.py).")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    warmup: int = Field(default=0, ge=0, description="Unmeasured warm-up requests.")
    repetitions: int = Field(default=1, ge=1)
    seed: int = Field(default=0, description="Seed for arrival spreading, session starts and bootstrap.")
    timeout_s: float = Field(default=600.0, gt=0.0, description="Per-request deadline.")
    keep_text: bool = False
    baseline_arm: str | None = None
    num_resamples: int = Field(default=1000, ge=1)
    progress: bool = Field(default=False, description="Draw a progress bar on stderr.")
    plots: bool = True


class ReplayOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    out_dir: Path
    files: list[Path]
    summary: ReplaySummary
    receipt: Receipt
    interrupted: bool


def load_trace_for(options: ReplayOptions) -> Trace:
    return load_trace(
        options.trace,
        traces_dir=options.traces_dir,
        seed=options.seed,
        max_prompt_tokens=options.max_prompt_tokens,
        tool_calls=options.tool_calls,
        tools=options.tools,
        session_rate_per_s=options.session_rate_per_s,
        max_conversations=options.max_conversations,
        max_requests=options.max_requests,
        skip_conversations=options.skip_conversations,
    )


class _Found:
    """What the endpoint told us before the replay started."""

    def __init__(self) -> None:
        self.model = ""
        self.engine: dict[str, JsonValue] | None = None


async def _replay_main(
    options: ReplayOptions,
    trace: Trace,
    sink: ReplaySink,
    found: _Found,
    writer: RecordWriter,
    transport: httpx.AsyncBaseTransport | None,
) -> None:
    api_key = api_key_from_env()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=max(20, options.concurrency))
    # Per-request deadlines come from asyncio.timeout in the client; httpx only bounds connecting.
    timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)
    async with httpx.AsyncClient(transport=transport, timeout=timeout, limits=limits) as http:
        models = await fetch_models(http, options.endpoint, api_key)
        if options.model is None and not models:
            raise EndpointUnreachable(f"{options.endpoint}/v1/models lists no model; pass --model")
        found.model = options.model or models[0]
        found.engine = await fetch_engine_info(http, options.endpoint, api_key)
        missing = [p for p in options.each_pool if found.engine is not None and p not in found.engine]
        if missing:
            raise UnknownPools(
                f"the endpoint serves no pool named {', '.join(missing)}; its pools: {', '.join(sorted(found.engine))}"
            )
        settings = ClientSettings(
            endpoint=options.endpoint,
            model=found.model,
            api=options.api,
            pool=options.pool,
            api_key=api_key,
            temperature=options.temperature,
            max_tokens_cap=options.max_tokens_cap,
            timeout_s=options.timeout_s,
            keep_text=options.keep_text,
        )
        config = ReplayConfig(
            mode=options.mode,
            concurrency=options.concurrency,
            time_scale=options.time_scale,
            max_in_flight=options.max_in_flight,
            warmup_requests=options.warmup,
            repetitions=options.repetitions,
            pools=options.each_pool,
        )
        writer.open()
        await replay(trace.requests, config, StreamingClient(http, settings), sink)


def run_replay(
    options: ReplayOptions,
    *,
    command_line: Sequence[str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    trace: Trace | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> ReplayOutcome:
    """Replay and write every output file. Raises EndpointUnreachable (nothing written), UnknownPools
    (nothing sent) and TraceNotFoundError / ValueError for a bad trace; Ctrl-C ends the replay but still
    writes."""
    trace = trace or load_trace_for(options)
    out_dir = options.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    writer = RecordWriter(out_dir / RECORDS_FILE)
    total = len(trace.requests) * options.repetitions * max(1, len(options.each_pool))
    sink = ReplaySink(writer, progress_total=total, progress=options.progress)
    found = _Found()
    started = wall_clock()
    try:
        asyncio.run(_replay_main(options, trace, sink, found, writer, transport))
    except KeyboardInterrupt:
        sink.interrupted = True
    finally:
        writer.close()
        sink.close()
    ended = wall_clock()
    if not found.model:  # the endpoint was never reached: nothing measured
        raise EndpointUnreachable(f"cannot reach {options.endpoint}")
    summary = summarize(
        sink.records,
        wall_s=sink.wall_s,
        repetition_wall_s=sink.repetition_wall_s,
        baseline_arm=options.baseline_arm,
        interrupted=sink.interrupted,
        num_resamples=options.num_resamples,
        seed=options.seed,
    )
    summary_path = out_dir / SUMMARY_FILE
    summary_path.write_text(summary.model_dump_json(indent=2) + "\n")
    files = [out_dir / RECORDS_FILE, summary_path]
    if options.plots:
        files.extend(write_plots(sink.records, out_dir / PLOTS_DIR))
    settings: dict[str, JsonValue] = {
        **options.model_dump(mode="json"),
        "api_key_set": api_key_from_env() is not None,
        "num_warmup_errors": sum(1 for r in sink.warmup_records if not r.ok),
    }
    receipt = Receipt(
        package_version=package_version(),
        git=git_state(),
        versions=distribution_versions(),
        endpoint=options.endpoint,
        model=found.model,
        engine=found.engine,
        hardware=hardware(),
        trace=trace_info(trace),
        settings=settings,
        warmup_requests=options.warmup,
        repetitions=options.repetitions,
        command_line=list(command_line if command_line is not None else sys.argv),
        started_at=utc_iso(started),
        ended_at=utc_iso(ended),
        interrupted=sink.interrupted,
        outputs_sha256=files_sha256(files),
    )
    receipt_path = out_dir / RECEIPT_FILE
    receipt_path.write_text(receipt.model_dump_json(indent=2) + "\n")
    files.append(receipt_path)
    return ReplayOutcome(out_dir=out_dir, files=files, summary=summary, receipt=receipt, interrupted=sink.interrupted)
