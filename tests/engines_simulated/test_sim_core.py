"""The clock-free core, on a profile with round numbers so every time can be worked out by hand.

Round profile: decode = 20 + 1 * n + 0.001 * context ms; verify adds 4 + 0.5 * n * (D - 1) ms, D = 4;
prefill = 20 + 0.1 * uncached prompt tokens ms. Workload "full" has acceptance 4.0 = D, so every
verify step keeps the whole block (alpha = 1) and draws are fixed.
"""

import random

import pytest

from ray_dspine.engines.protocol import EngineError
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from ray_dspine.engines.simulated.core import SimReplicaCore
from ray_dspine.engines.simulated.kv_tiers import KvTier
from ray_dspine.engines.simulated.profile import (
    CalibrationPoint,
    DecodeModel,
    DrafterProfile,
    PrefillModel,
    SimProfile,
)
from ray_dspine.engines.simulated.request import SimEvent, SimRequest


def round_profile() -> SimProfile:
    return SimProfile(
        name="round", gpu="none", model="none", sources=[], assumptions=[],
        calibration=CalibrationPoint(
            concurrency=1, context_tokens_per_request=0, workload="full", autoregressive_output_tok_s=1.0
        ),
        decode=DecodeModel(base_ms=20.0, per_running_ms=1.0, per_kv_token_ms=0.001),
        verify_per_token_ms=0.5,
        prefill=PrefillModel(per_token_ms=0.1),
        drafters={
            "dspine": DrafterProfile(
                draft_tokens=4, draft_ms=4.0, draft_vram_gb=4.0, accept_length={"full": 4.0},
                per_request_cv=0.0, reference_output_tok_s=1.0,
            )
        },
    )  # fmt: skip


def make_core(drafter="none", total_kv=100, slots=8, per_request=1, max_running=8, ema=0.05) -> SimReplicaCore:
    config = SimulatedEngineConfig(
        profile="round", workload="full", drafter=drafter, total_kv_tokens=total_kv, num_state_slots=slots,
        state_slots_per_request=per_request, prefix_block_tokens=4, max_running_requests=max_running,
        accept_ema_weight=ema,
    )  # fmt: skip
    return SimReplicaCore(config, round_profile(), random.Random(0))


def drain(core: SimReplicaCore, check=None) -> list[SimEvent]:
    events = []
    while (t := core.next_event_s()) is not None:
        events += core.advance_to(t)
        if check:
            check(core)
    return events


def req(rid, prompt, max_tokens, hashes=()) -> SimRequest:
    return SimRequest(rid, prompt, max_tokens, tuple(hashes))


def test_rule_autoregressive_timeline_prefill_then_batched_decode():
    core = make_core()
    core.submit(req("a", 10, 3), 0.0)
    events = drain(core)
    # prefill 20 + 0.1 * 10 = 21 ms; decode ctx 11: 20 + 1 + 0.011 = 21.011; ctx 12: 21.012
    kinds = [(e.kind, e.num_tokens) for e in events]
    assert kinds == [("first_token", 1), ("tokens", 1), ("tokens", 1), ("finished", 0)]
    assert [e.time_s for e in events] == pytest.approx([0.021, 0.042011, 0.063023, 0.063023])
    usage = events[-1].usage
    assert usage.prompt_tokens == 10 and usage.completion_tokens == 3 and usage.total_tokens == 13
    assert usage.verify_steps == 3 and usage.accept_length == 1.0 and usage.accept_histogram == [3]
    assert usage.path == "autoregressive" and usage.cached_prompt_tokens == 0
    assert events[-1].finish_reason == "length"


def test_rule_requests_join_at_the_next_step_boundary_and_prefill_goes_first():
    core = make_core()
    core.submit(req("a", 10, 2), 0.0)
    core.submit(req("b", 20, 2), 0.005)  # mid-prefill of a: waits for the boundary at 21 ms
    events = drain(core)
    # a prefill 0 -> 21 ms; b prefill 20 + 2 = 22 ms -> 43 ms; batched decode n = 2,
    # ctx (10 + 1) + (20 + 1) = 32: 20 + 2 + 0.032 = 22.032 ms -> 65.032 ms
    got = [(e.kind, e.request_id, round(e.time_s, 6)) for e in events]
    assert got == [
        ("first_token", "a", 0.021),
        ("first_token", "b", 0.043),
        ("tokens", "a", 0.065032),
        ("finished", "a", 0.065032),
        ("tokens", "b", 0.065032),
        ("finished", "b", 0.065032),
    ]


def test_rule_verify_steps_count_prefill_and_cap_at_max_tokens():
    core = make_core(drafter="dspine", ema=0.5)
    core.submit(req("a", 10, 10), 0.0)
    events = drain(core)
    # prefill 21 ms (1 token); verify = decode + 4 + 0.5 * 1 * 3: ctx 11 -> 26.511 ms (+4 tokens),
    # ctx 15 -> 26.515 ms (+4), ctx 19 -> 26.519 ms (+1: capped at the 10th token)
    assert [e.num_tokens for e in events if e.kind != "finished"] == [1, 4, 4, 1]
    assert [e.time_s for e in events[:4]] == pytest.approx([0.021, 0.047511, 0.074026, 0.100545])
    usage = events[-1].usage
    # 10 tokens / 4 target forwards = 2.5; histogram: two 1-token steps, two 4-token steps
    assert usage.verify_steps == 4 and usage.accept_length == 2.5 and usage.accept_histogram == [2, 0, 0, 2]
    assert usage.path == "speculative"


def test_rule_acceptance_ema_weighs_the_newest_step():
    core = make_core(drafter="dspine", ema=0.5)
    core.submit(req("a", 10, 10), 0.0)
    drain(core)
    # 1.0 -> 0.5 * 1 + 0.5 * 4 = 2.5 -> 0.5 * 2.5 + 0.5 * 4 = 3.25 -> 0.5 * 3.25 + 0.5 * 1 = 2.125
    assert core.load().accept_length_ema == pytest.approx(2.125)


def test_rule_path_is_autoregressive_after_a_fallback():
    core = make_core(drafter="dspine")
    core.submit(req("a", 10, 10), 0.0)
    core.advance_to(0.030)  # prefill done (21 ms), first verify step in flight (to 47.511 ms)
    core.set_drafter_enabled(False)  # applies from the next step to start
    events = drain(core)
    usage = events[-1].usage
    # 1 (prefill) + 4 (verify) + 5 autoregressive steps = 10 tokens in 7 steps
    assert usage.verify_steps == 7 and usage.accept_histogram == [6, 0, 0, 1] and usage.path == "autoregressive"
    load = core.load()
    assert not load.drafter_active and load.draft_vram_gb == 4.0


def test_rule_prefix_hits_reduce_prefill_and_are_counted():
    core = make_core()
    core.submit(req("a", 10, 2, ["h0", "h1", "h2"]), 0.0)  # 10 // 4 = 2 full blocks: h2 is ignored
    drain(core)
    assert core.prefix_cache.num_blocks == 2
    t0 = core.now_s
    core.submit(req("b", 10, 2, ["h0", "h1", "h2"]), t0)  # hit min(2, (10 - 1) // 4 = 2) = 2 blocks
    b = drain(core)
    # prefill 20 + 0.1 * (10 - 8) = 20.2 ms instead of 21 ms
    assert b[0].time_s - t0 == pytest.approx(0.0202)
    assert b[-1].usage.cached_prompt_tokens == 8
    assert (b[0].kind, b[0].usage.prompt_tokens, b[0].usage.cached_prompt_tokens) == ("first_token", 10, 8)
    t1 = core.now_s
    core.submit(req("c", 8, 2, ["h0", "h1"]), t1)  # capped: min(2, (8 - 1) // 4 = 1) = 1 block
    c = drain(core)
    assert c[0].time_s - t1 == pytest.approx(0.0204)  # 20 + 0.1 * 4
    counters = core.counters()
    assert counters.num_prefix_hit_tokens == 8 + 4
    assert counters.num_prefill_tokens == 10 + 2 + 4


def test_rule_a_prefill_round_pays_for_what_its_tokens_attend_hit_and_earlier_chunks_included():
    profile = round_profile().model_copy(
        update={"prefill": PrefillModel(per_token_ms=0.1, per_token_context_ms=0.01)}
    )
    config = SimulatedEngineConfig(
        profile="round", workload="full", drafter="none", total_kv_tokens=100, prefix_block_tokens=4,
        chunked_prefill_tokens=8,
    )  # fmt: skip
    core = SimReplicaCore(config, profile, random.Random(0))
    core.submit(req("a", 10, 1, ["h0", "h1"]), 0.0)
    a = drain(core)
    # rounds of 8 then 2 tokens: 20 + 0.8 + 0.01 * (0 + 1 + ... + 7 = 28) = 21.08 ms;
    # 20 + 0.2 + 0.01 * (8 + 9 = 17) = 20.37 ms; first token at 41.45 ms
    assert a[0].time_s == pytest.approx(0.04145)
    t0 = core.now_s
    core.submit(req("b", 10, 1, ["h0", "h1"]), t0)  # 8 tokens cached: its 2 new ones attend 8 and 9
    b = drain(core)
    assert b[0].time_s - t0 == pytest.approx(0.02037)  # 20 + 0.2 + 0.01 * 17


def test_eviction_policy_reaches_the_cache_and_admitted_hits_are_counted():
    config = SimulatedEngineConfig(
        profile="round", workload="full", drafter="none", total_kv_tokens=100, prefix_block_tokens=4,
        radix_eviction_policy="slru",
    )  # fmt: skip
    core = SimReplicaCore(config, round_profile(), random.Random(0))
    assert core.prefix_cache.eviction_policy == "slru"
    core.submit(req("a", 10, 2, ["h0", "h1"]), 0.0)
    drain(core)
    assert core.prefix_cache.hit_count("h0") == 0  # inserted by a's prefill: no hit yet
    core.submit(req("b", 10, 2, ["h0", "h1"]), core.now_s)
    drain(core)
    assert core.prefix_cache.hit_count("h0") == 1 and core.prefix_cache.hit_count("h1") == 1
    assert make_core().prefix_cache.eviction_policy == "lru"  # SGLang's default


def test_cached_prompt_tokens_is_the_hit_rule_read_without_admitting():
    core = make_core()
    assert core.cached_prompt_tokens(10, ["h0", "h1", "h2"]) == 0  # empty cache
    core.submit(req("a", 10, 2, ["h0", "h1", "h2"]), 0.0)
    drain(core)
    assert core.cached_prompt_tokens(10, ["h0", "h1", "h2"]) == 8  # 2 blocks of 4 tokens
    assert core.cached_prompt_tokens(8, ["h0", "h1"]) == 4  # capped at (8 - 1) // 4 = 1 block
    assert core.cached_prompt_tokens(10, ["x0", "h1"]) == 0  # a leading run only
    assert core.prefix_cache.num_blocks == 2 and core.counters().num_prefix_hit_tokens == 0  # nothing pinned or counted


def test_rule_kv_accounting_moves_prefilled_blocks_into_the_cache():
    core = make_core()
    core.submit(req("a", 10, 2, ["h0", "h1"]), 0.0)
    assert core.load().free_kv_tokens == 90  # admission allocates the 10 prompt tokens; decode tokens come later
    core.advance_to(0.021)  # prefill done: 8 tokens move to the cache, pinned; the decode step starts with
    # one more KV token (retraction.py rule `need`: min(1 - 1 + 1, 2) - 0 = 1): 100 - 8 - 2 - 1 = 89 free
    assert core.load().free_kv_tokens == 89 and core.prefix_cache.evictable_tokens == 0
    drain(core)
    assert core.load().free_kv_tokens == 100  # 92 free + 8 evictable
    core.submit(req("b", 10, 2, ["h0", "h1"]), core.now_s)
    assert core.load().free_kv_tokens == 90  # private 10 - 8 = 2, cached 8 pinned


def test_rule_admission_waits_rather_than_over_commits():
    core = make_core(total_kv=100)
    core.submit(req("a", 40, 40), 0.0)  # 80 tokens
    core.submit(req("b", 30, 10), 0.0)  # 40: does not fit beside a -> waits at the head
    core.submit(req("c", 5, 5), 0.0)  # 10: would fit, but first come first served
    assert core.load().num_running == 1 and core.load().num_queued == 2

    def never_negative(c):
        assert c.load().free_kv_tokens >= 0

    events = drain(core, never_negative)
    finished_a = next(e.time_s for e in events if e.kind == "finished" and e.request_id == "a")
    first_b = next(e.time_s for e in events if e.kind == "first_token" and e.request_id == "b")
    assert first_b > finished_a
    counters = core.counters()
    assert counters.num_waited_for_memory == 1 and counters.num_retractions == 0
    assert counters.num_finished == 3
    # b waits: at a's first pass after its prefill, a (g = 1) holds 40 and expects (40 - 1) * 0.7 = 27.3 more,
    # so b's 30 + 10 + 1 = 41 does not fit the 100 - 40 - 27.3 = 32.7 left, and the gap only narrows as a decodes.
    # a alone peaks at its prompt 40 + 39 decode tokens (the step that makes its 40th token): 79 / 100
    assert counters.peak_kv_utilization == pytest.approx(0.79)


def test_rule_backlog_reports_queued_and_unprefilled_prompt_tokens():
    core = make_core(total_kv=100)
    core.submit(req("a", 40, 40), 0.0)  # admitted; its prefill step runs 0 .. 24 ms (20 + 0.1 * 40)
    core.submit(req("b", 30, 10), 0.0)  # queued for memory: 30 uncached prompt, 30 + 10 KV
    core.submit(req("c", 5, 5), 0.0)  # queued behind b: 5 prompt, 10 KV
    load = core.load()
    assert (load.pending_prefill_tokens, load.queued_kv_tokens) == (40 + 30 + 5, 40 + 10)
    assert load.prefill_tokens_per_s == pytest.approx(10_000.0)  # 1000 / 0.1 ms per token
    core.advance_to(0.018)  # 18 of 24 ms done: a counts for its unfinished quarter, 10 tokens
    assert core.load().pending_prefill_tokens == 10 + 30 + 5
    core.advance_to(0.024)  # a prefilled; b and c still wait for memory
    assert core.load().pending_prefill_tokens == 35 and core.load().queued_kv_tokens == 50


def test_rule_decode_step_estimate_counts_one_more_request_and_prefill_pauses():
    core = make_core()
    # idle: one request, no context: 20 + 1 * 1 + 0.001 * 0 = 21 ms, no prefill seen yet
    assert core.load().decode_step_ms == pytest.approx(21.0)
    core.submit(req("a", 10, 50), 0.0)
    core.advance_to(0.021)  # a's prefill (20 + 0.1 * 10 = 21 ms) is the only time seen: share 1 -> cap 0.9
    # a running with context 11, plus one: 20 + 2 + 0.011 = 22.011 ms, / (1 - 0.9)
    assert core.load().decode_step_ms == pytest.approx(22.011 / 0.1)
    core.advance_to(10.0)  # a finished near 1.05 s; ~9 s of decoding and idle since: share ~0.0003
    assert core.load().decode_step_ms == pytest.approx(21.0, rel=1e-3)


def test_rule_state_slots_and_running_cap_gate_admission():
    core = make_core(slots=3, per_request=2)
    core.submit(req("a", 10, 2), 0.0)
    core.submit(req("b", 10, 2), 0.0)
    assert core.load().free_state_slots == 1 and core.load().num_queued == 1
    drain(core)
    counters = core.counters()
    assert counters.num_waited_for_state_slots == 1 and counters.peak_state_utilization == pytest.approx(2 / 3)
    capped = make_core(max_running=1)
    capped.submit(req("a", 10, 2), 0.0)
    capped.submit(req("b", 10, 2), 0.0)
    assert capped.load().num_running == 1 and capped.load().num_queued == 1


def test_rule_refuses_requests_that_can_never_fit():
    with pytest.raises(EngineError) as err:
        make_core(total_kv=100).submit(req("a", 60, 41), 0.0)  # 101 > 100
    assert err.value.status == 400 and err.value.code == "context_length_exceeded"
    with pytest.raises(EngineError) as err:
        make_core(slots=3, per_request=4).submit(req("a", 1, 1), 0.0)
    assert err.value.status == 503
    core = make_core()
    core.submit(req("a", 1, 1), 0.0)
    with pytest.raises(EngineError):
        core.submit(req("a", 1, 1), 0.0)


def test_rule_eviction_frees_only_what_admission_is_missing():
    core = make_core(total_kv=20)
    core.submit(req("a", 8, 2, ["h0", "h1"]), 0.0)
    drain(core)  # cache: h0, h1 (8 tokens), both evictable
    core.submit(req("b", 12, 4, ["g0", "g1", "g2"]), core.now_s)
    # b is admitted (12 + 4 + 1 = 17 < 12 free + 8 evictable) and allocates its 12 prompt tokens: all free
    assert core.counters().num_evicted_blocks == 0
    drain(core, lambda c: c.load().free_kv_tokens >= 0 or pytest.fail("over-committed"))
    # its prefill moves 3 blocks to the cache (20 cached, 0 free); its first decode token misses 1 token ->
    # one block: h1, the leaf released first; its next two tokens fit in that block's 3 spare tokens
    assert core.counters().num_evicted_blocks == 1
    assert core.prefix_cache.contains("h0") and not core.prefix_cache.contains("h1")
    assert core.counters().num_retractions == 0


def test_rule_cancel_frees_kv_and_slots_wherever_the_request_is():
    core = make_core(total_kv=100)
    core.submit(req("a", 40, 40, ["h0"]), 0.0)
    core.submit(req("b", 30, 30), 0.0)  # queued: 70 + 60 > 100
    core.advance_to(0.025)  # a prefilled (20 + 4 = 24 ms), first decode step in flight
    assert core.cancel("b") and core.load().num_queued == 0
    assert core.cancel("a")
    load = core.load()
    assert load.free_kv_tokens == 100 and load.free_state_slots == 8 and load.num_running == 0
    assert core.prefix_cache.evictable_tokens == 4  # a's block stays cached, now unreferenced
    assert drain(core) == []  # the in-flight step ends with no tokens for the cancelled request
    assert not core.cancel("a") and core.counters().num_cancelled == 2


def test_rule_time_only_moves_forward_and_submit_catches_up_first():
    core = make_core()
    core.submit(req("a", 10, 1), 0.0)  # done at 21 ms
    core.submit(req("b", 10, 1), 0.5)  # no advance_to in between: a completes first, b starts at 0.5
    events = core.advance_to(1.0)
    assert [(e.kind, e.request_id) for e in events] == [
        ("first_token", "a"), ("finished", "a"), ("first_token", "b"), ("finished", "b"),
    ]  # fmt: skip
    assert events[2].time_s == pytest.approx(0.521)
    with pytest.raises(ValueError):
        core.advance_to(0.9)


def make_chunked_core(policy: str, chunk: int = 100, max_running: int = 8) -> SimReplicaCore:
    config = SimulatedEngineConfig(
        profile="round", workload="full", drafter="none", total_kv_tokens=10_000, num_state_slots=8,
        prefix_block_tokens=4, max_running_requests=max_running, schedule_policy=policy,
        chunked_prefill_tokens=chunk,
    )  # fmt: skip
    return SimReplicaCore(config, round_profile(), random.Random(0))


def first_tokens(events: list[SimEvent]) -> dict[str, float]:
    return {e.request_id: round(e.time_s, 6) for e in events if e.kind == "first_token"}


def test_rule_chunked_fcfs_a_turn_waits_for_the_long_prompt_but_its_last_chunk():
    core = make_chunked_core("fcfs")
    core.submit(req("long", 400, 1), 0.0)
    core.submit(req("turn", 20, 1), 0.010)  # joins at the next round boundary
    # rounds of 100: 30 ms each (20 + 0.1 * 100); long: 0-30, 30-60, 60-90, 90-120 (its last 100, the
    # round is full); turn alone after it: 20 + 2 = 22 ms
    assert first_tokens(drain(core)) == {"long": 0.120, "turn": 0.142}


def test_rule_spf_a_turn_rides_in_the_next_round_of_the_long_prompt():
    core = make_chunked_core("shortest-prefill-first")
    core.submit(req("long", 400, 1), 0.0)
    core.submit(req("turn", 20, 1), 0.010)
    # round 1 (0-30 ms): long 100. Round 2: 20 reserved for turn (20 < 300, 20 <= 100 - 1), so long
    # takes 80 and turn 20: 30 ms, turn's first token at 60 ms. Then long: 100, 100, and its last 20
    # (20 + 2 = 22 ms): 90, 120, 142 ms
    assert first_tokens(drain(core)) == {"turn": 0.060, "long": 0.142}


def test_rule_spf_admits_the_shortest_queued_request_first():
    core = make_chunked_core("shortest-prefill-first", max_running=1)
    core.submit(req("a", 10, 1), 0.0)  # 20 + 1 = 21 ms
    core.submit(req("long", 50, 1), 0.005)
    core.submit(req("short", 10, 1), 0.006)
    # at 21 ms one place frees: short (10) before long (50): 21 + 21 = 42 ms, then long 42 + 25 = 67 ms
    assert first_tokens(drain(core)) == {"a": 0.021, "short": 0.042, "long": 0.067}
    fcfs = make_chunked_core("fcfs", max_running=1)
    fcfs.submit(req("a", 10, 1), 0.0)
    fcfs.submit(req("long", 50, 1), 0.005)
    fcfs.submit(req("short", 10, 1), 0.006)
    assert first_tokens(drain(fcfs)) == {"a": 0.021, "long": 0.046, "short": 0.067}


def test_rule_backlog_counts_the_running_round_for_the_share_already_run():
    core = make_chunked_core("shortest-prefill-first")
    core.submit(req("long", 400, 1), 0.0)
    core.submit(req("turn", 20, 1), 0.010)
    core.advance_to(0.015)  # half of long's first round (100 tokens) run: 350 left; turn queued (20)
    assert core.load().pending_prefill_tokens == 370
    core.advance_to(0.045)  # round 2 (30-60 ms) half run: long 300 - 80 / 2, turn 20 - 20 / 2
    assert core.load().pending_prefill_tokens == 270


def test_rule_spf_needs_chunked_prefill():
    with pytest.raises(ValueError, match="chunked_prefill_tokens"):
        SimulatedEngineConfig(schedule_policy="shortest-prefill-first")
    with pytest.raises(ValueError, match="at least page_tokens"):
        SimulatedEngineConfig(chunked_prefill_tokens=32, page_tokens=64)


def tiered_core(host_tokens=16, policy="write_back", total_kv=20, store=None) -> SimReplicaCore:
    config = SimulatedEngineConfig(
        profile="round", workload="full", drafter="none", total_kv_tokens=total_kv, num_state_slots=8,
        prefix_block_tokens=4, max_running_requests=8, hicache_host_tokens=host_tokens,
        hicache_write_policy=policy, hicache_load_ms_per_token=0.5,
    )  # fmt: skip
    return SimReplicaCore(config, round_profile(), random.Random(0), store=store)


def test_rule_hicache_a_block_evicted_to_the_host_tier_is_loaded_not_prefilled():
    core = tiered_core()
    core.submit(req("a", 8, 2, ["h0", "h1"]), 0.0)
    drain(core)  # device cache: h0, h1, both evictable
    core.submit(req("b", 12, 4, ["g0", "g1", "g2"]), core.now_s)  # needs 16 of 12 free: h1 evicted to host
    drain(core)
    assert not core.prefix_cache.contains("h1") and core.prefix_cache.tiers.host.contains("h1")
    t0 = core.now_s
    core.submit(req("c", 10, 2, ["h0", "h1"]), t0)
    # h0 on the device (d = 1), h1 in the host tier: h = min(1 + 1, (10 - 1) // 4 = 2) = 2, 4 tokens loaded;
    # prefill 20 + 0.1 * (10 - 8) = 20.2 ms, plus the load 4 * 0.5 = 2 ms
    c = drain(core)
    assert c[0].kind == "first_token" and c[0].time_s - t0 == pytest.approx(0.0222)
    assert c[-1].usage.cached_prompt_tokens == 8
    counters = core.counters()
    assert counters.num_prefix_hit_tokens == 8 and counters.num_tier_hit_tokens == 4
    assert counters.num_prefill_tokens == 8 + 12 + 2
    assert core.prefix_cache.contains("h1")  # the loaded block is on the device again
    assert core.load().host_kv_tokens == 16


def test_rule_hicache_loaded_blocks_take_device_kv_like_prefilled_ones():
    core = tiered_core()
    core.submit(req("a", 8, 2, ["h0", "h1"]), 0.0)
    drain(core)
    core.submit(req("b", 12, 4, ["g0", "g1", "g2"]), core.now_s)
    drain(core)  # device: h0 and g0..g2 cached (16 tokens, all evictable), 4 free
    core.submit(req("c", 10, 2, ["h0", "h1"]), core.now_s)
    # private = 10 - 1 * 4 (h0 pinned) = 6 tokens: the 4 loaded ones included; 4 free, so one block evicted
    assert core.counters().num_evicted_blocks == 2  # h1 earlier (b's first decode token), one g block now
    assert core.load().free_kv_tokens == 20 - 4 - 6  # h0 pinned, 6 allocated; the other g blocks evictable


def test_rule_hicache_write_through_fills_the_tier_as_blocks_are_first_cached():
    core = tiered_core(policy="write_through")
    core.submit(req("a", 8, 2, ["h0", "h1"]), 0.0)
    drain(core)
    host = core.prefix_cache.tiers.host
    assert host.contains("h0") and host.contains("h1") and core.counters().num_evicted_blocks == 0


def test_rule_hicache_a_shared_store_gives_one_replica_what_another_prefilled():
    store = KvTier(16)
    first = tiered_core(host_tokens=0, policy="write_through", store=store)
    second = tiered_core(host_tokens=0, policy="write_through", store=store)
    first.submit(req("a", 10, 2, ["h0", "h1"]), 0.0)
    drain(first)
    second.submit(req("b", 10, 2, ["h0", "h1"]), 0.0)
    b = drain(second)
    # nothing on second's device; both blocks in the store: 8 tokens loaded, 2 prefilled
    # 20 + 0.1 * 2 + 0.5 * 8 = 24.2 ms
    assert b[0].time_s == pytest.approx(0.0242) and b[-1].usage.cached_prompt_tokens == 8
    assert second.counters().num_tier_hit_tokens == 8 and second.load().host_kv_tokens == 0


def test_rule_hicache_a_chunked_request_pays_its_load_in_its_first_round_only():
    config = SimulatedEngineConfig(
        profile="round", workload="full", drafter="none", total_kv_tokens=100, num_state_slots=8,
        prefix_block_tokens=4, max_running_requests=8, hicache_write_policy="write_through",
        hicache_load_ms_per_token=0.5, chunked_prefill_tokens=4,
    )  # fmt: skip
    store = KvTier(16)
    seed = SimReplicaCore(config, round_profile(), random.Random(0), store=store)
    seed.submit(req("a", 9, 1, ["h0", "h1"]), 0.0)
    drain(seed)
    core = SimReplicaCore(config, round_profile(), random.Random(0), store=store)
    core.submit(req("b", 17, 1, ["h0", "h1", "x2", "x3"]), 0.0)
    b = drain(core)
    # 8 tokens loaded (h0, h1), 9 to prefill in rounds of 4, 4, 1: (20 + 0.4 + 4) + (20 + 0.4) + (20 + 0.1) ms
    assert b[0].time_s == pytest.approx(0.0649)
