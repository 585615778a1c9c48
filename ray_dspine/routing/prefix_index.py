"""Router-side approximate prefix index: chained block hash -> replicas believed to cache that block.

Like SGLang Model Gateway's approximate radix tree, it is built from routing decisions, not from the
engines' caches. Because hash h_i covers the whole prompt up to the end of block i (chained), a flat
map over hashes is a radix tree over blocks:

    depth(q, r) = max { k : h_0(q), ..., h_{k-1}(q) are all indexed for replica r }   (leading run)
    insert(q, r): mark h_0..h_{n-1} as cached on r, most recently used; each replica keeps at most
                  capacity(r) blocks, evicting its least recently used block first.
    capacity(r) = the value last given to `resize(r, c)`, else `capacity_blocks`
                  (a router sizes each replica to the blocks its KV cache can hold: an engine evicts
                  its least recently used prefix once the cache is full, and an index that kept more
                  would send requests to prefixes that are gone)

`depths` remembers its last answer until the index changes: one routing decision asks it for the same
request several times (the TTFT guard, the prefix and TTFT scorers, the placement).

Insertion touches blocks last-to-first, so a prompt's leading blocks are the most recently used and a
replica loses the tail of an old prompt before its head (leaves before ancestors, as a radix cache).
Parameters: capacity_blocks >= 1 per replica (None: unbounded until `trim`); resize(r, c): c >= 1.
Complexity: insert O(n + evictions); depths O(sum_i |replicas holding h_i|) <= O(n * R); trim O(evictions).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Sequence


def uncached_share(prompt_tokens: int, num_blocks: int, depth: int) -> int:
    """Prompt tokens not covered by a `depth`-block leading match of `num_blocks` (the share of blocks
    matched; no blocks: the whole prompt)."""
    if num_blocks == 0:
        return prompt_tokens
    return round(prompt_tokens * (1.0 - min(depth, num_blocks) / num_blocks))


class PrefixIndex:
    def __init__(self, capacity_blocks: int | None = None):
        self._capacity_blocks = capacity_blocks
        self._replica_capacity: dict[str, int] = {}
        self._blocks: dict[str, OrderedDict[str, None]] = {}
        self._holders: dict[str, set[str]] = {}
        self._last_depths: tuple[tuple[str, ...], dict[str, int]] | None = None

    def insert(self, prefix_hashes: Sequence[str], replica_id: str) -> None:
        self._last_depths = None
        blocks = self._blocks.setdefault(replica_id, OrderedDict())
        for block_hash in reversed(prefix_hashes):
            if block_hash in blocks:
                blocks.move_to_end(block_hash)
            else:
                blocks[block_hash] = None
                self._holders.setdefault(block_hash, set()).add(replica_id)
        capacity = self.capacity(replica_id)
        if capacity is not None:
            self._evict(replica_id, capacity)

    def capacity(self, replica_id: str) -> int | None:
        return self._replica_capacity.get(replica_id, self._capacity_blocks)

    def resize(self, replica_id: str, capacity_blocks: int) -> None:
        """Hold at most `capacity_blocks` blocks for this replica from now on (evicting LRU at once)."""
        if capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks}")
        self._replica_capacity[replica_id] = capacity_blocks
        if replica_id in self._blocks:
            self._evict(replica_id, capacity_blocks)

    def depths(self, prefix_hashes: Sequence[str]) -> dict[str, int]:
        """Leading-run match depth (blocks) per replica with depth >= 1 (a fresh dict each call)."""
        if not prefix_hashes:
            return {}
        key = tuple(prefix_hashes)
        if self._last_depths is not None and self._last_depths[0] == key:
            return dict(self._last_depths[1])
        depth = self._walk(prefix_hashes)
        self._last_depths = (key, depth)
        return dict(depth)

    def _walk(self, prefix_hashes: Sequence[str]) -> dict[str, int]:
        active = set(self._holders.get(prefix_hashes[0], ()))
        depth: dict[str, int] = {}
        for i, block_hash in enumerate(prefix_hashes[1:], start=1):
            if not active:
                break
            still = active & self._holders.get(block_hash, set())
            for replica_id in active - still:
                depth[replica_id] = i
            active = still
        for replica_id in active:
            depth[replica_id] = len(prefix_hashes)
        return depth

    def num_blocks(self, replica_id: str) -> int:
        return len(self._blocks.get(replica_id, ()))

    def replica_ids(self) -> Iterable[str]:
        return self._blocks.keys()

    def remove_replica(self, replica_id: str) -> None:
        self._replica_capacity.pop(replica_id, None)
        for block_hash in self._blocks.pop(replica_id, OrderedDict()):
            self._drop_holder(block_hash, replica_id)

    def trim(self, max_blocks: int) -> None:
        """Cut every replica down to `max_blocks` blocks, least recently used first."""
        for replica_id in list(self._blocks):
            self._evict(replica_id, max_blocks)

    def _evict(self, replica_id: str, max_blocks: int) -> None:
        blocks = self._blocks[replica_id]
        while len(blocks) > max_blocks:
            block_hash, _ = blocks.popitem(last=False)
            self._drop_holder(block_hash, replica_id)

    def _drop_holder(self, block_hash: str, replica_id: str) -> None:
        self._last_depths = None
        holders = self._holders.get(block_hash)
        if holders is not None:
            holders.discard(replica_id)
            if not holders:
                del self._holders[block_hash]
