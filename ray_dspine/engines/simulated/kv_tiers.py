"""HiCache tiers of a simulated replica: a host-memory tier (L2) of its own, a store (L3) shared by replicas.

SGLang's hierarchical cache (`--enable-hierarchical-cache`) keeps KV blocks the GPU cache no longer
holds in host memory (`--hicache-ratio` / `--hicache-size`) and, with `--hicache-storage-backend`, in
a store every replica can read (Mooncake, 3FS). A block in a tier is loaded back, not prefilled.

Rules (blocks named by their chained hashes, as in prefix_cache.py):
  write:  write_back (SGLang's `--hicache-write-policy write_back`): a block the device cache evicts is
          written to the host tier and to the store; write_through: a block is written to both when
          the device cache first inserts it (as SGLang 0.5.23 would if it backed up chunked prefills:
          it skips every prompt whose uncached part exceeds --chunked-prefill-size, sglang#33714).
  lru:    a tier holds at most `capacity_blocks`; writing a block it holds, or a hit on it, makes the
          block its most recent; a write past capacity drops the least recent blocks.
  run:    after the device cache's leading run of h blocks, the tiers extend it by the next blocks
          present in the host tier or the store, in order, stopping at the first block in neither.
Parameters: capacity_blocks >= 1.
Complexity: write, touch, contains O(1); run O(blocks of the run).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal

WritePolicy = Literal["write_back", "write_through"]


class KvTier:
    """One tier: an LRU set of block hashes."""

    def __init__(self, capacity_blocks: int):
        if capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks}")
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[str, None] = OrderedDict()
        self.num_dropped_blocks = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def contains(self, block_hash: str) -> bool:
        return block_hash in self._blocks

    def write(self, block_hash: str) -> None:
        self._blocks[block_hash] = None
        self._blocks.move_to_end(block_hash)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
            self.num_dropped_blocks += 1

    def touch(self, block_hash: str) -> None:
        if block_hash in self._blocks:
            self._blocks.move_to_end(block_hash)


class KvTiers:
    """The host tier and store under one device cache (either may be absent)."""

    def __init__(self, host: KvTier | None, store: KvTier | None, write_policy: WritePolicy):
        self.host = host
        self.store = store
        self.write_policy = write_policy

    def _targets(self) -> list[KvTier]:
        return [tier for tier in (self.host, self.store) if tier is not None]

    def on_insert(self, block_hash: str) -> None:
        if self.write_policy == "write_through":
            for tier in self._targets():
                tier.write(block_hash)

    def on_evict(self, block_hash: str) -> None:
        if self.write_policy == "write_back":
            for tier in self._targets():
                tier.write(block_hash)

    def run(self, block_hashes: Sequence[str], start: int) -> int:
        """Rule `run`: blocks after the first `start` found in a tier, contiguous."""
        tiers = self._targets()
        num = 0
        for block_hash in block_hashes[start:]:
            if not any(tier.contains(block_hash) for tier in tiers):
                break
            num += 1
        return num

    def touch(self, block_hashes: Sequence[str]) -> None:
        for tier in self._targets():
            for block_hash in block_hashes:
                tier.touch(block_hash)
