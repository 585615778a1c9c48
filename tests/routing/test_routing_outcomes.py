"""What became of each placement: one test per rule of outcomes.py, the stages the pipeline names, and
the Ray adapter's counts (without a cluster)."""

import asyncio
from types import SimpleNamespace

import pytest

from ray_dspine.engines.protocol import GenerateRequest, LoadSnapshot
from ray_dspine.routing.baselines.least_load import LeastLoadPolicy
from ray_dspine.routing.config import RouterConfig
from ray_dspine.routing.outcomes import STAGE_FILTER, STAGE_TTFT_GUARD, placement_outcome
from ray_dspine.routing.pipeline import RoutingPipeline
from ray_dspine.routing.types import ReplicaView, RequestView

RATE = 10_000.0
BOTH = frozenset({"a", "b"})


def view(rid, backlog_tokens=0, free_kv_tokens=200_000, healthy=True):
    load = LoadSnapshot(healthy=healthy, total_kv_tokens=200_000, free_kv_tokens=free_kv_tokens,
                        pending_prefill_tokens=backlog_tokens, prefill_tokens_per_s=RATE)  # fmt: skip
    return ReplicaView(rid, load, 0.0)


def test_rule_no_home_is_a_new_session():
    assert placement_outcome("a", None, BOTH, {}) == "new_session"


def test_rule_the_home_replica_is_stayed():
    assert placement_outcome("a", "a", BOTH, {}) == "stayed"


def test_rule_home_dropped_by_the_ttft_guard_is_moved_ttft():
    assert placement_outcome("b", "a", BOTH, {"a": STAGE_TTFT_GUARD}) == "moved_ttft"


def test_rule_home_removed_by_a_filter_is_moved_capacity():
    assert placement_outcome("b", "a", BOTH, {"a": STAGE_FILTER}) == "moved_capacity"


def test_rule_home_no_longer_a_candidate_is_moved_home_gone():
    assert placement_outcome("b", "gone", BOTH, {}) == "moved_home_gone"


def test_rule_otherwise_moved_score():
    # home a was a candidate and kept, yet the scores (or Ray's fall-through) put the request on b
    assert placement_outcome("b", "a", BOTH, {}) == "moved_score"


def sticky_pipeline(**config):
    p = RoutingPipeline(RouterConfig(**config), clock=lambda: 0.0)
    p.on_placed(RequestView("q0", session_id="s", prefix_hashes=("h0",), prompt_tokens=32_768), "a")
    p.on_completed("q0")
    return p


TURN = RequestView("q1", session_id="s", prefix_hashes=("h0", "h1"), prompt_tokens=65_536, needed_kv_tokens=66_000)


def test_pipeline_names_the_guard_as_the_stage_that_dropped_a_replica():
    # a: (100,000 backlog + 32,768 uncached) / 10,000 = 13.28 s; b: 6.55 s; over 6.55 + 5 (no extension for
    # the cached half): a is dropped
    guarded = sticky_pipeline(filters=[{"type": "fits_memory"}, {"type": "ttft_guard", "tolerance_s": 5.0, "per_cached_s": 0.0}])
    decision = guarded.choose(TURN, [view("a", backlog_tokens=100_000), view("b")])
    assert decision.ranked_replica_ids == ("b",) and decision.rejected_by == {"a": STAGE_TTFT_GUARD}
    assert placement_outcome("b", "a", BOTH, decision.rejected_by) == "moved_ttft"


def test_pipeline_names_the_filter_as_the_stage_that_removed_a_replica():
    # a has 1,000 free KV tokens for a turn needing 66,000 less what it caches: removed by the KV filter
    # (memory wait off: it would first hold the turn for a, which starts it 3.28 s sooner than b's 6.55 s)
    decision = sticky_pipeline(holds=[]).choose(TURN, [view("a", free_kv_tokens=1_000), view("b")])
    assert decision.ranked_replica_ids == ("b",) and decision.rejected_by == {"a": STAGE_FILTER}


def test_pipeline_says_why_a_request_waits():
    nowhere = sticky_pipeline().choose(TURN, [view("a", free_kv_tokens=0), view("b", free_kv_tokens=0)])
    assert nowhere.wait and nowhere.wait_kind == "capacity"
    # 10,000 tokens: b would start it at 90,000 / 10,000 + 1 = 10 s, full a at 2 + 1 = 3 s; 10 > 3 + 4: held
    q = RequestView("q", prefix_hashes=("x0",), prompt_tokens=10_000, needed_kv_tokens=10_100)
    held = RoutingPipeline(RouterConfig(filters=[{"type": "fits_memory"}], holds=[{"type": "memory_wait", "tolerance_s": 4.0}]),
                           clock=lambda: 0.0).choose(
        q, [view("a", backlog_tokens=20_000, free_kv_tokens=0), view("b", backlog_tokens=90_000)])
    assert held.wait and held.wait_kind == "memory" and held.rejected_by == {"a": STAGE_FILTER}
    unhealthy = LeastLoadPolicy(clock=lambda: 0.0).choose(q, [view("a", healthy=False)])
    assert unhealthy.wait and unhealthy.wait_kind == "unhealthy"


def replica(rid, **load):
    stats = LoadSnapshot(**{"total_kv_tokens": 10_000, "free_kv_tokens": 10_000, **load}).model_dump()
    return SimpleNamespace(replica_id=SimpleNamespace(unique_id=rid), routing_stats=stats)


def pending(rid, session="s"):
    generate = GenerateRequest(request_id=rid, prompt="x", max_tokens=100, estimated_prompt_tokens=4_000,
                               pool="dspine", arm="control", session_id=session)  # fmt: skip
    return SimpleNamespace(args=[generate], routing_context=SimpleNamespace(should_backoff=False),
                           metadata=SimpleNamespace(session_id=session, internal_request_id="i-" + rid))  # fmt: skip


def route(router, replicas, request):
    groups = asyncio.run(router.choose_replicas(replicas, request))
    if groups:
        router.on_request_routed(request, groups[0][0].replica_id, None)
    return [g[0].replica_id.unique_id for g in groups]


def test_adapter_counts_each_placement_once_by_outcome_and_each_hold_once():
    pytest.importorskip("ray")
    from ray_dspine.routing.ray_router import HeadroomRequestRouter

    router = object.__new__(HeadroomRequestRouter)
    router.initialize_state()
    a, b = replica("a"), replica("b")
    first = route(router, [a, b], pending("q1"))[0]
    other = "b" if first == "a" else "a"
    assert route(router, [a, b], pending("q2"))[0] == first  # the session's replica, nothing against it
    full = replica(first, free_kv_tokens=0)
    assert route(router, [full, replica(other)], pending("q3"))[0] == other  # home cannot hold 4,100 tokens
    # q4 fits nowhere: told to wait on two calls, counted once; then placed once memory frees
    q4 = pending("q4", session=None)
    nowhere = [replica("a", free_kv_tokens=0), replica("b", free_kv_tokens=0)]
    assert route(router, nowhere, q4) == [] and route(router, nowhere, q4) == []
    route(router, [a, b], q4)
    assert router.metrics.placements == {("dspine", "control", "new_session"): 2, ("dspine", "control", "stayed"): 1,
                                         ("dspine", "control", "moved_capacity"): 1}
    assert router.metrics.holds == {("dspine", "control", "capacity"): 1}
    assert router._held == {} and router._judged == {}


def test_routers_in_one_process_share_one_set_of_ray_metrics():
    pytest.importorskip("ray")
    from ray_dspine.routing.ray_metrics import RoutingMetrics

    first, second = RoutingMetrics("headroom", export=True), RoutingMetrics("cache_aware", export=True)
    assert first._exported is second._exported is not None
    # the in-memory counts stay each router's own
    first.placed("dspine", "control", "stayed")
    assert first.placements == {("dspine", "control", "stayed"): 1} and second.placements == {}
    assert RoutingMetrics("headroom", export=False)._exported is None
