"""One test per rule of block_cache.py, with B = 2 tokens per block and hand-worked counts."""

import pytest

from ray_dspine.engines.embedded.block_cache import BlockCache


def payload(i):
    return f"kv{i}"


def cached(cache, tokens, reserve):
    """A request reserves `reserve`, inserts `tokens`, ends: returns its leftover reservation."""
    assert cache.reserve(reserve)
    path, left = cache.extend([], tokens, payload, reserve)
    cache.release(left)
    cache.unpin(path)
    return path


def test_rule_match_longest_leading_run_capped():
    cache = BlockCache(block_tokens=2, budget_tokens=100)
    cached(cache, [1, 2, 3, 4, 5, 6, 7], reserve=10)  # full blocks (1,2) (3,4) (5,6); 7 is a partial block
    assert [b.payload for b in cache.match([1, 2, 3, 4, 5, 6, 9], max_blocks=9)] == ["kv0", "kv1", "kv2"]
    assert len(cache.match([1, 2, 3, 4, 5, 6], max_blocks=(6 - 1) // 2)) == 2  # cap: one token left to prefill
    assert len(cache.match([1, 2, 9, 4, 5, 6], max_blocks=9)) == 1  # the run stops at the first miss
    assert cache.match([2, 1], max_blocks=9) == []
    assert cache.evictable_tokens == 6  # matching pins nothing


def test_rule_insert_shares_existing_blocks_and_takes_reservation():
    cache = BlockCache(block_tokens=2, budget_tokens=100)
    assert cache.reserve(10)
    path, left = cache.extend([], [1, 2, 3, 4, 5], payload, 10)
    # two new blocks: 4 tokens move from the reservation (10 -> 6) into the cache (0 -> 4)
    assert (left, cache.reserved_tokens, cache.cached_tokens) == (6, 6, 4)
    assert cache.reserve(8)
    other, other_left = cache.extend([], [1, 2, 3, 4, 7, 8], payload, 8)
    # (1,2) and (3,4) are shared (no reservation taken), (7,8) is new: 8 -> 6; cache 4 -> 6
    assert other[:2] == path and other_left == 6 and cache.cached_tokens == 6
    assert [b.ref_count for b in other] == [2, 2, 1]


def test_rule_insert_stops_when_reservation_runs_out():
    cache = BlockCache(block_tokens=2, budget_tokens=100)
    assert cache.reserve(3)
    path, left = cache.extend([], [1, 2, 3, 4, 5, 6], payload, 3)
    assert len(path) == 1 and left == 1  # one block of 2 fits in 3; the second would need 2 more


def test_rule_pinned_blocks_are_never_evicted():
    cache = BlockCache(block_tokens=2, budget_tokens=8)
    assert cache.reserve(4)
    path, left = cache.extend([], [1, 2, 3, 4], payload, 4)  # pinned, holding 4 of 8
    assert left == 0 and cache.evict(100) == 0
    assert cache.available_tokens == 4 and not cache.reserve(5)
    cache.unpin(path)
    assert cache.evictable_tokens == 4 and cache.available_tokens == 8


def test_rule_unpin_makes_parents_more_recent_and_evict_takes_leaves_lru_first():
    cache = BlockCache(block_tokens=2, budget_tokens=100)
    a = cached(cache, [1, 2, 3, 4], reserve=4)  # blocks A0=(1,2), A1=(3,4)
    b = cached(cache, [1, 2, 5, 6], reserve=4)  # shares A0, adds B1=(5,6); A0 released again, last
    assert b[0] is a[0]
    # LRU order now: A1 (released first), B1, A0 (parent released after each child)
    assert cache.evict(2) == 2
    assert len(cache.match([1, 2, 3, 4], 9)) == 1 and len(cache.match([1, 2, 5, 6], 9)) == 2  # A1 went first
    assert cache.evict(2) == 2  # then B1, a leaf, before its parent A0
    assert len(cache.match([1, 2, 5, 6], 9)) == 1
    assert cache.evict(2) == 2 and cache.cached_tokens == 0 and cache.num_evicted_blocks == 3


def test_rule_budget_reserve_evicts_only_what_free_lacks():
    cache = BlockCache(block_tokens=2, budget_tokens=10)
    cached(cache, [1, 2, 3, 4, 5, 6], reserve=6)  # 6 cached, all evictable; free = 10 - 0 - 6 = 4
    assert (cache.free_tokens, cache.available_tokens) == (4, 10)
    assert cache.reserve(7)  # free 4 lacks 3: evict 2 blocks (4 tokens, whole blocks), keep 1
    assert (cache.reserved_tokens, cache.cached_tokens, cache.free_tokens) == (7, 2, 1)
    assert not cache.reserve(4)  # available = 1 + 2 = 3 < 4
    assert cache.reserved_tokens + cache.cached_tokens <= cache.budget_tokens


def test_available_if_pinned_excludes_hit_blocks():
    cache = BlockCache(block_tokens=2, budget_tokens=10)
    cached(cache, [1, 2, 3, 4], reserve=4)
    hit = cache.match([1, 2, 3, 4, 9], 2)
    assert cache.available_tokens == 10 and cache.available_if_pinned(hit) == 6  # the 4 hit tokens stay


def test_bad_parameters_refused():
    with pytest.raises(ValueError):
        BlockCache(block_tokens=0, budget_tokens=10)
    with pytest.raises(ValueError):
        BlockCache(block_tokens=16, budget_tokens=8)
