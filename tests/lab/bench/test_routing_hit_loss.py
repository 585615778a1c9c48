"""Prefix hit lost to the ideal cache by kind of request (routing_hit_loss.py): each stated rule, by hand."""

import pytest

from dspine_lab.bench.routing_hit_loss import HitLoss, PlacedRequest, format_hit_losses, hit_loss, mean_hit_loss


def placed(request_id: str, session: str, replica: int | str, sent_s: float, prompt: int, cached: int) -> PlacedRequest:
    return PlacedRequest(request_id, session, replica, sent_s, prompt, cached)


def test_rule_lost_is_what_the_ideal_cache_held_and_the_engine_did_not():
    # ideal 600 of a 1,000-token prompt, 200 cached: 400 lost = 40 points of the 1,000 prompt tokens
    loss = hit_loss([placed("a", "s", 0, 0.0, 1000, 200)], {"a": 600})
    assert loss is not None and loss.first_turn_points == pytest.approx(40.0)


def test_rule_a_request_that_hit_more_than_the_ideal_loses_nothing_and_offsets_nothing():
    # a hits 300 over its ideal 100 (0 lost, not -200); b loses 500 of its ideal 500; total 2,000 tokens
    requests = [placed("a", "s1", 0, 0.0, 1000, 300), placed("b", "s2", 1, 1.0, 1000, 0)]
    loss = hit_loss(requests, {"a": 100, "b": 500})
    assert loss is not None and loss.first_turn_points == pytest.approx(25.0)  # 100 * 500 / 2000


def test_rule_kinds_follow_each_conversations_previous_replica_in_order_of_sending():
    # s1: turns on replica 0, 0, 1 -> first, stayed, moved; s2: one turn -> first. Given out of order.
    requests = [
        placed("t3", "s1", 1, 3.0, 100, 0),
        placed("t1", "s1", 0, 1.0, 100, 0),
        placed("u1", "s2", 1, 1.5, 100, 0),
        placed("t2", "s1", 0, 2.0, 100, 0),
    ]
    # ideal: t1 10, t2 20, t3 30, u1 40 tokens, all lost; 400 prompt tokens in all
    loss = hit_loss(requests, {"t1": 10, "t2": 20, "t3": 30, "u1": 40})
    assert loss is not None
    assert (loss.num_first_turns, loss.num_stayed, loss.num_moved) == (2, 1, 1)
    assert loss.first_turn_points == pytest.approx(12.5)  # (10 + 40) / 400
    assert loss.stayed_points == pytest.approx(5.0)  # 20 / 400
    assert loss.moved_points == pytest.approx(7.5)  # 30 / 400
    assert loss.total_points == pytest.approx(25.0)


def test_rule_a_turn_compares_with_its_conversations_latest_replica_not_its_first():
    # replica 0, then 1 (moved), then 1 again: stayed, since the previous turn went to 1
    requests = [placed("a", "s", 0, 0.0, 100, 0), placed("b", "s", 1, 1.0, 100, 0), placed("c", "s", 1, 2.0, 100, 0)]
    loss = hit_loss(requests, {})
    assert loss is not None and (loss.num_first_turns, loss.num_stayed, loss.num_moved) == (1, 1, 1)


def test_rule_ties_in_sending_time_go_by_request_id():
    # both sent at 0: "a" is first, so "b" (replica 1) moved away from "a"'s replica 0
    loss = hit_loss([placed("b", "s", 1, 0.0, 100, 0), placed("a", "s", 0, 0.0, 100, 0)], {"b": 50})
    assert loss is not None and loss.num_moved == 1 and loss.moved_points == pytest.approx(25.0)


def test_rule_a_request_without_an_ideal_entry_counts_in_the_total_and_the_order_but_loses_nothing():
    requests = [placed("x", "s", 0, 0.0, 300, 0), placed("y", "s", 1, 1.0, 100, 0)]
    loss = hit_loss(requests, {"y": 100})
    assert loss is not None
    assert loss.first_turn_points == 0.0 and loss.moved_points == pytest.approx(25.0)  # 100 / 400


def test_rule_nowhere_is_the_ideal_hit_no_replica_held_when_placed():
    # a: ideal 600, cached 100, some replica held 400 -> lost 500, of it nowhere 600 - 400 = 200.
    # b: ideal 300, cached 0, held 0 -> nowhere 300. c: ideal 200, held 500 -> nowhere 0.
    # d: the engine hit 700 though no replica was seen holding more than 100 -> nowhere 0 (ideal 500).
    requests = [
        PlacedRequest("a", "s1", 0, 0.0, 1000, 100, held_tokens=400),
        PlacedRequest("b", "s1", 0, 1.0, 1000, 0, held_tokens=0),
        PlacedRequest("c", "s2", 1, 2.0, 1000, 0, held_tokens=500),
        PlacedRequest("d", "s3", 1, 3.0, 1000, 700, held_tokens=100),
    ]
    loss = hit_loss(requests, {"a": 600, "b": 300, "c": 200, "d": 500})
    assert loss is not None
    assert loss.total_points == pytest.approx(25.0)  # (500 + 300 + 200 + 0) / 4000
    assert loss.nowhere_points == pytest.approx(12.5)  # (200 + 300) / 4000


def test_rule_nowhere_is_none_unless_every_request_says_what_was_held():
    requests = [PlacedRequest("a", "s", 0, 0.0, 100, 0, held_tokens=0), placed("b", "s", 0, 1.0, 100, 0)]
    loss = hit_loss(requests, {"a": 50, "b": 50})
    assert loss is not None and loss.nowhere_points is None and loss.total_points == pytest.approx(50.0)


def test_no_prompt_tokens_gives_none():
    assert hit_loss([], {}) is None


def test_mean_over_replays_skips_the_ones_without_figures():
    a = HitLoss(first_turn_points=1.0, stayed_points=2.0, moved_points=0.0, num_first_turns=10, num_stayed=4, num_moved=1)
    b = HitLoss(first_turn_points=3.0, stayed_points=0.0, moved_points=1.0, num_first_turns=11, num_stayed=6, num_moved=2)
    mean = mean_hit_loss([a, None, b])
    assert mean is not None
    assert (mean.first_turn_points, mean.stayed_points, mean.moved_points) == (2.0, 1.0, 0.5)
    assert (mean.num_first_turns, mean.num_stayed, mean.num_moved) == (10, 5, 2)  # 10.5 -> 10, 1.5 -> 2
    assert mean.nowhere_points is None  # neither replay knows it
    assert mean_hit_loss([None]) is None


def test_mean_nowhere_only_when_every_replay_has_it():
    a = HitLoss(first_turn_points=1.0, stayed_points=0.0, moved_points=0.0, num_first_turns=1, num_stayed=0,
                num_moved=0, nowhere_points=0.5)  # fmt: skip
    b = a.model_copy(update={"nowhere_points": 1.0})
    c = a.model_copy(update={"nowhere_points": None})
    assert mean_hit_loss([a, b]).nowhere_points == pytest.approx(0.75)
    assert mean_hit_loss([a, c]).nowhere_points is None


def test_format_a_legend_then_a_line_per_router_with_figures():
    a = HitLoss(first_turn_points=1.5, stayed_points=0.25, moved_points=0.5, num_first_turns=3, num_stayed=2, num_moved=1)
    lines = format_hit_losses({"cache_aware": a, "pow2": None}, replays=3)
    assert len(lines) == 2 and lines[0].endswith("; mean of 3 replays")
    assert lines[1] == "cache_aware  2.25 = 1.50 (3) + 0.25 (2) + 0.50 (1)"
    assert format_hit_losses({"pow2": None}, replays=1) == []


def test_format_adds_nowhere_when_known():
    a = HitLoss(first_turn_points=1.5, stayed_points=0.25, moved_points=0.5, num_first_turns=3, num_stayed=2,
                num_moved=1, nowhere_points=1.75)  # fmt: skip
    lines = format_hit_losses({"headroom": a}, replays=1)
    assert "nowhere: of that, what no replica's cache held when the request was placed" in lines[0]
    assert lines[1] == "headroom     2.25 = 1.50 (3) + 0.25 (2) + 0.50 (1); nowhere 1.75"
