"""A request's KV cache with room to grow: a step writes its new keys in place, the held ones stay put.

Rule. Every layer keeps its keys and values in buffers of shape (batch, kv heads, capacity, head dim)
and holds positions [0, length). `update` with q new positions writes them at [length, length + q)
and returns views of [0, length + q): what was held is not copied. An update that would pass the
capacity first moves the held positions into buffers of max(length + q, 2 * capacity) positions,
rounded up to a multiple of GROW_TOKENS. `crop(-r)` forgets the last r positions (no copy; the next
update writes over them). `keys` and `values` are always the views of [0, length).
Why: transformers' DynamicLayer concatenates on every update, so every step copies every held
position of every layer, a cost that grows with the context, which an agent's conversation makes long;
here appending n positions copies O(n) in all. On the engine's CPU model, a one-token step behind 3,000
positions took 60.4 ms with the copying cache and 48.3 ms with this one (docs/results/embedded-engine.md).
Capacity: a request's cache starts with the positions its admission reserved (prompt, max_tokens and
one verify block; `Sequence.kv_capacity`), so it never moves in the common case; the buffers are
allocated, not written, so memory is touched only as positions are written.
Numerics: attention reads a strided view instead of a contiguous copy; the values and their order
are the same, and the greedy-identity tests run on this cache.
Complexity: update O(q) copies (amortized O(q) when it grows), crop O(1), views O(1).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

GROW_TOKENS = 256


def grown_capacity(capacity: int, needed: int) -> int:
    """max(needed, 2 * capacity) rounded up to a multiple of GROW_TOKENS."""
    want = max(needed, 2 * capacity)
    return -(-want // GROW_TOKENS) * GROW_TOKENS


class SlabLayer(DynamicLayer):
    """One layer's keys and values in buffers with spare positions (rule above)."""

    def __init__(self, capacity: int = GROW_TOKENS, **kwargs):
        super().__init__(**kwargs)
        self.capacity_hint = max(1, capacity)
        self.length = 0
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None

    @property
    def capacity(self) -> int:
        return 0 if self._keys is None else self._keys.shape[-2]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.length = 0
        self.is_initialized = True

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, needed: int) -> None:
        capacity = max(self.capacity_hint, needed) if self._keys is None else grown_capacity(self.capacity, needed)
        keys = key_states.new_empty(*key_states.shape[:-2], capacity, key_states.shape[-1])
        values = value_states.new_empty(*value_states.shape[:-2], capacity, value_states.shape[-1])
        if self.length:
            keys[..., : self.length, :].copy_(self._keys[..., : self.length, :])
            values[..., : self.length, :].copy_(self._values[..., : self.length, :])
        self._keys, self._values = keys, values

    def _views(self) -> None:
        self.keys = self._keys[..., : self.length, :]
        self.values = self._values[..., : self.length, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        if end > self.capacity:
            self._grow(key_states, value_states, end)
        self._keys[..., start:end, :].copy_(key_states)
        self._values[..., start:end, :].copy_(value_states)
        self.length = end
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """crop(-r): forget the last r positions; crop(n >= 0): keep the first n (transformers' convention)."""
        if not self.is_initialized:
            return
        if tokens_to_remove < 0:
            self.length = max(0, self.length + tokens_to_remove)
        else:
            self.length = min(self.length, tokens_to_remove)
        self._views()

    def reset(self) -> None:
        self._keys = self._values = None
        self.length = 0
        super().reset()

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise ValueError("a request's slab cache holds one sequence; it has no batch to repeat")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise ValueError("a request's slab cache holds one sequence; it has no batch to select from")


class SlabCache(Cache):
    """transformers' Cache of `SlabLayer`s, each starting with room for `capacity` positions."""

    def __init__(self, capacity: int = GROW_TOKENS):
        super().__init__(layers=[])
        self.capacity = capacity

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        while len(self.layers) <= layer_idx:
            self.layers.append(SlabLayer(self.capacity))
        return self.layers[layer_idx].update(key_states, value_states)

    @classmethod
    def holding(cls, layers: list[tuple[list[torch.Tensor], list[torch.Tensor]]], capacity: int) -> SlabCache:
        """A cache holding, per layer, the concatenation of the given key and value pieces along positions
        (one copy of each piece, no intermediate concatenation)."""
        cache = cls(capacity)
        for layer_idx, (key_pieces, value_pieces) in enumerate(layers):
            layer = SlabLayer(capacity)
            cache.layers.append(layer)
            for keys, values in zip(key_pieces, value_pieces):
                layer.update(keys, values)
        return cache
