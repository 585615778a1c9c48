"""`bench routing --tail N` in virtual time: each rule of routing_tail.py, the replay wiring and the CLI."""

import json

import pytest

from dspine_lab.bench.routing_tail import ServedRequest, format_slowest, p99_census, p99_ranks, slowest_requests
from dspine_lab.bench.routing_virtual import replay_virtual
from dspine_lab.bench.routing_workload import RoutingBenchSettings, ttft_floors_by_request
from ray_dspine.bench.traces.model import TraceMessage, TraceRequest


def prefill_s(uncached_tokens: int, cached_tokens: int) -> float:
    """A round step model for hand-working: 0.5 s a step plus 1 ms a token (the cached prefix costs nothing)."""
    return 0.5 + uncached_tokens / 1000


# Replica 0: a (4,000 tokens, nothing cached) prefills over [0, 4.5]; b (sent at 1.0, 500 of its 1,500 tokens
# uncached: 1.0 s) waits for it and prefills over [4.5, 5.5]; f (sent at 10) finds replica 0 idle.
# Replica 1: c prefills 3,000 tokens over [2.0, 5.5] where an ideal cache would have held 2,000 of them.
SERVED = [
    ServedRequest("a", 0, sent_s=0.0, first_token_s=4.5, prompt_tokens=4000, cached_tokens=0, floor_s=4.5),
    ServedRequest("b", 0, sent_s=1.0, first_token_s=5.5, prompt_tokens=1500, cached_tokens=1000, floor_s=1.0),
    ServedRequest("c", 1, sent_s=2.0, first_token_s=5.5, prompt_tokens=3000, cached_tokens=0, floor_s=1.5),
    ServedRequest("f", 0, sent_s=10.0, first_token_s=11.0, prompt_tokens=500, cached_tokens=0, floor_s=1.0),
]


@pytest.mark.parametrize(
    ("num_requests", "ranks"),
    [
        (419, (5, 6)),  # x = 0.99 * 418 = 413.82: ascending positions 413 and 414 = the 6th and 5th slowest
        (2, (1, 2)),  # x = 0.99: between the faster (rank 2) and the slower (rank 1)
        (101, (2,)),  # x = 99 exactly: the 2nd slowest alone
        (1, (1,)),
    ],
)
def test_rule_p99_ranks(num_requests, ranks):
    assert p99_ranks(num_requests) == ranks


def test_rule_p99_ranks_refuses_an_empty_replay():
    with pytest.raises(ValueError, match="num_requests must be >= 1"):
        p99_ranks(0)


def test_rule_slowest_first_and_ties_to_the_earlier_sent():
    rows = slowest_requests(SERVED, prefill_s, 3)
    # TTFTs: a 4.5, b 4.5, c 3.5, f 1.0; a and b tie, and a was sent first
    assert [(r.rank, r.request_id) for r in rows] == [(1, "a"), (2, "b"), (3, "c")]
    assert [r.ttft_s for r in rows] == pytest.approx([4.5, 4.5, 3.5])


def test_rule_own_prefill_waited_and_lost_cache():
    rows = {r.request_id: r for r in slowest_requests(SERVED, prefill_s, 4)}
    # own prefill 0.5 + uncached / 1000: a 4.5, b 1.0, c 3.5, f 1.0
    assert [rows[k].own_prefill_s for k in "abcf"] == pytest.approx([4.5, 1.0, 3.5, 1.0])
    # waited = TTFT - own prefill: b 4.5 - 1.0; the others start at once
    assert [rows[k].waited_s for k in "abcf"] == pytest.approx([0.0, 3.5, 0.0, 0.0])
    # lost cache = own prefill - floor: c prefilled 2,000 tokens its ideal cache holds (3.5 - 1.5)
    assert [rows[k].lost_cache_s for k in "abcf"] == pytest.approx([0.0, 0.0, 2.0, 0.0])


def test_rule_ahead_is_the_longest_prefill_on_its_replica_between_sent_and_start():
    rows = {r.request_id: r for r in slowest_requests(SERVED, prefill_s, 4)}
    # b waited over [1.0, 4.5) on replica 0, where a's step ran over [0, 4.5]
    assert (rows["b"].ahead_request_id, rows["b"].ahead_prefill_s) == ("a", pytest.approx(4.5))
    # c's replica ran nothing else; f was sent after a's and b's steps ended
    assert rows["c"].ahead_request_id is None and rows["f"].ahead_request_id is None


def test_rule_kind_and_cause_floor_queue_or_lost_cache():
    rows = {r.request_id: r for r in slowest_requests(SERVED, prefill_s, 4)}
    assert [rows[k].kind for k in "abcf"] == ["floor", "queued", "lost_cache", "floor"]
    assert rows["a"].cause == "at its floor"  # TTFT - floor = 0 <= 0.5
    assert rows["b"].cause == "queued 3.50 s, behind a's 4.50 s prefill"  # waited 3.5 >= lost 0
    assert rows["c"].cause == "prefilled 2.00 s its ideal cache holds"  # lost 2.0 > waited 0
    # the near-floor margin is a parameter: with 0 s, b's 3.5 s over its floor still reads as queueing
    strict = {r.request_id: r for r in slowest_requests(SERVED, prefill_s, 4, near_floor_s=0.0)}
    assert strict["a"].cause == "at its floor" and strict["b"].cause.startswith("queued 3.50 s")


def test_rule_without_a_floor_the_cause_is_the_wait():
    served = [ServedRequest("x", 0, sent_s=0.0, first_token_s=2.0, prompt_tokens=1000, cached_tokens=0)]
    (row,) = slowest_requests(served, prefill_s, 1)
    # own prefill 1.5 s, so it waited 0.5 s; nothing else ran on its replica
    assert row.floor_s is None and row.lost_cache_s is None and row.cause == "queued 0.50 s"


def test_rule_count_must_be_positive():
    with pytest.raises(ValueError, match="count must be >= 1"):
        slowest_requests(SERVED, prefill_s, 0)


def test_rule_census_counts_the_rows_at_the_p99_ranks_by_kind():
    rows = slowest_requests(SERVED, prefill_s, 3)  # a (floor), b (queued 3.5 s), c (lost cache 2.0 s)
    # 2 requests: the p99 ranks are 1 and 2 -> a and b; 3 requests: x = 1.98, ranks 1 and 2 again;
    # 101 requests: rank 2 alone -> b
    assert p99_census([(2, rows)]) == (
        "2 rows at the p99 ranks: 1 at their floor, 1 queued (mean wait 3.50 s), 0 lost cache"
    )
    assert p99_census([(2, rows), (101, rows)]) == (
        "3 rows at the p99 ranks: 1 at their floor, 2 queued (mean wait 3.50 s), 0 lost cache"
    )
    lost_first = slowest_requests(SERVED[2:3], prefill_s, 1)  # c alone: rank 1 of 1
    assert p99_census([(1, lost_first)]) == (
        "1 rows at the p99 ranks: 0 at their floor, 0 queued, 1 lost cache (mean 2.00 s of prefill)"
    )


def test_format_names_the_ranks_that_set_the_p99():
    lines = format_slowest("[slice 0, engine seed 0] headroom", 419, 8.28, slowest_requests(SERVED, prefill_s, 2))
    assert lines[0] == "[slice 0, engine seed 0] headroom: p99 8.28 s, set by rank 5 and 6 of 419"
    assert lines[3].split()[:2] == ["2", "4.50"] and lines[3].endswith("queued 3.50 s, behind a's 4.50 s prefill")


def trace_request(request_id: str, arrival_s: float, text: str) -> TraceRequest:
    return TraceRequest(
        request_id=request_id, session_id=request_id, turn_index=0, arrival_s=arrival_s, workload_class="chat",
        messages=[TraceMessage(role="user", content=text)], prompt_tokens=len(text) // 4,
        recorded_prompt_tokens=len(text) // 4, max_tokens=16, source="test",
    )  # fmt: skip


def test_replay_lists_a_request_queued_behind_a_long_prefill():
    # One replica. r0's canonical text has 40,008 characters -> 10,003 tokens, a prefill step of
    # 26.47 + 0.1 * 10,003 = 1,026.77 ms over [0, 1.02677]; r1 (4,104 characters -> 1,027 tokens, 129.17 ms,
    # no block shared with r0) is sent at 0.1 and prefills over [1.02677, 1.15594]: TTFT 1.05594 s, of which
    # 0.92677 s waiting behind r0.
    settings = RoutingBenchSettings(num_replicas=1, profile="h200-qwen3.8-27b")
    requests = [trace_request("r0", 0.0, "a" * 40_000), trace_request("r1", 0.1, "b" * 4096)]
    floors = ttft_floors_by_request(requests, settings)
    f = replay_virtual(requests, settings, "headroom", engine_seed=0, floors_sim_s=floors, tail=2)
    first, second = f.slowest
    assert (first.request_id, first.rank) == ("r1", 1)
    assert first.ttft_s == pytest.approx(1.05594) and first.own_prefill_s == pytest.approx(0.12917)
    assert first.waited_s == pytest.approx(0.92677) and first.cached_tokens == 0
    assert (first.ahead_request_id, first.ahead_prefill_s) == ("r0", pytest.approx(1.02677))
    assert first.cause == "queued 0.93 s, behind r0's 1.03 s prefill"
    assert (second.request_id, second.ttft_s, second.cause) == ("r0", pytest.approx(1.02677), "at its floor")
    assert replay_virtual(requests, settings, "headroom", engine_seed=0, floors_sim_s=floors).slowest == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--virtual", "--tail", "0"], "argument --tail: the number of slowest requests to list, at least 1 (got 0)"),
        (["--virtual", "--tail", "3", "--sweep-load", "1,2"], "argument --tail: lists the replays of one bench"),
    ],
)
def test_cli_bad_tail_is_named(capsys, routing_cli, argv, message):
    assert routing_cli(argv) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")


def test_cli_tail_lists_each_replays_slowest(capsys, routing_cli, mooncake_trace):
    argv = ["--virtual", "--window-s", "120", "--session-fraction", "0.05", "--engine-seeds", "0",
            "--routers", "cache_aware,headroom", "--tail", "3"]  # fmt: skip
    assert routing_cli(argv) == 0
    table = capsys.readouterr().out
    assert "slowest requests (simulated s;" in table
    assert table.count("[slice 0, engine seed 0] cache_aware: p99") == 1
    assert table.count("[slice 0, engine seed 0] headroom: p99") == 1
    assert "what sets the p99, over 1 replays per router:" in table
    assert table.count(" rows at the p99 ranks: ") == 2
    assert routing_cli([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for runs in result["runs"].values():
        (run,) = runs
        ttfts = [row["ttft_s"] for row in run["slowest"]]
        assert [row["rank"] for row in run["slowest"]] == [1, 2, 3] and ttfts == sorted(ttfts, reverse=True)
