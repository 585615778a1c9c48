"""The target model's shape, from a shipped profile or a Hugging Face `config.json`.

Rules:
    text keys, layer kinds: ray_dspine/hybrid_layers.py (64 layers at full_attention_interval 4: 16
                    full-attention and 48 linear-attention layers).
    head_dim:       `head_dim` if present, else hidden_size // num_attention_heads.
    parameters:     num_params_b if the profile states it, else estimated from the shape
                    (H hidden, I MLP width, V vocab, nh/nkv/hd attention heads, nk/nv/dk/dv linear heads,
                    K conv kernel; norms and biases ignored, < 0.01 %):
                      embeddings   V*H, twice unless tie_word_embeddings
                      MLP          3*H*I per layer
                      full attn    H*nh*hd*(2 if attn_output_gate else 1) + 2*H*nkv*hd + nh*hd*H
                      linear attn  H*(2*nk*dk + nv*dv) + H*nv*dv + 2*H*nv + (2*nk*dk + nv*dv)*K + nv*dv*H
Complexity: O(num_hidden_layers) to count layer kinds; everything else O(1).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ray_dspine.capacity.config import CapacityConfig
from ray_dspine.hybrid_layers import count_layer_kinds, text_config

PROFILE_PACKAGE = "ray_dspine.capacity"
PROFILE_DIR = "profiles"


class ModelProfile(BaseModel):
    """The numbers the planner needs about a hybrid (full + linear attention) target model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Profile name, e.g. 'qwen3.8-27b'.")
    source: str = Field(description="Where the shape came from: a shipped profile name or a config.json path.")
    assumption: str | None = Field(default=None, description="Set when the shape is assumed rather than read.")
    num_hidden_layers: int = Field(ge=1, le=1024)
    num_full_attention_layers: int = Field(ge=1, le=1024, description="Layers that keep a per-token KV cache.")
    num_linear_attention_layers: int = Field(ge=1, le=1024, description="Layers that keep a fixed recurrent state.")
    hidden_size: int = Field(ge=1)
    intermediate_size: int = Field(ge=1, description="Dense MLP width.")
    vocab_size: int = Field(ge=1)
    tie_word_embeddings: bool = False
    num_attention_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1, description="Full-attention KV heads (before TP sharding).")
    head_dim: int = Field(ge=1)
    attn_output_gate: bool = Field(default=True, description="q_proj also emits a sigmoid output gate (Qwen3.5).")
    linear_num_key_heads: int = Field(ge=1, description="Gated DeltaNet key heads (SGLang's n_groups).")
    linear_num_value_heads: int = Field(ge=1, description="Gated DeltaNet value heads (SGLang's num_heads).")
    linear_key_head_dim: int = Field(ge=1, description="Key head dim (SGLang's state_size).")
    linear_value_head_dim: int = Field(ge=1, description="Value head dim (SGLang's head_dim).")
    linear_conv_kernel_dim: int = Field(ge=2, le=64, description="Short causal conv width; state keeps K-1 steps.")
    max_position_embeddings: int = Field(default=262_144, ge=1)
    num_params_b: float | None = Field(default=None, gt=0.0, description="Stated parameter count (billions).")
    multimodal: bool = Field(
        default=False,
        description="The checkpoint carries a vision tower (a `*ForConditionalGeneration` architecture or a "
        "vision_config): SGLang then reserves its multimodal cache out of the KV budget.",
    )

    @model_validator(mode="after")
    def _check_layers(self) -> ModelProfile:
        total = self.num_full_attention_layers + self.num_linear_attention_layers
        if total != self.num_hidden_layers:
            raise ValueError(
                f"{self.num_full_attention_layers} full + {self.num_linear_attention_layers} linear layers "
                f"!= num_hidden_layers {self.num_hidden_layers}"
            )
        return self


def num_embedding_params(profile: ModelProfile) -> int:
    """Input embedding plus LM head (once if tied): V*H*(1 or 2)."""
    copies = 1 if profile.tie_word_embeddings else 2
    return profile.vocab_size * profile.hidden_size * copies


def estimate_num_params(profile: ModelProfile) -> int:
    """Parameter count: the stated num_params_b, else the shape estimate in the module docstring."""
    if profile.num_params_b is not None:
        return int(round(profile.num_params_b * 1e9))
    h = profile.hidden_size
    mlp = 3 * h * profile.intermediate_size
    q_width = profile.num_attention_heads * profile.head_dim
    kv_width = profile.num_kv_heads * profile.head_dim
    full_attn = h * q_width * (2 if profile.attn_output_gate else 1) + 2 * h * kv_width + q_width * h
    key_width = profile.linear_num_key_heads * profile.linear_key_head_dim
    value_width = profile.linear_num_value_heads * profile.linear_value_head_dim
    conv_dim = 2 * key_width + value_width
    linear_attn = (
        h * conv_dim  # fused q, k, v projection
        + h * value_width  # output-gate projection z
        + 2 * h * profile.linear_num_value_heads  # decay (a) and beta (b) projections
        + conv_dim * profile.linear_conv_kernel_dim  # depthwise causal conv
        + value_width * h  # output projection
    )
    return (
        num_embedding_params(profile)
        + profile.num_hidden_layers * mlp
        + profile.num_full_attention_layers * full_attn
        + profile.num_linear_attention_layers * linear_attn
    )


def _require_int(text: Mapping[str, object], key: str) -> int:
    value = text.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"config.json is missing integer {key!r}")
    return value


def _optional_int(text: Mapping[str, object], key: str, default: int) -> int:
    value = text.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def profile_from_hf_config(
    config: Mapping[str, object], *, name: str, source: str, assumption: str | None = None
) -> ModelProfile:
    """Build a profile from a parsed Qwen3-Next / Qwen3.5-style `config.json` mapping (no I/O)."""
    text = text_config(config)
    num_layers = _require_int(text, "num_hidden_layers")
    num_full, num_linear = count_layer_kinds(text, num_layers)
    hidden = _require_int(text, "hidden_size")
    num_heads = _require_int(text, "num_attention_heads")
    head_dim = text.get("head_dim")
    params_b = config.get("num_params_b", text.get("num_params_b"))
    return ModelProfile(
        name=name,
        source=source,
        assumption=assumption,
        num_hidden_layers=num_layers,
        num_full_attention_layers=num_full,
        num_linear_attention_layers=num_linear,
        hidden_size=hidden,
        intermediate_size=_require_int(text, "intermediate_size"),
        vocab_size=_require_int(text, "vocab_size"),
        tie_word_embeddings=bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        num_attention_heads=num_heads,
        num_kv_heads=_require_int(text, "num_key_value_heads"),
        head_dim=head_dim if isinstance(head_dim, int) else hidden // num_heads,
        attn_output_gate=bool(text.get("attn_output_gate", True)),
        linear_num_key_heads=_require_int(text, "linear_num_key_heads"),
        linear_num_value_heads=_require_int(text, "linear_num_value_heads"),
        linear_key_head_dim=_require_int(text, "linear_key_head_dim"),
        linear_value_head_dim=_require_int(text, "linear_value_head_dim"),
        linear_conv_kernel_dim=_require_int(text, "linear_conv_kernel_dim"),
        max_position_embeddings=_optional_int(text, "max_position_embeddings", 262_144),
        num_params_b=float(params_b) if isinstance(params_b, (int, float)) else None,
        multimodal="vision_config" in config
        or any(str(arch).endswith("ForConditionalGeneration") for arch in config.get("architectures") or []),
    )


def load_hf_config(path: str | Path) -> ModelProfile:
    """Read a `config.json` file (or a model directory holding one) into a profile."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    config = json.loads(file.read_text(encoding="utf-8"))
    name = str(config.get("name") or file.parent.name or "model")
    return profile_from_hf_config(config, name=name, source=str(file))


def list_shipped_profiles() -> list[str]:
    """Names of the profiles shipped under ray_dspine/capacity/profiles/."""
    folder = resources.files(PROFILE_PACKAGE).joinpath(PROFILE_DIR)
    return sorted(entry.name.removesuffix(".json") for entry in folder.iterdir() if entry.name.endswith(".json"))


def load_shipped_profile(name: str) -> ModelProfile:
    """Load a shipped profile by name; its `assumption` field says what is assumed rather than read."""
    entry = resources.files(PROFILE_PACKAGE).joinpath(PROFILE_DIR, f"{name}.json")
    if not entry.is_file():
        raise ValueError(f"no shipped profile {name!r}; shipped: {', '.join(list_shipped_profiles())}")
    config = json.loads(entry.read_text(encoding="utf-8"))
    assumption = config.get("assumption")
    return profile_from_hf_config(
        config, name=name, source=f"shipped:{name}", assumption=str(assumption) if assumption else None
    )


def resolve_profile(cfg: CapacityConfig) -> ModelProfile:
    """The profile a pool plans with: its config.json when a path is given, else the shipped profile."""
    if cfg.target_config_path is not None:
        return load_hf_config(cfg.target_config_path)
    assert cfg.target_profile is not None  # guaranteed by CapacityConfig's validator
    return load_shipped_profile(cfg.target_profile)
