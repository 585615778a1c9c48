"""HiCache tiers: LRU capacity, the two write policies, the run that extends a device hit."""

import pytest

from ray_dspine.engines.simulated.kv_tiers import KvTier, KvTiers
from ray_dspine.engines.simulated.prefix_cache import PrefixCache


def test_rule_lru_a_write_past_capacity_drops_the_least_recent():
    tier = KvTier(2)
    tier.write("a")
    tier.write("b")
    tier.touch("a")  # a is now the most recent: order b, a
    tier.write("c")  # over capacity: b goes
    assert [tier.contains(h) for h in "abc"] == [True, False, True]
    tier.write("a")  # rewriting a held block: most recent again, nothing dropped
    tier.write("d")  # drops c, the least recent
    assert [tier.contains(h) for h in "acd"] == [True, False, True]
    assert len(tier) == 2 and tier.num_dropped_blocks == 2


def test_rule_write_back_writes_evicted_blocks_to_every_tier():
    host, store = KvTier(4), KvTier(4)
    tiers = KvTiers(host, store, "write_back")
    tiers.on_insert("a")
    assert not host.contains("a") and not store.contains("a")
    tiers.on_evict("a")
    assert host.contains("a") and store.contains("a")


def test_rule_write_through_writes_blocks_when_first_cached():
    host, store = KvTier(4), KvTier(4)
    tiers = KvTiers(host, store, "write_through")
    tiers.on_insert("a")
    assert host.contains("a") and store.contains("a")
    tiers.on_evict("b")  # eviction writes nothing more
    assert not host.contains("b") and not store.contains("b")


def test_rule_run_extends_the_device_hit_through_either_tier_and_stops_at_a_gap():
    host, store = KvTier(4), KvTier(4)
    host.write("h1")
    store.write("h2")
    store.write("h4")
    tiers = KvTiers(host, store, "write_back")
    hashes = ["h0", "h1", "h2", "h3", "h4"]
    assert tiers.run(hashes, 1) == 2  # h1 (host), h2 (store), then h3 is in neither: h4 does not count
    assert tiers.run(hashes, 0) == 0  # h0 is in neither
    assert KvTiers(None, store, "write_back").run(hashes, 2) == 1  # a store alone


def test_rule_the_device_cache_feeds_its_tiers():
    host = KvTier(8)
    cache = PrefixCache(4, KvTiers(host, None, "write_back"))
    for h in ("a0", "a1"):
        cache.insert(h)
    cache.unpin(["a0", "a1"])  # evictable: a1 first (deepest released first), then a0
    assert cache.evict(4) == 4
    assert host.contains("a1") and not host.contains("a0")
    assert cache.match(["a0", "a1"]) == 1 and cache.tier_run(["a0", "a1"], 1) == 1
    assert PrefixCache(4).tier_run(["a0"], 0) == 0  # no tiers, no run


def test_capacity_must_hold_a_block():
    with pytest.raises(ValueError, match="capacity_blocks must be >= 1"):
        KvTier(0)
