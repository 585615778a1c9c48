"""Choose the embedded engine's `draft_prior_weight` on tuning prompts that `bench engine` never reports.

What it answers: how many pseudo-trials of the engine's pooled acceptance (draft_policy.py rule `prior`)
a new request should start from. The report set of `ray-dspine bench engine --prompts 6` is the first
6 prompts of the shipped list in its round-robin order; this study decodes the next ones (the tuning
set, 2 of each category by default) and never those 6.

Rules:
  run:     one speculative engine per candidate weight w and one autoregressive engine share one loaded
           model; every tuning prompt is decoded greedily by each engine in turn (the order rotated per
           prompt, as `bench engine` does), `rounds` times, after an untimed warm-up. Each engine keeps
           its pooled counts across prompts, as a serving replica does.
  figures: per w and category, output tokens / wall seconds over that category's decodes, and the
           speedup over the autoregressive engine's rate on the same decodes; overall likewise.
  choice:  the w with the highest overall speculative rate among those whose chat speedup is at least
           `chat_floor` (the engine's goal that speculation never loses on chat); none qualifying -> 0.
Parameters: weights >= 0; rounds >= 1; prompts: how many of the list after the report set (even split by
category). Complexity: (len(weights) + 1) * rounds * prompts decodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

REPORT_PROMPTS = 6  # `bench engine --prompts 6`: never decoded here


def tuning_prompts(count: int) -> list[dict]:
    from ray_dspine.bench.engine_bench import load_prompts

    prompts = load_prompts(REPORT_PROMPTS + count)[REPORT_PROMPTS:]
    if len(prompts) < count:
        raise ValueError(f"only {len(prompts)} prompts follow the report set; ask for at most that many")
    return prompts


def choose_weight(rates: dict[float, dict[str, float]], ar_rates: dict[str, float], chat_floor: float) -> float:
    """Rule `choice`: rates[w][category or "overall"] tokens/s; the chat floor on rates[w]["chat"] / ar["chat"]."""
    allowed = [w for w, r in rates.items() if "chat" not in ar_rates or r["chat"] / ar_rates["chat"] >= chat_floor]
    if not allowed:
        return 0.0
    return max(allowed, key=lambda w: (rates[w]["overall"], -w))


async def _run(weights: list[float], rounds: int, prompts: list[dict], max_tokens: int, progress) -> dict:
    from ray_dspine.bench.engine_bench import _decode, _engine
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.model import load_model

    base = EmbeddedEngineConfig(dtype="fp32", max_running_requests=1, prefix_reuse=False)
    loaded = load_model(base)
    engines = {"ar": _engine(base.model_copy(update={"speculative": False}), loaded)}
    for w in weights:
        engines[f"w={w:g}"] = _engine(base.model_copy(update={"draft_prior_weight": w}), loaded)
    for engine in engines.values():
        await engine.start()
        await _decode(engine, prompts[0]["messages"], 16, "warmup")
    tokens: dict[tuple[str, str], int] = {}
    seconds: dict[tuple[str, str], float] = {}
    names = list(engines)
    for r in range(rounds):
        for i, prompt in enumerate(prompts):
            shift = (r * len(prompts) + i) % len(names)
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                _text, usage, _s, _cpu = await _decode(
                    engines[name], prompt["messages"], max_tokens, f"{name}-{r}-{i}"
                )
                key = (name, prompt["category"])
                tokens[key] = tokens.get(key, 0) + (usage.completion_tokens if usage else 0)
                seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - started
            progress(f"round {r + 1}/{rounds}, prompt {i + 1}/{len(prompts)} ({prompt['category']})")
    for engine in engines.values():
        await engine.stop()
    categories = sorted({p["category"] for p in prompts})
    rates: dict[str, dict[str, float]] = {}
    for name in names:
        rates[name] = {c: tokens[name, c] / seconds[name, c] for c in categories}
        rates[name]["overall"] = sum(tokens[name, c] for c in categories) / sum(seconds[name, c] for c in categories)
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dspine_lab.engines.draft_prior_tuning", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--weights", default="0,2,4,8", help="candidate draft_prior_weight values (default 0,2,4,8)")
    parser.add_argument("--rounds", type=int, default=2, help="decodes of every prompt per engine (default 2)")
    parser.add_argument("--prompts", type=int, default=6, help="tuning prompts after the report set (default 6)")
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens per answer (default 96, as bench engine)")
    parser.add_argument("--chat-floor", type=float, default=0.97, help="least chat speedup a weight may have")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        weights = sorted({float(w) for w in args.weights.split(",") if w.strip()})
    except ValueError:
        parser.error("--weights must be comma-separated numbers, e.g. 0,2,4")
    if not weights or min(weights) < 0 or max(weights) > 64:
        parser.error("--weights must be between 0 and 64 (draft_prior_weight's range)")
    if args.rounds < 1 or args.prompts < 1 or args.max_tokens < 1 or args.chat_floor <= 0:
        parser.error("--rounds, --prompts and --max-tokens must be >= 1 and --chat-floor > 0")
    try:
        prompts = tuning_prompts(args.prompts)
    except ValueError as exc:
        parser.error(f"--prompts: {exc}")
    rates = asyncio.run(_run(weights, args.rounds, prompts, args.max_tokens, lambda m: print(m, file=sys.stderr)))
    ar = rates.pop("ar")
    by_weight = {w: rates[f"w={w:g}"] for w in weights}
    chosen = choose_weight(by_weight, ar, args.chat_floor)
    result = {
        "measured": "MEASURED, fp32, tuning prompts only",
        "command_line": " ".join(["python -m dspine_lab.engines.draft_prior_tuning", *(argv or sys.argv[1:])]),
        "tuning_prompts": [f"{REPORT_PROMPTS + j} ({p['category']})" for j, p in enumerate(prompts)],
        "ar_tokens_per_s": {c: round(v, 2) for c, v in ar.items()},
        "tokens_per_s": {f"{w:g}": {c: round(v, 2) for c, v in r.items()} for w, r in by_weight.items()},
        "speedup": {f"{w:g}": {c: round(v / ar[c], 3) for c, v in r.items()} for w, r in by_weight.items()},
        "chosen_weight": chosen,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    categories = [c for c in ar if c != "overall"] + ["overall"]
    print("MEASURED (fp32, tuning prompts): speculative / autoregressive output tokens/s")
    print(f"{'weight':>8} " + " ".join(f"{c:>10}" for c in categories))
    for w in weights:
        print(f"{w:>8g} " + " ".join(f"{result['speedup'][f'{w:g}'][c]:>9.3f}x" for c in categories))
    print(f"chosen draft_prior_weight: {chosen:g} (highest overall rate with chat >= {args.chat_floor}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
