"""Prefix cache: leading-run hits, pinning, LRU eviction of unreferenced blocks, leaves first."""

from ray_dspine.engines.simulated.prefix_cache import PrefixCache


def filled(block_tokens: int, hashes: list[str]) -> PrefixCache:
    cache = PrefixCache(block_tokens)
    for h in hashes:
        cache.insert(h)
    return cache


def test_rule_hit_is_the_longest_leading_run():
    cache = filled(4, ["a0", "a1", "a2"])
    assert cache.match(["a0", "a1", "a2", "a3"]) == 3
    assert cache.match(["a0", "x", "a2"]) == 1  # a2 does not count after a miss
    assert cache.match(["b0"]) == 0
    assert cache.cached_tokens == 12  # 3 blocks * 4 tokens


def test_rule_lru_eviction_skips_pinned_blocks():
    cache = filled(4, ["a", "b", "c"])  # each inserted pinned once
    cache.unpin(["a"])
    cache.unpin(["c"])  # evictable order: a (older), c; b stays pinned
    assert cache.evictable_tokens == 8
    assert cache.evict(100) == 8  # frees a and c (2 * 4 tokens), not b
    assert not cache.contains("a") and not cache.contains("c") and cache.contains("b")
    assert cache.num_evicted_blocks == 2
    assert cache.evict(4) == 0  # b is pinned: nothing left to evict


def test_rule_eviction_is_least_recently_released_first_and_stops_when_enough():
    cache = filled(4, ["a", "b", "c"])
    cache.unpin(["b"])
    cache.unpin(["a"])
    cache.unpin(["c"])
    cache.pin(["b"])
    cache.unpin(["b"])  # b used again: order a, c, b
    assert cache.evict(5) == 8  # 5 tokens need two 4-token blocks: a then c
    assert cache.contains("b") and not cache.contains("a") and not cache.contains("c")


def test_rule_unpin_releases_deepest_first_so_leaves_go_before_their_prefix():
    cache = filled(4, ["p0", "p1", "p2"])
    cache.unpin(["p0", "p1", "p2"])  # released p2, p1, p0: p2 is the oldest
    cache.evict(4)
    assert not cache.contains("p2") and cache.match(["p0", "p1", "p2"]) == 2


def test_rule_shared_blocks_need_every_user_to_release():
    cache = filled(4, ["s"])
    cache.pin(["s"])  # second user
    cache.unpin(["s"])
    assert cache.ref_count("s") == 1 and cache.evict(4) == 0
    cache.unpin(["s"])
    assert cache.evict(4) == 4


def test_insert_of_existing_block_pins_it():
    cache = filled(4, ["a"])
    cache.unpin(["a"])
    assert cache.insert("a") is False and cache.ref_count("a") == 1 and cache.evictable_tokens == 0
    assert cache.evictable_tokens_excluding(["a"]) == 0
