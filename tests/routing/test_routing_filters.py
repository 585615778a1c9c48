import math

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.filters import filter_replicas
from ray_dspine.routing.types import ReplicaView, RequestView

PARAMS = dict(stale_after_s=5.0, stale_headroom_fraction=0.5, drop_after_s=60.0)


def view(rid, age=0.0, **load):
    base = dict(total_kv_tokens=10_000, free_kv_tokens=10_000, total_state_slots=8, free_state_slots=8)
    return ReplicaView(rid, LoadSnapshot(**{**base, **load}), age)


REQ = RequestView("q", needed_kv_tokens=1000, num_state_slots=1)


def kept_ids(replicas, request=REQ):
    return [v.replica_id for v in filter_replicas(request, replicas, **PARAMS).kept]


def test_rule_healthy():
    result = filter_replicas(REQ, [view("a", healthy=False), view("b")], **PARAMS)
    assert [v.replica_id for v in result.kept] == ["b"] and result.rejected["a"] == "unhealthy"


def test_rule_holds_kv():
    # 999 free < 1000 needed -> out; exactly 1000 -> in
    assert kept_ids([view("a", free_kv_tokens=999), view("b", free_kv_tokens=1000)]) == ["b"]


def test_rule_holds_kv_after_the_replicas_queue():
    # 10000 free - 9000 queued = 1000 >= 1000 needed -> in; 9001 queued -> out, with the reason
    result = filter_replicas(REQ, [view("a", queued_kv_tokens=9001), view("b", queued_kv_tokens=9000)], **PARAMS)
    assert [v.replica_id for v in result.kept] == ["b"]
    assert result.rejected["a"] == "kv: 999 free after 9001 queued < 1000 needed"


def test_rule_holds_state_with_speculation_slots():
    # speculation: 3 slots per request; 2 free < 1 * 3 -> out; 3 free -> in
    replicas = [
        view("a", free_state_slots=2, state_slots_per_request=3),
        view("b", free_state_slots=3, state_slots_per_request=3),
    ]
    assert kept_ids(replicas) == ["b"]


def test_rule_no_state_pool_skips_state_check():
    assert kept_ids([view("a", total_state_slots=0, free_state_slots=0)]) == ["a"]


def test_rule_stale_report_trusts_a_fraction():
    # age 6 s > stale_after 5 s: trust 0.5 -> 0.5 * 1500 = 750 < 1000 -> out; 0.5 * 2000 = 1000 -> in
    replicas = [view("a", age=6.0, free_kv_tokens=1500), view("b", age=6.0, free_kv_tokens=2000)]
    assert kept_ids(replicas) == ["b"]
    # same report 4 s old is trusted fully
    assert kept_ids([view("a", age=4.0, free_kv_tokens=1500)]) == ["a"]


def test_rule_drop_after():
    result = filter_replicas(REQ, [view("a", age=61.0)], **PARAMS)
    assert result.kept == [] and "drop_after_s" in result.rejected["a"]


def test_rule_unreported_set_aside():
    result = filter_replicas(REQ, [ReplicaView("new", LoadSnapshot(), math.inf), view("b")], **PARAMS)
    assert [v.replica_id for v in result.kept] == ["b"]
    assert [v.replica_id for v in result.unreported] == ["new"]


def test_rule_holds_kv_counts_only_the_uncached_part_when_hit_blocks_are_pinned():
    # needed 1000, 900 of them cached on "a", which reports 300 free of which 100 evictable:
    # pinned_hit = min(900, 100) = 100; 300 - 100 = 200 >= 1000 - 900 = 100 -> in.
    # "b" caches nothing: 300 < 1000 -> out.
    replicas = [view("a", free_kv_tokens=300, evictable_kv_tokens=100), view("b", free_kv_tokens=300)]
    result = filter_replicas(REQ, replicas, cached_tokens={"a": 900}, **PARAMS)
    assert [v.replica_id for v in result.kept] == ["a"]
    assert result.rejected["b"] == "kv: 300 free < 1000 needed"


def test_rule_holds_kv_takes_evictable_hit_blocks_as_no_longer_free():
    # 900 cached, 300 free, all 300 evictable (they may be the hit blocks): 300 - 300 = 0 < 100 -> out
    replicas = [view("a", free_kv_tokens=300, evictable_kv_tokens=300)]
    result = filter_replicas(REQ, replicas, cached_tokens={"a": 900}, **PARAMS)
    assert result.rejected["a"] == "kv: 0 free < 100 needed (900 cached)"
    # evictable 200: 300 - 200 = 100 >= 100 -> in (exactly)
    assert kept_ids_cached([view("a", free_kv_tokens=300, evictable_kv_tokens=200)], {"a": 900}) == ["a"]


def test_rule_holds_kv_without_an_evictable_report_is_the_whole_need():
    # evictable not reported: taken as all 1000 free, pinned_hit = min(900, 1000) = 900;
    # 1000 - 900 = 100 >= 100 -> in, as 1000 >= 1000 needed would say; 999 free: 99 < 100 -> out, as 999 < 1000
    assert kept_ids_cached([view("a", free_kv_tokens=1000)], {"a": 900}) == ["a"]
    assert kept_ids_cached([view("a", free_kv_tokens=999)], {"a": 900}) == []


def kept_ids_cached(replicas, cached):
    return [v.replica_id for v in filter_replicas(REQ, replicas, cached_tokens=cached, **PARAMS).kept]
