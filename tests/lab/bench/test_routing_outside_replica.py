"""The rules of routing_outside_replica.py: TTFT outside the replica, its percentiles and p99 ranks."""

import pytest

from ray_dspine.bench.records import RequestRecord
from dspine_lab.bench.routing_outside_replica import format_outside, outside_replica


def record(i: int, ttft: float | None, replica_s: float | None, error: bool = False) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}", trace_request_id=f"r{i}", session_id="s", turn_index=0, workload_class="chat",
        repetition=0, api="chat", http_status=503 if error else 200, prompt_tokens=100, trace_prompt_tokens=100,
        max_tokens=8, output_tokens=8, ttft_s=ttft, e2e_s=1.0, server_replica_s=replica_s,
        error_kind="http_error" if error else None, start_offset_s=float(i), start_unix_s=1000.0 + i,
        end_unix_s=1001.0 + i,
    )  # fmt: skip


def test_rule_outside_is_ttft_less_the_replicas_share():
    assert record(0, 0.50, 0.42).ttft_outside_replica_s == pytest.approx(0.08)
    assert record(1, 0.50, None).ttft_outside_replica_s is None  # no header
    assert record(2, None, 0.3).ttft_outside_replica_s is None  # no first token
    assert record(3, 0.5, 0.3, error=True).ttft_outside_replica_s is None  # failed


def test_rule_figures_over_the_requests_that_told():
    # outside times 0.01, 0.02, 0.05, 0.10 (r4 has no header): p50 = 0.035; p99: 3 * 0.99 = 2.97 ->
    # 0.05 + 0.97 * 0.05 = 0.0985; max 0.10
    records = [record(0, 0.11, 0.10), record(1, 0.52, 0.50), record(2, 1.05, 1.00), record(3, 2.10, 2.00),
               record(4, 0.30, None)]  # fmt: skip
    f = outside_replica(records)
    assert f.num_requests == 4
    assert (f.p50_s, f.p99_s, f.max_s) == pytest.approx((0.035, 0.0985, 0.10))


def test_rule_p99_ranks_are_the_two_requests_the_p99_rests_on():
    # 5 ok TTFTs (the failed r5 is left out): position 0.99 * 4 = 3.96 -> ascending ranks 3 and 4,
    # r3 (TTFT 1.05, outside 0.05) and r1 (2.10, no header)
    records = [record(0, 0.11, 0.10), record(1, 2.10, None), record(2, 0.52, 0.50), record(3, 1.05, 1.00),
               record(4, 0.30, 0.29), record(5, 9.0, 8.0, error=True)]  # fmt: skip
    ranks = outside_replica(records).at_p99_ranks
    assert [(r.request_id, r.ttft_s) for r in ranks] == [("r3", 1.05), ("r1", 2.10)]
    assert ranks[0].outside_s == pytest.approx(0.05) and ranks[1].outside_s is None


def test_rule_p99_rank_once_when_the_position_is_whole_and_none_without_requests():
    # 101 TTFTs: 0.99 * 100 = 99 exactly -> one request, the 100th smallest (r99)
    records = [record(i, 0.01 * (i + 1), 0.0) for i in range(101)]
    assert [r.request_id for r in outside_replica(records).at_p99_ranks] == ["r99"]
    empty = outside_replica([])
    assert (empty.num_requests, empty.p50_s, empty.p99_s, empty.max_s, empty.at_p99_ranks) == (0, None, None, None, [])


def test_format_one_line_per_replay_that_told():
    told = outside_replica([record(0, 0.11, 0.10), record(1, 0.52, 0.50)])
    untold = outside_replica([record(0, 0.11, None)])
    lines = format_outside("headroom", [told, untold])
    assert len(lines) == 1 and lines[0].startswith("headroom     replay 1: TTFT outside the replica")
    # outside 0.01 and 0.02: p50 15 ms; p99 0.01 + 0.99 * 0.01 = 0.0199 s -> 20 ms; max 20 ms; the p99
    # position 0.99 * 1 lies between r0 and r1
    assert "p50 15 / p99 20 / max 20 ms" in lines[0]
    assert "r0: 10 ms of 0.11 s, r1: 20 ms of 0.52 s" in lines[0]
