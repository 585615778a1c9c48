"""Configuration of the simulated engine (a performance twin: no weights, calibrated timings)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...capacity.config import CapacityConfig
from ..prefill_pacing_config import PrefillPacingConfig
from ..protocol import SchedulePolicy
from .kv_tiers import WritePolicy
from .prefix_cache import EvictionPolicy

SimDrafter = Literal["dspine", "dflash2", "none"]


class SimulatedEngineConfig(BaseModel):
    """One simulated replica. Memory figures normally come from the capacity planner."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["simulated"] = "simulated"
    profile: str = Field(
        default="h200-qwen3.8-27b",
        pattern=r"^[a-z0-9][a-z0-9.\-]*$",
        description="Name of a shipped profile (a YAML file in ray_dspine/engines/simulated/profiles/).",
    )
    workload: str = Field(
        default="swe-bench-pro-xhigh",
        description="Which of the profile's acceptance figures to draw from (e.g. 'gsm8k-greedy').",
    )
    drafter: SimDrafter = Field(default="dspine", description="Draft model; 'none' decodes autoregressively.")
    capacity: CapacityConfig | None = Field(
        default=None,
        description="The GPU this twin models; when set, the planner fills total_kv_tokens, num_state_slots, "
        "state_slots_per_request and max_running_requests from it before the replica starts.",
    )
    total_kv_tokens: int = Field(default=262_144, ge=1, description="KV-cache tokens of the replica (planner).")
    num_state_slots: int = Field(default=64, ge=1, description="Mamba-state slots of the replica (planner).")
    state_slots_per_request: int = Field(
        default=1, ge=1, description="Slots one running request holds; speculation may need more (planner)."
    )
    prefix_block_tokens: int = Field(
        default=512, ge=1, le=65_536, description="Tokens per prefix-cache block (Mooncake's block size is 512)."
    )
    time_scale: float = Field(
        default=1.0,
        gt=0.0,
        le=1000.0,
        description="Wall seconds per simulated GPU second: 0.1 runs 10x faster than the GPU would.",
    )
    seed: int = Field(default=0, ge=0, description="Seed of acceptance draws; same seed, same draws.")
    max_running_requests: int = Field(default=64, ge=1, le=4096, description="Requests decoded at once, at most.")
    schedule_policy: SchedulePolicy = Field(
        default="fcfs",
        description="SGLang's --schedule-policy for prefill: 'fcfs' (SGLang's default) or "
        "'shortest-prefill-first' (SGLang >= 0.5.21: shortest uncached prefill first, and a long prompt's "
        "chunks leave room in each round for shorter waiting prompts; needs chunked_prefill_tokens).",
    )
    chunked_prefill_tokens: int | None = Field(
        default=None,
        ge=1,
        description="SGLang's --chunked-prefill-size: prompt tokens per prefill forward pass (8192 on an H200); "
        "None: each prompt prefills alone in one step, no chunking.",
    )
    radix_eviction_policy: EvictionPolicy = Field(
        default="lru",
        description="SGLang's --radix-eviction-policy: which cached prefix goes first when the KV pool is "
        "full. 'lru' (SGLang's default), 'slru' (prefixes hit fewer than 2 times before those hit more, "
        "least recent first within each), 'lfu' (fewest hits first, then least recent).",
    )
    page_tokens: int = Field(default=1, ge=1, description="SGLang's --page-size: KV tokens per page (1 by default).")
    hicache_host_tokens: int = Field(
        default=0,
        ge=0,
        description="SGLang's HiCache host-memory tier (--enable-hierarchical-cache): KV tokens kept in host "
        "memory once the GPU cache lets them go, loaded back instead of prefilled (SGLang sizes it by "
        "--hicache-ratio, default 2 x the GPU pool, or --hicache-size in GB); 0: off.",
    )
    hicache_write_policy: WritePolicy = Field(
        default="write_back",
        description="SGLang's --hicache-write-policy: 'write_back' (blocks go to the tiers when the GPU cache "
        "evicts them) or 'write_through' (when first cached; SGLang 0.5.23 skips prompts whose prefill is "
        "chunked, sglang#33714, so this is the policy as it would be with that fixed).",
    )
    hicache_load_ms_per_token: float = Field(
        default=0.002,
        ge=0.0,
        description="GPU ms to load one token's KV from a HiCache tier (65,536 B per token at ~32 GB/s).",
    )
    prefill_pacing: PrefillPacingConfig | None = Field(
        default=None,
        description="Paced prefill of long uncached prompts by the replica (engines/prefill_pacing_config.py); "
        "None: off.",
    )
    new_token_ratio_init: float = Field(
        default=0.7,
        gt=0.0,
        le=1.0,
        description="SGLang's SGLANG_INIT_NEW_TOKEN_RATIO x --schedule-conservativeness: the share of a running "
        "request's remaining max_tokens admission expects it still to generate (admission.py rule `ratio`).",
    )
    new_token_ratio_min_factor: float = Field(
        default=0.14, gt=0.0, le=1.0, description="SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR: the ratio's floor / its start."
    )
    new_token_ratio_decay_steps: int = Field(
        default=600, ge=1, description="SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS: decode steps from start to floor."
    )
    retract_decode_steps: int = Field(
        default=20,
        ge=0,
        description="SGLANG_RETRACT_DECODE_STEPS: tokens per request the ratio adds after a retraction.",
    )
    clip_max_new_tokens: int = Field(
        default=4096,
        ge=1,
        description="SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION: max_tokens admission counts per request, at most (tokens).",
    )
    accept_ema_weight: float = Field(
        default=0.05, gt=0.0, le=1.0, description="Weight of the newest verify step in the acceptance EMA."
    )

    @model_validator(mode="after")
    def _chunking_for_spf(self) -> "SimulatedEngineConfig":
        if self.schedule_policy == "shortest-prefill-first" and self.chunked_prefill_tokens is None:
            raise ValueError(
                "schedule_policy 'shortest-prefill-first' works on chunked prefill: set chunked_prefill_tokens "
                "(SGLang's --chunked-prefill-size; 8192 on an H200)"
            )
        pacing = self.prefill_pacing
        if pacing is not None and pacing.prefix_block_tokens != self.prefix_block_tokens:
            raise ValueError(
                f"prefill_pacing.prefix_block_tokens ({pacing.prefix_block_tokens}) must equal prefix_block_tokens "
                f"({self.prefix_block_tokens}): pieces must end on the cache's blocks"
            )
        if self.chunked_prefill_tokens is not None and self.chunked_prefill_tokens < self.page_tokens:
            raise ValueError(
                f"chunked_prefill_tokens ({self.chunked_prefill_tokens}) must be at least page_tokens "
                f"({self.page_tokens})"
            )
        return self
