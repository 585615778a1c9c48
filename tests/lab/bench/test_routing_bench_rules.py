"""The rules of `bench routing` that need no cluster: slice, floor, app, figures and goals."""

import argparse
from pathlib import Path

import pytest

from ray_dspine.bench.records import RequestRecord
from ray_dspine.routing.config import RouterConfig
from dspine_lab.bench.routing_bench import register, settings_from_args, subtract
from dspine_lab.bench.routing_results import (
    format_order_bound,
    format_table,
    goals,
    order_bound_reductions,
    reduction,
    reduction_ceilings,
    router_figures,
)
from dspine_lab.bench.routing_workload import (
    RoutingBenchSettings,
    bench_app_config,
    bench_pacing,
    format_hit_ceiling,
    prefix_hit_ceilings,
    session_kept,
    slice_requests,
    ttft_floor_sim_s,
)
from ray_dspine.bench.traces.model import Trace, TraceMessage, TraceRequest
from ray_dspine.engines.prefill_pacing_config import PrefillPacingConfig
from ray_dspine.serve.router_options import request_router_config


def trace_request(request_id: str, session: str, arrival_s: float, text: str = "hi", turn: int = 0) -> TraceRequest:
    return TraceRequest(
        request_id=request_id, session_id=session, turn_index=turn, arrival_s=arrival_s, workload_class="chat",
        messages=[TraceMessage(role="user", content=text)], prompt_tokens=len(text) // 4,
        recorded_prompt_tokens=len(text) // 4, max_tokens=16, source="test",
    )  # fmt: skip


def trace(requests: list[TraceRequest]) -> Trace:
    return Trace(
        name="test", path=Path("test.jsonl"), sha256="0" * 64, format="openai-log", seed=0, tool_calls="native",
        num_clamped=0, requests=requests,
    )  # fmt: skip


def test_rule_slice_window_and_arrival_scale():
    # window [10, 30) trace seconds keeps the requests at 15 and 25; arrival_scale 0.5 maps them to
    # (15 - 10) * 0.5 = 2.5 and (25 - 10) * 0.5 = 7.5 simulated seconds.
    requests = [trace_request(f"r{i}", f"s{i}", a) for i, a in enumerate([5.0, 15.0, 25.0, 35.0])]
    settings = RoutingBenchSettings(window_start_s=10.0, window_s=20.0, session_fraction=1.0, arrival_scale=0.5)
    kept = slice_requests(trace(requests), settings)
    assert [(r.request_id, r.arrival_s) for r in kept] == [("r1", 2.5), ("r2", 7.5)]


def test_rule_slice_samples_whole_sessions():
    # crc32("0:s1") / 2**32 = 0.677, "0:s2" 0.204, "0:s3" 0.263, "0:s4" 0.864; with seed 1: "1:s1" 0.085,
    # "1:s4" 0.397 (both below 0.5), "1:s2" 0.550, "1:s3" 0.984.
    assert [session_kept(s, 0, 0.5) for s in ("s1", "s2", "s3", "s4")] == [False, True, True, False]
    assert [session_kept(s, 1, 0.5) for s in ("s1", "s2", "s3", "s4")] == [True, False, False, True]
    requests = [trace_request(f"r{i}", s, float(i), turn=t) for i, (s, t) in enumerate([("s2", 0), ("s1", 0), ("s2", 1)])]
    kept = slice_requests(trace(requests), RoutingBenchSettings(window_s=100.0, session_fraction=0.5, arrival_scale=1.0))
    assert [r.request_id for r in kept] == ["r0", "r2"]  # both turns of s2, nothing of s1


def test_rule_ttft_floor_counts_only_uncached_prompt_tokens():
    # The ingress hashes "user\x1e" + text + "\x1e\x1e\n" (8 extra characters) in 2,048-character blocks and
    # estimates tokens as characters // 4 + 1. First: 4,096 + 8 characters -> 1,027 tokens, nothing cached:
    # 26.47 ms + 0.1 ms * 1,027 = 129.17 ms. Second: the same 4,096 characters + 2,048 more -> 6,152
    # characters -> 1,539 tokens; its first 2 blocks were seen: 26.47 + 0.1 * (1,539 - 2 * 512) = 77.97 ms.
    first = "a" * 4096
    second = first + "b" * 2048
    requests = [trace_request("r0", "s0", 0.0, first), trace_request("r1", "s1", 1.0, second)]
    floors = ttft_floor_sim_s(requests, RoutingBenchSettings(profile="h200-qwen3.8-27b"))
    assert floors == pytest.approx([0.12917, 0.07797])
    # The default profile adds 7.09e-7 ms per attended pair: the first prompt's 1,027 * 1,026 / 2 = 526,851
    # pairs (0.37354 ms); the second's 515 new tokens after 1,024 cached, 515 * 1,024 + 515 * 514 / 2 = 659,715
    # pairs (0.46774 ms).
    floors = ttft_floor_sim_s(requests, RoutingBenchSettings())
    assert floors == pytest.approx([0.12917 + 0.00037354, 0.07797 + 0.00046774])


def test_rule_ttft_floor_pays_one_base_step_per_chunk():
    # 40,960 + 8 characters -> 10,243 tokens, nothing cached; in 4,096-token passes: 3 passes,
    # 0.1 * 10,243 + 3 * 26.47 = 1,103.71 ms (unchunked: one base step, 1,050.77 ms)
    requests = [trace_request("r0", "s0", 0.0, "a" * 40_960)]
    chunked = RoutingBenchSettings(chunked_prefill_tokens=4096, profile="h200-qwen3.8-27b")
    assert ttft_floor_sim_s(requests, chunked) == pytest.approx([1.10371])
    assert ttft_floor_sim_s(requests, RoutingBenchSettings(profile="h200-qwen3.8-27b")) == pytest.approx([1.05077])


def test_rule_prefix_hit_ceiling_over_the_ideal_cache():
    # Prompts as in the floor test: r0 (session s0) 1,027 tokens, nothing seen; r1 (session s1) 1,539 tokens,
    # its first 2 blocks seen in r0 (1,024 tokens), none in its own session; r2 repeats r0's text in s0:
    # 1,027 tokens, capped at (1,027 - 1) // 512 = 2 blocks, seen both in the slice and in s0 (1,024).
    # Ceiling (1,024 + 1,024) / (1,027 + 1,539 + 1,027) = 2,048 / 3,593; within sessions 1,024 / 3,593.
    first = "a" * 4096
    requests = [
        trace_request("r0", "s0", 0.0, first),
        trace_request("r1", "s1", 1.0, first + "b" * 2048),
        trace_request("r2", "s0", 2.0, first),
    ]
    ceilings = prefix_hit_ceilings(requests)
    assert ceilings["prefix_hit_ceiling"] == pytest.approx(2048 / 3593)
    assert ceilings["prefix_hit_ceiling_within_sessions"] == pytest.approx(1024 / 3593)
    line = format_hit_ceiling([{**ceilings}, {"prefix_hit_ceiling": 0.3, "prefix_hit_ceiling_within_sessions": 0.15}])
    # the mean over the two slices: (0.570 + 0.3) / 2 = 0.435, (0.285 + 0.15) / 2 = 0.217
    assert line is not None and line.startswith("prefix-hit ceiling: 0.435 ") and "0.217 of it" in line
    assert prefix_hit_ceilings([]) == {"prefix_hit_ceiling": None, "prefix_hit_ceiling_within_sessions": None}
    assert format_hit_ceiling([{"prefix_hit_ceiling": None}]) is None


def test_rule_app_differs_only_in_router_policy():
    settings = RoutingBenchSettings(num_replicas=3)
    apps = {policy: bench_app_config(settings, policy) for policy in ("pow2", "cache_aware", "headroom")}
    # paced prefill is off for every router by default, as SGLang replicas run today
    assert [app.pools[0].engine.prefill_pacing for app in apps.values()] == [None, None, None]
    dumps = []
    for app in apps.values():
        dump = app.model_dump()
        dump["pools"][0]["deployment"]["router"]["policy"] = "same"
        dumps.append(dump)
    assert dumps[0] == dumps[1] == dumps[2]
    deployment = apps["headroom"].pools[0].deployment
    # The DSpine/ReplaySSM H200 plan runs 71 requests at once; Ray sends each replica at most that many.
    assert deployment.num_replicas == 3 and deployment.max_ongoing_requests == 71
    assert request_router_config(apps["pow2"].pools[0].deployment) is None  # Ray's PowerOfTwoChoices
    # GPU-second defaults in wall seconds at engine_time_scale 0.5: the guard's 6 s and 12 s, the memory
    # wait's 2 s and 12 s and the TTFT floor's 1 s halved; the per-cached ratios (seconds per second) are
    # scale-free; predicted_decode is not listed, so nothing of it appears
    router = deployment.router
    guard, wait = router.stage("ttft_guard"), router.stage("memory_wait")
    assert (guard.tolerance_s, guard.cached_max_s, guard.per_cached_s) == (3.0, 6.0, 4.0)
    assert (wait.tolerance_s, wait.cached_max_s, wait.per_cached_s) == (1.0, 6.0, 4.0)
    assert router.stage("predicted_ttft").indifference_s == 0.5 and router.stage("predicted_decode") is None
    assert [s.type for s in router.scorers] == [s.type for s in RouterConfig().scorers]  # order kept


def record(i: int, ttft: float | None, e2e: float, out: int, cached: int | None, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}", trace_request_id=f"r{i}", session_id="s", turn_index=0, workload_class="chat",
        repetition=0, api="chat", http_status=503 if error else 200, prompt_tokens=100, trace_prompt_tokens=100,
        max_tokens=32, output_tokens=out, cached_prompt_tokens=cached, ttft_s=ttft, e2e_s=e2e,
        error_kind="http_error" if error else None, error=error, start_offset_s=float(i), start_unix_s=1000.0 + i,
        end_unix_s=1000.0 + i + e2e,
    )  # fmt: skip


def counters(replica: str, hit: int, prefilled: int, waited: int, peak_kv: float) -> dict:
    return {
        "replica": replica,
        "counters": {
            "num_finished": 1, "num_prefix_hit_tokens": hit, "num_prefill_tokens": prefilled,
            "num_waited_for_memory": waited, "num_waited_for_state_slots": 0, "num_retractions": 0,
            "num_evicted_blocks": 2, "peak_kv_utilization": peak_kv, "peak_state_utilization": 0.5,
        },
    }  # fmt: skip


def test_rule_router_figures():
    records = [record(0, 0.1, 1.0, 10, 50), record(1, 0.2, 2.0, 20, 0), record(2, 0.3, 3.0, 30, 0),
               record(3, None, 0.5, 0, None, error="busy")]  # fmt: skip
    f = router_figures("headroom", "ours", records, [counters("a", 512, 1536, 1, 0.4), counters("b", 0, 512, 0, 0.6)], 0.5)
    # Percentiles of 3 values (linear rule): p50 = 0.2; p99: h = 2 * 0.99 = 1.98 -> 0.2 + 0.98 * 0.1 = 0.298.
    assert f.ttft_p50_s == pytest.approx(0.2) and f.ttft_p99_s == pytest.approx(0.298)
    assert f.e2e_p99_s == pytest.approx(2.98)  # 2 + 0.98 * 1
    assert f.ttft_p99_sim_s == pytest.approx(0.596)  # wall / time_scale 0.5
    # Wall: first send 1000.0, last end 1002.0 + 3.0 = 1005.0 -> 5 s; 60 ok output tokens -> 12 tok/s.
    assert f.wall_s == pytest.approx(5.0) and f.output_tokens_per_s == pytest.approx(12.0)
    assert f.output_tokens_per_sim_s == pytest.approx(6.0)
    # Hits from the engines: 512 / (512 + 1536 + 0 + 512) = 0.2; from usage: 50 / 300.
    assert f.prefix_hit_rate == pytest.approx(0.2) and f.prefix_hit_rate_usage == pytest.approx(50 / 300)
    assert (f.num_ok, f.errors, f.num_waited_for_memory, f.num_evicted_cache_blocks) == (3, {"http_503": 1}, 1, 4)
    assert [r.peak_kv_utilization for r in f.replicas] == [0.4, 0.6]
    assert f.ttft_excess_p99_sim_s is None  # no floors given
    # the failed request is listed with what the client saw: r3, sent at 3.0 s, answered 503 "busy"
    assert [(r.request_id, r.error_kind, r.error, r.sent_s, r.ttft_s) for r in f.failed] == [
        ("r3", "http_503", "busy", 3.0, None)
    ]
    assert "headroom     failed: r3 (replay 1, 100 prompt tokens, sent at 3.0 s, no first token): http_503: busy" in (
        format_table({"headroom": f}, [])
    )


def test_rule_hit_loss_per_replay_on_the_ok_requests():
    # one conversation: r0 on a, r1 back on a (stayed), r2 on b (moved); r3 failed: left out. Each ok
    # request has 100 prompt tokens (300 in all); ideal hits 0 / 80 / 90, cached 50 / 30 / 0.
    records = [record(0, 0.1, 1.0, 10, 50), record(1, 0.2, 2.0, 20, 30), record(2, 0.3, 3.0, 30, 0),
               record(3, None, 0.5, 0, None, error="busy")]  # fmt: skip
    for r, replica in zip(records, ("a", "a", "b", "b")):
        r.replica = replica
    ideal = {"r0": 0, "r1": 80, "r2": 90, "r3": 100}
    f = router_figures("headroom", "ours", records, [], 0.5, ideal_hit_tokens=ideal)
    [loss] = f.prefix_hit_loss_by_replay
    assert loss is not None and (loss.num_first_turns, loss.num_stayed, loss.num_moved) == (1, 1, 1)
    # lost: r0 max(0, 0 - 50) = 0, r1 80 - 30 = 50, r2 90: points 0, 100 * 50 / 300, 100 * 90 / 300
    assert loss.first_turn_points == 0.0
    assert loss.stayed_points == pytest.approx(50 / 3) and loss.moved_points == pytest.approx(30.0)
    assert router_figures("headroom", "ours", records, [], 0.5).prefix_hit_loss_by_replay == []


def test_rule_failed_requests_listed_first_twenty_in_sending_order():
    records = [record(i, None, 0.5, 0, None, error="busy") for i in range(25)]
    records = list(reversed(records))  # the client hands them back in completion order
    f = router_figures("headroom", "ours", records, [], 0.5)
    assert f.errors == {"http_503": 25}
    assert [r.request_id for r in f.failed] == [f"r{i}" for i in range(20)]


def test_rule_ttft_excess_over_each_requests_floor():
    records = [record(0, 0.1, 1.0, 10, 0), record(1, 0.2, 2.0, 20, 0), record(2, 0.3, 3.0, 30, 0),
               record(3, 0.9, 3.0, 30, 0)]  # fmt: skip
    floors = {"r0": 0.1, "r1": 0.4, "r2": 0.1}  # r3 has no floor: left out
    f = router_figures("headroom", "ours", records, [], 0.5, floors)
    # simulated TTFT = wall / 0.5 = 0.2, 0.4, 0.6 -> excess 0.1, 0.0, 0.5; sorted 0, 0.1, 0.5:
    # p99: h = 2 * 0.99 = 1.98 -> 0.1 + 0.98 * (0.5 - 0.1) = 0.492
    assert f.ttft_excess_p99_sim_s == pytest.approx(0.492)


def test_rule_order_bound_per_replay_on_the_ok_requests():
    records = [record(0, 0.1, 1.0, 10, 0), record(1, 0.2, 2.0, 20, 0), record(2, 0.3, 3.0, 30, 0),
               record(3, None, 0.5, 0, None, error="busy")]  # fmt: skip
    floors = {"r0": 3.0, "r1": 1.0, "r2": 0.5, "r3": 9.0}  # r3 failed: left out
    # Sent at 0, 1, 2 wall s = 0, 2, 4 simulated s (time scale 0.5). One replica: r0 over [0, 3], r1 over
    # [3, 4] (2 s after it was sent), r2 over [4, 4.5]: TTFTs 3, 2, 0.5 -> p99 2 + 0.98 * 1 = 2.98.
    one = router_figures("headroom", "ours", records, [], 0.5, floors, num_replicas=1)
    assert one.ttft_order_bound_p99_sim_s_by_replay == pytest.approx([2.98])
    # Two replicas: r1 starts when sent (1 s): TTFTs 3, 1, 0.5 -> p99 1 + 0.98 * 2 = 2.96.
    two = router_figures("headroom", "ours", records, [], 0.5, floors, num_replicas=2)
    assert two.ttft_order_bound_p99_sim_s_by_replay == pytest.approx([2.96])
    assert router_figures("headroom", "ours", records, [], 0.5, floors).ttft_order_bound_p99_sim_s_by_replay == []
    # Against a baseline whose p99 was 2.0 wall s = 4.0 simulated s: 1 - 2.98 / 4 = 0.255.
    base = one.model_copy(update={"ttft_p99_s_by_replay": [2.0], "ttft_order_bound_p99_sim_s_by_replay": []})
    cuts = order_bound_reductions({"cache_aware": base, "headroom": one}, 0.5)
    assert cuts == {"cache_aware": [pytest.approx(0.255)]}
    assert order_bound_reductions({"cache_aware": base}, 0.5) == {}  # no ours, no bound
    lines = format_order_bound({"cache_aware": base, "headroom": one}, cuts)
    assert lines[0] == "headroom     order-preserving bound on p99 TTFT per replay: 2.98 simulated s"
    assert lines[1].startswith("order-preserving bound vs cache_aware per replay: 0.255 (target 0.15")


def test_rule_goals():
    base = router_figures("x", "x", [record(0, 0.1, 1.0, 1, 0)], [counters("a", 1, 3, 0, 0.1)], 1.0)

    def with_(p99: float, hit: float):
        return base.model_copy(update={"ttft_p99_s": p99, "prefix_hit_rate": hit})

    figures = {"pow2": with_(1.0, 0.1), "cache_aware": with_(0.7, 0.25), "headroom": with_(0.6, 0.3)}
    checks = {g.name: g for g in goals(figures)}
    # 1 - 0.6 / 1.0 = 0.4 >= 0.30; 1 - 0.6 / 0.7 = 0.1429 < 0.15; hits 0.3 - 0.25 = 0.05 >= 0; 0 retractions.
    # These are point estimates: no verdict (paired.py judges goals on intervals).
    assert checks["ttft_p99_reduction_vs_pow2"].value == pytest.approx(0.4)
    assert checks["ttft_p99_reduction_vs_cache_aware"].value == pytest.approx(1 / 7)
    assert checks["prefix_hit_rate_minus_cache_aware"].value == pytest.approx(0.05)
    assert checks["retractions"].value == 0.0
    assert all("met" not in g.model_dump() for g in checks.values())
    assert reduction(None, 1.0) is None and reduction(1.0, 0.0) is None
    assert goals({"pow2": figures["pow2"]}) == []  # no ours, no goals


def test_rule_reduction_ceiling_is_the_floor_against_each_baseline():
    base = router_figures("x", "x", [record(0, 0.1, 1.0, 1, 0)], [], 1.0)
    figures = {name: base.model_copy(update={"ttft_p99_sim_s": p99}) for name, p99 in
               (("pow2", 16.0), ("cache_aware", 10.0), ("headroom", 9.0))}  # fmt: skip
    # floor p99 8 s: 1 - 8 / 16 = 0.5 against pow2, 1 - 8 / 10 = 0.2 against cache_aware; ours left out
    assert reduction_ceilings(figures, 8.0) == pytest.approx({"pow2": 0.5, "cache_aware": 0.2})


def test_rule_replays_pool_their_requests_and_keep_each_p99():
    # replay 0 sends at 1000-1002 and ends by 1005 (5 s); replay 1 is the same 100 s later (5 s)
    first = [record(i, ttft, 1.0 + i, 10, 0) for i, ttft in enumerate((0.1, 0.2, 0.3))]
    second = [
        r.model_copy(update={"repetition": 1, "ttft_s": r.ttft_s * 2, "start_unix_s": r.start_unix_s + 100,
                             "end_unix_s": r.end_unix_s + 100})
        for r in first
    ]  # fmt: skip
    f = router_figures("headroom", "ours", first + second, [], 1.0)
    # wall = 5 + 5 s (the 95 s between replays, when other routers ran, is not counted): 60 tokens / 10 s
    assert f.num_replays == 2 and f.wall_s == pytest.approx(10.0) and f.output_tokens_per_s == pytest.approx(6.0)
    # each replay's p99 (linear rule over 3 values): 0.2 + 0.98 * 0.1 = 0.298 and twice that
    assert f.ttft_p99_s_by_replay == pytest.approx([0.298, 0.596])
    # pooled p99 over 0.1, 0.2, 0.2, 0.3, 0.4, 0.6: h = 5 * 0.99 = 4.95 -> 0.4 + 0.95 * 0.2 = 0.59
    assert f.ttft_p99_s == pytest.approx(0.59)


def test_rule_each_replay_keeps_its_own_hit_rate():
    # replay 0: 0 + 50 + 100 cached of 3 x 100 prompt tokens = 0.5; replay 1: 20 of 300, its failed
    # request (cached 100) left out = 20 / 200 = 0.1; pooled over the 5 ok requests: 170 / 500 = 0.34
    first = [record(i, 0.1, 1.0, 10, cached) for i, cached in enumerate((0, 50, 100))]
    second = [
        record(3, 0.1, 1.0, 10, 20), record(4, 0.1, 1.0, 10, None), record(5, None, 1.0, 0, 100, error="busy"),
    ]  # fmt: skip
    second = [r.model_copy(update={"repetition": 1}) for r in second]
    f = router_figures("headroom", "ours", first + second, [], 1.0)
    assert f.prefix_hit_rate_by_replay == pytest.approx([0.5, 0.1])
    assert f.prefix_hit_rate_usage == pytest.approx(0.34)
    table = format_table({"headroom": f}, [])
    assert "headroom     per replay: TTFT p99 0.10 / 0.10; hit 0.500 / 0.100" in table


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--replicas", "0"], "argument --replicas: Input should be greater than or equal to 1 (got 0)"),
        (["--repeats", "0"], "argument --repeats: Input should be greater than or equal to 1 (got 0)"),
        (["--routers", "bogus"], "argument --routers: Input should be 'headroom', 'cache_aware', 'least_load' or 'pow2'"),
        (["--engine-time-scale", "-1"], "argument --engine-time-scale: Input should be greater than 0 (got -1.0)"),
        (["--trace", "no-such-trace"], "argument --trace: 'no-such-trace' is neither a known trace"),
        (["--hicache-host-tokens", "-1"], "argument --hicache-host-tokens: Input should be greater than or equal to 0"),
        (["--hicache-store-tokens", "1000"], "argument --hicache-store-tokens: a store shared by the replicas is "
         "modelled in virtual time; add --virtual"),
    ],
)
def test_cli_bad_input_is_named_with_exit_2_before_ray_starts(argv, message, capsys):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["routing", *argv])
    assert args.func(args) == 2
    assert capsys.readouterr().err.startswith("error: " + message)


def test_cli_an_empty_slice_is_named_with_exit_2_before_ray_starts(capsys, routing_cli, mooncake_trace):
    assert routing_cli(["--window-s", "0.001"]) == 2
    assert capsys.readouterr().err.startswith("error: argument --window-s: the slice holds no request")


def test_cli_a_missing_trace_file_is_named_with_exit_2(capsys, routing_cli, tmp_path):
    assert routing_cli(["--traces-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: argument --trace: trace 'mooncake' not found at ")


def test_cli_schedule_policy_and_its_chunk_size(capsys, routing_cli):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = ["routing", "--schedule-policy", "shortest-prefill-first", "--chunked-prefill-size", "8192"]
    settings = settings_from_args(parser.parse_args(args))
    assert settings.schedule_policy == "shortest-prefill-first" and settings.chunked_prefill_tokens == 8192
    engine = bench_app_config(settings, "headroom").pools[0].engine
    assert engine.schedule_policy == "shortest-prefill-first" and engine.chunked_prefill_tokens == 8192
    assert settings_from_args(parser.parse_args(["routing", "--chunked-prefill-size", "0"])).chunked_prefill_tokens is None
    assert routing_cli(["--schedule-policy", "shortest-prefill-first"]) == 2
    assert capsys.readouterr().err.startswith(
        "error: argument --chunked-prefill-size: Value error, shortest-prefill-first works on chunked prefill"
    )


def test_cli_hicache_flags_reach_every_replicas_engine():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = ["routing", "--hicache-host-tokens", "946020", "--hicache-write-policy", "write_through"]
    settings = settings_from_args(parser.parse_args(args))
    engine = bench_app_config(settings, "cache_aware").pools[0].engine
    assert engine.hicache_host_tokens == 946_020 and engine.hicache_write_policy == "write_through"
    plain = bench_app_config(settings_from_args(parser.parse_args(["routing"])), "headroom").pools[0].engine
    assert plain.hicache_host_tokens == 0 and plain.hicache_write_policy == "write_back"


def test_cli_eviction_policy_reaches_every_routers_replicas():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    settings = settings_from_args(parser.parse_args(["routing", "--radix-eviction-policy", "slru"]))
    for policy in ("pow2", "cache_aware", "headroom"):
        assert bench_app_config(settings, policy).pools[0].engine.radix_eviction_policy == "slru"
    plain = settings_from_args(parser.parse_args(["routing"]))
    assert bench_app_config(plain, "headroom").pools[0].engine.radix_eviction_policy == "lru"


def test_probe_counts_are_taken_off_but_peaks_kept():
    before = [counters("a", 0, 2, 0, 0.01)]
    after = [counters("a", 512, 1538, 1, 0.5)]
    (entry,) = subtract(after, before)
    assert entry["counters"]["num_prefill_tokens"] == 1536 and entry["counters"]["num_finished"] == 0
    assert entry["counters"]["peak_kv_utilization"] == 0.5


def test_cli_presets_and_overrides():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["routing", "--trace", "tau-bench", "--replicas", "3", "--max-tokens-cap", "0"])
    settings = settings_from_args(args)
    assert settings.num_replicas == 3 and settings.max_tokens_cap is None
    assert settings.session_rate_per_s == 2.0  # the tau-bench preset
    defaults = settings_from_args(parser.parse_args(["routing", "--routers", "pow2,headroom"]))
    assert defaults.routers == ["pow2", "headroom"] and defaults.max_tokens_cap == 128


def test_rule_outside_replica_per_replay_and_printed():
    # replay 0: TTFTs 0.1 / 0.2 with the replica's share 0.09 / 0.15 -> outside 10 / 50 ms;
    # replay 1: no Server-Timing -> no outside times, and no line
    records = [record(0, 0.1, 1.0, 10, 0), record(1, 0.2, 2.0, 10, 0), record(2, 0.3, 3.0, 10, 0)]
    records[0].server_replica_s, records[1].server_replica_s = 0.09, 0.15
    records[2].repetition = 1
    f = router_figures("headroom", "ours", records, [], 0.5)
    first, second = f.outside_replica_by_replay
    assert first.num_requests == 2 and first.max_s == pytest.approx(0.05) and second.num_requests == 0
    table = format_table({"headroom": f}, [])
    assert "headroom     replay 1: TTFT outside the replica" in table and "replay 2:" not in table


def test_rule_app_paces_every_routers_replicas_at_the_profiles_prefill_rate_and_attention_cost():
    assert bench_pacing(RoutingBenchSettings()) is None  # off by default
    settings = RoutingBenchSettings(prefill_pacing=PrefillPacingConfig(min_uncached_tokens=80_000))
    # h200-qwen3.8-27b-attention: 0.1 ms a token -> 10,000 tokens/s, 7.09e-7 ms a pair
    pacing = bench_pacing(settings)
    assert pacing is not None and pacing.min_uncached_tokens == 80_000
    assert (pacing.prefill_tokens_per_s, pacing.attention_ms_per_pair) == (pytest.approx(10_000.0), 7.09e-7)
    linear = bench_pacing(RoutingBenchSettings(profile="h200-qwen3.8-27b", prefill_pacing=settings.prefill_pacing))
    assert linear is not None and linear.attention_ms_per_pair == 0.0
    for policy in ("pow2", "cache_aware", "headroom"):  # the same pacing on every router's replicas
        assert bench_app_config(settings, policy).pools[0].engine.prefill_pacing == pacing
