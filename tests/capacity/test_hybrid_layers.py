"""The hybrid config's layer kinds (ray_dspine/hybrid_layers.py), one test per rule."""

import pytest

from ray_dspine.hybrid_layers import count_layer_kinds, text_config


def test_rule_text_keys_come_from_text_config_when_there_is_one():
    inner = {"num_hidden_layers": 4}
    assert text_config({"text_config": inner, "num_hidden_layers": 9}) is inner
    root = {"num_hidden_layers": 9}
    assert text_config(root) is root


def test_rule_layer_kinds_every_interval_th_layer_is_full_unless_layer_types_say():
    # 64 layers at interval 4: layers 4, 8, ..., 64 are full, 16 of them
    assert count_layer_kinds({"full_attention_interval": 4}, 64) == (16, 48)
    typed = {"full_attention_interval": 4, "layer_types": ["full_attention", "linear_attention", "full_attention"]}
    assert count_layer_kinds(typed, 3) == (2, 1)
    with pytest.raises(ValueError, match="not a hybrid model"):
        count_layer_kinds({}, 3)
    with pytest.raises(ValueError, match="layer_types has 3 entries, num_hidden_layers is 4"):
        count_layer_kinds(typed, 4)
    with pytest.raises(ValueError, match="unsupported layer types"):
        count_layer_kinds({"layer_types": ["sliding_attention"]}, 1)
