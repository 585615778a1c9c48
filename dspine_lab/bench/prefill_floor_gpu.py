"""Time the pieces of `prefill_floor.py` on a GPU with PyTorch, and print the prefill floor.

    python -m dspine_lab.bench.prefill_floor_gpu --out prefill-floor.json

Needs only PyTorch (any CUDA build; no model weights: every weight is random, which does not change
a dense product's time) and the model's config.json (default: the shipped Qwen3.8-27B shape). It
times, with CUDA events, the median of --reps runs after --warmup:
  - one full-attention layer's and one linear-attention layer's products on a chunk of --chunk tokens
    (bf16, three copies of the weights taken in turn, so the cache never holds them);
  - causal self-attention of one full layer at each of --lengths (PyTorch's kernel named by
    --attention-backend, flash by default; KV heads repeated to the query heads);
  - the same products at --decode-batch tokens plus the logits, the weights one decode step reads, and
    at --decode-batch x --draft-tokens tokens, what a speculative verify step runs.
Then prints and writes the figures of `prefill_floor.summarize`, the decode floor beside the
profile's step at that batch, and what ran where. On a machine without CUDA it runs on the CPU
(for a smoke test of a small config; the figures then say nothing about a GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import ray_dspine.capacity
from dspine_lab.bench.prefill_floor import (
    HybridShape,
    forward_products_ms,
    full_layer_gemms,
    gemm_flops,
    linear_layer_gemms,
    load_shape,
    summarize,
    verify_extra,
)

# The model shape the core ships with its capacity profiles (package data of ray_dspine.capacity).
DEFAULT_CONFIG = Path(ray_dspine.capacity.__file__).resolve().parent / "profiles" / "qwen3.8-27b.json"
DEFAULT_LENGTHS = "8192,16384,32768,65536,98304,131072"
H200_PREFILL_PER_TOKEN_MS = 0.1  # h200-qwen3.8-27b.yaml prefill.per_token_ms
H200_DECODE_BASE_MS = 26.47  # h200-qwen3.8-27b.yaml decode.base_ms
H200_DECODE_PER_RUNNING_MS = 0.5  # h200-qwen3.8-27b.yaml decode.per_running_ms
H200_VERIFY_PER_TOKEN_MS = 0.0515  # h200-qwen3.8-27b.yaml verify_per_token_ms
DSPINE_DRAFT_TOKENS = 16  # h200-qwen3.8-27b.yaml drafters.dspine.draft_tokens
WEIGHT_COPIES = 3


def _timer(torch, device: str, warmup: int, reps: int):
    def time_ms(fn) -> float:
        for _ in range(warmup):
            fn()
        samples = []
        for _ in range(reps):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t0) * 1000.0)
        return statistics.median(samples)

    return time_ms


def _layer_runner(torch, gemms: list[tuple[int, int]], tokens: int, device: str, dtype):
    """A function that runs one layer's products on `tokens` rows, cycling the weight copies."""
    inputs = {a: torch.randn(tokens, a, device=device, dtype=dtype) for a in {a for a, _ in gemms}}
    copies = [[torch.randn(b, a, device=device, dtype=dtype) * 0.02 for a, b in gemms] for _ in range(WEIGHT_COPIES)]
    state = {"i": 0}

    def run() -> None:
        weights = copies[state["i"] % WEIGHT_COPIES]
        state["i"] += 1
        for (a, _), w in zip(gemms, weights):
            torch.nn.functional.linear(inputs[a], w)

    return run


def _attention_runner(torch, s: HybridShape, tokens: int, device: str, dtype):
    q = torch.randn(1, s.heads, tokens, s.head_dim, device=device, dtype=dtype)
    k = torch.randn(1, s.kv_heads, tokens, s.head_dim, device=device, dtype=dtype)
    v = torch.randn_like(k)
    repeat = s.heads // s.kv_heads
    k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)

    def run() -> None:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return run


ATTENTION_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


def _attention_context(torch, device: str, backend: str):
    """The context that pins PyTorch's attention kernel on CUDA (None: PyTorch's own choice)."""
    if device != "cuda" or backend == "default":
        return None
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None
    return lambda: sdpa_kernel([getattr(SDPBackend, ATTENTION_BACKENDS[backend])])


def measure(args: argparse.Namespace) -> dict:
    import torch

    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    s = load_shape(args.config)
    time_ms = _timer(torch, device, args.warmup, args.reps)
    lengths = [int(x) for x in args.lengths.split(",") if x.strip()]

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    name = torch.cuda.get_device_name() if device == "cuda" else "no GPU"
    say(f"[prefill-floor] {device} ({name}), torch {torch.__version__}")
    full_ms = time_ms(_layer_runner(torch, full_layer_gemms(s), args.chunk, device, dtype))
    linear_ms = time_ms(_layer_runner(torch, linear_layer_gemms(s), args.chunk, device, dtype))
    say(f"[prefill-floor] chunk of {args.chunk}: full layer {full_ms:.3f} ms, linear layer {linear_ms:.3f} ms")
    pinned = _attention_context(torch, device, args.attention_backend)
    attention: dict[int, float] = {}
    backend = args.attention_backend if pinned is not None else "default"
    for n in lengths:
        runner = _attention_runner(torch, s, n, device, dtype)
        try:
            if pinned is not None:
                with pinned():
                    attention[n] = time_ms(runner)
            else:
                attention[n] = time_ms(runner)
        except RuntimeError as exc:  # no such kernel for this shape: PyTorch's own choice
            backend = f"default ({exc.__class__.__name__} from {args.attention_backend})"
            attention[n] = time_ms(runner)
        say(f"[prefill-floor] causal attention over {n}: {attention[n]:.2f} ms per layer")
        del runner
        if device == "cuda":
            torch.cuda.empty_cache()
    batch = args.decode_batch

    def forward_ms(tokens: int) -> float:
        full = time_ms(_layer_runner(torch, full_layer_gemms(s), tokens, device, dtype))
        linear = time_ms(_layer_runner(torch, linear_layer_gemms(s), tokens, device, dtype))
        logits = time_ms(_layer_runner(torch, [(s.hidden, s.vocab)], tokens, device, dtype)) if s.vocab else 0.0
        return forward_products_ms(s, full, linear, logits)

    decode_floor = forward_ms(batch)
    verify_tokens = batch * args.draft_tokens
    verify = verify_extra(
        decode_floor, forward_ms(verify_tokens), batch, args.draft_tokens, args.profile_verify_per_token_ms
    )
    say(f"[prefill-floor] products of a forward: {decode_floor:.2f} ms at {batch} tokens, "
        f"{decode_floor + verify['measured_ms']:.2f} ms at {verify_tokens}")  # fmt: skip
    weight_bytes = (
        s.full_layers * gemm_flops(full_layer_gemms(s), 1) / 2
        + s.linear_layers * gemm_flops(linear_layer_gemms(s), 1) / 2
        + s.hidden * s.vocab
    ) * (2 if dtype == torch.bfloat16 else 4)
    summary = summarize(s, args.chunk, full_ms, linear_ms, attention, args.profile_per_token_ms)
    summary.update(
        {
            "device": device,
            "device_name": name if device == "cuda" else "cpu",
            "torch": torch.__version__,
            "dtype": str(dtype).replace("torch.", ""),
            "attention_backend": backend,
            "config": str(args.config),
            "warmup": args.warmup,
            "reps": args.reps,
            "decode_batch": batch,
            "decode_floor_ms": decode_floor,
            "decode_weight_gb": weight_bytes / 1e9,
            "decode_weight_tb_s": weight_bytes / (decode_floor / 1000.0) / 1e12 if decode_floor > 0 else None,
            "profile_decode_ms": args.profile_decode_base_ms + args.profile_decode_per_running_ms * batch,
            "draft_tokens": args.draft_tokens,
            "verify_extra_ms": verify["measured_ms"],
            "profile_verify_extra_ms": verify["profile_ms"],
        }
    )
    return summary


def report(summary: dict) -> str:
    lines = [
        f"prefill floor on {summary['device_name']} (torch {summary['torch']}, {summary['dtype']}, "
        f"attention: {summary['attention_backend']}); every figure MEASURED, random weights",
        f"  products: {summary['gemm_ms_per_token'] * 1000:.1f} us per token "
        f"({summary['gemm_gflop_per_token']:.1f} GFLOP/token at {summary['gemm_tflop_s']:.0f} TFLOP/s), "
        f"chunk {summary['chunk_tokens']}; linear-attention scan not timed "
        f"({summary['scan_gflop_per_token']:.2f} GFLOP/token)",
        "  prompt tokens | attention per layer (ms, TFLOP/s) | floor (s) | profile (s) | floor / profile",
    ]
    for row in summary["by_length"]:
        ratio = row["floor_over_profile"]
        lines.append(
            f"  {row['prompt_tokens']:>13,} | {row['attention_ms_per_layer']:9.1f} ms at "
            f"{row['attention_tflop_s']:4.0f} | {row['floor_ms'] / 1000:9.2f} | {row['profile_ms'] / 1000:11.2f} | "
            f"{'-' if ratio is None else f'{ratio:.2f}'}"
        )
    lines.append(
        f"  fit: floor(N) ~ {summary['fit_per_token_ms']:.4f} ms * N "
        f"+ {summary['fit_per_token_squared_ms']:.3e} ms * N^2"
    )
    lines.append(
        f"  decode at batch {summary['decode_batch']}: weights read {summary['decode_floor_ms']:.2f} ms "
        f"({summary['decode_weight_gb']:.1f} GB at {summary['decode_weight_tb_s'] or 0:.2f} TB/s) against the "
        f"profile's {summary['profile_decode_ms']:.2f} ms step (before KV)"
    )
    lines.append(
        f"  verify of {summary['draft_tokens']} draft tokens a request: the extra query tokens' products add "
        f"{summary['verify_extra_ms']:.2f} ms against the profile's {summary['profile_verify_extra_ms']:.2f} ms"
    )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dspine_lab.bench.prefill_floor_gpu", description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the model's config.json (shape only)")
    p.add_argument("--chunk", type=int, default=8192, help="prefill chunk in tokens (SGLang --chunked-prefill-size)")
    p.add_argument("--lengths", default=DEFAULT_LENGTHS, help="prompt lengths in tokens, comma-separated")
    p.add_argument(
        "--attention-backend",
        choices=["flash", *[k for k in ATTENTION_BACKENDS if k != "flash"], "default"],
        default="flash",
        help="PyTorch's attention kernel to time (CUDA only)",
    )
    p.add_argument("--decode-batch", type=int, default=8, help="requests in the decode step timed")
    p.add_argument(
        "--draft-tokens", type=int, default=DSPINE_DRAFT_TOKENS, help="query tokens a request sends to a verify step"
    )
    p.add_argument("--profile-verify-per-token-ms", type=float, default=H200_VERIFY_PER_TOKEN_MS)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--profile-per-token-ms", type=float, default=H200_PREFILL_PER_TOKEN_MS)
    p.add_argument("--profile-decode-base-ms", type=float, default=H200_DECODE_BASE_MS)
    p.add_argument("--profile-decode-per-running-ms", type=float, default=H200_DECODE_PER_RUNNING_MS)
    p.add_argument("--cpu", action="store_true", help="run on the CPU even where CUDA is there")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = p.parse_args(argv)
    for name in ("chunk", "decode_batch", "draft_tokens", "reps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if not args.config.is_file():
        p.error(f"--config: no file at {args.config}")
    try:
        load_shape(args.config)
    except (ValueError, KeyError) as exc:  # json.JSONDecodeError is a ValueError
        p.error(f"--config: {args.config} is not a hybrid model's config.json ({exc}); give a Qwen3.5-style one")
    try:
        lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    except ValueError:
        p.error(f"--lengths: expected comma-separated token counts, got {args.lengths!r}")
    if not lengths or min(lengths) < 1:
        p.error("--lengths: give at least one length of at least 1 token")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    summary = measure(args)
    print(report(summary))
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
