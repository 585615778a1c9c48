import math

import pytest

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.config import RouterConfig
from ray_dspine.routing.pipeline import RoutingPipeline
from ray_dspine.routing.reservations import ReservationLedger
from ray_dspine.routing.types import ReplicaView, RequestView


class FakeClock:
    def __init__(self, now=100.0, step=0.0):
        self.now, self.step = now, step

    def __call__(self):
        value = self.now
        self.now += self.step
        return value


def view(rid, age=0.0, **load):
    base = dict(total_kv_tokens=10_000, free_kv_tokens=10_000)
    return ReplicaView(rid, LoadSnapshot(**{**base, **load}), age)


def pipeline(clock=None, **cfg):
    return RoutingPipeline(RouterConfig(**cfg), clock or FakeClock())


def test_rule_scored_ranking_default_weights():
    clock = FakeClock(now=100.0)
    p = pipeline(clock)
    earlier = RequestView("q0", session_id="s", prefix_hashes=("h0", "h1"), needed_kv_tokens=0)
    p.on_placed(earlier, "a")
    clock.now = 100.5  # the reports below were taken after q0 was placed (and show it running on a)
    request = RequestView(
        "q1", session_id="s", prefix_hashes=("h0", "h1"), prompt_tokens=2000, needed_kv_tokens=1000
    )
    rate = {"prefill_tokens_per_s": 10_000.0}
    replicas = [
        view("a", free_kv_tokens=6000, num_running=1, **rate),
        view("b", free_kv_tokens=9000, pending_prefill_tokens=8000, **rate),
    ]
    decision = p.choose(request, replicas)
    # predicted TTFT: a holds both blocks, no backlog -> 0 s; b: (8000 + 2000) / 10000 = 1 s;
    #   both at or under the 1 s floor: scores 1 and 1
    # a: affinity 4*1 + prefix 4*2000/(2000+32768) (all 2,000 tokens saved) + kv 0.25*(6000-1000)/10000
    #    + mamba 0.1*1 (no pool) + queue 0.5*1/(1+1) + predicted 4*1 = 4 + 0.23010 + 0.125 + 0.1 + 0.25 + 4
    # b: 0 + 0 + 0.25*(9000-1000)/10000 + 0.1 + 0.5*1/(1+0) + 4*1 = 4.8
    assert decision.ranked_replica_ids == ("a", "b") and not decision.wait
    prefix_a = 2000 / 34768
    assert decision.total_scores == pytest.approx({"a": 8.475 + 4 * prefix_a, "b": 0.2 + 0.1 + 0.5 + 4.0})
    assert decision.scores["prefix_match"] == pytest.approx({"a": prefix_a, "b": 0.0})
    assert decision.scores["predicted_ttft"] == pytest.approx({"a": 1.0, "b": 1.0})


def test_rule_spill_when_the_sticky_replica_cannot_hold():
    p = pipeline()
    p.on_placed(RequestView("q0", session_id="s"), "a")
    request = RequestView("q1", session_id="s", needed_kv_tokens=1000)
    decision = p.choose(request, [view("a", free_kv_tokens=500), view("b")])
    assert decision.ranked_replica_ids == ("b",) and "kv" in decision.rejected["a"]


def test_rule_wait_when_no_replica_can_hold():
    p = pipeline()
    request = RequestView("q", needed_kv_tokens=5000)
    decision = p.choose(request, [view("a", free_kv_tokens=4999), view("b", healthy=False)])
    assert decision.wait and decision.ranked_replica_ids == () and decision.chosen is None
    assert set(decision.rejected) == {"a", "b"}


def test_rule_never_fits_is_sent_for_the_engine_to_refuse():
    # 12,000 tokens exceed every replica's total (10,000): waiting cannot help, so the request is
    # placed on the healthy replica with the fewest requests in flight; unhealthy b is skipped.
    p = pipeline()
    request = RequestView("q", needed_kv_tokens=12_000)
    replicas = [view("a", free_kv_tokens=2000, num_running=3), view("b", healthy=False), view("c", num_running=1)]
    decision = p.choose(request, replicas)
    assert not decision.wait and decision.ranked_replica_ids == ("c", "a")
    assert "could ever hold" in decision.reason


def test_rule_unreported_replicas_are_the_fallback_tier():
    p = pipeline()
    new = ReplicaView("new", LoadSnapshot(), math.inf)
    request = RequestView("q", needed_kv_tokens=1000)
    # a reporting replica that can hold ranks first, the unreported one after it
    assert p.choose(request, [new, view("a")]).ranked_replica_ids == ("a", "new")
    # no reporting replica can hold: place on the unreported one instead of waiting
    decision = p.choose(request, [new, view("a", free_kv_tokens=10)])
    assert decision.ranked_replica_ids == ("new",) and not decision.wait


def test_rule_reservations_count_placements_newer_than_the_report():
    clock = FakeClock(now=10.0)
    p = pipeline(clock)
    p.on_placed(RequestView("q1", needed_kv_tokens=6000), "a")  # placed at t=10
    clock.now = 10.5
    request = RequestView("q2", needed_kv_tokens=6000)
    # reports 1 s old were taken at t=9.5 < 10: a's free KV is 10000 - 6000 = 4000 < 6000 -> a filtered
    decision = p.choose(request, [view("a", age=1.0), view("b", age=1.0)])
    assert decision.ranked_replica_ids == ("b",) and "4000" in decision.rejected["a"]
    # a fresh report (age 0, taken at t=10.5) already shows q1: no deduction, a is back
    assert set(p.choose(request, [view("a"), view("b")]).ranked_replica_ids) == {"a", "b"}
    # q1 completes: nothing is deducted even from the old report
    p.on_completed("q1")
    assert set(p.choose(request, [view("a", age=1.0), view("b", age=1.0)]).ranked_replica_ids) == {"a", "b"}


def test_rule_a_placement_at_the_instant_of_the_report_counts_as_pending():
    clock = FakeClock(now=10.0)
    ledger = ReservationLedger(clock, horizon_s=60.0)
    ledger.place(RequestView("q1", needed_kv_tokens=6000, prompt_tokens=5000), "a")  # placed at t=10
    # A report taken at t=10 (age 0) was read before q1 was placed: q1 is deducted.
    (same_instant,) = ledger.apply([view("a", age=0.0)])
    assert (same_instant.load.free_kv_tokens, same_instant.load.pending_prefill_tokens) == (4000, 5000)
    clock.now = 10.25  # a report taken at t=10.25 shows q1
    (later,) = ledger.apply([view("a", age=0.0)])
    assert (later.load.free_kv_tokens, later.load.num_queued) == (10_000, 0)


def test_rule_a_placement_still_on_its_way_counts_until_a_report_taken_after_the_replica_received_it():
    clock = FakeClock(now=10.0)
    ledger = ReservationLedger(clock, horizon_s=60.0, receipt_timeout_s=5.0)
    ledger.place(RequestView("giant", needed_kv_tokens=100_000, prompt_tokens=100_000), "a", received=False)
    clock.now = 10.4
    # A report taken at t=10.2 (age 0.2), after the placement but before the replica had the request:
    # it shows an idle replica, and the ledger still adds the 100,000 tokens.
    (on_its_way,) = ledger.apply([view("a", age=0.2, free_kv_tokens=500_000, total_kv_tokens=500_000)])
    assert (on_its_way.load.pending_prefill_tokens, on_its_way.load.free_kv_tokens) == (100_000, 400_000)
    ledger.received("giant")  # the replica has it at t=10.4
    clock.now = 10.6
    # a report taken at 10.3, before the replica had it, still cannot show it; one taken at 10.5 does
    (older,) = ledger.apply([view("a", age=0.3)])
    (newer,) = ledger.apply([view("a", age=0.1)])
    assert (older.load.pending_prefill_tokens, newer.load.pending_prefill_tokens) == (100_000, 0)
    ledger.received("giant")  # a second confirmation does not move the time the replica got it
    (still,) = ledger.apply([view("a", age=0.1)])
    assert still.load.pending_prefill_tokens == 0


def test_rule_placements_since_the_report_spend_a_pacing_replicas_yield_budget_first():
    clock = FakeClock(now=10.0)
    ledger = ReservationLedger(clock, horizon_s=60.0)
    ledger.place(RequestView("q1", prompt_tokens=12_000), "a")
    ledger.place(RequestView("q2", prompt_tokens=3_000), "b")
    pacing = dict(pending_prefill_tokens=50_000, yielding_prefill_tokens=40_000, yield_budget_tokens=20_000)
    a, b = ledger.apply([view("a", age=1.0, **pacing), view("b", age=1.0, yield_budget_tokens=2_000)])
    # 20,000 - 12,000 left on a; the unsent part stays as reported; b: 2,000 - 3,000 floors at 0
    assert (a.load.yield_budget_tokens, a.load.yielding_prefill_tokens) == (8_000, 40_000)
    assert a.load.pending_prefill_tokens == 62_000
    assert b.load.yield_budget_tokens == 0


PACING = dict(pacing_min_uncached_tokens=80_000, pacing_yield_fraction=0.5)


def test_rule_a_prompt_placed_to_be_paced_yields_to_what_fits_its_budget_and_holds_the_rest():
    ledger = ReservationLedger(FakeClock(now=10.0), horizon_s=60.0)
    ledger.place(RequestView("long", prompt_tokens=100_000), "a", pace_permitted=True)  # paced: budget 50,000
    ledger.place(RequestView("let-in", prompt_tokens=20_000), "a")  # within 50,000: budget 30,000 left
    ledger.place(RequestView("over", prompt_tokens=40_000), "a")  # over 30,000: held behind it
    ledger.place(RequestView("long-2", prompt_tokens=90_000), "a", pace_permitted=True)  # long while pacing: held
    ledger.place(RequestView("small", prompt_tokens=5_000), "a")  # let in: 25,000 left
    (a,) = ledger.apply([view("a", age=1.0, pending_prefill_tokens=2_000, **PACING)])
    assert a.load.pending_prefill_tokens == 2_000 + 100_000 + 20_000 + 40_000 + 90_000 + 5_000
    assert (a.load.yielding_prefill_tokens, a.load.yield_budget_tokens) == (230_000, 25_000)


def test_rule_a_long_prompt_without_a_permit_or_on_a_replica_that_does_not_pace_is_plain_backlog():
    ledger = ReservationLedger(FakeClock(now=10.0), horizon_s=60.0)
    ledger.place(RequestView("refused", prompt_tokens=100_000), "a", pace_permitted=False)
    ledger.place(RequestView("permitted", prompt_tokens=100_000), "b", pace_permitted=True)
    ledger.place(RequestView("short", prompt_tokens=79_999), "c", pace_permitted=True)  # under the threshold
    a, b, c = ledger.apply([view("a", age=1.0, **PACING), view("b", age=1.0), view("c", age=1.0, **PACING)])
    for replica in (a, b, c):
        assert (replica.load.yielding_prefill_tokens, replica.load.yield_budget_tokens) == (0, 0)
    assert (a.load.pending_prefill_tokens, c.load.pending_prefill_tokens) == (100_000, 79_999)


def test_rule_a_permitted_long_prompt_on_a_replica_already_pacing_is_held_not_paced():
    ledger = ReservationLedger(FakeClock(now=10.0), horizon_s=60.0)
    ledger.place(RequestView("long", prompt_tokens=100_000), "a", pace_permitted=True)
    pacing = dict(pending_prefill_tokens=50_000, yielding_prefill_tokens=40_000, yield_budget_tokens=20_000)
    (a,) = ledger.apply([view("a", age=1.0, **pacing, **PACING)])
    # the report's paced prompt keeps its budget; the newcomer waits behind it with the held requests
    assert (a.load.yielding_prefill_tokens, a.load.yield_budget_tokens) == (140_000, 20_000)
    assert a.load.pending_prefill_tokens == 150_000


def test_rule_a_paced_prompts_budget_drains_at_the_prefill_rate_while_the_report_ages():
    ledger = ReservationLedger(FakeClock(now=10.0), horizon_s=60.0)
    pacing = dict(pending_prefill_tokens=50_000, yielding_prefill_tokens=40_000, yield_budget_tokens=20_000)
    (a,) = ledger.apply([view("a", age=0.8, prefill_tokens_per_s=10_000.0, **pacing, **PACING)])
    # 0.8 s at 10,000 tokens/s: 8,000 tokens off the budget and off the backlog
    assert (a.load.yield_budget_tokens, a.load.pending_prefill_tokens) == (12_000, 42_000)
    assert a.load.yielding_prefill_tokens == 40_000
    ledger.place(RequestView("turn", prompt_tokens=12_001), "a")  # over the 12,000 left: held
    (a,) = ledger.apply([view("a", age=0.8, prefill_tokens_per_s=10_000.0, **pacing, **PACING)])
    assert (a.load.yield_budget_tokens, a.load.yielding_prefill_tokens) == (12_000, 52_001)


def test_a_turn_stays_on_the_replica_caching_it_after_a_prompt_was_placed_there_to_be_paced():
    # The conversation's 20,480 tokens are cached on a; a 150,000-token cold prompt was just placed on a with
    # a pacing permit (on_placed without a decision: permitted). The turn's 512 uncached tokens fit the
    # paced prompt's budget (75,000), so a starts it in 0.05 s, against 2.1 s on b. Counted as plain
    # backlog, a's estimate would be 15.05 s, past b's 2.1 s plus the cached-prefix allowance
    # (max(6, min(12, 4 x 2.05 s)) = 8.2 s), and the guard would send the turn to b to be prefilled again.
    p = pipeline(FakeClock(now=100.0))
    history = tuple(f"h{i}" for i in range(40))
    earlier = RequestView("t1", session_id="s", prefix_hashes=history, prompt_tokens=20_480,
                          needed_kv_tokens=21_000)  # fmt: skip
    p.on_placed(earlier, "a")
    p.on_completed("t1")
    p.on_placed(RequestView("cold", session_id="o", prompt_tokens=150_000, needed_kv_tokens=151_000), "a")
    load = dict(total_kv_tokens=1_000_000, free_kv_tokens=1_000_000, prefill_tokens_per_s=10_000.0, **PACING)
    turn = RequestView("t2", session_id="s", prefix_hashes=(*history, "h40"), prompt_tokens=21_000,
                       needed_kv_tokens=22_000)  # fmt: skip
    decision = p.choose(turn, [view("a", age=1.0, **load), view("b", age=1.0, **load)])
    assert decision.chosen == "a"
    assert "a" not in decision.rejected


def test_rule_a_placement_never_confirmed_is_assumed_received_after_the_timeout():
    clock = FakeClock(now=10.0)
    ledger = ReservationLedger(clock, horizon_s=60.0, receipt_timeout_s=5.0)
    ledger.place(RequestView("lost", prompt_tokens=3000), "a", received=False)
    clock.now = 16.0
    # seen = 10 + 5 = 15: a report taken at 14.5 still gets it added, one taken at 15.5 shows it
    (before,) = ledger.apply([view("a", age=1.5)])
    (after,) = ledger.apply([view("a", age=0.5)])
    assert (before.load.pending_prefill_tokens, after.load.pending_prefill_tokens) == (3000, 0)
    with pytest.raises(ValueError, match="receipt_timeout_s must be > 0"):
        ReservationLedger(clock, horizon_s=60.0, receipt_timeout_s=0.0)


def test_rule_reservation_ledger_adjusts_slots_and_queue_and_forgets_after_horizon():
    clock = FakeClock(now=0.0)
    ledger = ReservationLedger(clock, horizon_s=60.0)
    ledger.place(RequestView("q1", needed_kv_tokens=100, num_state_slots=1), "a")
    clock.now = 1.0
    (adjusted,) = ledger.apply([view("a", age=5.0, total_state_slots=8, free_state_slots=8, state_slots_per_request=3)])
    # free_kv 10000 - 100 = 9900; slots 8 - 1*3 = 5; queued 0 + 1
    assert (adjusted.load.free_kv_tokens, adjusted.load.free_state_slots, adjusted.load.num_queued) == (9900, 5, 1)
    clock.now = 61.0  # placed 61 s ago > horizon 60 s: forgotten
    (plain,) = ledger.apply([view("a", age=math.inf)])
    assert plain.load.free_kv_tokens == 10_000 and ledger.num_live() == 0


def test_rule_reported_backlog_drains_while_the_report_ages_and_placements_add_theirs():
    clock = FakeClock(now=10.0)
    ledger = ReservationLedger(clock, horizon_s=60.0)
    ledger.place(RequestView("q1", prompt_tokens=3000), "a", prefill_tokens=1200)  # placed at t=10
    ledger.place(RequestView("q2", prompt_tokens=500), "a")  # no estimate: the whole prompt
    clock.now = 10.5
    report = dict(age=2.0, pending_prefill_tokens=25_000, prefill_tokens_per_s=10_000.0)
    (a,) = ledger.apply([view("a", **report)])
    # reported 25000 - 10000 tok/s * 2 s = 5000 left, + 1200 + 500 placed since the report (t=8.5)
    assert a.load.pending_prefill_tokens == 6700
    (drained,) = ledger.apply([view("b", **{**report, "age": 3.0})])  # 25000 - 30000 -> 0, not negative
    assert drained.load.pending_prefill_tokens == 0
    (unknown_rate,) = ledger.apply([view("b", age=2.0, pending_prefill_tokens=25_000)])  # rate 0: no drain
    assert unknown_rate.load.pending_prefill_tokens == 25_000


def test_rule_placement_records_the_uncached_prompt_on_that_replica():
    clock = FakeClock(now=10.0)
    p = pipeline(clock)
    p.on_placed(RequestView("q0", prefix_hashes=("h0", "h1"), prompt_tokens=1000), "a")
    # q1 shares q0's two blocks out of four on a: 4000 * (1 - 2/4) = 2000 uncached on a
    p.on_placed(RequestView("q1", prefix_hashes=("h0", "h1", "h2", "h3"), prompt_tokens=4000), "a")
    p.on_placed(RequestView("q2", prefix_hashes=("h0", "h1", "h2", "h3"), prompt_tokens=4000), "b")
    loads = {v.replica_id: v.load for v in p.ledger.apply([view("a", age=1.0), view("b", age=1.0)])}
    assert loads["a"].pending_prefill_tokens == 1000 + 2000 and loads["b"].pending_prefill_tokens == 4000


def test_pipeline_records_each_scorer_latency_and_runs_only_listed_scorers():
    ticks = FakeClock(now=0.0, step=1e-6)  # every timer call advances 1 us
    listed = [s for s in RouterConfig().scorers if s.type != "prefix_match"]
    p = RoutingPipeline(RouterConfig(scorers=listed), FakeClock(), timer=ticks)
    decision = p.choose(RequestView("q"), [view("a")])
    expected = {"session_affinity", "kv_headroom", "mamba_headroom", "queue", "predicted_ttft"}
    assert set(decision.scorer_latency_us) == expected
    assert all(v == pytest.approx(1.0) for v in decision.scorer_latency_us.values())


def test_forget_replica_drops_its_state():
    p = pipeline()
    p.on_placed(RequestView("q0", session_id="s", prefix_hashes=("h0",)), "a")
    p.forget_replica("a")
    assert p.sessions.last("s") is None and p.prefix_index.depths(["h0"]) == {}


def test_rule_a_new_cache_generation_forgets_what_the_replica_cached():
    p = pipeline()
    p.on_placed(RequestView("q0", session_id="s", prefix_hashes=("h0", "h1")), "a")
    p.on_placed(RequestView("q1", session_id="t", prefix_hashes=("h0",)), "b")
    request = RequestView("q2", prefix_hashes=("h0", "h1"))
    p.choose(request, [view("a"), view("b")])  # generation 0 first seen: nothing forgotten
    assert p.prefix_index.depths(["h0", "h1"]) == {"a": 2, "b": 1}
    p.choose(request, [view("a", cache_generation=1), view("b")])  # a's server was relaunched
    assert p.prefix_index.depths(["h0", "h1"]) == {"b": 1}
    assert p.sessions.last("s") == "a"  # the session still prefers a; only the cache belief is gone


def test_rule_a_replica_that_caches_most_of_the_prompt_needs_kv_only_for_the_rest():
    p = pipeline()
    p.on_placed(RequestView("q0", session_id="s", prefix_hashes=("h0", "h1", "h2", "h3")), "a")
    p.on_completed("q0")
    # q1 repeats all 4 of q0's blocks and adds none: cached(q1, a) = 8000 - uncached_tokens = 8000 - 0;
    # a: 3000 free, 500 evictable -> 3000 - min(8000, 500) = 2500 >= 8100 - 8000 = 100 -> kept.
    # b caches nothing: 9000 >= 8100 -> kept as well; a ranks first (the session's replica, its prefix).
    request = RequestView("q1", session_id="s", prefix_hashes=("h0", "h1", "h2", "h3"), prompt_tokens=8000,
                          needed_kv_tokens=8100)  # fmt: skip
    decision = p.choose(request, [view("a", free_kv_tokens=3000, evictable_kv_tokens=500), view("b", free_kv_tokens=9000)])
    assert decision.ranked_replica_ids[0] == "a" and decision.rejected == {}
    # without the cache belief (another session, other blocks) a is short: 3000 < 8100
    other = RequestView("q2", prefix_hashes=("x0",), prompt_tokens=8000, needed_kv_tokens=8100)
    assert p.choose(other, [view("a", free_kv_tokens=3000, evictable_kv_tokens=500)]).wait


def _index_with_capacity_4(p):
    p.choose(RequestView("probe"), [view("a", total_kv_tokens=4 * 512, free_kv_tokens=4 * 512)])  # sizes a's index


def test_rule_a_served_request_leaves_its_blocks_most_recently_used():
    p = pipeline()
    _index_with_capacity_4(p)
    p.on_placed(RequestView("long", prefix_hashes=("l0", "l1")), "a")
    p.on_placed(RequestView("b", prefix_hashes=("b0", "b1")), "a")
    p.on_completed("long")  # long ends after b was placed: its blocks are the newest in a's LRU
    p.on_placed(RequestView("c", prefix_hashes=("c0", "c1")), "a")  # 6 blocks > 4: the 2 oldest go
    assert p.prefix_index.depths(["l0", "l1"]) == {"a": 2}
    assert p.prefix_index.depths(["b0", "b1"]) == {}


def test_rule_a_withdrawn_request_or_a_relaunched_replica_is_not_touched():
    p = pipeline()
    _index_with_capacity_4(p)
    p.on_placed(RequestView("long", prefix_hashes=("l0", "l1")), "a")
    p.on_placed(RequestView("b", prefix_hashes=("b0", "b1")), "a")
    p.on_completed("long", served=False)  # never reached a: insertion order stands
    p.on_placed(RequestView("c", prefix_hashes=("c0", "c1")), "a")
    assert p.prefix_index.depths(["l0", "l1"]) == {} and p.prefix_index.depths(["b0", "b1"]) == {"a": 2}
    # placed before a relaunch, completed after it: the new server never cached its blocks
    p.on_placed(RequestView("d", prefix_hashes=("d0",)), "a")
    p.choose(RequestView("probe2"), [view("a", total_kv_tokens=4 * 512, free_kv_tokens=4 * 512, cache_generation=1)])
    p.on_completed("d")
    assert p.prefix_index.depths(["d0"]) == {}
