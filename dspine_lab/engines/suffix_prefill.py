"""What a prefix hit leaves to prefill on the embedded engine's CPU model, and the TTFT ratio it allows.

What it answers: a turn of an agent conversation whose first H prompt tokens are cached still prefills
its S = P - H new tokens, and each of them attends every earlier token of the prompt. How long does
that take behind H cached tokens, and, priced over a replay's own turns, how much lower than a full
prefill can the reuse arm's prefill time be at all (queueing aside)?

Rules (times in ms; S new tokens; L cached tokens; pairs: ray_dspine/engines/attention_cost.py):
  t(L)      = the median of R timed forwards of the same S new tokens behind L cached tokens (the cache
              is filled once per L and cropped back to L after each forward; logits of the last row only,
              as a prefill chunk computes them), in the engine's dtype, on `threads` torch threads.
  share(L)  = (t(L) - t(0)) / t(L): the part of the suffix's prefill that the cached prefix adds.
  fit:      t(L) ~ S * base + pair * pairs(L, S), least squares over the timed L (two normal equations):
            base = ms per new token with nothing cached (projections, MLP, attention among the S),
            pair = ms per (new token, earlier token) attended.
  price(c, u) = u * base + pair * pairs(c, u): the prefill of u tokens after c of their prompt, one pass.
  ratio(turn) = price(0, P) / price(H, P - H) for a turn with P prompt tokens, H of them cached: what
              prefix reuse can divide that turn's prefill time by. Over a replay's answered records
              (`--records`), per arm: the median ratio over its turns, the ratio of its median prices
              (full / with its hits), and how its measured TTFT compares with its own price (median of
              ttft - price(H, P - H), and of ttft / price): the part of TTFT that is not prefill.
Parameters: S >= 1, every L >= 0, R >= 1, threads >= 1.
Complexity: O(sum over L of (L + R * S)) forward tokens; the pricing is O(turns).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from ray_dspine.bench.receipt import cpu_name
from ray_dspine.engines.attention_cost import attended_pairs


def prefix_share(t_cached_ms: float, t_empty_ms: float) -> float:
    """share(L) = (t(L) - t(0)) / t(L)."""
    return (t_cached_ms - t_empty_ms) / t_cached_ms


def fit_costs(suffix_tokens: int, times_ms: dict[int, float]) -> tuple[float, float]:
    """(base, pair): least squares of t(L) = S * base + pair * pairs(L, S) over the timed L (rule `fit`)."""
    rows = [(suffix_tokens, attended_pairs(cached, suffix_tokens), t) for cached, t in times_ms.items()]
    saa = sum(a * a for a, _b, _t in rows)
    sab = sum(a * b for a, b, _t in rows)
    sbb = sum(b * b for _a, b, _t in rows)
    sat = sum(a * t for a, _b, t in rows)
    sbt = sum(b * t for _a, b, t in rows)
    det = saa * sbb - sab * sab
    if det == 0:
        raise ValueError("need at least two distinct cached lengths to fit base and pair costs")
    return (sat * sbb - sbt * sab) / det, (saa * sbt - sab * sat) / det


def price_ms(base_ms: float, pair_ms: float, cached: int, uncached: int) -> float:
    """price(c, u) = u * base + pair * pairs(c, u)."""
    return uncached * base_ms + pair_ms * attended_pairs(cached, uncached)


def reuse_ratios(base_ms: float, pair_ms: float, turns: list[tuple[int, int, float]]) -> dict:
    """Over turns (P, H, measured TTFT in ms): rule `ratio`."""
    full = [price_ms(base_ms, pair_ms, 0, p) for p, _h, _t in turns]
    reuse = [price_ms(base_ms, pair_ms, h, p - h) for p, h, _t in turns]
    ttft = [t for _p, _h, t in turns]
    return {
        "turns": len(turns),
        "median_turn_ratio": round(statistics.median(f / r for f, r in zip(full, reuse)), 2),
        "ratio_of_median_prices": round(statistics.median(full) / statistics.median(reuse), 2),
        "median_full_prefill_ms": round(statistics.median(full), 1),
        "median_prefill_ms": round(statistics.median(reuse), 1),
        "median_ttft_ms": round(statistics.median(ttft), 1),
        "median_ttft_minus_price_ms": round(statistics.median(t - r for t, r in zip(ttft, reuse)), 1),
        "median_ttft_over_price": round(statistics.median(t / r for t, r in zip(ttft, reuse)), 2),
    }


def load_turns(records: Path) -> dict[str, list[tuple[int, int, float]]]:
    """Per arm (else pool), (prompt_tokens, cached_prompt_tokens, TTFT ms) of a replay's answered requests."""
    arms: dict[str, list[tuple[int, int, float]]] = {}
    for line in records.read_text().splitlines():
        row = json.loads(line)
        if row.get("http_status") != 200 or row.get("ttft_s") is None:
            continue
        turn = (int(row["prompt_tokens"]), int(row.get("cached_prompt_tokens") or 0), float(row["ttft_s"]) * 1000)
        arms.setdefault(str(row.get("arm") or row.get("pool")), []).append(turn)
    return arms


def time_suffix(model, suffix_tokens: int, cached_lengths: list[int], repeats: int, progress) -> dict[int, float]:
    """t(L) for every L (rule `t`)."""
    import torch
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    suffix = torch.randint(0, vocab, (1, suffix_tokens), generator=generator)
    times = {}
    with torch.inference_mode():
        for cached in cached_lengths:
            cache = DynamicCache()
            if cached:
                prefix = torch.randint(0, vocab, (1, cached), generator=generator)
                model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
            samples = []
            for _ in range(repeats + 1):  # the first forward warms the kernels, untimed
                started = time.perf_counter()
                model(input_ids=suffix, past_key_values=cache, use_cache=True, logits_to_keep=1)
                samples.append((time.perf_counter() - started) * 1000)
                cache.crop(-suffix_tokens)
            times[cached] = statistics.median(samples[1:])
            progress(f"{suffix_tokens} new tokens behind {cached} cached: {times[cached]:.0f} ms")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dspine_lab.engines.suffix_prefill", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--suffix", type=int, default=400, help="new tokens S per forward (default 400)")
    parser.add_argument("--cached", default="0,500,2000,4000", help="comma-separated cached lengths L")
    parser.add_argument("--repeats", type=int, default=3, help="timed forwards per L (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as each of 2 pools)")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--records", type=Path, help="a replay run folder or its records.jsonl: price its turns")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        cached = sorted({int(c) for c in args.cached.split(",") if c.strip()})
    except ValueError:
        parser.error("--cached must be comma-separated integers, e.g. 0,500,2000")
    if args.suffix < 1 or args.repeats < 1 or args.threads < 1 or not cached or cached[0] < 0 or len(cached) < 2:
        parser.error("--suffix, --repeats and --threads must be >= 1; --cached needs two or more lengths >= 0")
    arms: dict[str, list[tuple[int, int, float]]] = {}
    if args.records is not None:
        records = args.records / "records.jsonl" if args.records.is_dir() else args.records
        if not records.is_file():
            parser.error(f"--records: no such file or folder: {records}")
        try:
            arms = load_turns(records)
        except (ValueError, KeyError, TypeError) as exc:
            parser.error(f"--records: {records} is not a replay's records.jsonl ({exc})")
        if not arms:
            parser.error(f"--records: no answered requests in {records}")
    if cached[-1] + args.suffix > 8192:
        parser.error("--cached plus --suffix must stay within the model's 8,192-token window")

    import torch

    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.model import load_model

    torch.set_num_threads(args.threads)
    model = load_model(EmbeddedEngineConfig(dtype=args.dtype)).model
    times = time_suffix(model, args.suffix, cached, args.repeats, lambda m: print(m, file=sys.stderr, flush=True))
    base, pair = fit_costs(args.suffix, times)
    result = {
        "command_line": " ".join(["python -m dspine_lab.engines.suffix_prefill", *(argv or sys.argv[1:])]),
        "device_name": cpu_name(),
        "dtype": args.dtype,
        "threads": args.threads,
        "suffix_tokens": args.suffix,
        "t_ms": {str(c): round(t, 1) for c, t in times.items()},
        "prefix_share": {str(c): round(prefix_share(t, times[cached[0]]), 3) for c, t in times.items()},
        "base_ms_per_token": round(base, 4),
        "ms_per_pair": round(pair, 8),
    }
    if arms:
        result["replay"] = {arm: reuse_ratios(base, pair, turns) for arm, turns in sorted(arms.items())}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"MEASURED, {args.dtype}, {args.threads} thread(s): {args.suffix} new tokens behind L cached")
    for c in cached:
        print(f"  L={c:>6}: {times[c]:8.0f} ms   prefix share {prefix_share(times[c], times[cached[0]]):.0%}")
    print(f"  fit: {base:.3f} ms per new token + {pair * 1e6:.1f} ms per million attended pairs")
    for arm, r in result.get("replay", {}).items():
        print(
            f"  arm {arm}, {r['turns']} turns: prefill in full {r['median_full_prefill_ms']:.0f} ms, with its hits "
            f"{r['median_prefill_ms']:.0f} ms (median; median per-turn ratio {r['median_turn_ratio']}x); "
            f"TTFT {r['median_ttft_ms']:.0f} ms = {r['median_ttft_over_price']}x its prefill "
            f"(median excess {r['median_ttft_minus_price_ms']:.0f} ms)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
