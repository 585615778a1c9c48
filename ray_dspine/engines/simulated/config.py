"""Configuration of the simulated engine (a performance twin: no weights, calibrated timings)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ...capacity.config import CapacityConfig

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
    accept_ema_weight: float = Field(
        default=0.05, gt=0.0, le=1.0, description="Weight of the newest verify step in the acceptance EMA."
    )
