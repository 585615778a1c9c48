"""SGLang 0.5.23's admission and retraction in the simulated core (admission.py, retraction.py), on the
round profile of test_sim_core.py: prefill = 20 + 0.1 * uncached tokens ms, decode = 20 + n + 0.001 * context
ms, no prefix hashes (nothing cached) unless a test gives some; page_tokens = 1."""

import random

import pytest

from ray_dspine.engines.protocol import EngineError
from ray_dspine.engines.simulated.admission import NewTokenRatio
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from ray_dspine.engines.simulated.core import SimReplicaCore
from ray_dspine.engines.simulated.request import SimRequest
from ray_dspine.engines.simulated.retraction import decode_need, keep_order, lookahead_tokens
from tests.engines_simulated.test_sim_core import round_profile


def make_core(total_kv=1000, ratio=0.7, slots=8, drafter="none") -> SimReplicaCore:
    config = SimulatedEngineConfig(
        profile="round", workload="full", drafter=drafter, total_kv_tokens=total_kv, num_state_slots=slots,
        prefix_block_tokens=4, max_running_requests=8, new_token_ratio_init=ratio,
    )  # fmt: skip
    return SimReplicaCore(config, round_profile(), random.Random(0))


def req(rid, prompt, max_tokens):
    return SimRequest(rid, prompt, max_tokens)


def test_rule_ratio_starts_decays_floors_and_follows_a_retraction():
    ratio = NewTokenRatio(SimulatedEngineConfig())
    # init 0.7, min 0.7 * 0.14 = 0.098, decay (0.7 - 0.098) / 600 = 0.0010033 per decode step
    assert (ratio.current, ratio.min) == (pytest.approx(0.7), pytest.approx(0.098))
    ratio.decay_step()
    assert ratio.current == pytest.approx(0.7 - 0.602 / 600)
    for _ in range(700):
        ratio.decay_step()
    assert ratio.current == pytest.approx(0.098)  # 601 steps reach the floor; it stays there
    ratio.after_retract([(401, 600), (10, 300)])  # (401 + 10 + 20 * 2) / (600 + 300 + 1) = 451 / 901
    assert ratio.current == pytest.approx(451 / 901)
    ratio.after_retract([(600, 600)])  # (600 + 20) / 601 > 1: capped
    assert ratio.current == 1.0
    ratio.reset()
    assert ratio.current == pytest.approx(0.7)


def test_rule_ratio_decays_once_per_decode_step_and_resets_when_idle():
    core = make_core()
    core.submit(req("a", 10, 50), 0.0)
    for _ in range(4):  # prefill, then decode steps 1..3 complete; each advance begins the next step
        core.advance_to(core.next_event_s())
    assert core.new_token_ratio == pytest.approx(0.7 - 4 * 0.602 / 600)  # 4 decode steps begun
    while (t := core.next_event_s()) is not None:
        core.advance_to(t)
    assert core.new_token_ratio == pytest.approx(0.7)  # idle: reset


def test_rule_offset_counts_running_requests_at_the_ratio():
    # 1,000 KV tokens, ratio 0.7; a (100 prompt, 600 max) runs alone first (prefill 20 + 10 = 30 ms).
    # At its first pass after the prefill a has g = 1 and holds 100 tokens:
    #   offset = (600 - 1) * 0.7 = 419.3, remaining = 1000 - 100 - 419.3 = 480.7
    # b (100, 600) needs 100 + 600 + 1 = 701 >= 480.7: waits; b (100, 300) needs 401 < 480.7: admitted,
    # although 100 + 600 + 100 + 300 = 1,100 > 1,000 (reserving max_tokens up front would refuse it).
    for max_tokens, admitted in ((600, False), (300, True)):
        core = make_core()
        core.submit(req("a", 100, 600), 0.0)
        core.submit(req("b", 100, max_tokens), 0.0)
        core.advance_to(0.030)
        load = core.load()
        assert (load.num_running, load.num_queued) == ((2, 0) if admitted else (1, 1))
        assert core.counters().num_waited_for_memory == (0 if admitted else 1)


def test_rule_reserve_charges_each_admission_within_a_pass_strictly():
    # z (10, 1) finishes with its prefill at 21 ms; a and b queue behind it and meet one pass at 21 ms with
    # nothing running: a needs 100 + 600 + 1 = 701 < 1000, admitted; the offset becomes 701 and
    # remaining = 1000 - 701 = 299 (a's 100 allocated tokens added back). b (100, 197) needs 298 < 299: admitted;
    # b (100, 198) needs 299, not < 299: waits.
    for max_tokens, admitted in ((197, True), (198, False)):
        core = make_core()
        core.submit(req("z", 10, 1), 0.0)
        core.submit(req("a", 100, 600), 0.0)
        core.submit(req("b", 100, max_tokens), 0.0)
        core.advance_to(0.021)
        assert core.load().num_queued == (0 if admitted else 1)


def test_rule_refuses_what_admission_could_never_take():
    with pytest.raises(EngineError):  # 100 + 899 + 1 = 1000, not < 1000
        make_core().submit(req("a", 100, 899), 0.0)
    make_core().submit(req("a", 100, 898), 0.0)  # 999 < 1000


def test_rule_need_lookahead_and_victim_order():
    assert lookahead_tokens(None) == 1 and lookahead_tokens(16) == 32  # 2 * D with a drafter
    assert decode_need(1, 600, 0, 1) == 1  # the first decode step writes the first token's KV
    assert decode_need(1, 600, 0, 32) == 32
    assert decode_need(5, 6, 3, 8) == 3  # min(5 - 1 + 8, 6) - 3: never past max_tokens
    assert decode_need(5, 600, 40, 32) == 0  # already holds 36 + more
    keys = [("a", 5, 100), ("b", 3, 50), ("c", 3, 80), ("d", 9, 10)]
    # (g, -P) descending: d (9), a (5), b (3, -50), c (3, -80); victims from the end: c, the fewest
    # generated with the longest prompt, then b
    assert keep_order(keys) == ["d", "a", "b", "c"]
    assert keep_order([("x", 4, 10), ("y", 4, 10)]) == ["x", "y"]  # equals: the later in the batch goes first


def test_rule_retraction_when_a_decode_step_needs_one_more_token_than_free():
    # ratio 0.1 (init; min 0.014): a (100, 600) prefills 0..30 ms; at 30 ms b (100, 600) needs 701 <
    # 1000 - 100 - 599 * 0.1 = 840.1: admitted, prefilled 30..60 ms. Then both decode, one token each per
    # step: before step j + 1 each has g = j + 1 and holds j tokens beyond its prompt, so the step needs 2 and
    # free = 1000 - 200 - 2j. At j = 400 free is 0 < 2: retract. Both have g = 401 and P = 100; the later in
    # the batch, b, goes. It frees 100 + 400 = 500 tokens; a alone needs 1: done after one victim.
    # ratio = (401 + 20) / (600 + 1) = 421 / 601 from the one request left.
    core = make_core(ratio=0.1)
    core.submit(req("a", 100, 600), 0.0)
    core.submit(req("b", 100, 600), 0.0)
    seen = {}
    events = []
    while (t := core.next_event_s()) is not None:
        events += core.advance_to(t)
        counters = core.counters()
        if counters.num_retractions == 1 and not seen:
            load = core.load()
            seen = dict(ratio=core.new_token_ratio, queued=load.num_queued, free_slots=load.free_state_slots,
                        free_kv=load.free_kv_tokens, out=counters.num_retracted_output_tokens)  # fmt: skip
    assert seen["ratio"] == pytest.approx(421 / 601)
    assert seen["queued"] == 1 and seen["free_slots"] == 8 - 1 and seen["out"] == 401
    assert seen["free_kv"] == 1000 - 100 - 401  # a: prompt + 401 tokens, this step's one included
    # b waits at the tail: its fill 100 + 401 needs 501 + (600 - 401) + 1 = 701, more than a leaves it; once a
    # is done b prefills its fill again (501 tokens recomputed, no cache) and the prefill gives its 402nd token
    counters = core.counters()
    assert counters.num_retractions == 1 and counters.num_recomputed_tokens == 501
    assert counters.num_prefill_tokens == 200 and counters.num_finished == 2
    finished = {e.request_id: e for e in events if e.kind == "finished"}
    assert finished["a"].usage.completion_tokens == 600 and finished["b"].usage.completion_tokens == 600
    assert [e.request_id for e in events if e.kind == "first_token"] == ["a", "b"]  # readmission: no new first
    b_after = [e for e in events if e.request_id == "b" and e.kind == "tokens" and e.time_s > finished["a"].time_s]
    # first b token after a finished: its refill prefill, 20 + 0.1 * 501 = 70.1 ms after a's last step
    assert b_after[0].time_s == pytest.approx(finished["a"].time_s + 0.0701)
    assert sum(e.num_tokens for e in events if e.request_id == "b" and e.kind != "finished") == 600


def test_rule_retracted_prompt_blocks_stay_cached_and_hit_on_readmission():
    # as above, with hashed prompts (4-token blocks): b's 25 full prompt blocks stay cached when it is
    # retracted (unpinned, evictable); readmitted with nothing else running it hits min(25, (100 - 1) // 4) = 24
    # blocks = 96 tokens, so it recomputes 100 + 401 - 96 = 405 tokens
    core = make_core(ratio=0.1)
    core.submit(SimRequest("a", 100, 600, tuple(f"a{i}" for i in range(25))), 0.0)
    core.submit(SimRequest("b", 100, 600, tuple(f"b{i}" for i in range(25))), 0.0)
    while (t := core.next_event_s()) is not None:
        core.advance_to(t)
    counters = core.counters()
    assert counters.num_retractions == 1 and counters.num_recomputed_tokens == 405
    assert counters.num_prefix_hit_tokens == 0  # readmission hits are not counted as prompt hits
