"""One test per rule of prefill_rounds.py; the reservation figures are SGLang's own (PR #40024's tests)."""

import pytest

from ray_dspine.engines.simulated.prefill_rounds import PrefillWork, plan_round, reserved_tokens, spf_order

SPF = "shortest-prefill-first"


def work(rid: str, tokens: int, arrival: int = 0) -> PrefillWork:
    return PrefillWork(rid, tokens, arrival)


def test_rule_unchunked_takes_the_oldest_request_alone_and_whole():
    waiting = [work("b", 50_000, arrival=2), work("a", 300, arrival=1)]
    assert plan_round(None, waiting, None) == [("a", 300)]
    assert plan_round(None, [], None) == []


def test_rule_fcfs_adds_whole_requests_in_arrival_order_and_cuts_the_first_that_does_not_fit():
    waiting = [work("c", 30, 3), work("a", 40, 1), work("b", 50, 2)]
    # 40 + 50 = 90 of 100; c needs 30, 10 are left: c is cut to 10 and the round ends
    assert plan_round(None, waiting, 100) == [("a", 40), ("b", 50), ("c", 10)]


def test_rule_fcfs_chunk_continues_first_and_an_unfinished_chunk_takes_the_whole_round():
    chunked = work("long", 250)
    assert plan_round(chunked, [work("short", 5, 1)], 100) == [("long", 100)]
    # its last chunk leaves room: the rest goes to waiting requests in order
    assert plan_round(work("long", 60), [work("short", 5, 1), work("next", 80, 2)], 100) == [
        ("long", 60), ("short", 5), ("next", 35),
    ]  # fmt: skip


def test_rule_spf_orders_by_work_then_arrival():
    ordered = spf_order([work("big", 900, 0), work("late", 10, 5), work("early", 10, 2), work("mid", 50, 1)])
    assert [w.request_id for w in ordered] == ["early", "late", "mid", "big"]


@pytest.mark.parametrize(
    ("waiting", "budget", "page", "limit"),
    [
        ([512, 1024], 4096, 256, 2560),  # reserved 512 + 1024 = 1536; floor_256(4096 - 1536) = 2560
        ([257], 4096, 256, 3584),  # ceil_256(257) = 512 reserved
        ([3840], 4096, 256, 256),  # 3840 <= 4096 - 256: reserved, the chunk keeps one page
        ([4032], 4096, 64, 64),  # 4032 <= 4096 - 64
        ([4033], 4096, 64, 4096),  # ceil_64(4033) = 4096 > 4032: nothing reserved, the whole round
    ],
)
def test_rule_spf_reserves_room_for_shorter_waiting_requests(waiting, budget, page, limit):
    chunked = work("continuation", 16_384)
    plan = plan_round(chunked, [work(f"w{i}", n, i) for i, n in enumerate(waiting)], budget, SPF, page)
    assert plan[0] == ("continuation", limit)
    assert sum(-(-n // page) * page for _, n in plan[1:]) <= budget - limit


def test_rule_spf_reservation_stops_at_the_first_request_not_shorter_than_the_chunk():
    chunked = work("chunk", 600)
    ordered = spf_order([work("a", 100, 0), work("b", 600, 1), work("c", 50, 2)])  # c, a, b
    # c (50) and a (100) are shorter than 600; b (600) is not: the scan stops there
    assert reserved_tokens(chunked, ordered, 1000, 1) == 150
    # and it stops at the budget: 50 fits 99, then 100 would pass 100 - 1
    assert reserved_tokens(chunked, ordered, 100, 1) == 50


def test_rule_spf_never_cuts_a_request_beside_an_unfinished_chunk():
    chunked = work("chunk", 1000)
    # 40 is reserved (limit 60); "big" (500) does not fit the 40 left and the chunk stays unfinished
    assert plan_round(chunked, [work("big", 500, 1), work("short", 40, 2)], 100, SPF) == [
        ("chunk", 60), ("short", 40),
    ]  # fmt: skip
    # a chunk that finishes in this round leaves the rest to a new cut, as under fcfs
    assert plan_round(work("chunk", 30), [work("big", 500, 1)], 100, SPF) == [("chunk", 30), ("big", 70)]


def test_rule_spf_reserves_nothing_when_the_round_is_under_two_pages():
    assert reserved_tokens(work("chunk", 1000), [work("short", 1)], 127, 64) == 0
    assert plan_round(work("chunk", 1000), [work("short", 1)], 127, SPF, 64) == [("chunk", 127)]


def test_rule_a_whole_request_is_charged_whole_pages_and_a_cut_is_whole_pages():
    # a's 10 tokens are charged a 64-token page: 36 of 100 are left; b's 30 would fit 36, but its page
    # (64) does not, and a cut to floor_64(36) = 0 tokens is no cut
    assert plan_round(None, [work("a", 10, 0), work("b", 30, 1)], 100, "fcfs", 64) == [("a", 10)]
    # with 128: 64 left after a; b (70 -> 128 charged) is cut to 64
    assert plan_round(None, [work("a", 10, 0), work("b", 70, 1)], 128, "fcfs", 64) == [("a", 10), ("b", 64)]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="page_tokens"):
        plan_round(None, [work("a", 1)], 100, page_tokens=0)
    with pytest.raises(ValueError, match="budget_tokens"):
        plan_round(None, [work("a", 1)], 0)
    with pytest.raises(ValueError, match="unchunked"):
        plan_round(work("a", 5), [], None)
