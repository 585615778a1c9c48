"""The shared estimate (ray_dspine/routing/estimate.py) and the stage lists built from config, worked by hand."""

import pytest

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.config import RouterConfig
from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.filters import FitsMemory
from ray_dspine.routing.pipeline import RoutingPipeline
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.scorers.predicted_ttft import PredictedTtftScorer
from ray_dspine.routing.scorers.prefix_match import PrefixMatchScorer
from ray_dspine.routing.ttft_guard import TtftGuard
from ray_dspine.routing.types import ReplicaView, RequestView

DEFAULT_RATE = 5_000.0  # tokens/s assumed for a replica that reports no rate

# A 30,000-token prompt of three blocks; a caches the first two, b the first, c none.
REQUEST = RequestView("q", prefix_hashes=("h0", "h1", "h2"), prompt_tokens=30_000, needed_kv_tokens=31_000)
REPLICAS = [
    ReplicaView("a", LoadSnapshot(total_kv_tokens=40_000, free_kv_tokens=15_000, evictable_kv_tokens=2_000,
                                  pending_prefill_tokens=40_000, prefill_tokens_per_s=10_000.0), 0.0),
    ReplicaView("b", LoadSnapshot(total_kv_tokens=40_000, free_kv_tokens=25_000, evictable_kv_tokens=0), 0.0),
    ReplicaView("c", LoadSnapshot(total_kv_tokens=200_000, free_kv_tokens=100_000,
                                  pending_prefill_tokens=100_000, prefill_tokens_per_s=20_000.0), 0.0),
]  # fmt: skip


def index() -> PrefixIndex:
    out = PrefixIndex()
    out.insert(("h0", "h1"), "a")
    out.insert(("h0",), "b")
    return out


def test_rule_the_estimate_by_hand():
    e = Estimate.of(REQUEST, index(), DEFAULT_RATE)
    ids = [v.replica_id for v in REPLICAS]
    # uncached = round(30,000 * (1 - depth / 3)): a 10,000, b 20,000, c 30,000; cached the rest
    assert [e.depth(r) for r in ids] == [2, 1, 0]
    assert [e.uncached_tokens(r) for r in ids] == [10_000, 20_000, 30_000]
    assert [e.cached_tokens(r) for r in ids] == [20_000, 10_000, 0]
    assert [e.matched_tokens(r) for r in ids] == pytest.approx([20_000.0, 10_000.0, 0.0])
    # rate: a 10,000 and c 20,000 reported, b the default 5,000
    # ttft: a (40,000 + 10,000) / 10,000 = 5.0 s; b (0 + 20,000) / 5,000 = 4.0 s; c (100,000 + 30,000) / 20,000 = 6.5 s
    assert [e.ttft_s(v) for v in REPLICAS] == pytest.approx([5.0, 4.0, 6.5])
    # saved: a 20,000 / 10,000 = 2.0 s; b 10,000 / 5,000 = 2.0 s; c 0
    assert [e.saved_s(v) for v in REPLICAS] == pytest.approx([2.0, 2.0, 0.0])
    # backlog: a 40,000 / 10,000 = 4.0 s; b 0; c 100,000 / 20,000 = 5.0 s
    assert [e.backlog_s(v) for v in REPLICAS] == pytest.approx([4.0, 0.0, 5.0])
    # no prefix hashes: nothing cached anywhere, the whole prompt to prefill
    bare = Estimate.of(RequestView("p", prompt_tokens=700), index(), DEFAULT_RATE)
    assert (bare.uncached_tokens("a"), bare.cached_tokens("a"), bare.matched_tokens("a")) == (700, 0, 0.0)


def test_the_stages_read_the_estimates_figures():
    e = Estimate.of(REQUEST, index(), DEFAULT_RATE)
    # capacity: a needs 31,000 - 20,000 cached = 11,000 of 15,000 free less 2,000 evictable hit blocks it
    # pins = 13,000: kept; b 21,000 of 25,000 (nothing evictable): kept; c 31,000 of 100,000: kept.
    # Without their cached prefixes a (31,000 > 15,000) and b (31,000 > 25,000) would be removed.
    fits = FitsMemory(stale_after_s=5.0, stale_headroom_fraction=0.5, drop_after_s=60.0)
    kept, removed = fits.keep(e, REPLICAS)
    assert [v.replica_id for v in kept] == ["a", "b", "c"] and removed == {}
    # guard, tolerance 1 s, 1 s per s saved: allow a = b = max(1, 1 * 2.0) = 2 s, c 1 s; best 4.0 s:
    # a 5.0 <= 6.0 and b kept, c 6.5 > 5.0 dropped
    guard = TtftGuard(1.0, per_cached=1.0, cached_max_s=12.0)
    assert guard.allowances_s(e, REPLICAS) == pytest.approx([2.0, 2.0, 1.0])
    kept, dropped = guard.keep(e, REPLICAS)
    assert [v.replica_id for v in kept] == ["a", "b"]
    assert dropped == {"c": "ttft: 6.50s predicted > best 4.00s + tolerance 1s"}
    # prefix_match, half 10,000: a 20,000 / 30,000, b 10,000 / 20,000, c 0
    assert PrefixMatchScorer(10_000.0).score(e, REPLICAS) == pytest.approx([2 / 3, 0.5, 0.0])
    # predicted_ttft, floor 1 s: best 4.0 s -> a 4 / 5, b 1, c 4 / 6.5
    assert PredictedTtftScorer(1.0).score(e, REPLICAS) == pytest.approx([0.8, 1.0, 4 / 6.5])


def hand_config(**update) -> RouterConfig:
    return RouterConfig.model_validate({
        "estimator": {"default_prefill_tokens_per_s": DEFAULT_RATE},
        "filters": [{"type": "fits_memory"}, {"type": "ttft_guard", "tolerance_s": 1.0, "per_cached_s": 1.0}],
        "scorers": [{"type": "prefix_match", "weight": 1.0, "half_tokens": 10_000.0},
                    {"type": "predicted_ttft", "weight": 1.0}],
        "holds": [],
        **update,
    })  # fmt: skip


def test_pipeline_runs_the_listed_stages_over_one_estimate():
    p = RoutingPipeline(hand_config(), clock=lambda: 0.0)
    p.prefix_index.insert(("h0", "h1"), "a")
    p.prefix_index.insert(("h0",), "b")
    decision = p.choose(REQUEST, REPLICAS)
    # the stage figures above: c dropped by the guard; totals a 2/3 + 0.8 = 1.4667, b 0.5 + 1 = 1.5
    assert decision.rejected_by == {"c": "ttft_guard"}
    assert decision.scores == {
        "prefix_match": pytest.approx({"a": 2 / 3, "b": 0.5}), "predicted_ttft": pytest.approx({"a": 0.8, "b": 1.0}),
    }  # fmt: skip
    assert decision.total_scores == pytest.approx({"a": 2 / 3 + 0.8, "b": 1.5})
    assert decision.ranked_replica_ids == ("b", "a")


def test_registry_builds_the_listed_stages_in_order():
    config = hand_config(scorers=[{"type": "queue", "weight": 2.0}, {"type": "session_affinity", "weight": 0.5},
                                  {"type": "predicted_decode", "weight": 8.0}])  # fmt: skip
    p = RoutingPipeline(config, clock=lambda: 0.0)
    assert [f.name for f in p.filters] == ["fits_memory", "ttft_guard"]
    assert [(s.name, w) for s, w in p.scorers] == [("queue", 2.0), ("session_affinity", 0.5), ("predicted_decode", 8.0)]
    assert p.picker.name == "max_score" and p.holds == []
    assert [h.name for h in RoutingPipeline(RouterConfig(), clock=lambda: 0.0).holds] == ["memory_wait"]


def test_a_scorer_left_out_of_the_list_is_off():
    # Two identical empty replicas; the session last ran on b. With the default scorers b's affinity (4)
    # wins; without session_affinity the totals tie and the picker takes a (equal requests, then id).
    replicas = [ReplicaView(r, LoadSnapshot(total_kv_tokens=10_000, free_kv_tokens=10_000), 0.0) for r in "ab"]
    turn = RequestView("q", session_id="s", prompt_tokens=100, needed_kv_tokens=200)
    with_affinity = RoutingPipeline(RouterConfig(), clock=lambda: 0.0)
    with_affinity.sessions.record("s", "b")
    assert with_affinity.choose(turn, replicas).ranked_replica_ids == ("b", "a")
    without = RoutingPipeline(RouterConfig().without_stage("session_affinity"), clock=lambda: 0.0)
    without.sessions.record("s", "b")
    decision = without.choose(turn, replicas)
    assert decision.ranked_replica_ids == ("a", "b") and "session_affinity" not in decision.scores
