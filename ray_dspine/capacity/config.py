"""What a pool's YAML says about the hardware and the engine's memory knobs.

Rules:
    gpu memory:  gpu_memory_gb if given, else GPU_SPECS[gpu].memory_gb (unknown name -> error).
    dtype bytes: bf16 = 2, fp8 (any fp8_* KV format) = 1; Mamba SSM state float32 = 4,
                 bfloat16/float16 = 2.

Units: every `_gb` here is GiB (2**30 bytes), the unit SGLang's memory logs call "GB".
GPU totals are what `nvidia-smi` reports (H200 143,771 MiB; H100 SXM 81,559 MiB; A100 80GB 81,920 MiB).
Validators only check shapes and bounds; reading a `config.json` happens in `profile.py`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

WeightDtype = Literal["bf16", "fp8"]
KvDtype = Literal["bf16", "fp8_e4m3", "fp8_e5m2"]
SsmDtype = Literal["float32", "bfloat16", "float16"]
MambaStrategy = Literal["snapshot_per_draft", "replay_ssm"]
MambaRadixCacheStrategy = Literal["no_buffer", "extra_buffer"]

MIB_PER_GIB = 1024


class GpuSpec(BaseModel):
    """One accelerator model's memory, as the driver reports it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Short GPU name used in pool configs, e.g. 'H200'.")
    memory_gb: float = Field(gt=0.0, le=1024.0, description="Total device memory in GiB (nvidia-smi total).")
    device_name: str = Field(description="The name the driver reports (torch.cuda.get_device_name).")
    compute_capability: tuple[int, int] = Field(description="CUDA compute capability (major, minor).")


GPU_SPECS: dict[str, GpuSpec] = {
    "H200": GpuSpec(name="H200", memory_gb=143_771 / MIB_PER_GIB, device_name="NVIDIA H200", compute_capability=(9, 0)),
    "H100": GpuSpec(
        name="H100", memory_gb=81_559 / MIB_PER_GIB, device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0)
    ),
    "A100-80GB": GpuSpec(
        name="A100-80GB", memory_gb=81_920 / MIB_PER_GIB, device_name="NVIDIA A100-SXM4-80GB",
        compute_capability=(8, 0),
    ),  # fmt: skip
}

WEIGHT_DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp8": 1}
KV_DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
SSM_DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}


class DraftConfig(BaseModel):
    """The speculative drafter a pool runs (DSpine: 16 draft tokens; DFlash2: 8)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="draft", min_length=1, description="Label for reports, e.g. 'DSpine', 'DFlash2'.")
    draft_params_b: float = Field(gt=0.0, le=100.0, description="Draft parameters in billions (DSpine: 2.03).")
    draft_weight_dtype: WeightDtype = Field(default="bf16", description="Draft weight dtype.")
    draft_num_layers: int = Field(ge=1, le=64, description="Draft transformer layers that keep KV (DSpine: 5).")
    draft_kv_heads: int = Field(
        default=4, ge=1, le=128, description="Draft KV heads (4 x 128 gives SGLang's 10,240 B/token for 5 layers)."
    )
    draft_head_dim: int = Field(default=128, ge=16, le=1024, description="Draft attention head dimension.")
    speculative_num_draft_tokens: int = Field(
        ge=1, le=64, description="Tokens drafted per block and verified in one target pass (DSpine 16, DFlash2 8)."
    )
    draft_window_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Sliding-window length of the draft's KV (e.g. 8192); None keeps draft KV for every token.",
    )


class CapacityConfig(BaseModel):
    """The capacity-relevant part of a pool: GPU, parallelism, memory fractions, model and drafter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(min_length=1, description="GPU name; looked up in GPU_SPECS unless gpu_memory_gb is set.")
    gpu_memory_gb: float | None = Field(
        default=None, gt=0.0, le=1024.0, description="Per-GPU memory in GiB; overrides the GPU_SPECS lookup."
    )
    tensor_parallel_size: int = Field(default=1, ge=1, le=8, description="GPUs one replica shards over.")
    mem_fraction_static: float = Field(
        gt=0.0, lt=1.0, description="SGLang --mem-fraction-static: share of GPU memory for weights + KV + state."
    )
    target_profile: str | None = Field(
        default="qwen3.8-27b", description="Name of a shipped model profile (ray_dspine/capacity/profiles/*.json)."
    )
    target_config_path: str | None = Field(
        default=None, description="Path to the target's HF config.json; when set it wins over target_profile."
    )
    weight_dtype: WeightDtype = Field(default="bf16", description="Target weight dtype (embeddings stay bf16).")
    kv_dtype: KvDtype = Field(default="bf16", description="KV-cache dtype for target and draft.")
    mamba_ssm_dtype: SsmDtype = Field(
        default="float32", description="Recurrent (SSM / delta-rule) state dtype; SGLang's default is float32."
    )
    draft: DraftConfig | None = Field(default=None, description="The drafter; None serves autoregressively.")
    mamba_strategy: MambaStrategy = Field(
        default="snapshot_per_draft",
        description="snapshot_per_draft keeps one Mamba state per draft token for rollback; replay_ssm replays "
        "accepted tokens instead and keeps no per-draft snapshots.",
    )
    mamba_full_memory_ratio: float = Field(
        default=0.9, gt=0.0, le=100.0, description="SGLang --mamba-full-memory-ratio: Mamba memory / KV memory."
    )
    mamba_radix_cache_strategy: MambaRadixCacheStrategy = Field(
        default="no_buffer",
        description="SGLang --mamba-radix-cache-strategy: no_buffer (3 state slots per running request; SGLang "
        "requires the overlap scheduler off) or extra_buffer (adds ping-pong slots, keeps overlap scheduling).",
    )
    radix_cache_enabled: bool = Field(default=True, description="False passes --disable-radix-cache.")
    overlap_schedule_enabled: bool | None = Field(
        default=None,
        description="Whether SGLang's overlap scheduler runs; None takes what the strategy allows (off for "
        "no_buffer, on for extra_buffer). Off renders --disable-overlap-schedule.",
    )
    context_length_tokens: int = Field(
        default=262_144, ge=1, le=4_194_304, description="Longest request (prompt + output) a replica must hold."
    )
    max_running_requests: int | None = Field(
        default=None, ge=1, le=65_536, description="Optional cap on concurrent requests per replica."
    )

    @model_validator(mode="after")
    def _check_sources(self) -> CapacityConfig:
        if self.gpu_memory_gb is None and self.gpu not in GPU_SPECS:
            known = ", ".join(sorted(GPU_SPECS))
            raise ValueError(f"unknown gpu {self.gpu!r}: set gpu_memory_gb or use one of {known}")
        if self.target_profile is None and self.target_config_path is None:
            raise ValueError("set target_profile or target_config_path")
        if self.overlap_schedule_enabled and self.mamba_radix_cache_strategy == "no_buffer" and self.radix_cache_enabled:
            raise ValueError(
                "mamba_radix_cache_strategy no_buffer cannot run with overlap_schedule_enabled: true (SGLang 0.5.23 "
                "asserts 'no_buffer do not support overlap schedule'); leave overlap_schedule_enabled unset or use "
                "mamba_radix_cache_strategy: extra_buffer"
            )
        return self

    def overlap_schedule(self) -> bool:
        """Whether the overlap scheduler runs: the explicit setting, else what the strategy allows."""
        if self.overlap_schedule_enabled is not None:
            return self.overlap_schedule_enabled
        return self.mamba_radix_cache_strategy == "extra_buffer" or not self.radix_cache_enabled

    def resolved_gpu_memory_gb(self) -> float:
        """Per-GPU memory in GiB: the override if set, else the GPU_SPECS entry."""
        if self.gpu_memory_gb is not None:
            return self.gpu_memory_gb
        return GPU_SPECS[self.gpu].memory_gb
