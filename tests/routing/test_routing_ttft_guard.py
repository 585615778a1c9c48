import pytest

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.config import EstimatorConfig, RouterConfig, TtftGuardFilter
from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.pipeline import RoutingPipeline
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.ttft_guard import TtftGuard, within_tolerance
from ray_dspine.routing.types import ReplicaView, RequestView

RATE = 10_000.0


def est(index, request):
    return Estimate.of(request, index, RATE)


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
    kept, dropped = TtftGuard(tolerance_s=1.0).keep(est(index, request), replicas)
    assert [v.replica_id for v in kept] == ["cached", "cold"] and dropped == {}
    # tolerance 0.4: cold (4.0 > 3.9) is dropped, with its figures in the reason
    kept, dropped = TtftGuard(tolerance_s=0.4).keep(est(index, request), replicas)
    assert [v.replica_id for v in kept] == ["cached"]
    assert dropped == {"cold": "ttft: 4.00s predicted > best 3.50s + tolerance 0.4s"}


def half_cached():
    # 4 blocks, 2 cached on "cached": uncached = 40,000 * (1 - 2/4) = 20,000 -> 20,000 cached tokens, 2.0 s saved
    index = PrefixIndex()
    index.insert(["h0", "h1"], "cached")
    request = RequestView("q", prefix_hashes=("h0", "h1", "h2", "h3"), prompt_tokens=40_000)
    # cached: (80,000 + 20,000) / 10,000 = 10.0 s; cold: 40,000 / 10,000 = 4.0 s; 6.0 s over the best
    return index, request, [view("cached", backlog_tokens=80_000), view("cold")]


def test_rule_a_replica_may_cost_per_cached_seconds_per_second_of_prefill_its_cache_saves():
    index, request, replicas = half_cached()
    guard = TtftGuard(tolerance_s=5.0, per_cached=4.0, cached_max_s=12.0)
    # allow(cached) = max(5, min(12, 4 * 2.0)) = 8 s: 10.0 <= 4.0 + 8 -> kept; cold (saves nothing) is the best
    assert guard.allowances_s(est(index, request), replicas) == pytest.approx([8.0, 5.0])
    kept, dropped = guard.keep(est(index, request), replicas)
    assert [v.replica_id for v in kept] == ["cached", "cold"] and dropped == {}
    # without the extension the 5 s tolerance alone drops it: 10.0 > 4.0 + 5
    kept, dropped = TtftGuard(tolerance_s=5.0).keep(est(index, request), replicas)
    assert dropped == {"cached": "ttft: 10.00s predicted > best 4.00s + tolerance 5s"}


def test_rule_the_extension_is_capped_at_cached_max_s():
    index, request, replicas = half_cached()
    # allow(cached) = max(5, min(5.5, 8.0)) = 5.5 s: 10.0 > 4.0 + 5.5 -> dropped, the allowance in the reason
    kept, dropped = TtftGuard(tolerance_s=5.0, per_cached=4.0, cached_max_s=5.5).keep(est(index, request), replicas)
    assert [v.replica_id for v in kept] == ["cold"]
    assert dropped == {"cached": "ttft: 10.00s predicted > best 4.00s + 5.50s allowed for its cached prefix (tolerance 5s)"}


def test_rule_the_extension_never_allows_less_than_the_tolerance():
    index, request, replicas = half_cached()
    # per_cached 1: 1 * 2.0 s = 2 s < tolerance 6 -> allow 6; 10.0 <= 4.0 + 6 -> kept
    guard = TtftGuard(tolerance_s=6.0, per_cached=1.0, cached_max_s=12.0)
    assert guard.allowances_s(est(index, request), replicas) == pytest.approx([6.0, 6.0])
    # cached_max_s below the tolerance does not lower it either
    assert TtftGuard(6.0, per_cached=4.0, cached_max_s=1.0).allowances_s(est(index, request), replicas) == [6.0, 6.0]


@pytest.mark.parametrize("name", ["tolerance_s", "per_cached", "cached_max_s"])
def test_rule_negative_parameters_are_refused(name):
    values = {"tolerance_s": 1.0, "per_cached": 1.0, "cached_max_s": 1.0} | {name: -1.0}
    with pytest.raises(ValueError, match=f"{name} must be >= 0"):
        TtftGuard(**values)


def sticky_pipeline(tolerance_s, per_cached_s=0.0):
    config = RouterConfig()
    if tolerance_s is None:
        config = config.without_stage("ttft_guard")
    else:
        config = config.with_stage(TtftGuardFilter(tolerance_s=tolerance_s, per_cached_s=per_cached_s))
    p = RoutingPipeline(config, clock=lambda: 0.0)
    p.on_placed(RequestView("q0", session_id="s", prefix_hashes=("h0",), prompt_tokens=32_768), "home")
    p.on_completed("q0")
    return p


# A second turn of 65,536 tokens whose first half (block h0) the session's home replica caches.
TURN = RequestView("q1", session_id="s", prefix_hashes=("h0", "h1"), prompt_tokens=65_536, needed_kv_tokens=66_000)


def test_rule_pipeline_guard_moves_a_turn_off_a_replica_stuck_behind_a_long_prefill():
    # home: (backlog 100,000 + uncached 32,768) / 10,000 = 13.28 s; other: 65,536 -> 6.55 s; limit 11.55 s
    replicas = [view("home", backlog_tokens=100_000, total_kv_tokens=200_000), view("other", total_kv_tokens=200_000)]
    guarded = sticky_pipeline(5.0).choose(TURN, replicas)
    assert guarded.ranked_replica_ids == ("other",)
    assert guarded.rejected["home"] == "ttft: 13.28s predicted > best 6.55s + tolerance 5s"
    # with the guard off: home 4 (affinity) + 4 * 32,768 / (32,768 + 32,768) (prefix) + 4 * (6.55 + 0.5) /
    # (13.28 + 0.5) = 8.05 against other's 4 (predicted_ttft), the kv, mamba and queue scores equal: home first
    unguarded = sticky_pipeline(None).choose(TURN, replicas)
    assert unguarded.ranked_replica_ids == ("home", "other")


def test_rule_pipeline_guard_lets_a_long_cached_prefix_wait_longer():
    # home saves 32,768 tokens = 3.28 s of prefill; per_cached 3: allow min(12, 9.83) = 9.83 s, and
    # 13.28 <= 6.55 + 9.83: home is kept, and affinity and the prefix win as without the guard (8.05 vs 4)
    replicas = [view("home", backlog_tokens=100_000, total_kv_tokens=200_000), view("other", total_kv_tokens=200_000)]
    decision = sticky_pipeline(5.0, per_cached_s=3.0).choose(TURN, replicas)
    assert decision.ranked_replica_ids == ("home", "other") and decision.rejected == {}


def test_rule_pipeline_guard_keeps_locality_inside_the_tolerance():
    # home: (60,000 + 32,768) / 10,000 = 9.28 s, within 6.55 + 5: both kept; home 4 + 2 + 4 * 7.05 / 9.78
    # = 8.89 against other's 4: affinity and the cached half win although home is 2.7 s slower
    replicas = [view("home", backlog_tokens=60_000, total_kv_tokens=200_000), view("other", total_kv_tokens=200_000)]
    decision = sticky_pipeline(5.0).choose(TURN, replicas)
    assert decision.ranked_replica_ids == ("home", "other") and decision.rejected == {}


def test_rule_pipeline_sizes_each_prefix_index_to_the_replicas_kv_cache():
    p = RoutingPipeline(
        RouterConfig(estimator=EstimatorConfig(prefix_index_capacity_blocks=8, prefix_block_tokens=512)), clock=lambda: 0.0
    )
    p.on_placed(RequestView("q0", prefix_hashes=("h0", "h1", "h2", "h3")), "small")
    p.on_placed(RequestView("q1", prefix_hashes=("h0", "h1", "h2", "h3")), "large")
    request = RequestView("q2", prefix_hashes=("h0", "h1", "h2", "h3"), needed_kv_tokens=10)
    # small: 1,100 KV tokens // 512 = 2 blocks; large: 100,000 // 512 = 195, capped at 8
    p.choose(request, [view("small", total_kv_tokens=1_100), view("large")])
    assert p.prefix_index.capacity("small") == 2 and p.prefix_index.capacity("large") == 8
    assert p.prefix_index.depths(request.prefix_hashes) == {"small": 2, "large": 4}


def test_rule_pipeline_counts_a_hicache_host_tier_in_the_prefix_index():
    p = RoutingPipeline(RouterConfig(estimator=EstimatorConfig(prefix_block_tokens=512)), clock=lambda: 0.0)
    request = RequestView("q", prefix_hashes=("h0",), needed_kv_tokens=10)
    hosted = view("hosted", total_kv_tokens=1_100)
    hosted = ReplicaView("hosted", hosted.load.model_copy(update={"host_kv_tokens": 2_000}), 0.0)
    # hosted: (1,100 GPU + 2,000 host) // 512 = 6 blocks; plain: 1,100 // 512 = 2
    p.choose(request, [hosted, view("plain", total_kv_tokens=1_100)])
    assert p.prefix_index.capacity("hosted") == 6 and p.prefix_index.capacity("plain") == 2
