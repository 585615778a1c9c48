import pytest

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.config import RouterConfig
from ray_dspine.routing.pipeline import RoutingPipeline
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.ttft_guard import TtftGuard, within_tolerance
from ray_dspine.routing.types import ReplicaView, RequestView

RATE = 10_000.0


def view(rid, backlog_tokens=0, total_kv_tokens=100_000):
    load = LoadSnapshot(
        total_kv_tokens=total_kv_tokens,
        free_kv_tokens=total_kv_tokens,
        pending_prefill_tokens=backlog_tokens,
        prefill_tokens_per_s=RATE,
    )
    return ReplicaView(rid, load, 0.0)


def test_rule_keep_within_the_cheapest_plus_tolerance():
    # cheapest 2 s; limit 2 + 2 = 4 s: 4.0 kept (boundary), 4.01 dropped
    assert within_tolerance([2.0, 4.0, 4.01, 3.0], tolerance_s=2.0) == [True, True, False, True]
    # tolerance 0 keeps only the ties with the cheapest
    assert within_tolerance([1.0, 1.0, 1.5], tolerance_s=0.0) == [True, True, False]
    assert within_tolerance([], 1.0) == []


def test_rule_the_estimate_counts_the_prefix_hit_before_the_tolerance():
    index = PrefixIndex()
    index.insert(["h0", "h1", "h2", "h3"], "cached")
    request = RequestView("q", prefix_hashes=("h0", "h1", "h2", "h3"), prompt_tokens=40_000)
    replicas = [view("cached", backlog_tokens=35_000), view("cold")]
    # cached: backlog 35,000 + uncached 0 -> 3.5 s; cold: 0 + 40,000 -> 4.0 s; limit 3.5 + 1 = 4.5: both kept
    kept, dropped = TtftGuard(index, RATE, tolerance_s=1.0).keep(request, replicas)
    assert [v.replica_id for v in kept] == ["cached", "cold"] and dropped == {}
    # tolerance 0.4: cold (4.0 > 3.9) is dropped, with its figures in the reason
    kept, dropped = TtftGuard(index, RATE, tolerance_s=0.4).keep(request, replicas)
    assert [v.replica_id for v in kept] == ["cached"]
    assert dropped == {"cold": "ttft: 4.00s predicted > best 3.50s + tolerance 0.4s"}


def test_rule_negative_tolerance_is_refused():
    with pytest.raises(ValueError, match="tolerance_s must be >= 0"):
        TtftGuard(PrefixIndex(), RATE, tolerance_s=-1.0)


def sticky_pipeline(tolerance_s):
    p = RoutingPipeline(RouterConfig(ttft_tolerance_s=tolerance_s), clock=lambda: 0.0)
    p.on_placed(RequestView("q0", session_id="s", prefix_hashes=("h0",), prompt_tokens=512), "home")
    p.on_completed("q0")
    return p


def test_rule_pipeline_guard_moves_a_turn_off_a_replica_stuck_behind_a_long_prefill():
    request = RequestView("q1", session_id="s", prefix_hashes=("h0", "h1"), prompt_tokens=1024, needed_kv_tokens=1100)
    # home: backlog 100,000 + uncached 512 -> 10.05 s; other: 1024 -> 0.10 s; limit 0.10 + 5 = 5.10 s
    replicas = [view("home", backlog_tokens=100_000), view("other")]
    guarded = sticky_pipeline(5.0).choose(request, replicas)
    assert guarded.ranked_replica_ids == ("other",)
    assert guarded.rejected["home"] == "ttft: 10.05s predicted > best 0.10s + tolerance 5s"
    # with the guard off: home 2 (affinity) + 4 * 1/2 (prefix) + 4 * (0.10 + 0.5) / (10.05 + 0.5) = 4.23
    # against other's 4 * 1 (predicted_ttft), the kv, mamba and queue scores being equal: home first
    unguarded = sticky_pipeline(None).choose(request, replicas)
    assert unguarded.ranked_replica_ids == ("home", "other")


def test_rule_pipeline_guard_keeps_locality_inside_the_tolerance():
    request = RequestView("q1", session_id="s", prefix_hashes=("h0", "h1"), prompt_tokens=1024, needed_kv_tokens=1100)
    # home: backlog 30,000 + 512 -> 3.05 s, within 0.10 + 5: both kept, affinity and prefix win
    decision = sticky_pipeline(5.0).choose(request, [view("home", backlog_tokens=30_000), view("other")])
    assert decision.ranked_replica_ids == ("home", "other") and decision.rejected == {}


def test_rule_pipeline_sizes_each_prefix_index_to_the_replicas_kv_cache():
    p = RoutingPipeline(RouterConfig(prefix_index_capacity_blocks=8, prefix_block_tokens=512), clock=lambda: 0.0)
    p.on_placed(RequestView("q0", prefix_hashes=("h0", "h1", "h2", "h3")), "small")
    p.on_placed(RequestView("q1", prefix_hashes=("h0", "h1", "h2", "h3")), "large")
    request = RequestView("q2", prefix_hashes=("h0", "h1", "h2", "h3"), needed_kv_tokens=10)
    # small: 1,100 KV tokens // 512 = 2 blocks; large: 100,000 // 512 = 195, capped at 8
    p.choose(request, [view("small", total_kv_tokens=1_100), view("large")])
    assert p.prefix_index.capacity("small") == 2 and p.prefix_index.capacity("large") == 8
    assert p.prefix_index.depths(request.prefix_hashes) == {"small": 2, "large": 4}
