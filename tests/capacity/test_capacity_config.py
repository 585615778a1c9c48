"""Config rules: GPU memory lookup and override, bounds, unknown fields."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ray_dspine.capacity import GPU_SPECS, CapacityConfig, DraftConfig


def test_rule_gpu_memory_lookup_and_override():
    # nvidia-smi totals: H200 143,771 MiB = 140.40 GiB; H100 81,559 MiB = 79.65 GiB
    assert CapacityConfig(gpu="H200", mem_fraction_static=0.88).resolved_gpu_memory_gb() == 143_771 / 1024
    assert round(GPU_SPECS["H100"].memory_gb, 2) == 79.65
    assert CapacityConfig(gpu="H200", gpu_memory_gb=141.0, mem_fraction_static=0.88).resolved_gpu_memory_gb() == 141.0
    assert CapacityConfig(gpu="B300", gpu_memory_gb=268.0, mem_fraction_static=0.9).resolved_gpu_memory_gb() == 268.0
    with pytest.raises(ValidationError, match="unknown gpu 'B300'"):
        CapacityConfig(gpu="B300", mem_fraction_static=0.9)


def test_config_bounds_and_forbidden_fields():
    with pytest.raises(ValidationError):
        CapacityConfig(gpu="H200", mem_fraction_static=1.0)
    with pytest.raises(ValidationError):
        CapacityConfig(gpu="H200", mem_fraction_static=0.88, tensor_parallel_size=16)
    with pytest.raises(ValidationError):
        CapacityConfig(gpu="H200", mem_fraction_static=0.88, mem_fraction=0.9)
    with pytest.raises(ValidationError, match="target_profile or target_config_path"):
        CapacityConfig(gpu="H200", mem_fraction_static=0.88, target_profile=None)
    with pytest.raises(ValidationError):
        DraftConfig(draft_params_b=2.03, draft_num_layers=5, speculative_num_draft_tokens=0)


def test_config_from_yaml_like_mapping():
    cfg = CapacityConfig.model_validate(
        {
            "gpu": "H100",
            "tensor_parallel_size": 2,
            "mem_fraction_static": 0.85,
            "draft": {"name": "DFlash2", "draft_params_b": 2.03, "draft_num_layers": 5,
                      "speculative_num_draft_tokens": 8},
        }  # fmt: skip
    )
    assert cfg.draft is not None and cfg.draft.speculative_num_draft_tokens == 8
    assert cfg.target_profile == "qwen3.8-27b"
