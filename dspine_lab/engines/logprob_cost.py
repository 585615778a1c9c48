"""What does asking for log-probabilities cost a request on the embedded engine? Each prompt decoded with and
without them, side by side.

Rules:
  variants: `off` (no log-probabilities), `logprobs` (the chosen token's only) and `top<N>` (with N alternatives,
            N = --top), each on the same engine and loaded model: greedy, speculation on, prefix reuse off, one
            request at a time, the same max_tokens.
  order:    each round decodes every prompt under every variant back to back, the variants' order rotating
            from prompt to prompt and round to round, so machine noise falls on all alike. A first untimed
            decode of the first prompt warms the engine.
  figures:  per variant, seconds summed over every round's decodes, and that sum over `off`'s; `same_text`
            says whether every variant's answer equals `off`'s on every prompt (log-probabilities must not
            change what is decoded).
Parameters: prompts: the bench's list in its order (load_prompts, both sets), the first 6 by default.
Complexity: rounds x prompts x 3 decodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from ray_dspine.bench.receipt import cpu_name


def variants(top: int) -> dict[str, dict]:
    """Rule `variants`: each variant's request fields."""
    return {"off": {}, "logprobs": {"logprobs": True}, f"top{top}": {"logprobs": True, "top_logprobs": top}}


def measure(loaded, config, prompts: list[dict], max_tokens: int, top: int, rounds: int, clock=time.perf_counter):
    """Rules `order` and `figures`: {seconds: {variant: s}, ratio: {variant: s / off's}, same_text: bool}."""
    from ray_dspine.engines.embedded.engine import EmbeddedEngine
    from ray_dspine.engines.protocol import ChatMessage, GenerateRequest

    asked = variants(top)
    names = list(asked)

    async def run() -> tuple[dict[str, float], bool]:
        engine = EmbeddedEngine(config, loader=lambda _c: loaded)
        await engine.start()
        seconds = dict.fromkeys(names, 0.0)
        texts: dict[tuple[str, int], str] = {}

        async def decode(prompt: dict, fields: dict, request_id: str) -> str:
            request = GenerateRequest(request_id=request_id, messages=[ChatMessage(**m) for m in prompt["messages"]],
                                      max_tokens=max_tokens, temperature=0.0, **fields)  # fmt: skip
            return "".join([chunk.text async for chunk in engine.generate(request)])

        try:
            await decode(prompts[0], {}, "warmup")
            for round_ in range(rounds):
                for i, prompt in enumerate(prompts):
                    shift = (i + round_) % len(names)
                    for name in names[shift:] + names[:shift]:
                        started = clock()
                        texts[name, i] = await decode(prompt, asked[name], f"{name}-{round_}-{i}")
                        seconds[name] += clock() - started
        finally:
            await engine.stop()
        same = all(texts[name, i] == texts["off", i] for name in names for i in range(len(prompts)))
        return seconds, same

    seconds, same = asyncio.run(run())
    base = seconds["off"]
    return {
        "seconds": {name: round(value, 3) for name, value in seconds.items()},
        "ratio": {name: round(value / base, 3) if base else None for name, value in seconds.items()},
        "same_text": same,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dspine_lab.engines.logprob_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=6, help="prompts of the bench's list, in order (default 6)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per answer (default 64)")
    parser.add_argument("--top", type=int, default=20, help="alternatives of the `top` variant, 1 to 20 (default 20)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the prompts (default 2)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if min(args.prompts, args.max_tokens, args.rounds) < 1:
        parser.error("--prompts, --max-tokens and --rounds must be at least 1")
    if not 1 <= args.top <= 20:
        parser.error("--top must be between 1 and 20 (OpenAI's top_logprobs range)")

    from ray_dspine.bench.engine_bench import load_prompts
    from ray_dspine.engines.embedded import compute
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.model import load_model

    config = EmbeddedEngineConfig(dtype="fp32", max_running_requests=1, prefix_reuse=False)
    loaded = compute.run(load_model, config)
    figures = measure(loaded, config, load_prompts(args.prompts, "all"), args.max_tokens, args.top, args.rounds)
    result = {
        "command_line": " ".join(["python -m dspine_lab.engines.logprob_cost", *(argv if argv is not None else sys.argv[1:])]),
        "device_name": cpu_name(),
        "prompts": args.prompts,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        **figures,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for name, seconds in figures["seconds"].items():
        print(f"MEASURED {name}: {seconds:.2f} s, {figures['ratio'][name]:.3f}x the seconds without log-probabilities")
    print(f"answers identical across variants: {figures['same_text']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
