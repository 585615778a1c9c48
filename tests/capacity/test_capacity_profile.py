"""Profile rules: layer kinds, head_dim fallback, text_config nesting, parameter estimate, config.json loading."""

from __future__ import annotations

import json

import pytest

from ray_dspine.capacity import (
    CapacityConfig,
    estimate_num_params,
    list_shipped_profiles,
    load_hf_config,
    profile_from_hf_config,
    resolve_profile,
)
from ray_dspine.capacity.profile import num_embedding_params


def small_config() -> dict[str, object]:
    """A hand-written Qwen3-Next-style config.json: 8 layers, full attention every 4th."""
    return {
        "model_type": "qwen3_next",
        "num_hidden_layers": 8,
        "full_attention_interval": 4,
        "hidden_size": 256,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
    }


def test_shipped_profile_assumes_qwen35_27b_shape(qwen_profile):
    assert "qwen3.8-27b" in list_shipped_profiles()
    assert (qwen_profile.num_hidden_layers, qwen_profile.num_full_attention_layers) == (64, 16)
    assert qwen_profile.num_linear_attention_layers == 48
    assert (qwen_profile.num_kv_heads, qwen_profile.head_dim) == (4, 256)
    assert (qwen_profile.hidden_size, qwen_profile.vocab_size) == (5120, 248_320)
    assert (qwen_profile.linear_num_key_heads, qwen_profile.linear_num_value_heads) == (16, 48)
    assert qwen_profile.assumption is not None
    assert "ASSUMED" in qwen_profile.assumption and "Qwen3.5-27B" in qwen_profile.assumption


def test_rule_parameter_estimate(qwen_profile):
    # embeddings 2 * 248,320 * 5,120                                       =  2,542,796,800
    # MLP 64 * 3 * 5,120 * 17,408                                          = 17,112,760,320
    # full attn 16 * (5,120*6,144*2 + 2*5,120*1,024 + 6,144*5,120 = 104,857,600)  =  1,677,721,600
    # linear 48 * (5,120*10,240 + 5,120*6,144 + 2*5,120*48 + 10,240*4 + 6,144*5,120 = 115,875,840)
    #                                                                      =  5,562,040,320
    assert num_embedding_params(qwen_profile) == 2_542_796_800
    assert estimate_num_params(qwen_profile) == 26_895_319_040  # ~26.9B
    stated = qwen_profile.model_copy(update={"num_params_b": 27.0})
    assert estimate_num_params(stated) == 27_000_000_000


def test_rule_full_attention_interval():
    profile = profile_from_hf_config(small_config(), name="small", source="test")
    # layers 3 and 7 satisfy (i + 1) % 4 == 0
    assert (profile.num_full_attention_layers, profile.num_linear_attention_layers) == (2, 6)


def test_rule_layer_types_win_over_interval():
    config = small_config() | {
        "num_hidden_layers": 4,
        "full_attention_interval": 2,
        "layer_types": ["linear_attention", "full_attention", "linear_attention", "linear_attention"],
    }
    profile = profile_from_hf_config(config, name="small", source="test")
    assert (profile.num_full_attention_layers, profile.num_linear_attention_layers) == (1, 3)


def test_rule_head_dim_fallback_and_explicit():
    assert profile_from_hf_config(small_config(), name="s", source="t").head_dim == 64  # 256 // 4
    assert profile_from_hf_config(small_config() | {"head_dim": 128}, name="s", source="t").head_dim == 128


def test_rule_text_config_nesting():
    wrapped = {"model_type": "qwen3_5", "text_config": small_config()}
    assert profile_from_hf_config(wrapped, name="s", source="t").num_hidden_layers == 8


def test_load_hf_config_from_file_and_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(small_config()), encoding="utf-8")
    from_file = load_hf_config(tmp_path / "config.json")
    from_dir = load_hf_config(tmp_path)
    assert from_file == from_dir
    assert from_file.source == str(tmp_path / "config.json")
    assert from_file.assumption is None
    assert (from_file.num_kv_heads, from_file.linear_conv_kernel_dim) == (2, 4)


def test_resolve_profile_prefers_config_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(small_config()), encoding="utf-8")
    cfg = CapacityConfig(gpu="H200", mem_fraction_static=0.88, target_config_path=str(tmp_path / "config.json"))
    assert resolve_profile(cfg).num_hidden_layers == 8
    shipped = CapacityConfig(gpu="H200", mem_fraction_static=0.88)
    assert resolve_profile(shipped).name == "qwen3.8-27b"


def test_loader_refuses_bad_configs():
    with pytest.raises(ValueError, match="not a hybrid model"):
        profile_from_hf_config({k: v for k, v in small_config().items() if k != "full_attention_interval"},
                               name="s", source="t")  # fmt: skip
    with pytest.raises(ValueError, match="missing integer 'linear_num_key_heads'"):
        profile_from_hf_config({k: v for k, v in small_config().items() if k != "linear_num_key_heads"},
                               name="s", source="t")  # fmt: skip
    with pytest.raises(ValueError, match="unsupported layer types"):
        profile_from_hf_config(small_config() | {"layer_types": ["sliding_attention"] * 8}, name="s", source="t")
    with pytest.raises(ValueError, match="no shipped profile"):
        resolve_profile(CapacityConfig(gpu="H200", mem_fraction_static=0.88, target_profile="nope"))
