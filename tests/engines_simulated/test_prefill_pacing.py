"""Paced prefill (engines/prefill_pacing.py): a test per rule of the module docstring."""

import pytest
from pydantic import ValidationError

from ray_dspine.engines.prefill_pacing import PacedPrefill, PrefillPacer, PrefillPacingConfig, plan_pieces


def pacer(min_uncached_tokens: int = 40_000, yield_fraction: float = 0.5) -> PrefillPacer:
    return PrefillPacer(
        PrefillPacingConfig(min_uncached_tokens=min_uncached_tokens, piece_tokens=16_384, yield_fraction=yield_fraction)
    )


def test_rule_paced_from_the_threshold_of_uncached_tokens():
    # 50,000-token prompt with 10,000 cached: 40,000 uncached reaches the threshold; 1 more cached does not
    assert pacer().start("a", 50_000, 10_000) is not None
    assert pacer().start("b", 50_000, 10_001) is None


def test_rule_paced_one_at_a_time_per_replica():
    p = pacer()
    first = p.start("a", 100_000, 0)
    assert first is not None and p.active is first
    assert p.start("b", 100_000, 0) is None  # the second is sent whole while the first is paced
    p.finish("b")  # finishing another request frees nothing
    assert p.active is first
    p.finish("a")
    assert p.active is None and p.start("b", 100_000, 0) is not None


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


def test_rule_next_is_the_request_itself_once_the_budget_is_spent_or_the_pieces_are_out():
    paced = PacedPrefill("a", 60_000, cached_before=0, budget_s=1.0, rate=10_000.0, pieces=[16_384, 32_768])
    assert paced.next_piece(0.0) == 16_384
    paced.piece_done(3.0)  # 3.0 - 1.6384 = 1.3616 s yielded >= 1.0 s budget
    assert paced.next_piece(3.0) is None and paced.pieces == []
    out = PacedPrefill("b", 30_000, cached_before=0, budget_s=100.0, rate=10_000.0, pieces=[16_384])
    assert out.next_piece(0.0) == 16_384
    out.piece_done(1.7)
    assert out.next_piece(1.7) is None


def test_rule_cached_before_is_what_the_replica_held_before_the_first_piece():
    paced = pacer().start("a", 100_000, 4_096)
    assert paced is not None and paced.cached_before == 4_096


def test_piece_done_without_a_piece_out_is_an_error():
    paced = PacedPrefill("a", 60_000, cached_before=0, budget_s=1.0, rate=10_000.0, pieces=[16_384])
    with pytest.raises(RuntimeError, match="without a piece out"):
        paced.piece_done(1.0)
