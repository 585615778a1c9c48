"""The slab KV cache (kv_cache.py): appends in place, crops without copying, grows by doubling."""

import pytest
import torch
from transformers import DynamicCache

from ray_dspine.engines.embedded.kv_cache import GROW_TOKENS, SlabCache, SlabLayer, grown_capacity


def _kv(start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(1 batch, 2 heads, count positions, 3 dims) whose values name their position: k = p, v = -p."""
    positions = torch.arange(start, start + count, dtype=torch.float32).view(1, 1, count, 1).expand(1, 2, count, 3)
    return positions.clone(), -positions.clone()


def test_grown_capacity_by_hand():
    assert GROW_TOKENS == 256
    assert grown_capacity(300, 301) == 768  # 2 * 300 = 600, rounded up to 3 * 256
    assert grown_capacity(256, 1000) == 1024  # what is needed wins over doubling; 1000 -> 4 * 256
    assert grown_capacity(512, 513) == 1024  # doubling lands on a multiple already


def test_update_writes_in_place_and_returns_what_is_held():
    layer = SlabLayer(capacity=10)
    keys, values = layer.update(*_kv(0, 4))
    buffer = layer._keys.data_ptr()
    assert layer.capacity == 10 and layer.get_seq_length() == 4
    keys, values = layer.update(*_kv(4, 3))
    assert layer._keys.data_ptr() == buffer  # 7 <= 10 positions: nothing moved
    assert keys[0, 0, :, 0].tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert values[0, 1, :, 2].tolist() == [0, -1, -2, -3, -4, -5, -6]
    assert torch.equal(layer.keys, keys) and layer.keys.data_ptr() == buffer  # a view of the buffer


def test_crop_forgets_without_copying_and_the_next_update_writes_over():
    layer = SlabLayer(capacity=10)
    layer.update(*_kv(0, 6))
    layer.crop(-2)  # a verify step rejected its last 2 drafts
    assert layer.get_seq_length() == 4 and layer.keys[0, 0, :, 0].tolist() == [0, 1, 2, 3]
    keys, _ = layer.update(*_kv(40, 2))
    assert keys[0, 0, :, 0].tolist() == [0, 1, 2, 3, 40, 41]
    layer.crop(3)  # transformers' other convention: keep the first 3
    assert layer.keys[0, 0, :, 0].tolist() == [0, 1, 2]
    layer.crop(5)  # keeping more than is held keeps all of it
    assert layer.get_seq_length() == 3


def test_growing_past_capacity_keeps_the_held_positions():
    layer = SlabLayer(capacity=4)
    layer.update(*_kv(0, 3))
    keys, values = layer.update(*_kv(3, 3))  # 6 > 4: moves into max(6, 2 * 4) -> 256 positions
    assert layer.capacity == 256
    assert keys[0, 1, :, 1].tolist() == [0, 1, 2, 3, 4, 5] and values[0, 0, :, 0].tolist() == [0, -1, -2, -3, -4, -5]


def test_cache_matches_dynamic_cache_layer_for_layer():
    slab, dynamic = SlabCache(capacity=8), DynamicCache()
    assert slab.get_seq_length() == 0
    for start, count in [(0, 5), (5, 1), (6, 4)]:
        for layer_idx in range(2):
            a = slab.update(*_kv(start + 100 * layer_idx, count), layer_idx)
            b = dynamic.update(*_kv(start + 100 * layer_idx, count), layer_idx)
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    slab.crop(-3)
    dynamic.crop(-3)
    assert slab.get_seq_length() == dynamic.get_seq_length() == 7
    assert torch.equal(slab.layers[1].keys, dynamic.layers[1].keys)


def test_holding_concatenates_pieces_into_one_buffer():
    first, second = _kv(0, 2), _kv(2, 3)
    cache = SlabCache.holding([([first[0], second[0]], [first[1], second[1]])], capacity=16)
    assert cache.get_seq_length() == 5 and cache.layers[0].capacity == 16
    assert cache.layers[0].keys[0, 0, :, 0].tolist() == [0, 1, 2, 3, 4]
    assert cache.layers[0].values[0, 0, :, 0].tolist() == [0, -1, -2, -3, -4]


def test_batch_reshaping_is_refused():
    layer = SlabLayer()
    layer.update(*_kv(0, 1))
    with pytest.raises(ValueError, match="one sequence"):
        layer.batch_repeat_interleave(2)


def test_model_logits_bit_identical_to_dynamic_cache(tiny):
    # prefill, a 4-token verify block, crop 2 rejected, a 1-token step: the same bits on both caches
    model = tiny.model
    runs = []
    for cache in (SlabCache(capacity=16), DynamicCache()):
        with torch.inference_mode():
            outs = [model(input_ids=torch.tensor([[5, 6, 7, 8, 9, 10, 11]]), past_key_values=cache).logits]
            outs.append(model(input_ids=torch.tensor([[12, 13, 14, 15]]), past_key_values=cache).logits)
            cache.crop(-2)
            outs.append(model(input_ids=torch.tensor([[20]]), past_key_values=cache).logits)
        runs.append(outs)
    for slab_logits, dynamic_logits in zip(*runs):
        assert torch.equal(slab_logits, dynamic_logits)
