"""Two embedded-engine settings under concurrency, side by side, on tuning prompts `bench engine` never reports.

What it answers: does a setting that only matters with several requests in flight (`mixed_chunk`,
`max_batch_requests`, ...) change the engine's output tokens/s? `bench engine`'s batching cell, run on two
engines that differ only in that setting, in alternating pairs.

Rules:
  run:      one loaded fp32 model; engines A and B from `bench engine`'s batching settings (fp32, prefix
            reuse off, max_running_requests = c) plus each variant's overrides, each warmed up with two
            requests at once. Then `pairs` pairs of `bench engine`'s closed-loop cell at concurrency c (each
            of the c workers decodes every tuning prompt once, worker w starting at prompt w), A first in
            even pairs and B first in odd ones, so a slow stretch of the shared machine hits both alike.
  figures:  per pair, each engine's output tokens / wall seconds and the ratio B / A. Over the pairs, the
            geometric mean of the ratios and its 95% interval, exp(mean(log r) +- t * sd(log r) / sqrt(P))
            with t the two-sided 97.5% quantile of Student's t with P - 1 degrees of freedom (`T_975`);
            B beats A when the interval's low end is above 1, loses when its high end is below 1, else
            the pairs cannot tell. `differing_texts`: requests (of P * c * prompts) whose greedy text from
            B differs from A's in the same pair (batching changes floating-point order, so a setting that
            changes who shares a forward may change a rare token).
Parameters: variants as NAME=FIELD:VALUE[;FIELD:VALUE] (draft_tuning.py's form; dtype stays fp32);
pairs in [2, 30]; concurrency >= 1; prompts: how many of the tuning prompts.
Complexity: 2 * pairs cells of concurrency * prompts decodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys

from dspine_lab.engines.draft_tuning import add_prompt_flags, parse_variant, tuning_prompts

# Two-sided 95% quantiles of Student's t by degrees of freedom (1..29).
T_975 = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
]


def paired_ratio_interval(ratios: list[float]) -> dict:
    """Geometric mean of the per-pair ratios and its 95% t interval (rule `figures`); at least 2 pairs."""
    if not 2 <= len(ratios) <= len(T_975) + 1 or min(ratios) <= 0:
        raise ValueError(f"need 2 to {len(T_975) + 1} positive ratios, got {ratios}")
    logs = [math.log(r) for r in ratios]
    mean, half = statistics.fmean(logs), T_975[len(logs) - 2] * statistics.stdev(logs) / math.sqrt(len(logs))
    low, high = math.exp(mean - half), math.exp(mean + half)
    verdict = "B faster" if low > 1 else "B slower" if high < 1 else "cannot tell"
    return {"geometric_mean": math.exp(mean), "low": low, "high": high, "verdict": verdict}


async def _run(variants: dict[str, dict], pairs: int, concurrency: int, prompts: list[dict], max_tokens: int, progress):
    from ray_dspine.bench.engine_bench import _batching_cell, _decode, _engine
    from ray_dspine.engines.embedded import compute
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.model import load_model

    base = EmbeddedEngineConfig(dtype="fp32", max_running_requests=max(concurrency, 1), prefix_reuse=False)
    loaded = await compute.call(load_model, base)
    engines = {name: _engine(base.model_copy(update=overrides), loaded) for name, overrides in variants.items()}
    for engine in engines.values():
        await engine.start()
        await asyncio.gather(*(_decode(engine, prompts[0]["messages"], 16, f"warmup-{i}") for i in range(2)))
    names = list(engines)
    rows, differing = [], 0
    for pair in range(pairs):
        texts, rates = {}, {}
        for name in names if pair % 2 == 0 else names[::-1]:
            tag = f"{name}-{pair}"
            texts[name], figures = await _batching_cell(engines[name], prompts, max_tokens, concurrency, tag)
            rates[name] = figures["tokens_per_s"]
            progress(f"pair {pair + 1}/{pairs} {name}: {rates[name]} tok/s")
        a, b = names
        differing += sum(texts[a][key] != texts[b][key] for key in texts[a])
        rows.append({"pair": pair, a: rates[a], b: rates[b], "ratio_b_over_a": rates[b] / rates[a]})
    for engine in engines.values():
        await engine.stop()
    return rows, differing


def main(argv: list[str] | None = None) -> int:
    prog = "python -m dspine_lab.engines.concurrency_ab"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--variant", dest="variants", action="append", required=True,
                        help="NAME=FIELD:VALUE[;FIELD:VALUE], exactly twice: A, then B")
    parser.add_argument("--pairs", type=int, default=4, help="alternating pairs of cells (default 4)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    add_prompt_flags(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if len(args.variants) != 2:
        parser.error("--variant: give exactly two, A and B")
    if not 2 <= args.pairs <= len(T_975) + 1 or args.concurrency < 1 or args.prompts < 1 or args.max_tokens < 1:
        parser.error(f"--pairs must be 2..{len(T_975) + 1}; --concurrency, --prompts and --max-tokens >= 1")
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig

    variants: dict[str, dict] = {}
    for text in args.variants:
        try:
            name, overrides = parse_variant(text)
            EmbeddedEngineConfig(**{"dtype": "fp32", **overrides})  # pydantic's ValidationError is a ValueError
        except ValueError as exc:
            parser.error(f"--variant {text!r}: {exc}")
        if name in variants or "dtype" in overrides:
            parser.error(f"--variant {text!r}: names must differ, and dtype stays fp32")
        variants[name] = overrides
    try:
        prompts = tuning_prompts(args.prompts)
    except ValueError as exc:
        parser.error(f"--prompts: {exc}")
    progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    rows, differing = asyncio.run(_run(variants, args.pairs, args.concurrency, prompts, args.max_tokens, progress))
    a, b = variants
    interval = paired_ratio_interval([row["ratio_b_over_a"] for row in rows])
    result = {
        "measured": "MEASURED, fp32, tuning prompts only",
        "command_line": " ".join([prog, *(argv if argv is not None else sys.argv[1:])]),
        "tuning_prompts": [f"tuning {j} ({p['category']})" for j, p in enumerate(prompts)],
        "concurrency": args.concurrency,
        "variants": {"A": {a: variants[a]}, "B": {b: variants[b]}},
        "pairs": [{k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()} for row in rows],
        "ratio_b_over_a": {k: round(v, 3) if isinstance(v, float) else v for k, v in interval.items()},
        "differing_texts": differing,
        "requests_per_engine": args.pairs * args.concurrency * len(prompts),
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"MEASURED (fp32, tuning prompts, concurrency {args.concurrency}): output tokens/s")
    for row in rows:
        print(f"  pair {row['pair'] + 1}: {a} {row[a]:.2f}, {b} {row[b]:.2f}, {b}/{a} {row['ratio_b_over_a']:.3f}")
    r = result["ratio_b_over_a"]
    print(f"{b}/{a}: {r['geometric_mean']}x (95% interval {r['low']} to {r['high']}): {r['verdict']}")
    print(f"greedy texts that differ between them: {differing} of {result['requests_per_engine']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
