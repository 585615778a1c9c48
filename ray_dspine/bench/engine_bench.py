"""`ray-dspine bench engine`: the embedded engine alone (no Ray), speculative vs autoregressive vs peer.

Method. The fixed prompt set (`prompts/engine.json`: open chat, code edits that repeat their input,
agent tool-call turns that repeat their context) is decoded greedily, each prompt by three decoders
back to back in the serving dtype so machine noise hits all three alike: our autoregressive path,
our speculative path, and transformers' own `generate(prompt_lookup_num_tokens=k)` as the peer
(k = `--peer-draft-tokens`: each side drafts at most the length the same study chose for it, in the
serving dtype, on prompts this bench does not report). Every decoder's torch work runs on the one
compute thread (compute.py).
tokens/s = output tokens / decode wall time, summed over the prompts of a group; the order of the
three rotates from prompt to prompt, and each figure is also given per CPU-second of this process
(`cpu_*`), which a busy shared machine disturbs far less than wall time. Then both of our
paths run again in fp32, where byte-identical greedy output is the contract (`greedy_identical`);
bf16's mismatches are counted and reported too (both dtypes always run).
Why a speedup is what it is: speedup = accept_length / step_cost_ratio, where step_cost_ratio is
(speculative seconds per verify step) / (autoregressive seconds per token); both are printed per category.
The decode time above includes the prefill before the first token, which both paths do alike; so
`decode_tokens_per_s` also gives each of our paths after it: (output tokens - 1) / (decode seconds -
seconds to the first chunk), summed over the prompts of a group, and `decode_speedup` their ratio. It
explains a speedup, it is not the speedup: a caller waits for the prefill too. (The peer's
`generate` does not stream, so it has no such figure.)
Interval: `speedup_ci` and `speedup_vs_peer_ci` are paired bootstraps over the prompts
(stats.paired_cluster_ratio_ci, 1,000 resamples, seed 0) on the autoregressive path's or the peer's seconds
over our speculative path's, theirs scaled to our output tokens on each prompt (two greedy decodes may stop
at different lengths), for all prompts and per category; a goal is met when the low end clears it. A
category's interval rests on its 4 report prompts.
The prompt-set engines run without prefix reuse (each prompt is decoded from scratch, as the peer does).
Then the multi-turn agent scenario (engine_agent.py): tau-bench conversations turn by turn, TTFT and
throughput at each concurrency, with and without prefix reuse, in the serving dtype.
Batching (`concurrency` in the result): the same prompts, greedy, in the serving dtype, at
concurrency 1 and 4, closed loop (each of the c workers decodes every prompt once, worker w starting
at prompt w and going round, each starting its next request when the last one ends: c requests in
flight until the workers' last ones, c x prompts requests in the cell), on the batched engine (the
default `max_batch_requests`) and the unbatched one (`max_batch_requests = 1`), cells interleaved
(c1 unbatched, c1 batched, c4 batched, c4 unbatched) so machine noise hits both alike. Aggregate output tokens/s = output tokens of the cell / its wall
seconds (and per CPU-second); the ratio is batched / unbatched at the same concurrency. The exact
reference is each prompt decoded alone (unbatched, concurrency 1); a cell's greedy mismatches are
the requests whose text differs from it. In fp32 (the default) the unbatched cells must have none;
in bf16 a block verify rounds differently from shorter blocks, so timing-dependent draft lengths
alone can change a greedy token and even the unbatched cells may count some.
`--row-exact`: every bf16 engine of the bench (serving dtype or the identity run) runs with config
`row_exact` (batch.py rule `row exact`), so `bf16_greedy_mismatches` and the bf16 batching cells count
what is left of bf16's mismatches under it (`bf16_row_exact` in the result says which ran).
Receipt: with `--json` the result opens with `command_line`, `device_name` (the CPU's model name and the
cores this process may use) and `git` (commit and dirty flag of the checkout).
"""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import statistics
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np

from ..engines.embedded import compute
from ..engines.embedded.config import EmbeddedEngineConfig
from ..engines.embedded.engine import EmbeddedEngine
from ..engines.embedded.model import load_model
from ..engines.protocol import ChatMessage, GenerateRequest
from .engine_agent import load_conversations, run_agent_scenario
from .receipt import cpu_name, git_state
from .stats import paired_cluster_ratio_ci

# The peer's draft length per dtype: its fastest of 8, 16 and 32 on the tuning prompts, by the same study that
# chose our engine's num_draft_tokens (32 in both dtypes; docs/results/embedded-engine.md, "How long a draft
# may be" for fp32, "bf16, with the weights packed once" for bf16).
PEER_DRAFT_TOKENS = {"fp32": 16, "bf16": 32}
# The report set: the shipped prompts whose `set` is "report" (8 per category). The others ("tuning", 2 per
# category) are the prompts the engine's settings were chosen on (docs/results/embedded-engine.md), so a report
# never decodes a prompt any choice has seen.
REPORT_PROMPTS = 24


def load_prompts(limit: int, which: str = "report") -> list[dict]:
    """The first `limit` prompts of set `which` ("report", "tuning" or "all"), round-robin over the categories in
    the file's order (so any limit keeps them balanced), each category's prompts in the file's order."""
    data = json.loads(resources.files("ray_dspine.bench.prompts").joinpath("engine.json").read_text())
    by_category: dict[str, list[dict]] = {}
    for prompt in data["prompts"]:
        by_category.setdefault(prompt["category"], []).append(prompt)
    ordered = [p for group in zip(*by_category.values()) for p in group]
    return [p for p in ordered if which in ("all", p["set"])][:limit]


async def _decode(engine: EmbeddedEngine, messages: list[dict], max_tokens: int, request_id: str):
    request = GenerateRequest(
        request_id=request_id,
        messages=[ChatMessage(**m) for m in messages],
        max_tokens=max_tokens,
        temperature=0.0,
        clamp_max_tokens=True,
    )
    parts, usage, first_s = [], None, None
    start, cpu_start = time.perf_counter(), time.process_time()
    async for chunk in engine.generate(request):
        if first_s is None:
            first_s = time.perf_counter() - start
        parts.append(chunk.text)
        usage = chunk.usage or usage
    return "".join(parts), usage, time.perf_counter() - start, time.process_time() - cpu_start, first_s


def _peer_decode(loaded, messages: list[dict], max_tokens: int, num_draft_tokens: int):
    """transformers' prompt lookup on one prompt, on the compute thread like our engines' steps (compute.py):
    (output tokens, wall seconds, CPU seconds of the process)."""
    return compute.run(_peer_generate, loaded, messages, max_tokens, num_draft_tokens)


def _peer_generate(loaded, messages: list[dict], max_tokens: int, num_draft_tokens: int):
    import torch

    from ..engines.embedded.prompt import render_prompt

    request = GenerateRequest(request_id="peer", messages=[ChatMessage(**m) for m in messages], max_tokens=max_tokens)
    ids = torch.tensor([render_prompt(loaded.tokenizer, request)])
    start, cpu_start = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        out = loaded.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_tokens,
            do_sample=False,
            prompt_lookup_num_tokens=num_draft_tokens,
            pad_token_id=loaded.tokenizer.eos_token_id,
        )
    return int(out.shape[1] - ids.shape[1]), time.perf_counter() - start, time.process_time() - cpu_start


def _engine(config: EmbeddedEngineConfig, loaded) -> EmbeddedEngine:
    return EmbeddedEngine(config, loader=lambda _config: loaded)


def _config(dtype: str, row_exact: bool, **fields) -> EmbeddedEngineConfig:
    """The bench's engine settings in `dtype`; `row_exact` applies to bf16 only (fp32 runs as it is)."""
    return EmbeddedEngineConfig(dtype=dtype, row_exact=row_exact and dtype == "bf16", **fields)


async def _run_dtype(
    dtype: str,
    prompts: list[dict],
    max_tokens: int,
    num_draft_tokens: int,
    peer_tokens: int | None,
    progress,
    row_exact: bool = False,
):
    """Our AR and speculative engines on every prompt, and the peer at `peer_tokens` (None: no peer)."""
    base = _config(dtype, row_exact, num_draft_tokens=num_draft_tokens, max_running_requests=1, prefix_reuse=False)
    loaded = await compute.call(load_model, base)
    ar = _engine(base.model_copy(update={"speculative": False}), loaded)
    spec = _engine(base, loaded)
    await ar.start()
    await spec.start()
    warmup = prompts[0]["messages"]
    for _ in range(2):  # untimed: first calls allocate caches and warm the kernels
        await _decode(ar, warmup, 16, "warmup-ar")
        await _decode(spec, warmup, 16, "warmup-spec")
        if peer_tokens is not None:
            _peer_decode(loaded, warmup, 16, peer_tokens)
    rows = []
    for i, prompt in enumerate(prompts):
        messages = prompt["messages"]
        runs = {
            "ar": lambda: _decode(ar, messages, max_tokens, f"ar-{i}"),
            "spec": lambda: _decode(spec, messages, max_tokens, f"spec-{i}"),
        }
        if peer_tokens is not None:
            runs["peer"] = lambda: _peer_decode(loaded, messages, max_tokens, peer_tokens)
        order = list(runs)
        order = order[i % len(order) :] + order[: i % len(order)]  # rotate who goes first
        results = {}
        for name in order:
            outcome = runs[name]()
            results[name] = await outcome if asyncio.iscoroutine(outcome) else outcome
        ar_text, ar_usage, row_ar_s, row_ar_cpu, row_ar_first = results["ar"]
        spec_text, spec_usage, row_spec_s, row_spec_cpu, row_spec_first = results["spec"]
        row = {
            "category": prompt["category"],
            "ar_tokens": ar_usage.completion_tokens,
            "ar_s": row_ar_s,
            "ar_cpu": row_ar_cpu,
            "ar_first_s": row_ar_first,
            "spec_tokens": spec_usage.completion_tokens,
            "spec_s": row_spec_s,
            "spec_cpu": row_spec_cpu,
            "spec_first_s": row_spec_first,
            "spec_verify_steps": spec_usage.verify_steps,
            "accept_length": spec_usage.accept_length,
            "identical": ar_text == spec_text,
        }
        if peer_tokens is not None:
            row["peer_tokens"], row["peer_s"], row["peer_cpu"] = results["peer"]
        rows.append(row)
        progress(f"{dtype} prompt {i + 1}/{len(prompts)} ({prompt['category']}): accept {spec_usage.accept_length:.2f}")
    await ar.stop()
    await spec.stop()
    del ar, spec, loaded
    gc.collect()
    return rows


def _rate(rows: list[dict], key: str, clock: str = "s") -> float | None:
    if not rows or f"{key}_{clock}" not in rows[0]:
        return None
    seconds = sum(r[f"{key}_{clock}"] for r in rows)
    return round(sum(r[f"{key}_tokens"] for r in rows) / seconds, 2) if seconds else None


def _decode_rate(rows: list[dict], key: str) -> float | None:
    """Output tokens after the first per second after the first chunk, summed over `rows` (docstring)."""
    if not rows or any(r.get(f"{key}_first_s") is None for r in rows):
        return None
    seconds = sum(r[f"{key}_s"] - r[f"{key}_first_s"] for r in rows)
    tokens = sum(r[f"{key}_tokens"] - 1 for r in rows)
    return round(tokens / seconds, 2) if seconds > 0 else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def paired_interval(rows: list[dict], baseline: str) -> dict | None:
    """95% paired bootstrap interval on our speculative path over `baseline` ("ar" or "peer"; module docstring,
    `Interval`); None without that baseline or with fewer than 2 prompts."""
    if len(rows) < 2 or f"{baseline}_s" not in rows[0]:
        return None
    pairs = [(str(i), r["spec_s"], r[f"{baseline}_s"] * r["spec_tokens"] / max(1, r[f"{baseline}_tokens"]))
             for i, r in enumerate(rows)]  # fmt: skip
    ci = paired_cluster_ratio_ci(pairs, np.random.default_rng(0), stat="mean")
    return {"estimate": round(ci.estimate, 3), "low": round(ci.low, 3), "high": round(ci.high, 3), "confidence": 0.95}


def _figures(serving: list[dict], fp32: list[dict], bf16: list[dict], dtype: str) -> dict:
    ar, spec, peer = _rate(serving, "ar"), _rate(serving, "spec"), _rate(serving, "peer")
    cpu_ar, cpu_spec, cpu_peer = (_rate(serving, key, "cpu") for key in ("ar", "spec", "peer"))
    decode_ar, decode_spec = _decode_rate(serving, "ar"), _decode_rate(serving, "spec")
    accepts = [r["accept_length"] for r in serving]
    ar_s_per_token = sum(r["ar_s"] for r in serving) / max(1, sum(r["ar_tokens"] for r in serving))
    spec_s_per_step = sum(r["spec_s"] for r in serving) / max(1, sum(r["spec_verify_steps"] for r in serving))
    return {
        "prompts": len(serving),
        "ar_tokens_per_s": ar,
        "spec_tokens_per_s": spec,
        "speedup": _ratio(spec, ar),
        "speedup_ci": paired_interval(serving, "ar"),
        "peer_tokens_per_s": peer,
        "speedup_vs_peer": _ratio(spec, peer),
        "speedup_vs_peer_ci": paired_interval(serving, "peer"),
        "cpu_tokens_per_s": {"ar": cpu_ar, "spec": cpu_spec, "peer": cpu_peer},
        "cpu_speedup": _ratio(cpu_spec, cpu_ar),
        "cpu_speedup_vs_peer": _ratio(cpu_spec, cpu_peer),
        "decode_tokens_per_s": {"ar": decode_ar, "spec": decode_spec},
        "decode_speedup": _ratio(decode_spec, decode_ar),
        "accept_length_mean": round(statistics.fmean(accepts), 3),
        "accept_length_p50": round(statistics.median(accepts), 3),
        "step_cost_ratio": round(spec_s_per_step / ar_s_per_token, 3),
        "greedy_identical": sum(r["identical"] for r in fp32),
        "bf16_greedy_mismatches": sum(not r["identical"] for r in bf16),
        "dtype": {"throughput": dtype, "greedy_identical": "fp32"},
    }


async def _run_agent(dtype: str, num_draft_tokens: int, agent: dict, progress, row_exact: bool = False) -> dict:
    conversations = agent["conversations"]
    base = _config(dtype, row_exact, num_draft_tokens=num_draft_tokens)
    loaded = await compute.call(load_model, base)
    result = await run_agent_scenario(
        loaded, base, conversations, tuple(agent["concurrency"]), agent["max_tokens"], progress
    )
    del loaded
    gc.collect()
    return result


BATCH_CONCURRENCY = (1, 4)


async def _batching_cell(engine: EmbeddedEngine, prompts: list[dict], max_tokens: int, concurrency: int, tag: str):
    """Closed loop at `concurrency`: worker w decodes every prompt once, starting at prompt w and going round,
    so `concurrency` requests are in flight until the workers' last requests (concurrency x prompts in all)."""
    texts: dict[tuple[int, int], str] = {}
    tokens = 0

    async def worker(w: int) -> None:
        nonlocal tokens
        for step in range(len(prompts)):
            index = (w + step) % len(prompts)
            messages = prompts[index]["messages"]
            text, usage, _s, _cpu, _first = await _decode(engine, messages, max_tokens, f"{tag}-{w}-{index}")
            texts[w, index] = text
            tokens += usage.completion_tokens if usage is not None else 0  # an error chunk carries none

    start, cpu_start = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    figures = {
        "requests": len(texts),
        "output_tokens": tokens,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "tokens_per_s": round(tokens / wall, 2) if wall else None,
        "cpu_tokens_per_s": round(tokens / cpu, 2) if cpu else None,
    }
    return texts, figures


async def _run_batching(
    dtype: str, prompts: list[dict], max_tokens: int, num_draft_tokens: int, progress, row_exact: bool = False
) -> dict:
    """Batched vs unbatched engine at each BATCH_CONCURRENCY, same prompts (module docstring, `Batching`)."""
    top = max(BATCH_CONCURRENCY)
    base = _config(dtype, row_exact, num_draft_tokens=num_draft_tokens, max_running_requests=top, prefix_reuse=False)
    loaded = await compute.call(load_model, base)
    engines = {
        "batched": _engine(base, loaded),
        "unbatched": _engine(base.model_copy(update={"max_batch_requests": 1}), loaded),
    }
    for engine in engines.values():
        await engine.start()
        for _ in range(2):  # untimed warm-up, a batched step included
            await asyncio.gather(*(_decode(engine, prompts[0]["messages"], 16, f"warmup-{i}") for i in range(2)))
    cells: dict[str, dict] = {}
    texts: dict[tuple[int, str], dict[tuple[int, int], str]] = {}
    for position, concurrency in enumerate(BATCH_CONCURRENCY):
        order = ("unbatched", "batched") if position % 2 == 0 else ("batched", "unbatched")
        for name in order:
            tag = f"c{concurrency}-{name}"
            texts[concurrency, name], figures = await _batching_cell(
                engines[name], prompts, max_tokens, concurrency, tag
            )
            cells.setdefault(f"c{concurrency}", {})[name] = figures
            progress(f"batching {tag}: {figures['tokens_per_s']} tok/s")
    for engine in engines.values():
        await engine.stop()
    reference = {index: text for (_w, index), text in texts[min(BATCH_CONCURRENCY), "unbatched"].items()}
    for concurrency in BATCH_CONCURRENCY:
        cell = cells[f"c{concurrency}"]
        for name in engines:
            decoded = texts[concurrency, name]
            cell[name]["greedy_mismatches"] = sum(text != reference[index] for (_w, index), text in decoded.items())
        cell["ratio_batched_over_unbatched"] = _ratio(
            cell["batched"]["tokens_per_s"], cell["unbatched"]["tokens_per_s"]
        )
        cell["cpu_ratio_batched_over_unbatched"] = _ratio(
            cell["batched"]["cpu_tokens_per_s"], cell["unbatched"]["cpu_tokens_per_s"]
        )
    del engines, loaded
    gc.collect()
    return {
        "dtype": dtype,
        "prompts": len(prompts),
        "max_tokens": max_tokens,
        "max_batch_requests": base.max_batch_requests,
        "cells": cells,
        "greedy_mismatches_batched": sum(cells[f"c{c}"]["batched"]["greedy_mismatches"] for c in BATCH_CONCURRENCY),
        "greedy_mismatches_unbatched": sum(
            cells[f"c{c}"]["unbatched"]["greedy_mismatches"] for c in BATCH_CONCURRENCY
        ),
    }


def run_engine_bench(
    num_prompts: int,
    max_tokens: int,
    num_draft_tokens: int,
    dtype: str,
    progress=None,
    agent: dict | None = None,
    peer_draft_tokens: int | None = None,
    row_exact: bool = False,
) -> dict:
    """agent: {conversations (load_conversations' lists of turns), max_tokens, concurrency: [..]} or None to skip the
    scenario;
    peer_draft_tokens None: the peer's tuned length in `dtype` (PEER_DRAFT_TOKENS); row_exact: every bf16 engine
    of the bench runs with config `row_exact` (fp32 ones as they are)."""
    progress = progress or (lambda message: print(message, file=sys.stderr, flush=True))
    if peer_draft_tokens is None:
        peer_draft_tokens = PEER_DRAFT_TOKENS[dtype]
    prompts = load_prompts(num_prompts)
    serving = asyncio.run(
        _run_dtype(dtype, prompts, max_tokens, num_draft_tokens, peer_draft_tokens, progress, row_exact)
    )
    other_dtype = "bf16" if dtype == "fp32" else "fp32"
    other = asyncio.run(_run_dtype(other_dtype, prompts, max_tokens, num_draft_tokens, None, progress, row_exact))
    by_dtype = {dtype: serving, other_dtype: other}
    fp32, bf16 = by_dtype["fp32"], by_dtype["bf16"]
    result = _figures(serving, fp32, bf16, dtype)
    result["bf16_row_exact"] = row_exact
    result[f"{other_dtype}_tokens_per_s"] = {"ar": _rate(other, "ar"), "spec": _rate(other, "spec")}
    result["max_tokens"] = max_tokens
    result["num_draft_tokens"] = num_draft_tokens
    result["peer_draft_tokens"] = peer_draft_tokens
    result["per_category"] = {}
    for category in dict.fromkeys(p["category"] for p in prompts):
        pick = lambda rows: [r for r in rows if r["category"] == category]  # noqa: E731
        result["per_category"][category] = _figures(pick(serving), pick(fp32), pick(bf16), dtype)
    result["concurrency"] = asyncio.run(
        _run_batching(dtype, prompts, max_tokens, num_draft_tokens, progress, row_exact)
    )
    if agent is not None:
        result["agent"] = asyncio.run(_run_agent(dtype, num_draft_tokens, agent, progress, row_exact))
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def register(subparsers) -> None:
    parser = subparsers.add_parser("engine", help="benchmark the embedded engine alone: speculative vs autoregressive vs peer")
    parser.add_argument(
        "--prompts", type=int, default=REPORT_PROMPTS,
        help=f"prompts of the report set, balanced by category (default and most: {REPORT_PROMPTS}; the rest of "
        "the shipped list tunes the engine's settings and is never reported)",
    )
    parser.add_argument("--max-tokens", type=int, default=128, help="output tokens per prompt at most")
    parser.add_argument(
        "--num-draft-tokens", type=int, default=EmbeddedEngineConfig.model_fields["num_draft_tokens"].default,
        help="most tokens our engine drafts per step (default: the engine's num_draft_tokens)",
    )
    parser.add_argument(
        "--peer-draft-tokens", type=int, default=None,
        help="tokens the peer drafts per step (default: its fastest on the tuning prompts in the chosen dtype, "
        f"{PEER_DRAFT_TOKENS['fp32']} in fp32 and {PEER_DRAFT_TOKENS['bf16']} in bf16, as 32 is ours in both)",
    )
    parser.add_argument(
        "--dtype", choices=["bf16", "fp32"], default="fp32",
        help="serving dtype, timed against the peer (the other dtype runs too, for its greedy mismatches)",
    )
    parser.add_argument(
        "--row-exact", action="store_true",
        help="run every bf16 engine with row_exact (each token's logits the bits it gets decoded alone), so bf16's "
        "greedy mismatches count what is left of them",
    )
    parser.add_argument(
        "--agent-conversations", type=int, default=4,
        help="tau-bench conversations in the multi-turn agent scenario (0: skip it)",
    )
    parser.add_argument("--agent-turns", type=int, default=3, help="assistant turns per conversation at most")
    parser.add_argument("--agent-max-tokens", type=int, default=32, help="output tokens per agent turn at most")
    parser.add_argument(
        "--agent-concurrency", default="1,4", help="comma-separated concurrencies (conversations in flight)"
    )
    parser.add_argument("--traces-dir", default=None, help="folder holding tau-bench/ (default: the house traces dir)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.set_defaults(func=_main)


def _main(args) -> int:
    if args.prompts < 1 or args.max_tokens < 1:
        print("ray-dspine bench engine: --prompts and --max-tokens must be at least 1", file=sys.stderr)
        return 2
    if args.prompts > REPORT_PROMPTS:
        print(f"ray-dspine bench engine: --prompts is at most {REPORT_PROMPTS}, the report set; the tuning prompts "
              "chose the engine's settings, so figures on them would not be held out", file=sys.stderr)
        return 2
    for flag, value in (("--num-draft-tokens", args.num_draft_tokens), ("--peer-draft-tokens", args.peer_draft_tokens)):
        if value is not None and not 1 <= value <= 64:
            print(f"ray-dspine bench engine: {flag} must be between 1 and 64 (the engine's num_draft_tokens range)",
                  file=sys.stderr)
            return 2
    agent = None
    if args.agent_conversations > 0:
        try:
            concurrency = [int(c) for c in args.agent_concurrency.split(",") if c.strip()]
        except ValueError:
            concurrency = []
        if not concurrency or min(concurrency) < 1 or args.agent_turns < 1 or args.agent_max_tokens < 1:
            print("ray-dspine bench engine: --agent-concurrency, --agent-turns and --agent-max-tokens must be "
                  "positive", file=sys.stderr)
            return 2
        try:  # before any model is loaded: a wrong folder should not cost the minutes of the prompt set first
            conversations = load_conversations(
                args.agent_conversations, args.agent_turns, Path(args.traces_dir) if args.traces_dir else None
            )
        except (OSError, ValueError) as exc:
            print(f"ray-dspine bench engine: --traces-dir: cannot read the tau-bench trace: {exc}", file=sys.stderr)
            return 2
        agent = {"conversations": conversations, "max_tokens": args.agent_max_tokens, "concurrency": concurrency}
    result = run_engine_bench(
        args.prompts, args.max_tokens, args.num_draft_tokens, args.dtype, agent=agent,
        peer_draft_tokens=args.peer_draft_tokens, row_exact=args.row_exact,
    )
    if args.json:  # a receipt: what ran, on which machine, at which commit
        provenance = {
            "command_line": " ".join(["ray-dspine", *sys.argv[1:]]),
            "device_name": cpu_name(),
            "git": git_state().model_dump(),
        }
        print(json.dumps({**provenance, **result}, indent=2))
        return 0
    print(
        f"{'category':<10} {'ar tok/s':>9} {'spec tok/s':>10} {'peer tok/s':>10} {'speedup':>8} {'vs peer':>8} "
        f"{'cpu spdup':>9} {'cpu vs peer':>11} {'decode spdup':>12} {'accept':>7} {'step cost':>9} {'identical':>9}"
    )
    rows = [("all", result)] + list(result["per_category"].items())
    for name, fig in rows:
        print(
            f"{name:<10} {fig['ar_tokens_per_s']:>9} {fig['spec_tokens_per_s']:>10} {fig['peer_tokens_per_s']:>10} "
            f"{fig['speedup']:>8} {fig['speedup_vs_peer']:>8} {fig['cpu_speedup']:>9} {fig['cpu_speedup_vs_peer']:>11} "
            f"{str(fig['decode_speedup']):>12} "
            f"{fig['accept_length_mean']:>7} {fig['step_cost_ratio']:>9} "
            f"{fig['greedy_identical']:>5}/{fig['prompts']}"
        )
    for name, fig in rows:
        intervals = (("over autoregressive", fig.get("speedup_ci")), ("over the peer", fig.get("speedup_vs_peer_ci")))
        spans = [f"{label} {ci['low']}-{ci['high']}" for label, ci in intervals if ci]
        if spans:
            print(f"{name}: speculative, 95% paired intervals over the prompts: {', '.join(spans)}")
    _print_batching(result["concurrency"])
    if "agent" in result:
        _print_agent(result["agent"])
    bf16 = "bf16 row exact" if result["bf16_row_exact"] else "bf16"
    print(
        f"greedy output speculative vs autoregressive: fp32 {result['greedy_identical']}/{result['prompts']} "
        f"identical, {bf16} {result['bf16_greedy_mismatches']} mismatches"
    )
    print(
        f"peak RSS {result['peak_rss_mb']} MB; throughput in {bf16 if args.dtype == 'bf16' else 'fp32'}, identity "
        f"in fp32; drafts of at most {result['num_draft_tokens']} tokens (ours) and {result['peer_draft_tokens']} (peer)"
    )
    return 0


def _print_agent(agent: dict) -> None:
    print(
        f"\nagent turns: tau-bench, {agent['conversations']} conversations, {agent['turns']} turns, "
        f"<= {agent['max_tokens']} tokens each"
    )
    print(f"{'cell':<14} {'ttft p50 s':>10} {'ttft p90 s':>10} {'tok/s':>7} {'cpu tok/s':>9} {'cached':>7} {'refused':>7}")
    for name, cell in agent["cells"].items():
        print(
            f"{name:<14} {cell['ttft_p50_s']:>10} {cell['ttft_p90_s']:>10} {cell['output_tokens_per_s']:>7} "
            f"{cell['cpu_output_tokens_per_s']:>9} {cell['cached_prompt_share']:>7} {cell['refused']:>7}"
        )
    for name, figures in agent["summary"].items():
        print(
            f"{name}: ttft p50 no-reuse / reuse = {figures['ttft_p50_ratio_no_reuse_over_reuse']}x, "
            f"throughput reuse / no-reuse = {figures['throughput_ratio_reuse_over_no_reuse']}x"
        )


def _print_batching(batching: dict) -> None:
    print(
        f"\nbatching: {batching['prompts']} prompts, <= {batching['max_tokens']} tokens, {batching['dtype']}, "
        f"batched = max_batch_requests {batching['max_batch_requests']}, unbatched = 1"
    )
    print(
        f"{'concurrency':<12} {'unbatched tok/s':>15} {'batched tok/s':>13} {'ratio':>6} {'cpu ratio':>9} "
        f"{'unbatched wall s':>16} {'batched wall s':>14} {'mismatches b/u':>14}"
    )
    for name, cell in batching["cells"].items():
        b, u = cell["batched"], cell["unbatched"]
        print(
            f"{name:<12} {u['tokens_per_s']:>15} {b['tokens_per_s']:>13} {cell['ratio_batched_over_unbatched']:>6} "
            f"{cell['cpu_ratio_batched_over_unbatched']:>9} {u['wall_s']:>16} {b['wall_s']:>14} "
            f"{b['greedy_mismatches']:>8}/{u['greedy_mismatches']}"
        )
