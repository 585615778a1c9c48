"""Paced prefill (engines/prefill_pacing.py): a test per rule of the module docstring."""

import pytest
from pydantic import ValidationError

from dspine_lab.engines.prefill_pacing import PacedPrefill, PrefillPacer, plan_pieces
from ray_dspine.engines.prefill_pacing_config import PrefillPacingConfig


def pacer(
    min_uncached_tokens: int = 40_000, yield_fraction: float = 0.5, attention_ms_per_pair: float = 0.0
) -> PrefillPacer:
    return PrefillPacer(
        PrefillPacingConfig(
            min_uncached_tokens=min_uncached_tokens, piece_tokens=16_384, yield_fraction=yield_fraction,
            attention_ms_per_pair=attention_ms_per_pair,
        )  # fmt: skip
    )


def test_rule_paced_from_the_threshold_of_uncached_tokens():
    # 50,000-token prompt with 10,000 cached: 40,000 uncached reaches the threshold; 1 more cached does not
    assert pacer().start("a", 50_000, 10_000) is not None
    assert pacer().start("b", 50_000, 10_001) is None


def test_rule_paced_one_at_a_time_per_replica():
    p = pacer()
    first = p.start("a", 100_000, 0)
    assert first is not None and p.active is first
    assert p.start("b", 100_000, 0) is None  # never two paced at once
    assert p.finish("b") == []  # finishing another request frees nothing
    assert p.active is first
    p.finish("a")
    assert p.active is None and p.start("b", 100_000, 0) is not None


def test_rule_long_needs_the_threshold_and_at_least_one_piece():
    p = pacer()
    assert p.is_long(50_000, 10_000)
    assert not p.is_long(50_000, 10_001)  # 39,999 uncached
    # 24,575 tokens leave no piece (rule `pieces`) even with a threshold of 1
    assert not PrefillPacer(PrefillPacingConfig(min_uncached_tokens=1)).is_long(24_575, 0)


def test_rule_left_is_the_unspent_budget_in_tokens_less_what_was_let_in():
    # budget 5 s at 10,000 tokens/s = 50,000 tokens
    p = pacer()
    paced = p.start("a", 100_000, 0)
    assert p.left_tokens() == 50_000
    p.let_in(7_000)  # before the first piece: runs ahead of it (measuring once it is sent)
    assert p.left_tokens() == 43_000
    assert paced.next_piece(0.0) == 16_384
    assert (paced.measuring_tokens, paced.queued_ahead_tokens) == (7_000, 0)
    p.let_in(3_000)  # while the piece is out: runs before the next piece
    assert p.left_tokens() == 40_000
    # the piece took 2.3384 s: 1.6384 s its own, 0.7 s yielded (the 7,000 let in before it)
    paced.piece_done(2.3384)
    assert paced.yielded_s == pytest.approx(0.7)
    assert paced.measuring_tokens == 0 and p.left_tokens() == 50_000 - 7_000 - 3_000
    assert pacer().left_tokens() == 0  # nothing paced


def test_rule_left_counts_what_the_piece_out_has_waited_beyond_its_own_prefill():
    # budget 50,000 tokens; the piece's own prefill: 16,384 tokens at 10,000 tokens/s = 1.6384 s
    p = pacer()
    paced = p.start("a", 100_000, 0)
    p.let_in(7_000)
    paced.next_piece(10.0)
    assert p.left_tokens(11.0) == 43_000  # within its own prefill time: only the 7,000 measured count
    # 2.6384 s out: 1 s (10,000 tokens) beyond its own prefill, more than the 7,000 measured
    assert p.left_tokens(12.6384) == pytest.approx(40_000, abs=1)
    p.let_in(2_000)  # runs before the next piece
    assert p.left_tokens(12.6384) == pytest.approx(38_000, abs=1)
    assert p.left_tokens() == 41_000  # no time given: the piece has waited nothing
    # 39,000 uncached (under the 40,000 threshold): over the 38,000 left at 12.6384 s, not over 41,000
    assert p.should_hold(39_000, 0, now_s=12.6384)
    assert not p.should_hold(39_000, 0)
    assert p.arrive("b", 39_000, 0, now_s=12.6384) == "held"


def test_rule_hold_long_prompts_and_requests_over_the_budget_left():
    p = pacer()
    assert not p.should_hold(100_000, 0)  # nothing paced: no hold
    p.start("a", 100_000, 0)
    assert p.should_hold(60_000, 0)  # long: waits behind the paced prompt
    assert p.should_hold(50_001, 20_000) is False  # 30,001 uncached: under both the threshold and the 50,000 left
    p.let_in(30_001)
    assert p.left_tokens() == 19_999
    assert p.should_hold(20_000, 0)  # over what is left
    assert not p.should_hold(19_999, 0)
    off = PrefillPacer(PrefillPacingConfig(min_uncached_tokens=40_000, hold_long_prompts=False))
    off.start("a", 100_000, 0)
    assert not off.should_hold(60_000, 0)


def test_rule_hold_releases_every_held_request_in_arrival_order_when_the_paced_one_is_sent():
    p = pacer()
    p.start("a", 100_000, 0)
    p.hold("b", 60_000)
    p.hold("c", 20_000)
    p.hold("d", 70_000)
    p.release("c")  # withdrawn while held
    assert p.held == ("b", "d")
    assert p.finish("a") == ["b", "d"]
    assert p.held == () and p.active is None


def test_rule_yielding_is_the_unsent_part_of_the_paced_prompt_and_the_held_requests():
    p = pacer()
    assert p.yielding_tokens() == 0
    paced = p.start("a", 100_000, 4_096)
    assert p.yielding_tokens() == 100_000 - 4_096  # nothing sent yet
    assert paced.next_piece(0.0) == 4_096 + 16_384
    p.hold("b", 60_000)
    assert p.yielding_tokens() == (100_000 - 20_480) + 60_000  # after the piece out, and the held one
    paced.piece_done(2.0)
    assert p.yielding_tokens() == (100_000 - 20_480) + 60_000


def test_rule_pieces_start_at_the_cached_blocks_and_leave_half_a_piece_or_more_to_the_request():
    # cached 1,000 -> floor to blocks of 512: 512; pieces 512 + 16,384 j while 50,000 - b_j >= 8,192:
    # 16,896 (33,104 left), 33,280 (16,720 left); 49,664 leaves 336 < 8,192: not a piece
    assert plan_pieces(50_000, 1_000, 16_384, 512) == [16_896, 33_280]
    # 24,576 tokens: 16,384 leaves 8,192 = C / 2, still a piece; 24,575 leaves 8,191: none
    assert plan_pieces(24_576, 0, 16_384, 512) == [16_384]
    assert plan_pieces(24_575, 0, 16_384, 512) == []
    assert PrefillPacer(PrefillPacingConfig(min_uncached_tokens=1)).start("a", 24_575, 0) is None


def test_rule_pieces_are_whole_prefix_blocks():
    with pytest.raises(ValidationError, match="multiple of prefix_block_tokens"):
        PrefillPacingConfig(min_uncached_tokens=1, piece_tokens=1_000)


def test_rule_budget_is_the_yield_share_of_its_own_prefill():
    # 100,000 uncached tokens at 10,000 tokens/s: 10 s of prefill; half of it: 5 s
    paced = pacer().start("a", 100_000, 0)
    assert paced is not None and paced.budget_s == pytest.approx(5.0)
    assert pacer(yield_fraction=0.0).start("a", 100_000, 0).budget_s == 0.0


def test_rule_yielded_counts_a_pieces_time_beyond_its_own_prefill():
    paced = PacedPrefill("a", 60_000, cached_before=1_000, budget_s=10.0, rate=10_000.0, pieces=[16_896, 33_280])
    assert paced.next_piece(now_s=0.0) == 16_896
    # own prefill (16,896 - 1,000) / 10,000 = 1.5896 s; it took 2.5 s: 0.9104 s yielded
    paced.piece_done(now_s=2.5)
    assert paced.yielded_s == pytest.approx(0.9104)
    assert paced.next_piece(now_s=3.0) == 33_280
    # own (33,280 - 16,896) / 10,000 = 1.6384 s; it took 1.6 s: nothing more yielded (never negative)
    paced.piece_done(now_s=4.6)
    assert paced.yielded_s == pytest.approx(0.9104)


def test_rule_own_s_adds_the_attention_a_piece_pays_over_the_prefix_before_it():
    # 1e-6 ms a pair: tokens 10,000..20,000 attend 10,000 * 10,000 + 10,000 * 9,999 / 2 = 149,995,000 pairs,
    # 0.149995 s on top of 1.0 s of tokens
    paced = PacedPrefill("a", 60_000, cached_before=10_000, budget_s=10.0, rate=10_000.0, pieces=[20_000],
                         pair_s=1e-9)  # fmt: skip
    assert paced.own_s(10_000, 20_000) == pytest.approx(1.149995)
    # so a piece that took exactly that long yielded nothing to others
    assert paced.next_piece(now_s=0.0) == 20_000
    paced.piece_done(now_s=1.149995)
    assert paced.yielded_s == pytest.approx(0.0, abs=1e-9)
    # the budget is the yield share of the whole prompt's own prefill, attention included: 50,000 tokens
    # cold, 5 s + 1e-9 s * 50,000 * 49,999 / 2 = 5 + 1.249975 s; half of it 3.1249875 s
    p = pacer(attention_ms_per_pair=1e-6)
    assert p.start("b", 50_000, 0).budget_s == pytest.approx(3.1249875)


def test_rule_next_is_the_request_itself_once_the_budget_is_spent_or_the_pieces_are_out():
    paced = PacedPrefill("a", 60_000, cached_before=0, budget_s=1.0, rate=10_000.0, pieces=[16_384, 32_768])
    assert paced.next_piece(0.0) == 16_384
    paced.piece_done(3.0)  # 3.0 - 1.6384 = 1.3616 s yielded >= 1.0 s budget
    assert paced.next_piece(3.0) is None and paced.pieces == []
    out = PacedPrefill("b", 30_000, cached_before=0, budget_s=100.0, rate=10_000.0, pieces=[16_384])
    assert out.next_piece(0.0) == 16_384
    out.piece_done(1.7)
    assert out.next_piece(1.7) is None


def test_rule_hit_is_what_neither_the_pieces_nor_the_request_prefilled():
    paced = PacedPrefill("a", 50_000, cached_before=1_000, budget_s=10.0, rate=10_000.0, pieces=[16_896, 33_280])
    paced.record(16_896, 1_000)  # the first piece prefills 15,896
    paced.record(33_280, 30_000)  # another request had cached up to 30,000 meanwhile: 3,280 prefilled
    paced.record(50_000, 33_280)  # the request itself: 16,720
    # 50,000 - (15,896 + 3,280 + 16,720) = 14,104: the 1,000 cached at first and 13,104 the other prefilled
    assert paced.hit_tokens() == 14_104
    # the engine counted 1,000 + 30,000 + 33,280 hits; all but 14,104 are the request's own work
    assert paced.self_hit_tokens() == 64_280 - 14_104


def test_rule_cached_before_is_what_the_replica_held_before_the_first_piece():
    paced = pacer().start("a", 100_000, 4_096)
    assert paced is not None and paced.cached_before == 4_096


def test_piece_done_without_a_piece_out_is_an_error():
    paced = PacedPrefill("a", 60_000, cached_before=0, budget_s=1.0, rate=10_000.0, pieces=[16_384])
    with pytest.raises(RuntimeError, match="without a piece out"):
        paced.piece_done(1.0)


def test_rule_arrive_holds_paces_or_lets_in_and_never_paces_without_a_permit():
    p = pacer()
    assert p.arrive("a", 100_000, 0, permitted=False) == "whole" and p.active is None  # long, no permit
    assert p.arrive("b", 100_000, 0) == "paced" and p.active.request_id == "b"
    assert p.arrive("c", 60_000, 0) == "held" and p.held == ("c",)  # long while b is paced
    assert p.arrive("d", 10_000, 0) == "whole"  # within b's 50,000-token budget: let in, spends it
    assert p.left_tokens() == 40_000
    assert p.arrive("e", 40_001, 0, permitted=False) == "held"  # over what is left, permit or not
