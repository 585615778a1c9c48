"""Prefix cache of a simulated replica: KV blocks keyed by chained block hashes, evicted by policy.

Rules (B = prefix_block_tokens; hashes are chained, so block i's hash names the whole prefix 0..i):
  hit:    h = the longest leading run of a request's block hashes present in the cache;
          cached prompt tokens = h * B (the core caps h so at least one prompt token is prefilled).
  pin:    blocks a running request uses (hit or inserted by its prefill) have ref_count >= 1 and are
          never evicted; when its last user ends a block joins the evictable blocks.
  count:  a block's hit count goes up by one each time an admitted request's hit pins it (`pin_hits`);
          inserting or sharing a block during prefill does not count (SGLang counts matches only).
  unpin:  a request's blocks are released deepest-first, so a parent block is always more recent
          than its children and eviction removes leaves before the prefixes they extend.
  evict:  to free T tokens, drop unreferenced blocks lowest rank first, least recently released first
          within a rank, until >= T tokens are freed or none is left; each dropped block counts one
          eviction. The rank is SGLang's --radix-eviction-policy:
            lru   every block rank 0 (least recently released first: SGLang's default);
            slru  rank 1 (protected) for a block with hit count >= 2, else 0 (probationary);
            lfu   rank = hit count.
          A parent's hit count is at least its children's and a parent is released after them, so
          every policy still evicts leaves before the prefixes they extend.
  size:   cached tokens = B * number of blocks (pinned + evictable).
  tiers:  with HiCache tiers (kv_tiers.py), each block first inserted is offered to them (write_through)
          and each evicted block is written to them (write_back); `tier_run` is how far the tiers
          extend the device's leading run.
Parameters: B in [1, 65536] tokens.
Complexity: match/pin/unpin O(blocks of the request); evict O(blocks evicted); dict + OrderedDict.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal

from ray_dspine.engines.simulated.kv_tiers import KvTiers

EvictionPolicy = Literal["lru", "slru", "lfu"]  # SGLang's --radix-eviction-policy values we model
SLRU_PROTECTED_HITS = 2  # SGLang's SLRUStrategy protected_threshold


class PrefixCache:
    def __init__(
        self, block_tokens: int, tiers: KvTiers | None = None, eviction_policy: EvictionPolicy = "lru"
    ):
        self.block_tokens = block_tokens
        self.tiers = tiers
        self.eviction_policy = eviction_policy
        self._ref_counts: dict[str, int] = {}
        self._hit_counts: dict[str, int] = {}
        # ref_count 0, by rank (rule `evict`), least recently released first within a rank
        self._evictable: dict[int, OrderedDict[str, None]] = {}
        self._evictable_rank: dict[str, int] = {}
        self.num_evicted_blocks = 0

    @property
    def num_blocks(self) -> int:
        return len(self._ref_counts)

    @property
    def cached_tokens(self) -> int:
        return len(self._ref_counts) * self.block_tokens

    @property
    def evictable_tokens(self) -> int:
        return len(self._evictable_rank) * self.block_tokens

    def contains(self, block_hash: str) -> bool:
        return block_hash in self._ref_counts

    def ref_count(self, block_hash: str) -> int:
        return self._ref_counts.get(block_hash, 0)

    def hit_count(self, block_hash: str) -> int:
        return self._hit_counts.get(block_hash, 0)

    def match(self, block_hashes: Sequence[str]) -> int:
        """Number of leading hashes present (h)."""
        num_hit = 0
        for block_hash in block_hashes:
            if block_hash not in self._ref_counts:
                break
            num_hit += 1
        return num_hit

    def tier_run(self, block_hashes: Sequence[str], start: int) -> int:
        """Blocks after the first `start` the HiCache tiers hold, contiguous (0 without tiers)."""
        return 0 if self.tiers is None else self.tiers.run(block_hashes, start)

    def evictable_tokens_excluding(self, block_hashes: Sequence[str]) -> int:
        """Evictable tokens left if these (present) blocks were pinned first."""
        num_would_pin = sum(1 for h in set(block_hashes) if h in self._evictable_rank)
        return self.evictable_tokens - num_would_pin * self.block_tokens

    def pin(self, block_hashes: Sequence[str]) -> None:
        for block_hash in block_hashes:
            self._ref_counts[block_hash] += 1
            rank = self._evictable_rank.pop(block_hash, None)
            if rank is not None:
                self._drop_evictable(rank, block_hash)

    def pin_hits(self, block_hashes: Sequence[str]) -> None:
        """Pin the blocks an admitted request's hit gives it, counting one hit on each (rule `count`)."""
        self.pin(block_hashes)
        for block_hash in block_hashes:
            self._hit_counts[block_hash] += 1

    def insert(self, block_hash: str) -> bool:
        """Add a block pinned once by its inserter; True if new, False if it was there (then pinned)."""
        if block_hash in self._ref_counts:
            self.pin([block_hash])
            return False
        self._ref_counts[block_hash] = 1
        self._hit_counts[block_hash] = 0
        if self.tiers is not None:
            self.tiers.on_insert(block_hash)
        return True

    def unpin(self, block_hashes: Sequence[str]) -> None:
        for block_hash in reversed(block_hashes):
            count = self._ref_counts[block_hash] - 1
            self._ref_counts[block_hash] = count
            if count == 0:
                rank = self._rank(block_hash)
                self._evictable_rank[block_hash] = rank
                self._evictable.setdefault(rank, OrderedDict())[block_hash] = None

    def _drop_evictable(self, rank: int, block_hash: str) -> None:
        blocks = self._evictable[rank]
        del blocks[block_hash]
        if not blocks:
            del self._evictable[rank]

    def _rank(self, block_hash: str) -> int:
        if self.eviction_policy == "lru":
            return 0
        hits = self._hit_counts[block_hash]
        if self.eviction_policy == "slru":
            return 1 if hits >= SLRU_PROTECTED_HITS else 0
        return hits

    def evict(self, num_tokens: int) -> int:
        """Free at least num_tokens from unreferenced blocks if possible; returns tokens freed."""
        freed = 0
        while freed < num_tokens and self._evictable_rank:
            rank = min(self._evictable)
            block_hash = next(iter(self._evictable[rank]))
            self._drop_evictable(rank, block_hash)
            del self._evictable_rank[block_hash]
            del self._ref_counts[block_hash]
            del self._hit_counts[block_hash]
            self.num_evicted_blocks += 1
            if self.tiers is not None:
                self.tiers.on_evict(block_hash)
            freed += self.block_tokens
        return freed
