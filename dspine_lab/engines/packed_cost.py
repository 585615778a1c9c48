"""How much packing requests' steps into one forward can give on the embedded engine's CPU model.

What it answers: the engine packs the verify steps of up to n running requests into one forward
(ray_dspine/engines/embedded/batch.py). When every request feeds q tokens a step (its last token and
q - 1 draft tokens), how many times the output of one-at-a-time steps can n requests packed together
produce at most, whatever the draft policy and the acceptance? That bounds the batching ratio
`bench engine` measures.

Rules (times in ms; every request holds L cached tokens):
  t(n, q)    = the median of R timed forwards of n requests feeding q tokens each, all rows' logits
               kept, as a verify step keeps them: for n >= 2 one packed forward (`forward_packed`, the
               step's new keys dropped), for n = 1 a step alone as the engine runs a group of one (the
               model on the request's own cache, cropped back after). The caches are filled once; on the
               compute thread, in the engine's dtype, on `threads` torch threads. The first forward of
               each (n, q) warms up, untimed.
  gain(n, q) = n * t(1, q) / t(n, q): the tokens/s of n requests stepping together over one request
               stepping alone at the same q, which is the most batching can multiply throughput by
               when every step feeds q tokens (equal acceptance on both sides).
Parameters: every n >= 1 (n = 1 is always timed, as the reference), every q >= 1, L >= 0, R >= 1,
threads >= 1.
Complexity: O(sum over (n, q) of R * n * (q + L)) forward work; one cache of L tokens per request, filled once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from dspine_lab.engines.suffix_prefill import cpu_name


def batching_gain(t_alone_ms: float, t_packed_ms: float, requests: int) -> float:
    """gain(n, q) = n * t(1, q) / t(n, q)."""
    return requests * t_alone_ms / t_packed_ms


def time_packed(model, requests: list[int], feeds: list[int], cached: int, repeats: int, progress) -> dict:
    """t(n, q) in ms for every n in `requests` and q in `feeds` (rule above); call on the compute thread."""
    import torch
    from transformers import DynamicCache

    from ray_dspine.engines.embedded.batch import forward_packed

    caches = []
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for _ in range(max(requests)):
            cache = DynamicCache()
            if cached:
                prefix = torch.randint(100, 1000, (1, cached), generator=generator)
                model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
            caches.append(cache)
        times: dict[tuple[int, int], float] = {}
        for n in requests:
            for q in feeds:
                step = [[5] * q for _ in range(n)]
                samples = []
                for _ in range(repeats + 1):
                    started = time.perf_counter()
                    if n == 1:
                        model(input_ids=torch.tensor(step), past_key_values=caches[0], use_cache=True, logits_to_keep=0)
                        caches[0].crop(-q)
                    else:
                        forward_packed(model, caches[:n], step)
                    samples.append((time.perf_counter() - started) * 1000)
                times[n, q] = statistics.median(samples[1:])
                progress(f"{n} request(s) x {q} token(s) behind {cached} cached: {times[n, q]:.1f} ms")
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
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    requests = sorted({1, *_ints(args.requests, "--requests", parser)})
    feeds = _ints(args.tokens, "--tokens", parser)
    if args.cached < 0 or args.repeats < 1 or args.threads < 1:
        parser.error("--cached must be >= 0; --repeats and --threads must be >= 1")

    from ray_dspine.engines.embedded import compute
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.model import load_model, set_threads

    def study() -> dict:
        set_threads(args.threads)
        model = load_model(EmbeddedEngineConfig(dtype=args.dtype)).model
        progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        return time_packed(model, requests, feeds, args.cached, args.repeats, progress)

    times = compute.run(study)
    cells = [
        {"requests": n, "tokens": q, "t_ms": round(times[n, q], 1), "gain": round(batching_gain(times[1, q], times[n, q], n), 2)}
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
        "cells": cells,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"MEASURED, {args.dtype}, {args.threads} thread(s), {args.cached} cached tokens per request:")
    print(f"  {'requests':>8} {'tokens each':>11} {'ms/forward':>10} {'gain':>6}")
    for cell in cells:
        print(f"  {cell['requests']:>8} {cell['tokens']:>11} {cell['t_ms']:>10} {cell['gain']:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
