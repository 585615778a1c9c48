"""How much packing requests' steps into one forward can give on the embedded engine's CPU model.

What it answers: the engine packs the verify steps of up to n running requests into one forward
(ray_dspine/engines/embedded/batch.py). When every request feeds q tokens a step (its last token and
q - 1 draft tokens), how many times the output of one-at-a-time steps can n requests packed together
produce at most, whatever the draft policy and the acceptance? That bounds the batching ratio
`bench engine` measures.

Rules (times in ms; every request holds L cached tokens):
  t(n, q)    = the median of R timed forwards of n requests feeding q tokens each, all rows' logits
               kept, as a verify step keeps them: one packed forward (`forward_packed`), for n = 1 too
               when q >= 2, as the engine runs a verify block alone (sequence.py; a one-token step is
               the model's own forward there and here); every request's cache (rule `caches`) is
               cropped back after the forward (inside
               the timing, as the engine crops rejected drafts). The caches are filled once; on the
               compute thread, in the engine's dtype, on `threads` torch threads. The first forward of
               each (n, q) warms up, untimed.
  gain(n, q) = n * t(1, q) / t(n, q): the tokens/s of n requests stepping together over one request
               stepping alone at the same q, which is the most batching can multiply throughput by
               when every step feeds q tokens (equal acceptance on both sides).
  variants   = every cell is timed on each cache kind asked for (`--cache`): the engine's slab cache, and
               transformers' DynamicCache (which copies every held position at every step), and with each
               weights layout asked for (`--weights`, bf16 only): the model's own linear layers (plain), and
               the engine's weights packed once for oneDNN (packed_weights.py); the repeats of a cell
               alternate between the variants so machine noise hits them alike; a variant's gain uses
               its own t(1, q); and, for n = 1 (`--alone`), the engine's step alone (above) and the
               model's own forward on the request's cache for every q (transformers' sdpa, which copies
               the key/value heads out to every query head for a block of q >= 2 tokens); and with each
               attention asked for (`--attention`): the engine's per-request attention (segment) and rule
               `row exact`'s one query row at a time (row, config row_exact, bf16 only).
Parameters: every n >= 1 (n = 1 is always timed, as the reference), every q >= 1, L >= 0, R >= 1,
threads >= 1.
Complexity: O(variants * sum over (n, q) of R * n * (q + L)) forward work; one cache of L tokens per request
and variant, filled once; one model per weights layout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from ray_dspine.bench.receipt import cpu_name


def batching_gain(t_alone_ms: float, t_packed_ms: float, requests: int) -> float:
    """gain(n, q) = n * t(1, q) / t(n, q)."""
    return requests * t_alone_ms / t_packed_ms


def variant_name(
    layout: str, kind: str, alone: str, layouts: tuple, alones: tuple, attention: str = "segment",
    attentions: tuple = ("segment",),
) -> str:
    """The cache kind, prefixed by the weights layout and suffixed by the way of a step alone and the attention
    when more than one of those is timed: `slab`, `packed-slab`, `slab-model`, `packed-slab-row`."""
    parts = ([layout] if layouts != ("plain",) else []) + [kind] + ([alone] if len(alones) > 1 else [])
    return "-".join(parts + ([attention] if len(attentions) > 1 else []))


def make_cache(kind: str, capacity: int):
    """The engine's slab cache (kv_cache.py), or transformers' DynamicCache, which concatenates every step."""
    from transformers import DynamicCache

    from ray_dspine.engines.embedded.kv_cache import SlabCache

    if kind == "slab":
        return SlabCache(capacity)
    if kind == "dynamic":
        return DynamicCache()
    raise ValueError(f"unknown cache {kind!r}: slab or dynamic")


def time_packed(
    variants: list[tuple[str, object, str, str, bool]],
    requests: list[int],
    feeds: list[int],
    cached: int,
    repeats: int,
    progress,
) -> dict:
    """t(name, n, q) in ms for every variant (name, model, cache kind, step alone: "engine" or "model", rule
    `row exact`: True or False), n in `requests` and q in `feeds`
    (rule above); call on the compute thread. Each cell's repeats alternate between the variants."""
    import torch

    from ray_dspine.engines.embedded.batch import forward_packed

    generator = torch.Generator().manual_seed(0)
    prefixes = [torch.randint(100, 1000, (1, cached), generator=generator) for _ in range(max(requests))]
    caches = {}
    with torch.inference_mode():
        for name, model, kind, _alone, _row_exact in variants:
            caches[name] = []
            for prefix in prefixes:
                cache = make_cache(kind, cached + max(feeds))
                if cached:
                    model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
                caches[name].append(cache)
        times: dict[tuple[str, int, int], float] = {}
        for n in requests:
            for q in feeds:
                step = [[5] * q for _ in range(n)]
                samples: dict[str, list[float]] = {name: [] for name, *_rest in variants}
                for _ in range(repeats + 1):
                    for name, model, _kind, alone, row_exact in variants:
                        held = caches[name][:n]
                        started = time.perf_counter()
                        if n == 1 and (alone == "model" or q == 1):
                            ids = torch.tensor(step)
                            model(input_ids=ids, past_key_values=held[0], use_cache=True, logits_to_keep=0)
                        else:
                            forward_packed(model, held, step, row_exact=row_exact)
                        for cache in held:
                            cache.crop(-q)
                        samples[name].append((time.perf_counter() - started) * 1000)
                for name in samples:
                    times[name, n, q] = statistics.median(samples[name][1:])
                    ms = times[name, n, q]
                    progress(f"{name}: {n} request(s) x {q} token(s) behind {cached} cached: {ms:.1f} ms")
    return times


def _ints(text: str, flag: str, parser: argparse.ArgumentParser) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        parser.error(f"{flag} must be comma-separated integers, e.g. 1,9,33")
    if not values or values[0] < 1:
        parser.error(f"{flag} needs one or more integers >= 1")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dspine_lab.engines.packed_cost", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--requests", default="1,2,4", help="comma-separated request counts n (default 1,2,4)")
    parser.add_argument("--tokens", default="1,9,33", help="comma-separated tokens per request q (default 1,9,33)")
    parser.add_argument("--cached", type=int, default=600, help="cached tokens L per request (default 600)")
    parser.add_argument("--repeats", type=int, default=5, help="timed forwards per (n, q) (default 5)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2, one pool on 2 cores)")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument(
        "--cache",
        default="slab",
        help="comma-separated KV caches to time, each cell alternating between them: slab (the engine's, "
        "kv_cache.py) and dynamic (transformers' DynamicCache) (default slab)",
    )
    parser.add_argument(
        "--weights",
        default="plain",
        help="comma-separated weight layouts to time, each cell alternating between them: plain (the model's "
        "own linear layers) and packed (packed once for oneDNN, the engine's bf16 default) (default plain)",
    )
    parser.add_argument(
        "--alone",
        default="engine",
        help="comma-separated ways to run a request's step alone (n = 1), each cell alternating between them: "
        "engine (a packed forward of one request, as the engine runs it) and model (the model's own forward, "
        "transformers' sdpa) (default engine)",
    )
    parser.add_argument(
        "--attention",
        default="segment",
        help="comma-separated attentions to time, each cell alternating between them: segment (the engine's, one "
        "call per request) and row (rule `row exact`, one call per query row; bf16) (default segment)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    requests = sorted({1, *_ints(args.requests, "--requests", parser)})
    feeds = _ints(args.tokens, "--tokens", parser)
    if args.cached < 0 or args.repeats < 1 or args.threads < 1:
        parser.error("--cached must be >= 0; --repeats and --threads must be >= 1")
    kinds = tuple(dict.fromkeys(k.strip() for k in args.cache.split(",") if k.strip()))
    if not kinds or any(k not in ("slab", "dynamic") for k in kinds):
        parser.error("--cache takes slab, dynamic or both, comma-separated")
    layouts = tuple(dict.fromkeys(w.strip() for w in args.weights.split(",") if w.strip()))
    if not layouts or any(w not in ("plain", "packed") for w in layouts):
        parser.error("--weights takes plain, packed or both, comma-separated")
    if "packed" in layouts and args.dtype != "bf16":
        parser.error("--weights packed needs --dtype bf16 (fp32 layers are never packed)")
    alones = tuple(dict.fromkeys(a.strip() for a in args.alone.split(",") if a.strip()))
    if not alones or any(a not in ("engine", "model") for a in alones):
        parser.error("--alone takes engine, model or both, comma-separated")
    attentions = tuple(dict.fromkeys(a.strip() for a in args.attention.split(",") if a.strip()))
    if not attentions or any(a not in ("segment", "row") for a in attentions):
        parser.error("--attention takes segment, row or both, comma-separated")
    if "row" in attentions and args.dtype != "bf16":
        parser.error("--attention row is the engine's row_exact, which is bf16 only: add --dtype bf16")
    names = {
        (layout, kind, alone, attention): variant_name(layout, kind, alone, layouts, alones, attention, attentions)
        for layout in layouts
        for kind in kinds
        for alone in alones
        for attention in attentions
    }

    from ray_dspine.engines.embedded import compute
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.model import load_model, set_threads

    def study() -> dict:
        set_threads(args.threads)
        models = {
            layout: load_model(EmbeddedEngineConfig(dtype=args.dtype, packed_weights=layout == "packed")).model
            for layout in layouts
        }
        variants = [
            (name, models[layout], kind, alone, attention == "row")
            for (layout, kind, alone, attention), name in names.items()
        ]
        progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        return time_packed(variants, requests, feeds, args.cached, args.repeats, progress)

    times = compute.run(study)
    cells = [
        {
            "weights": layout,
            "cache": kind,
            "alone": alone,
            "attention": attention,
            "requests": n,
            "tokens": q,
            "t_ms": round(times[name, n, q], 1),
            "gain": round(batching_gain(times[name, 1, q], times[name, n, q], n), 2),
        }
        for (layout, kind, alone, attention), name in names.items()
        for n in requests
        for q in feeds
    ]
    result = {
        "command_line": " ".join(["python -m dspine_lab.engines.packed_cost", *(argv if argv is not None else sys.argv[1:])]),
        "device_name": cpu_name(),
        "dtype": args.dtype,
        "threads": args.threads,
        "cached_tokens": args.cached,
        "repeats": args.repeats,
        "caches": list(kinds),
        "weights": list(layouts),
        "alone": list(alones),
        "attention": list(attentions),
        "cells": cells,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"MEASURED, {args.dtype}, {args.threads} thread(s), {args.cached} cached tokens per request:")
    print(
        f"  {'weights':>7} {'cache':>7} {'alone':>6} {'attention':>9} {'requests':>8} {'tokens each':>11} "
        f"{'ms/forward':>10} {'gain':>6}"
    )
    for c in cells:
        print(
            f"  {c['weights']:>7} {c['cache']:>7} {c['alone']:>6} {c['attention']:>9} {c['requests']:>8} "
            f"{c['tokens']:>11} {c['t_ms']:>10} {c['gain']:>6}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
