"""`bench engine`'s multi-turn agent scenario: tau-bench conversations replayed turn by turn.

Method. The tau-bench trace is read at run time through the house loader (`load_trace("tau-bench")`,
first `conversations` sessions, first `turns` assistant turns of each). A conversation's turns are
sent one after another, each with the recorded history (system policy, user turns, recorded
assistant turns and tool results), so turn t+1's prompt extends turn t's. `concurrency` workers take
whole conversations from the list in order. Each request asks for min(recorded, max_tokens) tokens,
greedily. Every (concurrency, reuse) cell runs on a fresh engine (empty prefix cache) sharing one
loaded model, cells interleaved reuse on / off so machine noise hits both alike. The engines keep the
default `max_batch_requests`, so at concurrency > 1 the conversations' steps share packed forwards.
Figures per cell: TTFT = seconds from submit to the first chunk carrying a token (p50, p90 over the
cell's requests); throughput = output tokens / cell wall seconds, and per CPU-second of this process;
cached share = cached prompt tokens / prompt tokens; refused = requests the engine refused (a prompt
past the model's context).
"""

from __future__ import annotations

import asyncio
import statistics
import time

from ..engines.embedded.config import EmbeddedEngineConfig
from ..engines.embedded.engine import EmbeddedEngine
from ..engines.protocol import ChatMessage, EngineError, GenerateRequest
from .traces.loader import load_trace


def load_conversations(conversations: int, turns: int, traces_dir=None) -> list[list]:
    trace = load_trace("tau-bench", traces_dir=traces_dir, max_conversations=conversations)
    by_session: dict[str, list] = {}
    for request in trace.requests:
        by_session.setdefault(request.session_id, []).append(request)
    return [sorted(turns_, key=lambda r: r.turn_index)[:turns] for turns_ in by_session.values()]


def to_messages(trace_request) -> list[ChatMessage]:
    out = []
    for message in trace_request.messages:
        extra = {}
        if message.tool_calls:
            extra["tool_calls"] = [call.model_dump() for call in message.tool_calls]
        out.append(ChatMessage(role=message.role, content=message.content, **extra))
    return out


async def _send(engine: EmbeddedEngine, trace_request, max_tokens: int, request_id: str) -> dict:
    request = GenerateRequest(
        request_id=request_id,
        messages=to_messages(trace_request),
        max_tokens=min(trace_request.max_tokens, max_tokens),
        temperature=0.0,
        clamp_max_tokens=True,
    )
    start = time.perf_counter()
    ttft, usage = None, None
    try:
        async for chunk in engine.generate(request):
            if ttft is None and chunk.num_tokens > 0:
                ttft = time.perf_counter() - start
            usage = chunk.usage or usage
    except EngineError:
        return {"refused": True}
    return {
        "refused": False,
        "ttft_s": ttft if ttft is not None else time.perf_counter() - start,
        "output_tokens": usage.completion_tokens if usage else 0,
        "prompt_tokens": usage.prompt_tokens if usage else 0,
        "cached_tokens": usage.cached_prompt_tokens if usage else 0,
    }


async def _cell(engine: EmbeddedEngine, conversations: list[list], concurrency: int, max_tokens: int) -> dict:
    pending = list(enumerate(conversations))
    results: list[dict] = []

    async def worker() -> None:
        while pending:
            index, turns = pending.pop(0)
            for turn in turns:
                results.append(await _send(engine, turn, max_tokens, f"c{index}-t{turn.turn_index}"))

    start, cpu_start = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    served = [r for r in results if not r["refused"]]
    ttfts = sorted(r["ttft_s"] for r in served)
    output = sum(r["output_tokens"] for r in served)
    prompt = sum(r["prompt_tokens"] for r in served)
    return {
        "requests": len(served),
        "refused": len(results) - len(served),
        "ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
        "ttft_p90_s": round(ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))], 3) if ttfts else None,
        "output_tokens_per_s": round(output / wall, 2) if wall else None,
        "cpu_output_tokens_per_s": round(output / cpu, 2) if cpu else None,
        "cached_prompt_share": round(sum(r["cached_tokens"] for r in served) / prompt, 3) if prompt else 0.0,
        "wall_s": round(wall, 2),
    }


async def run_agent_scenario(
    loaded, base: EmbeddedEngineConfig, conversations: list[list], concurrencies: tuple[int, ...],
    max_tokens: int, progress,
) -> dict:
    cells: dict[str, dict] = {}
    for concurrency in concurrencies:
        order = (True, False) if concurrency % 2 else (False, True)  # alternate who goes first
        for reuse in order:
            config = base.model_copy(update={"prefix_reuse": reuse, "max_running_requests": max(concurrency, 1)})
            engine = EmbeddedEngine(config, loader=lambda _c: loaded)
            await engine.start()
            cell = await _cell(engine, conversations, concurrency, max_tokens)
            await engine.stop()
            name = f"c{concurrency}_{'reuse' if reuse else 'no_reuse'}"
            cells[name] = cell
            progress(f"agent {name}: ttft p50 {cell['ttft_p50_s']} s, {cell['output_tokens_per_s']} tok/s")
    summary = {}
    for concurrency in concurrencies:
        on, off = cells[f"c{concurrency}_reuse"], cells[f"c{concurrency}_no_reuse"]
        summary[f"c{concurrency}"] = {
            "ttft_p50_ratio_no_reuse_over_reuse": _ratio(off["ttft_p50_s"], on["ttft_p50_s"]),
            "throughput_ratio_reuse_over_no_reuse": _ratio(on["output_tokens_per_s"], off["output_tokens_per_s"]),
        }
    return {
        "trace": "tau-bench",
        "conversations": len(conversations),
        "turns": sum(len(c) for c in conversations),
        "max_tokens": max_tokens,
        "cells": cells,
        "summary": summary,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None
