"""KV payloads of prefix blocks: copy a block out of a request's cache, rebuild a cache from blocks.

Rule. Block i of a sequence is, for every layer, the keys and values at positions [i * B, (i + 1) * B),
copied (so evicting a block frees its memory whatever else is alive). A cache rebuilt from a path of
blocks 0..h-1 is, per layer, their concatenation along the position axis: h * B positions, the same
values the request that computed them held, each block copied once into the new cache's buffers
(kv_cache.py). The positions are absolute (rotary embeddings are applied before caching), so a block
is only valid behind the exact prefix it was computed after, which the block cache's tree guarantees.
Cost: O(layers * B * heads * head_dim) per block copied; a rebuild copies h blocks once.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .kv_cache import SlabCache


def block_payload(cache, index: int, block_tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    start, end = index * block_tokens, (index + 1) * block_tokens
    return [
        (layer.keys[:, :, start:end].clone(), layer.values[:, :, start:end].clone()) for layer in cache.layers
    ]


def cache_from_blocks(payloads: Sequence[list[tuple[torch.Tensor, torch.Tensor]]], capacity: int) -> SlabCache:
    """The cache of a path of blocks, with room for `capacity` positions (kv_cache.py)."""
    num_layers = len(payloads[0])
    return SlabCache.holding(
        [([p[layer][0] for p in payloads], [p[layer][1] for p in payloads]) for layer in range(num_layers)], capacity
    )
