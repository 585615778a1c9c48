"""The prefill floor of a hybrid (full + linear attention) model on one GPU, from timed pieces.

What it answers: how long a cold prompt of N tokens takes to prefill when nothing but the model's own
matrix products and attention run, against what a simulated profile assumes (`prefill.per_token_ms`
per uncached token). The pieces are timed on the GPU by `prefill_floor_gpu.py`; this module holds the
shapes and the arithmetic, with no GPU and no third-party import, so it runs wherever Python does.

Rules (h hidden, I MLP width, nh/nkv/hd attention heads, nk/nv/dk/dv linear-attention heads, F/L the
full/linear layer counts, C the chunk of --chunked-prefill-size tokens; SGLang fuses as below):
  gemms:  a full-attention layer runs qkv (h -> nh*hd*g + 2*nkv*hd, g = 2 with an output gate, else 1),
          o (nh*hd -> h), gate_up (h -> 2I), down (I -> h); a linear-attention layer runs qkvz
          (h -> 2*nk*dk + 2*nv*dv), ba (h -> 2*nv), out (nv*dv -> h), gate_up, down. Each is timed on a
          chunk of C tokens; the logits are left out (a prefill computes them for its last token only).
  flops:  a product of M tokens through an (a -> b) weight is 2*M*a*b FLOP; causal attention over N
          tokens is 2*N^2*nh*hd FLOP per full layer (QK^T and PV, half the square).
  gemm:   the per-token GEMM cost g = (F * t_full(C) + L * t_linear(C)) / C ms.
  attn:   causal self-attention over the whole prompt, one full layer, timed at lengths N_j; a chunked
          prefill does the same products in pieces, so its attention time is taken as this one's.
          Between timed lengths, and beyond the longest, t_attn(N) = t_attn(N_j) * (N / N_j)^2 with N_j
          the nearest timed length at or below N (the smallest above it for N below every timed one).
  scan:   the linear layers' recurrence is not timed (it needs the model's own kernels); its FLOPs are
          counted per token and layer as 4*nv*dk*dv (state update and read-out), and reported.
  floor:  floor(N) = N * g + F * t_attn(N) ms (no launch overhead, no scan, no logits: a lower bound
          of what the model's own kernels need, up to their efficiency against these).
  fit:    the least-squares a, b of floor(N) ~ a*N + b*N^2 over the timed lengths (two normal equations),
          so a profile can add b as a per-token, per-context-token cost.
  ratio:  floor(N) / (per_token_ms * N) at each timed length, for a profile's per_token_ms.
  verify: a speculative verify step runs every layer's products and the logits on n * D query tokens
          (n requests, D draft tokens each) where a decode step runs them on n; what the n * (D - 1)
          extra tokens add is products(n * D) - products(n), against a profile's
          verify_per_token_ms * n * (D - 1).
Parameters: shapes from a Hugging Face config (its text keys and layer kinds: ray_dspine/hybrid_layers.py);
C >= 1; lengths >= 1.
Complexity: O(number of timed lengths).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ray_dspine.hybrid_layers import count_layer_kinds, text_config


@dataclass(frozen=True)
class HybridShape:
    hidden: int
    mlp: int
    heads: int
    kv_heads: int
    head_dim: int
    output_gate: bool
    linear_key_heads: int
    linear_value_heads: int
    linear_key_dim: int
    linear_value_dim: int
    full_layers: int
    linear_layers: int
    vocab: int = 0


def shape_from_config(config: dict) -> HybridShape:
    """A HybridShape from a Hugging Face config.json (its text_config when it has one)."""
    text = text_config(config)
    full, linear = count_layer_kinds(text, int(text["num_hidden_layers"]))
    heads = int(text["num_attention_heads"])
    return HybridShape(
        hidden=int(text["hidden_size"]),
        mlp=int(text["intermediate_size"]),
        heads=heads,
        kv_heads=int(text.get("num_key_value_heads", heads)),
        head_dim=int(text.get("head_dim", int(text["hidden_size"]) // heads)),
        output_gate=bool(text.get("attn_output_gate", False)),
        linear_key_heads=int(text.get("linear_num_key_heads", 1)),
        linear_value_heads=int(text.get("linear_num_value_heads", 1)),
        linear_key_dim=int(text.get("linear_key_head_dim", 1)),
        linear_value_dim=int(text.get("linear_value_head_dim", 1)),
        full_layers=full,
        linear_layers=linear,
        vocab=int(text.get("vocab_size", 0)),
    )


def load_shape(path: Path) -> HybridShape:
    return shape_from_config(json.loads(Path(path).read_text(encoding="utf-8")))


def full_layer_gemms(s: HybridShape) -> list[tuple[int, int]]:
    """(in, out) of each product of one full-attention layer (rule `gemms`)."""
    q = s.heads * s.head_dim
    qkv = q * (2 if s.output_gate else 1) + 2 * s.kv_heads * s.head_dim
    return [(s.hidden, qkv), (q, s.hidden), (s.hidden, 2 * s.mlp), (s.mlp, s.hidden)]


def linear_layer_gemms(s: HybridShape) -> list[tuple[int, int]]:
    """(in, out) of each product of one linear-attention layer (rule `gemms`)."""
    value = s.linear_value_heads * s.linear_value_dim
    qkvz = 2 * s.linear_key_heads * s.linear_key_dim + 2 * value
    return [
        (s.hidden, qkvz),
        (s.hidden, 2 * s.linear_value_heads),
        (value, s.hidden),
        (s.hidden, 2 * s.mlp),
        (s.mlp, s.hidden),
    ]


def gemm_flops(gemms: list[tuple[int, int]], tokens: int) -> float:
    return sum(2.0 * tokens * a * b for a, b in gemms)


def attention_flops(s: HybridShape, tokens: int) -> float:
    """Causal attention over `tokens`, one full layer (rule `flops`)."""
    return 2.0 * tokens * tokens * s.heads * s.head_dim


def scan_flops_per_token(s: HybridShape) -> float:
    """The linear layers' recurrence, per token and layer (rule `scan`)."""
    return 4.0 * s.linear_value_heads * s.linear_key_dim * s.linear_value_dim


def gemm_ms_per_token(s: HybridShape, full_chunk_ms: float, linear_chunk_ms: float, chunk: int) -> float:
    """Rule `gemm`."""
    return (s.full_layers * full_chunk_ms + s.linear_layers * linear_chunk_ms) / chunk


def attention_ms(timed: dict[int, float], tokens: int) -> float:
    """One full layer's causal attention over `tokens` (rule `attn`), from {length: ms}."""
    if not timed:
        raise ValueError("no timed attention length")
    lengths = sorted(timed)
    below = [n for n in lengths if n <= tokens]
    base = below[-1] if below else lengths[0]
    return timed[base] * (tokens / base) ** 2


def floor_ms(s: HybridShape, per_token_gemm_ms: float, timed_attention: dict[int, float], tokens: int) -> float:
    """Rule `floor`."""
    return tokens * per_token_gemm_ms + s.full_layers * attention_ms(timed_attention, tokens)


def fit_linear_quadratic(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares a, b of y ~ a*N + b*N^2 (rule `fit`); needs two distinct lengths."""
    s2 = sum(float(n) ** 2 for n, _ in points)
    s3 = sum(float(n) ** 3 for n, _ in points)
    s4 = sum(float(n) ** 4 for n, _ in points)
    y1 = sum(n * y for n, y in points)
    y2 = sum(float(n) ** 2 * y for n, y in points)
    det = s2 * s4 - s3 * s3
    if det == 0:
        raise ValueError("the fit needs at least two distinct lengths")
    return (y1 * s4 - y2 * s3) / det, (s2 * y2 - s3 * y1) / det


def forward_products_ms(s: HybridShape, full_layer_ms: float, linear_layer_ms: float, logits_ms: float) -> float:
    """Every layer's products and the logits of one forward, from one layer of each kind timed."""
    return s.full_layers * full_layer_ms + s.linear_layers * linear_layer_ms + logits_ms


def verify_extra(decode_ms: float, verify_ms: float, num_requests: int, draft_tokens: int, per_token_ms: float) -> dict:
    """Rule `verify`: the measured extra of a verify step's products and what a profile charges for it."""
    return {
        "measured_ms": verify_ms - decode_ms,
        "profile_ms": per_token_ms * num_requests * (draft_tokens - 1),
    }


def summarize(
    s: HybridShape,
    chunk: int,
    full_chunk_ms: float,
    linear_chunk_ms: float,
    timed_attention: dict[int, float],
    profile_per_token_ms: float,
) -> dict:
    """Every derived figure of the module docstring, for a report."""
    g = gemm_ms_per_token(s, full_chunk_ms, linear_chunk_ms, chunk)
    chunk_flops = s.full_layers * gemm_flops(full_layer_gemms(s), chunk) + s.linear_layers * gemm_flops(
        linear_layer_gemms(s), chunk
    )
    chunk_ms = s.full_layers * full_chunk_ms + s.linear_layers * linear_chunk_ms
    rows = []
    for n in sorted(timed_attention):
        floor = floor_ms(s, g, timed_attention, n)
        rows.append(
            {
                "prompt_tokens": n,
                "attention_ms_per_layer": timed_attention[n],
                "attention_tflop_s": attention_flops(s, n) / (timed_attention[n] / 1000.0) / 1e12,
                "gemm_ms": n * g,
                "attention_ms": s.full_layers * timed_attention[n],
                "floor_ms": floor,
                "profile_ms": profile_per_token_ms * n,
                "floor_over_profile": floor / (profile_per_token_ms * n) if profile_per_token_ms > 0 else None,
            }
        )
    a, b = fit_linear_quadratic([(r["prompt_tokens"], r["floor_ms"]) for r in rows]) if len(rows) >= 2 else (g, 0.0)
    return {
        "chunk_tokens": chunk,
        "gemm_ms_per_token": g,
        "gemm_tflop_s": chunk_flops / (chunk_ms / 1000.0) / 1e12 if chunk_ms > 0 else None,
        "full_layer_chunk_ms": full_chunk_ms,
        "linear_layer_chunk_ms": linear_chunk_ms,
        "scan_gflop_per_token": scan_flops_per_token(s) * s.linear_layers / 1e9,
        "gemm_gflop_per_token": chunk_flops / chunk / 1e9,
        "by_length": rows,
        "fit_per_token_ms": a,
        "fit_per_token_squared_ms": b,
        "profile_per_token_ms": profile_per_token_ms,
    }
