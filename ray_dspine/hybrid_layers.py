"""Which layers of a hybrid (full + linear attention) Hugging Face config keep a KV cache.

Rules:
    text keys:   read from `config["text_config"]` when present (Qwen3.5 multimodal wrapper), else the root.
    layer kinds: `layer_types` (a list of "full_attention" / "linear_attention") wins; else layer i
                 (0-based) is full attention iff (i + 1) % full_attention_interval == 0, so 64 layers at
                 interval 4 give 16 full-attention and 48 linear-attention (Gated DeltaNet) layers.
No third-party import: the GPU timing tool reads configs with it on machines that have only PyTorch.
Complexity: O(num_hidden_layers).
"""

from __future__ import annotations

from collections.abc import Mapping


def text_config(config: Mapping[str, object]) -> Mapping[str, object]:
    """Rule `text keys`."""
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


def count_layer_kinds(text: Mapping[str, object], num_layers: int) -> tuple[int, int]:
    """Rule `layer kinds`: (full-attention layers, linear-attention layers); ValueError if not hybrid."""
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list):
        if len(layer_types) != num_layers:
            raise ValueError(f"layer_types has {len(layer_types)} entries, num_hidden_layers is {num_layers}")
        unknown = sorted({str(t) for t in layer_types} - {"full_attention", "linear_attention"})
        if unknown:
            raise ValueError(f"unsupported layer types {unknown}")
        num_full = sum(1 for t in layer_types if t == "full_attention")
        return num_full, num_layers - num_full
    interval = text.get("full_attention_interval")
    if not isinstance(interval, int) or interval < 1:
        raise ValueError("config has neither layer_types nor full_attention_interval: not a hybrid model")
    num_full = sum(1 for i in range(num_layers) if (i + 1) % interval == 0)
    return num_full, num_layers - num_full
