"""Capacity planner: what one replica of a pool holds, by SGLang's own memory arithmetic.

Byte figures are per GPU unless a name says `replica`; t = tensor_parallel_size, G = gpu_memory_gb * 2**30,
f = mem_fraction_static, C = context_length_tokens. The split and the joint solve follow SGLang's
`_handle_max_mamba_cache` and `resolve_max_num_reqs` (mem_cache/kv_cache_configurator.py).

Rules:
  R1 weights    W = E*2 + (P - E)*w for the target (P params, E embedding params kept bf16, w = 2 bf16 / 1 fp8);
                W_draft = P_draft * w_draft. Both shard evenly: per GPU ceil((W + W_draft) / t).
  R2 budget     rest = floor(G*f) - ceil((W + W_draft) / t) - R_mm; R_mm = 100 MiB for a multimodal target
                (SGLang's SGLANG_VLM_CACHE_SIZE_MB default, reserved out of the KV budget), else 0;
                rest <= 0 refuses.
  R3 KV/token   kv = 2 * L_full * max(1, n_kv // t) * hd * b_kv (K and V; heads replicate past t = n_kv);
                kv_draft = 2 * L_draft * max(1, n_kv_draft // t) * hd_draft * b_kv
                (5 layers x 4 heads x 128 in bf16 = 10,240 B, SGLang's own figure).
  R4 state      p = L_lin * ((2*nk*dk + nv*dv) / t * (K - 1) * 2 + nv / t * dv * dk * b_ssm):
                bf16 conv window plus the delta-rule state (float32 by default in SGLang).
  R4b ring      under replay_ssm with a draft, each running request slot (N + 1 of them: SGLang's padding
                slot) holds a ReplaySSM verify ring of L = 16 steps (--linear-replayssm-cache-len):
                g = L_lin * (2*(nv/t)*L*dv*2 + 2*(nk/t)*L*dk*2 + (nv/t)*L*4) bytes (bf16 update vectors
                and keys with their low parts, fp32 log-decays; `replayssm_ring_bytes_per_req`).
  R5 split      M = floor(rest * r / (1 + r)), r = mamba_full_memory_ratio (default 0.9).
  R6 ratio      q = 1 without radix cache; else 3, plus 2 for extra_buffer with the overlap scheduler,
                plus 1 for extra_buffer without it (Mamba pool slots per running request).
  R7 slots      S = floor(M / (p * (1 + D/q))): D = speculative_num_draft_tokens under snapshot_per_draft
                (one state snapshot per draft token per running request, solved jointly with the pool);
                D = 0 without a draft or under replay_ssm, so S = floor(M / p).
  R8 running    N = min(floor(S / q), max_running_requests); S <= 0 or N <= 0 refuses.
  R9 KV tokens  kv_budget = rest - (S + 1)*p - (N + 1)*D*p - (N + 1)*g (SGLang's pools each keep one padding
                slot; the unspent Mamba share goes to KV, as in SGLang's `_handle_max_mamba_cache`);
                T = floor(kv_budget / (kv + kv_draft)); with draft_window_tokens w the draft may instead keep a
                ring of min(w, C) tokens per running request, T_ring = floor((kv_budget - N*min(w, C)*kv_draft)
                / kv), and a window never costs more than one draft entry per pooled token: T = max(T, T_ring).
                T < C refuses.
  R10 headroom  state_slots_per_request = q + D, num_state_slots = S + N*D (units of p bytes), so
                num_state_slots // state_slots_per_request >= N, with equality when no cap binds.
  R11 draft     draft_vram_gb (replica) = W_draft + t * (T * kv_draft, or the ring).
  R12 args      sglang_args pins the sizes above explicitly (--max-running-requests N, --max-mamba-cache-size S)
                with --mamba-radix-cache-strategy and, whenever the overlap scheduler is off (always with
                no_buffer and the radix cache on, which SGLang 0.5.23 asserts), --disable-overlap-schedule.
Complexity: O(1).

Assumptions: draft weights are charged to the static budget (conservative; SGLang loads them after
sizing the pools); ReplaySSM's per-step replay inputs are left to activation headroom (for the
Qwen3.5-27B shape they are ~0.5 % of one snapshot); activation and CUDA-graph memory live in 1 - f.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ray_dspine.capacity.config import (
    KV_DTYPE_BYTES,
    SSM_DTYPE_BYTES,
    WEIGHT_DTYPE_BYTES,
    CapacityConfig,
    MambaStrategy,
)
from ray_dspine.capacity.profile import ModelProfile, estimate_num_params, num_embedding_params
from ray_dspine.capacity.report import RefusalNote

GIB = 1 << 30
MIB = 1 << 20
CONV_STATE_BYTES = 2  # SGLang keeps the conv window in bf16
MULTIMODAL_RESERVE_BYTES = 100 * MIB  # SGLANG_VLM_CACHE_SIZE_MB's default
REPLAYSSM_CACHE_LEN = 16  # --linear-replayssm-cache-len's default
MAMBA_BASE_RATIO = 3
EXTRA_BUFFER_RATIO_OVERLAP = 2
EXTRA_BUFFER_RATIO_NO_OVERLAP = 1


class CapacityError(ValueError):
    """A pool configuration that does not fit; the message carries the arithmetic."""


class CapacityPlan(BaseModel):
    """What one replica holds. `model_dump()` is the JSON form."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str
    gpu_memory_gb: float = Field(description="Per-GPU memory, GiB.")
    tensor_parallel_size: int
    mem_fraction_static: float
    profile_name: str
    profile_assumption: str | None = Field(description="Non-empty when the model shape is assumed.")
    draft_name: str | None = Field(description="None when the pool serves autoregressively.")
    static_gb_per_gpu: float = Field(description="G * f, GiB.")
    target_weight_gb: float = Field(description="Target weights for the whole replica, GiB.")
    draft_weight_gb: float = Field(description="Draft weights for the whole replica, GiB.")
    weights_gb_per_gpu: float
    rest_gb_per_gpu: float = Field(description="Post-weight budget split between Mamba state and KV, GiB.")
    mamba_budget_gb_per_gpu: float = Field(description="rest * r / (1 + r), GiB.")
    kv_budget_gb_per_gpu: float = Field(description="rest - pool state - per-draft snapshots, GiB.")
    target_kv_bytes_per_token: int = Field(description="Per GPU.")
    draft_kv_bytes_per_token: int = Field(description="Per GPU; 0 without a draft.")
    mamba_conv_bytes_per_request: int = Field(description="Per GPU, all linear layers.")
    mamba_ssm_bytes_per_request: int = Field(description="Per GPU, all linear layers.")
    mamba_state_bytes_per_request: int = Field(description="conv + SSM, per GPU.")
    mamba_strategy: MambaStrategy
    mamba_ratio: int = Field(description="Mamba pool slots per running request (SGLang's mamba ratio).")
    speculative_num_draft_tokens: int = Field(description="0 when autoregressive.")
    num_snapshots_per_request: int = Field(description="Per-draft state snapshots per running request.")
    max_mamba_cache_size: int = Field(description="Mamba pool slots (SGLang --max-mamba-cache-size).")
    snapshot_gb_per_gpu: float = Field(description="Per-draft snapshot memory at max_running_requests, GiB.")
    draft_ring_gb_per_gpu: float = Field(description="Draft sliding-window KV ring at max running, GiB.")
    free_kv_tokens: int = Field(description="KV tokens the pool holds (target, and draft unless windowed).")
    kv_tokens_per_request_max: int = Field(description="context_length_tokens: one request's largest KV.")
    num_full_context_requests: int = Field(description="free_kv_tokens // kv_tokens_per_request_max.")
    max_running_requests: int
    max_running_requests_cap: int | None
    num_state_slots: int = Field(description="Mamba state units (pool slots + snapshots) for the engine.")
    state_slots_per_request: int = Field(ge=1, description="State units one running request takes.")
    draft_vram_gb: float = Field(description="Draft weights + its KV at a full pool, whole replica, GiB.")
    sglang_args: list[str] = Field(description="The SGLang capacity arguments this plan implies.")


def target_weight_bytes(cfg: CapacityConfig, profile: ModelProfile) -> int:
    """R1: embeddings in bf16, everything else in the weight dtype."""
    params = estimate_num_params(profile)
    embed = num_embedding_params(profile)
    return embed * 2 + (params - embed) * WEIGHT_DTYPE_BYTES[cfg.weight_dtype]


def draft_weight_bytes(cfg: CapacityConfig) -> int:
    """R1: the drafter's parameters in its own dtype; 0 without a draft."""
    if cfg.draft is None:
        return 0
    return int(round(cfg.draft.draft_params_b * 1e9)) * WEIGHT_DTYPE_BYTES[cfg.draft.draft_weight_dtype]


def target_kv_bytes_per_token(cfg: CapacityConfig, profile: ModelProfile) -> int:
    """R3 for the target's full-attention layers, per GPU."""
    heads = max(1, profile.num_kv_heads // cfg.tensor_parallel_size)
    return 2 * profile.num_full_attention_layers * heads * profile.head_dim * KV_DTYPE_BYTES[cfg.kv_dtype]


def draft_kv_bytes_per_token(cfg: CapacityConfig) -> int:
    """R3 for the drafter's layers, per GPU; 0 without a draft."""
    if cfg.draft is None:
        return 0
    heads = max(1, cfg.draft.draft_kv_heads // cfg.tensor_parallel_size)
    return 2 * cfg.draft.draft_num_layers * heads * cfg.draft.draft_head_dim * KV_DTYPE_BYTES[cfg.kv_dtype]


def mamba_state_bytes(cfg: CapacityConfig, profile: ModelProfile) -> tuple[int, int]:
    """R4: (conv bytes, SSM bytes) of one request's recurrent state over all linear layers, per GPU."""
    t = cfg.tensor_parallel_size
    groups = -(-profile.linear_num_key_heads // t) * t  # key groups replicate up to a multiple of t
    value_width = profile.linear_num_value_heads * profile.linear_value_head_dim
    conv_dim = value_width + 2 * groups * profile.linear_key_head_dim
    conv = conv_dim // t * (profile.linear_conv_kernel_dim - 1) * CONV_STATE_BYTES
    ssm_heads = max(1, profile.linear_num_value_heads // t)
    ssm = ssm_heads * profile.linear_value_head_dim * profile.linear_key_head_dim * SSM_DTYPE_BYTES[cfg.mamba_ssm_dtype]
    layers = profile.num_linear_attention_layers
    return conv * layers, ssm * layers


def mamba_ratio(cfg: CapacityConfig) -> int:
    """R6: Mamba pool slots SGLang budgets per running request."""
    if not cfg.radix_cache_enabled:
        return 1
    if cfg.mamba_radix_cache_strategy == "extra_buffer":
        extra = EXTRA_BUFFER_RATIO_OVERLAP if cfg.overlap_schedule() else EXTRA_BUFFER_RATIO_NO_OVERLAP
        return MAMBA_BASE_RATIO + extra
    return MAMBA_BASE_RATIO


def replay_ring_bytes_per_request(cfg: CapacityConfig, profile: ModelProfile) -> int:
    """R4b: the ReplaySSM verify ring of one request slot, per GPU; 0 without it."""
    if cfg.draft is None or cfg.mamba_strategy != "replay_ssm":
        return 0
    t, steps = cfg.tensor_parallel_size, REPLAYSSM_CACHE_LEN
    value_heads, key_heads = profile.linear_num_value_heads // t, profile.linear_num_key_heads // t
    per_layer = (
        2 * value_heads * steps * profile.linear_value_head_dim * CONV_STATE_BYTES
        + 2 * key_heads * steps * profile.linear_key_head_dim * CONV_STATE_BYTES
        + value_heads * steps * 4
    )
    return per_layer * profile.num_linear_attention_layers


def num_snapshots_per_request(cfg: CapacityConfig) -> int:
    """R7's D: per-draft snapshots only with a draft under snapshot_per_draft."""
    if cfg.draft is None or cfg.mamba_strategy == "replay_ssm":
        return 0
    return cfg.draft.speculative_num_draft_tokens


def _gib(num_bytes: float) -> float:
    return num_bytes / GIB


def plan_capacity(cfg: CapacityConfig, profile: ModelProfile, *, pool_name: str = "pool") -> CapacityPlan:
    """Apply R1-R11; raise CapacityError (with the arithmetic) when the pool does not fit."""
    t = cfg.tensor_parallel_size
    gpu_gb = cfg.resolved_gpu_memory_gb()
    static = int(gpu_gb * GIB * cfg.mem_fraction_static)
    w_target, w_draft = target_weight_bytes(cfg, profile), draft_weight_bytes(cfg)
    weights_per_gpu = -(-(w_target + w_draft) // t)
    rest = static - weights_per_gpu - (MULTIMODAL_RESERVE_BYTES if profile.multimodal else 0)
    note = RefusalNote(pool_name, cfg, gpu_gb, static, w_target, w_draft, weights_per_gpu, rest)
    if rest <= 0:
        raise CapacityError(note.weights_do_not_fit())

    r = cfg.mamba_full_memory_ratio
    mamba_budget = int(rest * r / (1 + r))
    conv, ssm = mamba_state_bytes(cfg, profile)
    per_req = conv + ssm
    q = mamba_ratio(cfg)
    d = num_snapshots_per_request(cfg)
    slots = (mamba_budget * q) // (per_req * (q + d))  # floor(M / (p * (1 + D/q))) in integers
    running = slots // q
    if cfg.max_running_requests is not None:
        running = min(running, cfg.max_running_requests)
    note.add_mamba(mamba_budget, per_req, q, d, slots, running)
    if slots <= 0 or running <= 0:
        raise CapacityError(note.no_mamba_slots())

    kv_tok, draft_tok = target_kv_bytes_per_token(cfg, profile), draft_kv_bytes_per_token(cfg)
    snapshots = (running + 1) * d * per_req
    ring_fixed = (running + 1) * replay_ring_bytes_per_request(cfg, profile)
    kv_budget = rest - (slots + 1) * per_req - snapshots - ring_fixed
    window = cfg.draft.draft_window_tokens if cfg.draft is not None else None
    ring = running * min(window, cfg.context_length_tokens) * draft_tok if window is not None else 0
    per_token = max(0, kv_budget // (kv_tok + draft_tok))
    windowed = max(0, (kv_budget - ring) // kv_tok) if window is not None else 0
    if windowed > per_token:
        free_tokens, draft_kv_at_full = windowed, ring
    else:
        ring, free_tokens, draft_kv_at_full = 0, per_token, per_token * draft_tok
    note.add_kv(kv_budget, kv_tok, draft_tok, ring, free_tokens)
    if free_tokens < cfg.context_length_tokens:
        raise CapacityError(note.kv_too_small())

    return CapacityPlan(
        gpu=cfg.gpu,
        gpu_memory_gb=gpu_gb,
        tensor_parallel_size=t,
        mem_fraction_static=cfg.mem_fraction_static,
        profile_name=profile.name,
        profile_assumption=profile.assumption,
        draft_name=cfg.draft.name if cfg.draft is not None else None,
        static_gb_per_gpu=_gib(static),
        target_weight_gb=_gib(w_target),
        draft_weight_gb=_gib(w_draft),
        weights_gb_per_gpu=_gib(weights_per_gpu),
        rest_gb_per_gpu=_gib(rest),
        mamba_budget_gb_per_gpu=_gib(mamba_budget),
        kv_budget_gb_per_gpu=_gib(kv_budget),
        target_kv_bytes_per_token=kv_tok,
        draft_kv_bytes_per_token=draft_tok,
        mamba_conv_bytes_per_request=conv,
        mamba_ssm_bytes_per_request=ssm,
        mamba_state_bytes_per_request=per_req,
        mamba_strategy=cfg.mamba_strategy,
        mamba_ratio=q,
        speculative_num_draft_tokens=cfg.draft.speculative_num_draft_tokens if cfg.draft is not None else 0,
        num_snapshots_per_request=d,
        max_mamba_cache_size=slots,
        snapshot_gb_per_gpu=_gib(snapshots),
        draft_ring_gb_per_gpu=_gib(ring),
        free_kv_tokens=free_tokens,
        kv_tokens_per_request_max=cfg.context_length_tokens,
        num_full_context_requests=free_tokens // cfg.context_length_tokens,
        max_running_requests=running,
        max_running_requests_cap=cfg.max_running_requests,
        num_state_slots=slots + running * d,
        state_slots_per_request=q + d,
        draft_vram_gb=_gib(w_draft + t * draft_kv_at_full),
        sglang_args=sglang_args(cfg, max_running_requests=running, max_mamba_cache_size=slots),
    )


def sglang_args(cfg: CapacityConfig, *, max_running_requests: int, max_mamba_cache_size: int) -> list[str]:
    """SGLang 0.5.x launch arguments that pin the planned pools (explicit sizes reproduce the plan)."""
    args = [
        "--tp-size", str(cfg.tensor_parallel_size),
        "--mem-fraction-static", f"{cfg.mem_fraction_static:g}",
        "--context-length", str(cfg.context_length_tokens),
        "--max-running-requests", str(max_running_requests),
        "--max-mamba-cache-size", str(max_mamba_cache_size),
        "--mamba-full-memory-ratio", f"{cfg.mamba_full_memory_ratio:g}",
        "--mamba-radix-cache-strategy", cfg.mamba_radix_cache_strategy,
        "--mamba-ssm-dtype", cfg.mamba_ssm_dtype,
        "--kv-cache-dtype", "auto" if cfg.kv_dtype == "bf16" else cfg.kv_dtype,
    ]  # fmt: skip
    if not cfg.radix_cache_enabled:
        args.append("--disable-radix-cache")
    if not cfg.overlap_schedule():
        args.append("--disable-overlap-schedule")  # SGLang asserts this for no_buffer
    if cfg.draft is not None:
        args += ["--speculative-num-draft-tokens", str(cfg.draft.speculative_num_draft_tokens)]
        if cfg.mamba_strategy == "replay_ssm":
            args.append("--enable-linear-replayssm-spec")
    return args
