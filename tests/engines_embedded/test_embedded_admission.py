import pytest

from ray_dspine.engines.embedded.admission import AdmissionController, Overloaded
from ray_dspine.engines.embedded.block_cache import BlockCache


def controller(budget, slots, queued, block_tokens=4, reuse=True):
    return AdmissionController(BlockCache(block_tokens, budget), slots, queued, reuse=reuse)


def prompt(n, start=0):
    return list(range(start, start + n))


def test_rule_admits_when_kv_and_slot_fit():
    ctl = controller(budget=100, slots=2, queued=4)
    ctl.enqueue("a", prompt(40), 20)
    ctl.enqueue("b", prompt(10, start=500), 20)
    assert ctl.admit() == ["a", "b"]
    assert ctl.free_kv_tokens == 10  # 100 - 60 - 30
    assert ctl.free_slots == 0


def test_rule_head_of_queue_blocks_those_behind():
    ctl = controller(budget=100, slots=4, queued=4)
    ctl.enqueue("a", prompt(50), 20)
    ctl.admit()
    ctl.enqueue("b", prompt(30, start=100), 20)  # 50 does not fit (30 free)
    ctl.enqueue("c", prompt(5, start=200), 5)  # 10 would fit, but waits behind b
    assert ctl.admit() == []
    assert ctl.queued_kv_tokens == 60  # what the queue will take: 50 + 10
    ctl.release("a")
    assert ctl.admit() == ["b", "c"]
    assert ctl.queued_kv_tokens == 0


def test_rule_slots_limit_running_requests():
    ctl = controller(budget=1000, slots=1, queued=4)
    ctl.enqueue("a", prompt(5), 5)
    ctl.enqueue("b", prompt(5), 5)
    assert ctl.admit() == ["a"]
    assert ctl.num_queued == 1


def test_rule_request_larger_than_budget_is_refused():
    ctl = controller(budget=100, slots=1, queued=4)
    with pytest.raises(ValueError, match="101 KV tokens"):
        ctl.enqueue("a", prompt(51), 50)


def test_rule_full_queue_is_overload():
    ctl = controller(budget=100, slots=1, queued=1)
    ctl.enqueue("a", prompt(5), 5)
    ctl.admit()
    ctl.enqueue("b", prompt(5), 5)
    with pytest.raises(Overloaded):
        ctl.enqueue("c", prompt(5), 5)


def test_release_is_idempotent_and_frees_queued():
    ctl = controller(budget=100, slots=1, queued=2)
    ctl.enqueue("a", prompt(5), 5)
    ctl.release("a")
    ctl.release("a")
    assert ctl.num_queued == 0 and ctl.free_kv_tokens == 100


def finish_with_cache(ctl, request_id, tokens):
    ctl.cache_tokens(request_id, tokens, lambda i: i)
    ctl.release(request_id)


def test_rule_hit_blocks_are_counted_once_and_pinned():
    # B = 4. "a" (prompt 10, M 6) caches its 10 prompt + 5 output tokens held in KV: 3 full blocks (12).
    ctl = controller(budget=40, slots=2, queued=4)
    ctl.enqueue("a", prompt(10), 6)
    assert ctl.admit() == ["a"]
    finish_with_cache(ctl, "a", prompt(15))
    assert ctl.cache.cached_tokens == 12 and ctl.free_kv_tokens == 40  # all evictable
    # "b": same first 9 tokens + new ones, 14 prompt tokens: hit h = 2 blocks (8 tokens; match cap
    # floor(13 / 4) = 3, but block 3 (8..11) differs). Needs 14 - 8 + 10 = 16 private tokens.
    b = prompt(9) + prompt(5, start=300)
    ctl.enqueue("b", b, 10)
    assert ctl.queued_kv_tokens == 16 and ctl.queued_uncached_prompt_tokens == 6
    assert ctl.admit() == ["b"]
    holding = ctl.holding("b")
    assert holding.hit_tokens == 8 and holding.reserved_tokens == 16
    # free = 40 - 16 reserved - 12 cached = 12; evictable = the one unpinned block (4): available 16
    assert ctl.free_kv_tokens == 16 and ctl.cache.evictable_tokens == 4


def test_rule_admission_needs_available_excluding_its_own_hit():
    ctl = controller(budget=24, slots=3, queued=4)
    ctl.enqueue("a", prompt(9), 3)
    ctl.admit()
    finish_with_cache(ctl, "a", prompt(8))  # 2 blocks, 8 tokens, evictable
    ctl.enqueue("x", prompt(4, start=100), 4)
    assert ctl.admit() == ["x"]  # reserves 8: free = 24 - 8 - 8 = 8, available = 8 + 8 = 16
    # prompt 9 (the cached 8 + 1): hit 2 blocks; available once they are pinned = 16 - 8 = 8
    ctl.enqueue("b", prompt(9), 8)  # needs 9 - 8 + 8 = 9 > 8: waits
    assert ctl.admit() == []
    ctl.release("b")
    ctl.enqueue("c", prompt(9), 7)  # needs 8 <= 8
    assert ctl.admit() == ["c"] and ctl.holding("c").hit_tokens == 8
    assert ctl.cache.cached_tokens == 8 and ctl.free_kv_tokens == 0


def test_rule_reuse_off_never_hits():
    ctl = controller(budget=100, slots=2, queued=4, reuse=False)
    ctl.enqueue("a", prompt(9), 3)
    ctl.admit()
    finish_with_cache(ctl, "a", prompt(8))
    ctl.enqueue("b", prompt(9), 3)
    ctl.admit()
    assert ctl.holding("b").hit_tokens == 0 and ctl.holding("b").reserved_tokens == 12


def test_rule_a_hit_is_cut_down_to_whole_units_of_blocks():
    # B = 4, U = 2 blocks (8 tokens): "a" caches 5 blocks (20 tokens); a 23-token prompt sharing them matches
    # 5 blocks (cap floor(22 / 4) = 5), cut to 4 (16 tokens); one sharing 7 tokens matches 1 block, cut to 0
    ctl = AdmissionController(BlockCache(4, 200), 4, 4, hit_unit_blocks=2)
    ctl.enqueue("a", prompt(20), 4)
    ctl.admit()
    finish_with_cache(ctl, "a", prompt(20))
    assert ctl.cache.cached_tokens == 20
    ctl.enqueue("b", prompt(20) + prompt(3, start=500), 4)
    ctl.enqueue("c", prompt(7) + prompt(9, start=600), 4)
    assert ctl.queued_uncached_prompt_tokens == (23 - 16) + 16
    assert ctl.admit() == ["b", "c"]
    assert ctl.holding("b").hit_tokens == 16 and ctl.holding("b").reserved_tokens == 23 - 16 + 4
    assert ctl.holding("c").hit_tokens == 0
    with pytest.raises(ValueError, match="hit_unit_blocks must be at least 1"):
        AdmissionController(BlockCache(4, 200), 4, 4, hit_unit_blocks=0)
