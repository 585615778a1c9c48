"""Capacity planning: what a pool's replica holds on its GPUs (weights, KV tokens, Mamba slots).

Pure: never imports ray. `plan_capacity(cfg, resolve_profile(cfg))` is the usual call.
"""

from ray_dspine.capacity.config import GPU_SPECS, CapacityConfig, DraftConfig, GpuSpec
from ray_dspine.capacity.planner import CapacityError, CapacityPlan, plan_capacity
from ray_dspine.capacity.profile import (
    ModelProfile,
    estimate_num_params,
    list_shipped_profiles,
    load_hf_config,
    load_shipped_profile,
    profile_from_hf_config,
    resolve_profile,
)
from ray_dspine.capacity.report import format_plan

__all__ = [
    "GPU_SPECS",
    "CapacityConfig",
    "CapacityError",
    "CapacityPlan",
    "DraftConfig",
    "GpuSpec",
    "ModelProfile",
    "estimate_num_params",
    "format_plan",
    "list_shipped_profiles",
    "load_hf_config",
    "load_shipped_profile",
    "plan_capacity",
    "profile_from_hf_config",
    "resolve_profile",
]
