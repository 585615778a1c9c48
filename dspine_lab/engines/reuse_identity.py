"""Does a prefix-cache hit change the engine's greedy output? Every prompt decoded cold and again on a warm cache.

What it answers: a hit starts the prefill where the cached blocks end, so the prefill chunks fall elsewhere
than in a decode from an empty cache. In fp32 that moves the last bits; in bf16 it can move more. How many
answers differ?

Rules:
  cold:   one engine with prefix_reuse off decodes every prompt once, in order (greedy, the same
          max_tokens each); those are the reference answers.
  warm:   one engine with prefix_reuse on decodes the prompts in order twice; the second pass finds the
          first pass's blocks cached (a prompt's own whole blocks, and any template prefix it shares).
  figures: per prompt, the second pass's cached prompt tokens (usage.cached_prompt_tokens) and whether its
          answer differs from the cold one; the count of differing answers. Both engines run the same
          settings otherwise (speculation on, one request at a time), on one loaded model.
Parameters: prompts: the bench's list in its order (load_prompts, both sets), the first 12 by default; dtype
and row_exact as the engine takes them (row_exact needs bf16).
Complexity: 3 decodes per prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from ray_dspine.bench.receipt import cpu_name


async def _answers(engine, prompts: list[dict], max_tokens: int, passes: int) -> list[tuple[str, int]]:
    from ray_dspine.engines.protocol import ChatMessage, GenerateRequest

    await engine.start()
    out = []
    try:
        for round_ in range(passes):
            for i, prompt in enumerate(prompts):
                request = GenerateRequest(
                    request_id=f"p{round_}-{i}", messages=[ChatMessage(**m) for m in prompt["messages"]],
                    max_tokens=max_tokens, temperature=0.0,
                )
                chunks = [c async for c in engine.generate(request)]
                out.append(("".join(c.text for c in chunks), chunks[-1].usage.cached_prompt_tokens))
    finally:
        await engine.stop()
    return out


def compare(loaded, config, prompts: list[dict], max_tokens: int) -> list[dict]:
    """Rules `cold`, `warm` and `figures`: one row per prompt, {cached_tokens, differs}."""
    from ray_dspine.engines.embedded.engine import EmbeddedEngine

    def engine(reuse: bool):
        return EmbeddedEngine(config.model_copy(update={"prefix_reuse": reuse}), loader=lambda _c: loaded)

    cold = asyncio.run(_answers(engine(False), prompts, max_tokens, 1))
    warm = asyncio.run(_answers(engine(True), prompts, max_tokens, 2))[len(prompts) :]
    return [{"cached_tokens": cached, "differs": text != reference} for (reference, _), (text, cached) in zip(cold, warm)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dspine_lab.engines.reuse_identity", description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--row-exact", action="store_true", help="the engine's row_exact (bf16 only)")
    parser.add_argument("--prompts", type=int, default=12, help="prompts of the bench's list, in order (default 12)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per answer (default 64)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.row_exact and args.dtype != "bf16":
        parser.error("--row-exact needs --dtype bf16 (the engine's row_exact is bf16 only)")
    if args.prompts < 1 or args.max_tokens < 1:
        parser.error("--prompts and --max-tokens must be at least 1")

    from ray_dspine.bench.engine_bench import load_prompts
    from ray_dspine.engines.embedded import compute
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.model import load_model

    prompts = load_prompts(args.prompts, "all")
    config = EmbeddedEngineConfig(dtype=args.dtype, row_exact=args.row_exact, max_running_requests=1)
    loaded = compute.run(load_model, config)
    rows = compare(loaded, config, prompts, args.max_tokens)
    result = {
        "command_line": " ".join(["python -m dspine_lab.engines.reuse_identity", *(argv if argv is not None else sys.argv[1:])]),
        "device_name": cpu_name(),
        "dtype": args.dtype,
        "row_exact": args.row_exact,
        "max_tokens": args.max_tokens,
        "prompts": [{"category": p["category"], **row} for p, row in zip(prompts, rows)],
        "differing": sum(row["differs"] for row in rows),
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    label = f"{args.dtype}{' row exact' if args.row_exact else ''}"
    print(f"MEASURED, {label}: {result['differing']} of {len(rows)} answers on a warm cache differ from the cold ones")
    for i, row in enumerate(result["prompts"]):
        print(f"  prompt {i} ({row['category']}): {row['cached_tokens']} cached tokens, {'differs' if row['differs'] else 'same'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
