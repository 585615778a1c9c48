"""Shared models for the capacity tests: a toy hybrid model with round numbers, and the shipped profile.

Toy shape (worked out once, used everywhere):
  target KV/token  = 2 * 2 full layers * 2 KV heads * 64 dim * 2 B            = 1,024 B
  draft KV/token   = 2 * 1 layer * 2 KV heads * 64 dim * 2 B                  =   512 B
  conv state/layer = (2*2*16 + 4*16) = 128 channels * (4 - 1) * 2 B          =   768 B
  SSM state/layer  = 4 value heads * 16 * 16 * 4 B (float32)                  = 4,096 B
  state/request    = 6 linear layers * (768 + 4,096)                           = 29,184 B
Toy budget: 1 GiB GPU x 0.5 = 536,870,912 B static; target 494,013,312 B (247,006,656 params in bf16)
  + draft 2,000,000 B (1,000,000 params) = 496,013,312 B; rest = 40,857,600 B.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ray_dspine.capacity import CapacityConfig, DraftConfig, ModelProfile, load_shipped_profile


@pytest.fixture
def toy_profile() -> ModelProfile:
    return ModelProfile(
        name="toy",
        source="test",
        num_hidden_layers=8,
        num_full_attention_layers=2,
        num_linear_attention_layers=6,
        hidden_size=256,
        intermediate_size=512,
        vocab_size=1000,
        num_attention_heads=4,
        num_kv_heads=2,
        head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_conv_kernel_dim=4,
        num_params_b=0.247006656,
    )


@pytest.fixture
def toy_draft() -> DraftConfig:
    return DraftConfig(
        name="toy-draft",
        draft_params_b=0.001,
        draft_num_layers=1,
        draft_kv_heads=2,
        draft_head_dim=64,
        speculative_num_draft_tokens=4,
    )


@pytest.fixture
def make_toy_config(toy_draft: DraftConfig) -> Callable[..., CapacityConfig]:
    def make(**overrides: object) -> CapacityConfig:
        fields: dict[str, object] = {
            "gpu": "toy",
            "gpu_memory_gb": 1.0,
            "mem_fraction_static": 0.5,
            "mamba_full_memory_ratio": 1.0,
            "context_length_tokens": 4096,
            "draft": toy_draft,
        }
        fields.update(overrides)
        return CapacityConfig.model_validate(fields)

    return make


@pytest.fixture
def qwen_profile() -> ModelProfile:
    return load_shipped_profile("qwen3.8-27b")


@pytest.fixture
def dspine() -> DraftConfig:
    return DraftConfig(name="DSpine", draft_params_b=2.03, draft_num_layers=5, speculative_num_draft_tokens=16)
