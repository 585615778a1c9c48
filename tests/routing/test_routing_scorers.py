import pytest

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.estimate import Estimate, uncached_tokens
from ray_dspine.routing.picker import MaxScorePicker, rank, weighted_totals
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.scorers.kv_headroom import KvHeadroomScorer
from ray_dspine.routing.scorers.mamba_headroom import MambaHeadroomScorer
from ray_dspine.routing.scorers.predicted_decode import PredictedDecodeScorer
from ray_dspine.routing.scorers.predicted_ttft import PredictedTtftScorer
from ray_dspine.routing.scorers.prefix_match import PrefixMatchScorer
from ray_dspine.routing.scorers.queue import QueueScorer
from ray_dspine.routing.scorers.session_affinity import SessionAffinityScorer
from ray_dspine.routing.session_table import SessionTable
from ray_dspine.routing.types import ReplicaView, RequestView


def view(rid, **load):
    return ReplicaView(rid, LoadSnapshot(**load), 0.0)


def est(request, index=None, rate=10_000.0):
    """The decision's shared estimate of `request` (an empty prefix index unless given)."""
    return Estimate.of(request, index or PrefixIndex(), rate)


def ttfts(estimate, replicas):
    return [estimate.ttft_s(v) for v in replicas]


def test_rule_session_affinity():
    table = SessionTable(capacity=10)
    table.record("s", "b")
    scorer = SessionAffinityScorer(table)
    replicas = [view("a"), view("b")]
    assert scorer.score(est(RequestView("q", session_id="s")), replicas) == [0.0, 1.0]
    assert scorer.score(est(RequestView("q", session_id="other")), replicas) == [0.0, 0.0]
    assert scorer.score(est(RequestView("q")), replicas) == [0.0, 0.0]


def test_rule_prefix_match_scores_the_saved_prefill_saturating():
    index = PrefixIndex()
    index.insert(["h0", "h1", "h2"], "a")
    index.insert(["h0"], "b")
    scorer = PrefixMatchScorer(half_tokens=1000.0)
    request = RequestView("q", prefix_hashes=("h0", "h1", "h2", "h3"), prompt_tokens=4000)
    # a saves 3 of 4 blocks = 3,000 tokens -> 3000 / 4000 = 0.75; b 1,000 -> 0.5 (the half point); c 0
    assert scorer.score(est(request, index), [view("a"), view("b"), view("c")]) == [0.75, 0.5, 0.0]
    # the same share of a 40-token prompt saves 30 tokens: 30 / 1030, next to nothing
    small = RequestView("q", prefix_hashes=("h0", "h1", "h2", "h3"), prompt_tokens=40)
    assert scorer.score(est(small, index), [view("a")]) == pytest.approx([30 / 1030])
    assert scorer.score(est(RequestView("q"), index), [view("a")]) == [0.0]  # no hashes: nothing to match
    with pytest.raises(ValueError, match="half_tokens must be > 0"):
        PrefixMatchScorer(half_tokens=0.0)


def test_rule_kv_headroom_after_placement():
    scorer = KvHeadroomScorer()
    request = RequestView("q", needed_kv_tokens=1000)
    replicas = [
        view("a", total_kv_tokens=10_000, free_kv_tokens=6000),  # (6000-1000)/10000 = 0.5
        view("b", total_kv_tokens=10_000, free_kv_tokens=500),  # negative -> clipped to 0
        view("c", total_kv_tokens=0, free_kv_tokens=0),  # no pool reported -> 0
    ]
    assert scorer.score(est(request), replicas) == [0.5, 0.0, 0.0]


def test_rule_mamba_headroom_after_placement():
    scorer = MambaHeadroomScorer()
    request = RequestView("q", num_state_slots=1)
    replicas = [
        view("a", total_state_slots=16, free_state_slots=10, state_slots_per_request=2),  # (10-2)/16 = 0.5
        view("b", total_state_slots=0, free_state_slots=0),  # no state pool -> 1
        view("c", total_state_slots=8, free_state_slots=1, state_slots_per_request=3),  # negative -> 0
    ]
    assert scorer.score(est(request), replicas) == [0.5, 1.0, 0.0]


def test_rule_queue():
    scorer = QueueScorer()
    replicas = [view("a"), view("b", num_running=2, num_queued=1)]
    assert scorer.score(est(RequestView("q")), replicas) == [1.0, 0.25]  # 1/(1+0), 1/(1+3)


def test_rule_picker_weighted_sum():
    replicas = [view("a"), view("b")]
    totals = weighted_totals(replicas, {"x": [1.0, 0.0], "y": [0.5, 1.0]}, {"x": 2.0, "y": 3.0})
    # a: 2*1 + 3*0.5 = 3.5; b: 2*0 + 3*1 = 3.0
    assert totals == pytest.approx({"a": 3.5, "b": 3.0})
    assert rank(replicas, totals) == ["a", "b"]
    assert MaxScorePicker().pick(replicas, {"x": [1.0, 0.0], "y": [0.5, 1.0]}, {"x": 2.0, "y": 3.0})[1] == ["a", "b"]


def test_rule_picker_tie_break_fewer_requests_then_replica_id():
    replicas = [view("c", num_running=1), view("b", num_running=1), view("a", num_running=2, num_queued=1)]
    # 0.1 + 0.2 != 0.3 in floats: rounding keeps these three totals equal
    totals = {"a": 0.3, "b": 0.1 + 0.2, "c": 0.3}
    # equal totals -> b, c (1 request, by id) before a (3 requests)
    assert rank(replicas, totals) == ["b", "c", "a"]


def test_rule_predicted_ttft_backlog_plus_uncached_over_rate():
    index = PrefixIndex()
    index.insert(("h0", "h1", "h2", "h3"), "a")  # a holds all 4 blocks of the prompt
    scorer = PredictedTtftScorer(indifference_s=0.5)
    request = RequestView("q", prefix_hashes=("h0", "h1", "h2", "h3"), prompt_tokens=8000)
    estimate = est(request, index, rate=5000.0)
    replicas = [
        view("a", pending_prefill_tokens=20_000, prefill_tokens_per_s=10_000.0),  # (20000 + 0) / 10000 = 2 s
        view("b", pending_prefill_tokens=2_000, prefill_tokens_per_s=10_000.0),  # (2000 + 8000) / 10000 = 1 s
        view("c", pending_prefill_tokens=2_000),  # no rate reported: (2000 + 8000) / 5000 = 2 s
    ]
    assert ttfts(estimate, replicas) == pytest.approx([2.0, 1.0, 2.0])
    # all estimates above the 0.5 s floor: score = best / est = 1 / 2 for a and c, 1 for b
    assert scorer.score(estimate, replicas) == pytest.approx([0.5, 1.0, 0.5])


def test_rule_estimate_ttft_ahead_a_paced_prompt_lets_a_request_within_its_budget_go_first():
    # a paces a 100,000-token prompt: 84,000 of its 90,000 pending tokens are its unsent part and held
    # requests, and it still lets 20,000 tokens ahead of it
    pacing = dict(
        pending_prefill_tokens=90_000, yielding_prefill_tokens=84_000, yield_budget_tokens=20_000,
        prefill_tokens_per_s=10_000.0,
    )  # fmt: skip
    replicas = [view("a", **pacing), view("b", pending_prefill_tokens=30_000, prefill_tokens_per_s=10_000.0)]
    short = RequestView("q", prompt_tokens=20_000)  # within the budget: (6,000 + 20,000) / 10,000 = 2.6 s on a
    long = RequestView("r", prompt_tokens=20_001)  # over it: (90,000 + 20,001) / 10,000 on a
    assert ttfts(est(short), replicas) == pytest.approx([2.6, 5.0])
    assert ttfts(est(long), replicas) == pytest.approx([11.0001, 5.0001])
    # nothing paced (yielding 0): the budget field changes nothing
    idle = [view("c", pending_prefill_tokens=5_000, yield_budget_tokens=50_000, prefill_tokens_per_s=10_000.0)]
    assert ttfts(est(short), idle) == pytest.approx([2.5])


def test_rule_predicted_ttft_estimates_under_the_indifference_floor_score_alike():
    index = PrefixIndex()
    index.insert(("sys0", "sys1", "sys2"), "busy")  # the shared system prompt, cached on one replica
    scorer = PredictedTtftScorer(indifference_s=1.0)
    request = RequestView("q", prefix_hashes=("sys0", "sys1", "sys2"), prompt_tokens=1500)
    estimate = est(request, index)
    rate = {"prefill_tokens_per_s": 10_000.0}
    replicas = [
        view("busy", **rate),  # 0 s: everything cached, nothing queued
        view("idle", **rate),  # 1500 / 10000 = 0.15 s of prefill
        view("backlog", pending_prefill_tokens=18_500, **rate),  # (18500 + 1500) / 10000 = 2 s
    ]
    assert ttfts(estimate, replicas) == pytest.approx([0.0, 0.15, 2.0])
    # floored at 1 s: 1, 1, 2 -> scores 1, 1 and 1 / 2; the idle replica loses nothing to the cached one
    assert scorer.score(estimate, replicas) == pytest.approx([1.0, 1.0, 0.5])


def test_rule_predicted_ttft_uncached_share_of_prompt():
    request = RequestView("q", prefix_hashes=("h0", "h1", "h2", "h3"), prompt_tokens=8000)
    assert [uncached_tokens(request, d) for d in (0, 1, 3, 4, 9)] == [8000, 6000, 2000, 0, 0]
    assert uncached_tokens(RequestView("q", prompt_tokens=700), 0) == 700  # no blocks: the whole prompt


def test_predicted_ttft_and_estimate_refuse_a_zero_floor_or_rate():
    with pytest.raises(ValueError, match="default_prefill_tokens_per_s must be > 0"):
        est(RequestView("q"), rate=0.0)
    with pytest.raises(ValueError, match="indifference_s must be > 0"):
        PredictedTtftScorer(indifference_s=0.0)


def test_rule_predicted_decode_output_over_pool_acceptance_times_step():
    scorer = PredictedDecodeScorer(typical_output_tokens=256, slack_s=0.5)
    replicas = [
        view("a", decode_step_ms=100.0, accept_length_ema=4.0),  # crowded: 100 ms steps
        view("b", decode_step_ms=40.0, accept_length_ema=1.0),  # idle: still shows its start EMA
        view("c"),  # reports no step time: 0 s
    ]
    # out = min(400, 256) = 256; a = max EMA = 4 -> 64 steps: a 6.4 s, b 2.56 s, c 0 s
    request = RequestView("q", max_tokens=400)
    assert scorer.estimates_s(request, replicas) == pytest.approx([6.4, 2.56, 0.0])
    assert scorer.score(est(request), replicas) == pytest.approx([0.5 / 6.9, 0.5 / 3.06, 1.0])
    # a short answer decodes max_tokens, not the typical count: 8 / 4 * 0.1 s = 0.2 s on a
    assert scorer.estimates_s(RequestView("q", max_tokens=8), replicas)[0] == pytest.approx(0.2)
    with pytest.raises(ValueError):
        PredictedDecodeScorer(typical_output_tokens=0, slack_s=0.5)
