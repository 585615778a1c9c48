"""Compare settings of the embedded engine's adaptive drafting on tuning prompts `bench engine` never reports.

What it answers: which of a few drafting settings (named config overrides, e.g. per-match acceptance on or
off, draft_policy.py rule `match`) decodes fastest, chosen on prompts that the report set of
`ray-dspine bench engine` does not contain: this study decodes the shipped list's tuning prompts (`set`
"tuning", 2 of each category) and never a report prompt.

Rules:
  run:     one speculative engine per variant and one autoregressive engine share one loaded model (fp32,
           or bf16 with `--dtype bf16`: the dtype is the study's, never a variant's),
           and so does the peer, transformers' `generate(prompt_lookup_num_tokens=k)`, once per k of
           `peer_tokens` (arms `peer-k<k>`); every tuning prompt is decoded greedily by each arm in turn
           (the order rotated per prompt, as `bench engine` does), `rounds` times, after an untimed
           warm-up. Each engine keeps its step-cost tables across prompts, as a serving replica does.
           Searching the peer's draft length beside the variants' gives a comparison with it equal
           tuning effort on the setting both share.
  figures: per variant and category, output tokens / wall seconds over that category's decodes, and the
           speedup over the autoregressive engine's rate on the same decodes; overall likewise. Greedy
           output must match the autoregressive engine's in fp32; in bf16 a verify block rounds differently
           from single steps, so some answers differ (docs/results/embedded-engine.md). Mismatches are
           counted either way (not for the peer, whose `generate` returns tokens the bench does not
           detokenize).
  choice:  the variant with the highest overall rate among those whose chat speedup is at least
           `chat_floor` (speculation must not lose on chat); none qualifying -> the first variant. The
           peer's k: the highest overall rate (`chosen_peer_tokens`).
Parameters: variants as NAME=FIELD:VALUE[;FIELD:VALUE] (EmbeddedEngineConfig fields, JSON values), over
`base` settings every arm shares (FIELD:VALUE[;FIELD:VALUE]; no dtype: `--dtype`); the peer's k in [1, 64]
(its n-gram size stays transformers' default); rounds >= 1; prompts: how many of the list after the report
set. Complexity: (variants + peer k's + 1) * rounds * prompts decodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time


DEFAULT_VARIANTS = [  # per-match counts with prior weights 0..8, and one set of counts from a neutral start
    "w0=draft_acceptance_by_match:true;draft_prior_weight:0",
    "w2=draft_acceptance_by_match:true;draft_prior_weight:2",
    "w4=draft_acceptance_by_match:true;draft_prior_weight:4",
    "w8=draft_acceptance_by_match:true;draft_prior_weight:8",
    "one-set=draft_acceptance_by_match:false;draft_prior_weight:0",
]


def tuning_prompts(count: int) -> list[dict]:
    from ray_dspine.bench.engine_bench import load_prompts

    prompts = load_prompts(count, "tuning")
    if len(prompts) < count:
        raise ValueError(f"only {len(prompts)} prompts tune the engine's settings; ask for at most that many")
    return prompts


def add_prompt_flags(parser) -> None:
    """--prompts (tuning prompts, never the report set) and --max-tokens, as every tuning study takes them."""
    parser.add_argument("--prompts", type=int, default=6, help="tuning prompts, never the report set (default 6)")
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens per answer (default 96, as bench engine)")


def parse_variant(text: str) -> tuple[str, dict]:
    """NAME=FIELD:VALUE[;FIELD:VALUE] -> (NAME, {FIELD: value}); values are JSON (true, 0.5, 8)."""
    name, sep, body = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"{text!r}: expected NAME=FIELD:VALUE[;FIELD:VALUE]")
    overrides = {}
    for item in filter(None, (part.strip() for part in body.split(";"))):
        field, sep, value = item.partition(":")
        if not sep:
            raise ValueError(f"{item!r}: expected FIELD:VALUE")
        try:
            overrides[field.strip()] = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{item!r}: the value must be JSON (true, 0.5, 8)") from exc
    return name.strip(), overrides


def choose_variant(rates: dict[str, dict[str, float]], ar_rates: dict[str, float], chat_floor: float) -> str:
    """Rule `choice`: rates[name][category or "overall"] tokens/s; the floor on rates[name]["chat"] / ar["chat"]."""
    names = list(rates)
    allowed = [n for n in names if "chat" not in ar_rates or rates[n]["chat"] / ar_rates["chat"] >= chat_floor]
    if not allowed:
        return names[0]
    return max(allowed, key=lambda n: (rates[n]["overall"], -names.index(n)))


async def _run(
    variants: dict[str, dict],
    peer_tokens: list[int],
    rounds: int,
    prompts: list[dict],
    max_tokens: int,
    progress,
    common: dict | None = None,
    dtype: str = "fp32",
):
    from ray_dspine.bench.engine_bench import _decode, _engine, _peer_decode
    from ray_dspine.engines.embedded import compute
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.model import load_model

    base = EmbeddedEngineConfig(**{"dtype": dtype, "max_running_requests": 1, "prefix_reuse": False, **(common or {})})
    engines = {"ar": base.model_copy(update={"speculative": False})}
    for name, overrides in variants.items():
        engines[name] = EmbeddedEngineConfig(**{**base.model_dump(), **overrides})  # validated
    loaded = await compute.call(load_model, base)
    engines = {name: _engine(config, loaded) for name, config in engines.items()}
    for engine in engines.values():
        await engine.start()
        await _decode(engine, prompts[0]["messages"], 16, "warmup")
    peers = {f"peer-k{k}": k for k in peer_tokens}
    for k in peer_tokens:
        _peer_decode(loaded, prompts[0]["messages"], 16, k)
    tokens: dict[tuple[str, str], int] = {}
    seconds: dict[tuple[str, str], float] = {}
    mismatches = {name: 0 for name in engines}
    names = list(engines) + list(peers)
    for r in range(rounds):
        for i, prompt in enumerate(prompts):
            shift = (r * len(prompts) + i) % len(names)
            texts = {}
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                if name in peers:
                    produced = _peer_decode(loaded, prompt["messages"], max_tokens, peers[name])[0]
                else:
                    texts[name], usage, *_ = await _decode(
                        engines[name], prompt["messages"], max_tokens, f"{name}-{r}-{i}"
                    )
                    produced = usage.completion_tokens if usage else 0
                key = (name, prompt["category"])
                tokens[key] = tokens.get(key, 0) + produced
                seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - started
            for name in engines:
                mismatches[name] += texts[name] != texts["ar"]
            progress(f"round {r + 1}/{rounds}, prompt {i + 1}/{len(prompts)} ({prompt['category']})")
    for engine in engines.values():
        await engine.stop()
    categories = sorted({p["category"] for p in prompts})
    rates: dict[str, dict[str, float]] = {}
    for name in names:
        rates[name] = {c: tokens[name, c] / seconds[name, c] for c in categories}
        rates[name]["overall"] = sum(tokens[name, c] for c in categories) / sum(seconds[name, c] for c in categories)
    return rates, mismatches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dspine_lab.engines.draft_tuning", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--variant", action="append", dest="variants", metavar="NAME=FIELD:VALUE[;FIELD:VALUE]",
        help="a drafting setting to compare (repeatable; default: per-match counts with draft_prior_weight 0, 2, 4 "
        "and 8, and one set of counts from a neutral start)",
    )
    parser.add_argument(
        "--peer-tokens", default="", metavar="K[,K]",
        help="also time transformers' prompt lookup with these draft lengths (e.g. 8,16; default: none)",
    )
    parser.add_argument(
        "--base", default="", metavar="FIELD:VALUE[;FIELD:VALUE]",
        help="engine settings every arm shares, the autoregressive one too (e.g. num_draft_tokens:8)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="decodes of every prompt per engine (default 2)")
    add_prompt_flags(parser)
    parser.add_argument("--chat-floor", type=float, default=0.97, help="least chat speedup a variant may have")
    parser.add_argument(
        "--dtype", choices=("fp32", "bf16"), default="fp32",
        help="the model's dtype for every arm (default fp32, where greedy output must match)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.prompts < 1 or args.max_tokens < 1 or args.chat_floor <= 0:
        parser.error("--rounds, --prompts and --max-tokens must be >= 1 and --chat-floor > 0")
    try:
        peer_tokens = sorted({int(k) for k in args.peer_tokens.split(",") if k.strip()})
    except ValueError:
        parser.error("--peer-tokens must be comma-separated integers, e.g. 8,16")
    if peer_tokens and not 1 <= min(peer_tokens) <= max(peer_tokens) <= 64:
        parser.error("--peer-tokens must be between 1 and 64")
    variants: dict[str, dict] = {}
    for text in args.variants or DEFAULT_VARIANTS:
        try:
            name, overrides = parse_variant(text)
        except ValueError as exc:
            parser.error(f"--variant {exc}")
        if name == "ar" or name.startswith("peer-") or name in variants:
            parser.error(
                f"--variant names must be unique, not 'ar' (the autoregressive reference) and not start with "
                f"'peer-' (the peer's arms): {name!r}"
            )
        variants[name] = overrides
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig

    try:  # pydantic's ValidationError is a ValueError
        common = parse_variant(f"base={args.base}")[1]
        EmbeddedEngineConfig(**{"dtype": "fp32", **common})
    except ValueError as exc:
        parser.error(f"--base: not a valid engine setting: {exc}")
    if any("dtype" in overrides for overrides in [common, *variants.values()]):
        parser.error("--base/--variant: the dtype is the study's, not a variant's; drop dtype and pass --dtype")
    for name, overrides in variants.items():
        try:
            EmbeddedEngineConfig(**{"dtype": "fp32", **common, **overrides})
        except ValueError as exc:
            parser.error(f"--variant {name}: not a valid engine setting: {exc}")
    try:
        prompts = tuning_prompts(args.prompts)
    except ValueError as exc:
        parser.error(f"--prompts: {exc}")
    rates, mismatches = asyncio.run(
        _run(
            variants, peer_tokens, args.rounds, prompts, args.max_tokens, lambda m: print(m, file=sys.stderr), common,
            args.dtype,
        )
    )
    ar = rates.pop("ar")
    peer_rates = {name: rates.pop(name) for name in list(rates) if name.startswith("peer-")}
    chosen = choose_variant(rates, ar, args.chat_floor)
    result = {
        "measured": f"MEASURED, {args.dtype}, tuning prompts only",
        "command_line": " ".join(["python -m dspine_lab.engines.draft_tuning", *(argv if argv is not None else sys.argv[1:])]),
        "tuning_prompts": [f"tuning {j} ({p['category']})" for j, p in enumerate(prompts)],
        "base": common,
        "variants": variants,
        "ar_tokens_per_s": {c: round(v, 2) for c, v in ar.items()},
        "tokens_per_s": {n: {c: round(v, 2) for c, v in r.items()} for n, r in rates.items()},
        "speedup": {n: {c: round(v / ar[c], 3) for c, v in r.items()} for n, r in rates.items()},
        "greedy_mismatches_vs_ar": {n: mismatches[n] for n in rates},
        "chosen": chosen,
    }
    if peer_rates:
        best_peer = max(peer_rates, key=lambda n: (peer_rates[n]["overall"], -int(n.removeprefix("peer-k"))))
        result["peer_tokens_per_s"] = {n: {c: round(v, 2) for c, v in r.items()} for n, r in peer_rates.items()}
        result["peer_speedup"] = {n: {c: round(v / ar[c], 3) for c, v in r.items()} for n, r in peer_rates.items()}
        result["chosen_peer_tokens"] = int(best_peer.removeprefix("peer-k"))
        result["chosen_over_chosen_peer"] = {
            c: round(rates[chosen][c] / peer_rates[best_peer][c], 3) for c in rates[chosen]
        }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    categories = [c for c in ar if c != "overall"] + ["overall"]
    print(f"MEASURED ({args.dtype}, tuning prompts): speculative / autoregressive output tokens/s")
    print(f"{'variant':>12} " + " ".join(f"{c:>10}" for c in categories) + "  mismatches")
    for name in rates:
        row = " ".join(f"{result['speedup'][name][c]:>9.3f}x" for c in categories)
        print(f"{name:>12} {row}  {mismatches[name]:>10}")
    for name in peer_rates:
        print(f"{name:>12} " + " ".join(f"{result['peer_speedup'][name][c]:>9.3f}x" for c in categories))
    print(f"chosen: {chosen} (highest overall rate with chat >= {args.chat_floor}x)")
    if peer_rates:
        versus = " ".join(f"{c} {v:.3f}x" for c, v in result["chosen_over_chosen_peer"].items())
        print(f"peer's best k: {result['chosen_peer_tokens']}; {chosen} over it: {versus}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
