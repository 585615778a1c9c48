"""Prefix cache: leading-run hits, pinning, eviction of unreferenced blocks by policy, leaves first."""

from ray_dspine.engines.simulated.prefix_cache import EvictionPolicy, PrefixCache


def filled(block_tokens: int, hashes: list[str], policy: EvictionPolicy = "lru") -> PrefixCache:
    cache = PrefixCache(block_tokens, eviction_policy=policy)
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


def hit_then_release(cache: PrefixCache, hashes: list[str], times: int) -> None:
    for _ in range(times):
        cache.pin_hits(hashes)
        cache.unpin(hashes)


def test_rule_count_only_admitted_hits_count():
    cache = filled(4, ["a", "b"])
    cache.pin(["a"])  # shared during prefill (insert of an existing block pins it the same way)
    assert cache.insert("b") is False
    assert cache.hit_count("a") == 0 and cache.hit_count("b") == 0
    cache.pin_hits(["a"])
    assert cache.hit_count("a") == 1 and cache.ref_count("a") == 3  # inserted, shared, hit


def test_rule_evict_lru_ignores_hit_counts():
    cache = filled(4, ["hot", "cold"])
    cache.unpin(["hot"])
    cache.unpin(["cold"])
    hit_then_release(cache, ["hot"], 3)  # released again after cold: order cold, hot
    cache.pin(["cold"])
    cache.unpin(["cold"])  # cold released last: order hot, cold
    assert cache.evict(4) == 4
    assert not cache.contains("hot") and cache.contains("cold")


def test_rule_evict_slru_takes_probationary_blocks_before_protected_ones():
    cache = filled(4, ["twice", "once", "never"], "slru")
    cache.unpin(["twice", "once", "never"])
    hit_then_release(cache, ["twice"], 2)  # hit count 2: protected
    hit_then_release(cache, ["once"], 1)  # hit count 1: still probationary
    cache.pin(["never"])
    cache.unpin(["never"])  # released last of all: order by recency twice, once, never
    assert cache.evict(4) == 4 and not cache.contains("once")  # oldest probationary
    assert cache.evict(4) == 4 and not cache.contains("never")  # then the newer probationary
    assert cache.evict(4) == 4 and not cache.contains("twice")  # protected last


def test_rule_evict_lfu_takes_fewest_hits_then_least_recent():
    cache = filled(4, ["h3", "h1a", "h1b"], "lfu")
    cache.unpin(["h3", "h1a", "h1b"])
    hit_then_release(cache, ["h3"], 3)
    hit_then_release(cache, ["h1b"], 1)
    hit_then_release(cache, ["h1a"], 1)  # h1a released after h1b
    assert cache.evict(4) == 4 and not cache.contains("h1b")
    assert cache.evict(4) == 4 and not cache.contains("h1a")
    assert cache.evict(4) == 4 and not cache.contains("h3")
    assert cache.hit_count("h3") == 0  # an evicted block forgets its hits


def test_rule_evict_every_policy_takes_leaves_before_their_prefix():
    for policy in ("lru", "slru", "lfu"):
        cache = filled(4, ["p0", "p1", "p2"], policy)
        cache.unpin(["p0", "p1", "p2"])
        hit_then_release(cache, ["p0", "p1", "p2"], 2)  # a whole conversation hit twice
        hit_then_release(cache, ["p0", "p1"], 1)  # its prefix once more
        cache.evict(4)
        assert cache.match(["p0", "p1", "p2"]) == 2, policy  # p2, the leaf, went first
        cache.evict(4)
        assert cache.match(["p0", "p1", "p2"]) == 1, policy
