"""`bench routing --tail N` through Ray Serve: each rule of routing_ray_tail.py, on hand-built records."""

import pytest

from ray_dspine.bench.records import RequestRecord
from dspine_lab.bench.routing_ray_tail import (
    format_ray_slowest,
    replay_slowest,
    served_from_records,
    slowest_by_router,
)
from dspine_lab.bench.routing_workload import RoutingBenchSettings, bench_prefill_seconds


def record(trace_id: str, start_s: float, ttft_s: float | None, prompt: int, cached: int | None = 0,
           replica: str = "abc123", repetition: int = 0) -> RequestRecord:  # fmt: skip
    failed = ttft_s is None
    return RequestRecord(
        request_id=f"{trace_id}#{repetition}", trace_request_id=trace_id, session_id="s-" + trace_id,
        turn_index=0, workload_class="chat", repetition=repetition, api="chat", replica=replica,
        prompt_tokens=prompt, trace_prompt_tokens=prompt, max_tokens=16, output_tokens=0 if failed else 16,
        cached_prompt_tokens=cached, ttft_s=ttft_s, e2e_s=None if failed else ttft_s + 1.0,
        error_kind="http_error" if failed else None, error="503" if failed else None,
        start_offset_s=start_s, start_unix_s=1e9 + start_s, end_unix_s=1e9 + start_s + 2.0,
    )  # fmt: skip


def test_rule_served_converts_the_clients_wall_seconds_to_simulated_seconds():
    # engine_time_scale 0.5: 1.0 wall s after the start is 2.0 simulated s; a 0.6 s TTFT ends at 3.2.
    records = [
        record("q1", 1.0, 0.6, prompt=3000, cached=None, replica="r-A"),
        record("q2", 2.0, None, prompt=800),  # failed: no first token, left out
    ]
    (served,) = served_from_records(records, {"q1": 0.4}, engine_time_scale=0.5)
    assert (served.request_id, served.replica) == ("q1", "r-A")
    assert served.sent_s == pytest.approx(2.0) and served.first_token_s == pytest.approx(3.2)
    assert (served.prompt_tokens, served.cached_tokens, served.floor_s) == (3000, 0, 0.4)
    assert served_from_records([record("q3", 0.0, 0.1, prompt=10)], {}, 1.0)[0].floor_s is None
    with pytest.raises(ValueError, match="engine_time_scale must be > 0"):
        served_from_records(records, {}, 0.0)


# The virtual one-replica example of test_routing_tail.py seen from the client at engine_time_scale 0.5:
# r0 (10,003 tokens, prefill 26.47 + 0.1 * 10,003 ms = 1.02677 s) is sent at 0 and r1 (1,027 tokens,
# 0.12917 s) at 0.1 simulated s; r1 waits 0.92677 s behind r0 and gets TTFT 1.05594 s. In wall seconds:
# r0 at 0 with TTFT 0.513385, r1 at 0.05 with TTFT 0.52797.
QUEUED = [record("r0", 0.0, 0.513385, prompt=10_003), record("r1", 0.05, 0.52797, prompt=1_027)]


def test_rule_slowest_reads_the_queue_off_the_records():
    prefill = bench_prefill_seconds(RoutingBenchSettings(profile="h200-qwen3.8-27b"))
    entry = replay_slowest(QUEUED, {"r0": 1.02677, "r1": 0.12917}, 0.5, prefill, count=2)
    assert (entry["repeat"], entry["num_requests"]) == (0, 2)
    # p99, linear: 1.02677 + 0.99 * (1.05594 - 1.02677)
    assert entry["ttft_p99_sim_s"] == pytest.approx(1.0556483)
    first, second = entry["slowest"]
    assert (first["rank"], first["request_id"], first["replica"]) == (1, "r1", "abc123")
    assert first["own_prefill_s"] == pytest.approx(0.12917) and first["waited_s"] == pytest.approx(0.92677)
    assert (first["ahead_request_id"], first["ahead_prefill_s"]) == ("r0", pytest.approx(1.02677))
    assert first["cause"] == "queued 0.93 s, behind r0's 1.03 s prefill"
    assert (second["request_id"], second["cause"]) == ("r0", "at its floor")


def test_rule_slowest_takes_one_replay_at_a_time():
    mixed = [record("a", 0.0, 0.1, prompt=10), record("b", 0.0, 0.1, prompt=10, repetition=1)]
    with pytest.raises(ValueError, match=r"got repetitions \[0, 1\]"):
        replay_slowest(mixed, {}, 0.5, lambda uncached, cached: 0.0, count=1)


def test_rule_slowest_by_router_keeps_repeat_order():
    records = {
        "headroom": [
            record("x", 0.0, 0.2, prompt=100, repetition=1),
            record("x", 0.0, 0.4, prompt=100, repetition=0),
        ],
    }
    out = slowest_by_router(records, {}, 0.5, lambda uncached, cached: 0.1, count=1)
    assert [entry["repeat"] for entry in out["headroom"]] == [0, 1]
    assert [entry["slowest"][0]["ttft_s"] for entry in out["headroom"]] == [pytest.approx(0.8), pytest.approx(0.4)]


def test_rule_table_labels_each_repeat_and_ends_with_a_census():
    prefill = bench_prefill_seconds(RoutingBenchSettings(profile="h200-qwen3.8-27b"))
    floors = {"r0": 1.02677, "r1": 0.12917}
    lines = format_ray_slowest(slowest_by_router({"headroom": QUEUED}, floors, 0.5, prefill, 2))
    assert lines[0].startswith("slowest requests (simulated s = wall s / engine_time_scale")
    assert lines[1] == "[repeat 1] headroom: p99 1.06 s, set by rank 1 and 2 of 2"
    assert "queued 0.93 s, behind r0's 1.03 s prefill" in lines[3]
    assert lines[-2] == "what sets the p99, over 1 replays per router:"
    # both rows sit at the p99 ranks of a 2-request replay: r1 queued (0.93 s), r0 at its floor
    assert lines[-1] == "headroom: 2 rows at the p99 ranks: 1 at their floor, 1 queued (mean wait 0.93 s), 0 lost cache"
    assert format_ray_slowest({"headroom": []}) == []
