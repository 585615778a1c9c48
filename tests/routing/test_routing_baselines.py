from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.baselines.cache_aware import CacheAwarePolicy, is_imbalanced
from ray_dspine.routing.baselines.least_load import LeastLoadPolicy
from ray_dspine.routing.config import CacheAwareConfig
from ray_dspine.routing.types import ReplicaView, RequestView


class Clock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def view(rid, running=0, healthy=True):
    return ReplicaView(rid, LoadSnapshot(num_running=running, healthy=healthy), 0.0)


def policy(clock=None, **cfg):
    return CacheAwarePolicy(CacheAwareConfig(**cfg), clock or Clock())


QUERY = RequestView("q", prefix_hashes=("h0", "h1", "h2", "h3"))


def test_rule_imbalance_needs_both_thresholds():
    # defaults abs 64, rel 1.5
    assert is_imbalanced([100, 10], 64, 1.5)  # 90 > 64 and 100 > 15
    assert not is_imbalanced([300, 230], 64, 1.5)  # 70 > 64 but 300 <= 345
    assert not is_imbalanced([60, 0], 64, 1.5)  # 60 <= 64
    assert not is_imbalanced([], 64, 1.5)


def test_rule_imbalanced_picks_shortest_queue_even_over_a_cache_hit():
    p = policy()
    p.on_placed(QUERY, "a")
    decision = p.choose(QUERY, [view("a", running=100), view("b", running=10)])
    assert decision.ranked_replica_ids == ("b", "a") and decision.reason.startswith("imbalanced")


def test_rule_balanced_cache_hit_above_threshold():
    p = policy()
    p.on_placed(RequestView("q0", prefix_hashes=("h0", "h1")), "a")
    # a matches 2 of 4 blocks: 0.5 > 0.3 -> a, though it is busier (5 vs 0, balanced)
    decision = p.choose(QUERY, [view("a", running=5), view("b")])
    assert decision.ranked_replica_ids == ("a", "b") and decision.scores["match_rate"] == {"a": 0.5, "b": 0.0}


def test_rule_balanced_cache_miss_picks_smallest_tree():
    p = policy(cache_threshold=0.25)
    p.on_placed(RequestView("q0", prefix_hashes=("h0", "x1", "x2", "x3", "x4")), "a")  # a: 5 blocks
    p.on_placed(RequestView("q1", prefix_hashes=("y0", "y1")), "b")  # b: 2 blocks
    # a matches 1 of 4 = 0.25, not > 0.25 -> miss -> smallest tree b
    decision = p.choose(QUERY, [view("a"), view("b")])
    assert decision.chosen == "b" and decision.reason.startswith("cache miss")


def test_rule_tree_updated_on_placement_and_trimmed_every_interval():
    clock = Clock(0.0)
    p = policy(clock, eviction_interval_s=10.0, max_tree_size=2)
    p.choose(QUERY, [view("a")])  # first call starts the eviction timer at t=0
    p.on_placed(QUERY, "a")
    clock.now = 5.0
    p.choose(QUERY, [view("a")])
    assert p.prefix_index.num_blocks("a") == 4  # 5 s < 10 s: no trim yet
    clock.now = 10.0
    p.choose(QUERY, [view("a")])
    assert p.prefix_index.num_blocks("a") == 2  # trimmed to max_tree_size, keeping h0, h1
    assert p.prefix_index.depths(list(QUERY.prefix_hashes)) == {"a": 2}


def test_rule_cache_aware_skips_unhealthy_and_waits_when_none_healthy():
    p = policy()
    assert p.choose(QUERY, [view("a", healthy=False), view("b")]).ranked_replica_ids == ("b",)
    assert p.choose(QUERY, [view("a", healthy=False)]).wait


def test_rule_least_load_order_and_unreported_placements():
    clock = Clock(0.0)
    p = LeastLoadPolicy(clock)
    replicas = [view("c", running=1), view("b", running=1), view("a", running=2), view("d", healthy=False)]
    # loads c=1, b=1, a=2; tie c/b broken by id; d unhealthy left out
    assert p.choose(RequestView("q"), replicas).ranked_replica_ids == ("b", "c", "a")
    clock.now = 0.1
    p.on_placed(RequestView("q1"), "b")
    clock.now = 0.2
    stale = [ReplicaView(v.replica_id, v.load, 1.0) for v in replicas]
    # reports 1 s old do not show q1 on b: b counts 2 -> c(1), a(2), b(2)
    assert p.choose(RequestView("q2"), stale).ranked_replica_ids == ("c", "a", "b")
