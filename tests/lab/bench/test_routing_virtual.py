"""`bench routing --virtual`: the replay rules on hand-built requests, and the CLI on a tiny slice."""

import argparse
import json

import pytest

from dspine_lab.bench.routing_bench import register, settings_from_args
from ray_dspine.engines.prefill_pacing_config import PrefillPacingConfig
from dspine_lab.bench.routing_virtual import _Replay, _turns, replay_virtual
from dspine_lab.bench.routing_workload import (
    RoutingBenchSettings,
    bench_app_config,
    ideal_hit_tokens,
    ttft_floors_by_request,
)
from ray_dspine.bench.traces.loader import NAMED_TRACES, default_traces_dir
from ray_dspine.bench.traces.model import TraceMessage, TraceRequest

# the linear H200 profile (every prompt token priced alike) keeps the hand arithmetic short
SETTINGS = RoutingBenchSettings(num_replicas=2, profile="h200-qwen3.8-27b")


def trace_request(request_id: str, session: str, arrival_s: float, text: str) -> TraceRequest:
    return TraceRequest(
        request_id=request_id, session_id=session, turn_index=0, arrival_s=arrival_s, workload_class="chat",
        messages=[TraceMessage(role="user", content=text)], prompt_tokens=len(text) // 4,
        recorded_prompt_tokens=len(text) // 4, max_tokens=16, source="test",
    )  # fmt: skip


def two_requests() -> list[TraceRequest]:
    # canonical texts of 4,104 and 6,152 characters -> 1,027 and 1,539 tokens; blocks of 2,048 characters:
    # the second shares the first's two full blocks (1,024 tokens) and arrives long after the first ended
    first = "a" * 4096
    return [trace_request("r0", "s0", 0.0, first), trace_request("r1", "s1", 10.0, first + "b" * 2048)]


def test_rule_ours_keeps_both_requests_at_their_floor_and_hits_the_shared_prefix():
    requests = two_requests()
    floors = ttft_floors_by_request(requests, SETTINGS)
    f = replay_virtual(requests, SETTINGS, "headroom", engine_seed=0, floors_sim_s=floors)
    # floors: 26.47 + 0.1 * 1027 = 129.17 ms; the second on the replica holding the two blocks:
    # 26.47 + 0.1 * (1539 - 1024) = 77.97 ms. Nothing queues, so each TTFT is its floor.
    assert floors == pytest.approx({"r0": 0.12917, "r1": 0.07797})
    assert f.ttft_excess_p99_sim_s == pytest.approx(0.0, abs=1e-9)
    # p99 of (0.07797, 0.12917), linear rule: 0.07797 + 0.99 * 0.0512 = 0.128658
    assert f.ttft_p99_sim_s == pytest.approx(0.128658)
    # hits 1,024 tokens of 1,024 + 1,027 + 515 prefilled: 0.39906; both on one replica
    assert f.prefix_hit_rate == pytest.approx(1024 / 2566)
    assert sorted(f.requests_per_replica) == [0, 2] and f.num_retractions == 0
    assert f.prefix_hit_loss is None  # no ideal cache given
    # two first turns; the second cached all 1,024 tokens the ideal cache holds for it: nothing lost
    ideal = ideal_hit_tokens(requests)
    assert ideal == {"r0": 0, "r1": 1024}
    loss = replay_virtual(requests, SETTINGS, "headroom", 0, floors, ideal_hit_tokens=ideal).prefix_hit_loss
    assert loss is not None and loss.total_points == 0.0 and loss.nowhere_points == 0.0
    assert (loss.num_first_turns, loss.num_stayed, loss.num_moved) == (2, 0, 0)


def test_rule_held_is_what_any_core_cached_for_the_request_when_it_was_placed():
    # the same two prompts sent together: when r1 is placed, r0 is placed but not yet admitted, so no
    # core holds r1's 1,024 shared tokens (held 0). Ours spreads the two over the idle replicas and r1
    # hits nothing: it loses the ideal 1,024 tokens, all of them held nowhere: 100 * 1024 / 2566 points.
    # cache_aware sends r1 after r0 (its prefix match), r0 is admitted first and r1 hits all 1,024.
    first = "a" * 4096
    requests = [trace_request("r0", "s0", 0.0, first), trace_request("r1", "s1", 0.0, first + "b" * 2048)]
    floors = ttft_floors_by_request(requests, SETTINGS)
    ideal = ideal_hit_tokens(requests)
    ours = replay_virtual(requests, SETTINGS, "headroom", 0, floors, ideal_hit_tokens=ideal).prefix_hit_loss
    assert ours is not None
    assert ours.first_turn_points == pytest.approx(100 * 1024 / 2566)
    assert ours.nowhere_points == pytest.approx(100 * 1024 / 2566)
    baseline = replay_virtual(requests, SETTINGS, "cache_aware", 0, floors, ideal_hit_tokens=ideal).prefix_hit_loss
    assert baseline is not None and baseline.total_points == 0.0 and baseline.nowhere_points == 0.0


def test_rule_the_order_bound_queues_the_replays_arrivals_on_one_pool_with_the_ideal_cache():
    # three cold 1,027-token prompts at t = 0 on two replicas: floors 129.17 ms each. Bound: two start at
    # once, the third when the first replica frees: TTFTs 0.12917, 0.12917, 0.25834 ->
    # p99 0.12917 + 0.98 * 0.12917 = 0.2557566. Ours places them so: its p99 is the bound.
    requests = [trace_request(f"r{i}", f"s{i}", 0.0, letter * 4096) for i, letter in enumerate("acd")]
    floors = ttft_floors_by_request(requests, SETTINGS)
    assert floors == pytest.approx({"r0": 0.12917, "r1": 0.12917, "r2": 0.12917})
    f = replay_virtual(requests, SETTINGS, "headroom", engine_seed=0, floors_sim_s=floors)
    assert f.ttft_order_bound_p99_sim_s == pytest.approx(0.2557566)
    assert f.ttft_p99_sim_s == pytest.approx(0.2557566)
    assert replay_virtual(requests, SETTINGS, "headroom", engine_seed=0, floors_sim_s={}).ttft_order_bound_p99_sim_s is None


def test_rule_a_later_turn_is_sent_when_the_earlier_one_ended():
    first = trace_request("r0", "s0", 0.0, "a" * 4096)
    second = trace_request("r1", "s0", 0.001, "a" * 4096 + "b" * 2048).model_copy(update={"turn_index": 1})
    f = replay_virtual([first, second], SETTINGS, "headroom", engine_seed=0, floors_sim_s={})
    # the second turn is sent only after the first ended, onto the replica holding its prefix: no queueing,
    # so its TTFT is its own prefill, 77.97 ms, and the first's is 129.17 ms
    assert f.ttft_p50_sim_s == pytest.approx((0.12917 + 0.07797) / 2)
    assert f.prefix_hit_rate == pytest.approx(1024 / 2566) and f.ttft_excess_p99_sim_s is None


def test_rule_same_seeds_same_figures():
    requests = two_requests() + [trace_request(f"x{i}", f"sx{i}", 0.01 * i, "c" * (3000 + i)) for i in range(6)]
    runs = [replay_virtual(requests, SETTINGS, "pow2", engine_seed=3, floors_sim_s={}) for _ in range(2)]
    assert runs[0] == runs[1]


def test_rule_a_hicache_store_is_shared_by_the_replicas_of_a_replay():
    # pow2 at engine seed 0 puts r0 and r1 on different replicas: r1 hits nothing on its own, but with a
    # store that r0's prefill wrote (write_through) it loads the 1,024 shared tokens: 1024 / 2566
    requests = two_requests()
    apart = replay_virtual(requests, SETTINGS, "pow2", engine_seed=0, floors_sim_s={})
    assert apart.requests_per_replica == [1, 1] and apart.prefix_hit_rate == 0.0
    stored = SETTINGS.model_copy(update={"hicache_store_tokens": 4096, "hicache_write_policy": "write_through"})
    shared = replay_virtual(requests, stored, "pow2", engine_seed=0, floors_sim_s={})
    assert shared.requests_per_replica == [1, 1] and shared.prefix_hit_rate == pytest.approx(1024 / 2566)
    first, second = _Replay(stored, "pow2", 0, None), _Replay(stored, "pow2", 0, None)
    stores = [core.prefix_cache.tiers.store for core in first.cores]
    assert stores[0] is stores[1] and stores[0].capacity_blocks == 4096 // 512
    assert second.cores[0].prefix_cache.tiers.store is not stores[0]  # a fresh store per replay


def test_rule_a_replica_counted_backlog_counts_the_host_tier_in_its_block_lru():
    settings = SETTINGS.model_copy(update={"backlog_source": "replica", "hicache_host_tokens": 51_200})
    replay = _Replay(settings, "headroom", 0, None)
    total = replay.cores[0].load().total_kv_tokens
    # (GPU KV + 51,200 host tokens) // 512-token blocks, set by the first report
    assert replay.backlogs[0].capacity_blocks == (total + 51_200) // 512
    assert replay.reports[0][0].host_kv_tokens == 51_200


def test_rule_every_replica_has_reported_before_the_first_arrival():
    settings = SETTINGS.model_copy(update={"num_replicas": 4})
    replay = _Replay(settings, "headroom", 0, None)
    # P = routing_stats_period_s / engine_time_scale; replica k reports at k * P / 4 + i * P, the
    # i = -1 report already in hand at t = 0: ages P, 3P/4, P/2, P/4, each of an idle replica
    period = settings.routing_stats_period_s / settings.engine_time_scale
    views = replay.views()
    assert [v.stats_age_s for v in views] == pytest.approx([period, 0.75 * period, 0.5 * period, 0.25 * period])
    assert all(v.reported and v.load.free_kv_tokens == v.load.total_kv_tokens > 0 for v in views)
    assert replay.next_report == pytest.approx([0.0, 0.25 * period, 0.5 * period, 0.75 * period])


@pytest.mark.parametrize(
    ("source", "while_prefilling", "after_first_token"),
    [
        ("engine", (1027, 10_000.0), (0, 10_000.0)),  # the core's own queue and rate (1 / 0.1 ms)
        ("replica", (1027, 10_000.0), (0, 10_000.0)),  # counted from the placement; the assumed rate
        ("none", (0, 0.0), (0, 0.0)),  # request counts only
    ],
)
def test_rule_the_backlog_the_router_is_told_comes_from_the_chosen_source(source, while_prefilling, after_first_token):
    settings = SETTINGS.model_copy(update={"backlog_source": source})
    replay = _Replay(settings, "headroom", 0, None)
    turn = _turns(two_requests(), settings)[0]  # 1,027 prompt tokens, nothing cached anywhere
    assert replay.place(turn)
    k = replay.placed_on[turn.index]
    load = replay.report(k)
    assert (load.pending_prefill_tokens, load.prefill_tokens_per_s) == while_prefilling
    if source == "engine":
        assert load.decode_step_ms > 0.0
    else:  # what SGLang does not report
        assert (load.queued_kv_tokens, load.decode_step_ms) == (0, 0.0)
    replay.now = 1.0  # its prefill (129.17 ms) is over
    for event in replay.cores[k].advance_to(replay.now):
        if event.kind == "first_token":
            replay.backlogs[k].first(event.request_id)
    load = replay.report(k)
    assert (load.pending_prefill_tokens, load.prefill_tokens_per_s) == after_first_token


def test_cli_backlog_needs_virtual(capsys):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["routing", "--backlog", "replica"])
    assert args.func(args) == 2
    assert capsys.readouterr().err.startswith("error: argument --backlog: the backlog's source is chosen in virtual")


def test_cli_virtual_runs_every_router_without_ray(capsys):
    if not (default_traces_dir() / NAMED_TRACES["mooncake"]).is_file():
        pytest.skip("the Mooncake trace is not present")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    argv = ["routing", "--virtual", "--window-s", "120", "--session-fraction", "0.05", "--engine-seeds", "0,1", "--json"]
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert result["virtual"] is True and result["engine_seeds"] == [0, 1]
    assert list(result["routers"]) == ["pow2", "cache_aware", "headroom"]
    assert all(len(runs) == 2 for runs in result["runs"].values())
    n = result["slice"]["num_requests"]
    assert all(run["num_requests"] == n for runs in result["runs"].values() for run in runs)
    assert {g["name"] for g in result["goals"]} >= {"ttft_p99_reduction_vs_cache_aware", "retractions"}
    assert out.err.count("[seed ") == 6  # one progress line per replay


def test_cli_bad_engine_seeds_are_named(capsys):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["routing", "--virtual", "--engine-seeds", "x"])
    assert args.func(args) == 2
    assert capsys.readouterr().err.startswith("error: argument --engine-seeds: comma-separated seeds >= 0")


def test_cli_virtual_pairs_runs_over_slices_and_engine_seeds(capsys, tmp_path):
    if not (default_traces_dir() / NAMED_TRACES["mooncake"]).is_file():
        pytest.skip("the Mooncake trace is not present")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    png = tmp_path / "paired.png"
    argv = ["routing", "--virtual", "--window-s", "120", "--session-fraction", "0.05", "--slices", "0,1",
            "--engine-seeds", "0", "--plot", str(png), "--json"]  # fmt: skip
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert result["slice_seeds"] == [0, 1] and [s["seed"] for s in result["slices"]] == [0, 1]
    for runs in result["runs"].values():  # slices outermost, so run i of every router is the same replay
        assert [(r["slice_seed"], r["engine_seed"]) for r in runs] == [(0, 0), (1, 0)]
        assert [r["num_requests"] for r in runs] == [s["num_requests"] for s in result["slices"]]
    paired = {g["name"]: g for g in result["paired_goals"]}
    assert set(paired) == {"ttft_p99_reduction_vs_pow2", "ttft_p99_reduction_vs_cache_aware",
                           "prefix_hit_points_vs_cache_aware"}  # fmt: skip
    ours, ca = result["runs"]["headroom"], result["runs"]["cache_aware"]
    expected = [100 * (o["prefix_hit_rate"] - c["prefix_hit_rate"]) for o, c in zip(ours, ca)]
    assert paired["prefix_hit_points_vs_cache_aware"]["per_pair"] == pytest.approx(expected)
    assert all(g["num_pairs"] == 2 and g["ci95_low"] is not None for g in paired.values())
    assert out.err.count("[slice 0] [seed 0]") == 3 and out.err.count("[slice 1] [seed 0]") == 3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {png}" in out.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--slices", "0,1"], "argument --slices: several slices are replayed in virtual time; add --virtual"),
        (["--virtual", "--slices", "0,1", "--sweep-tolerance", "4,6"], "argument --slices: a tolerance sweep"),
        (["--virtual", "--slices", "1,1"], "argument --slices: a seed is listed twice"),
        (["--virtual", "--slices", "-1"], "argument --slices: comma-separated seeds >= 0"),
        (["--virtual", "--engine-seeds", "0,0"], "argument --engine-seeds: a seed is listed twice"),
    ],
)
def test_cli_bad_slices_are_named(capsys, argv, message):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["routing", *argv])
    assert args.func(args) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")


def test_table_counts_the_replays_whose_ceiling_reaches_the_target():
    from dspine_lab.bench.routing_virtual_report import format_virtual_table

    result = {
        "routers": {}, "settings": {"seed": 0}, "engine_seeds": [0, 1, 2], "goals": [],
        "ttft_p99_reduction_ceiling": {"cache_aware": 0.15},
        # per replay 1 - floor / cache_aware's p99: 0.10 and 0.20 (one replay had no p99)
        "ttft_p99_reduction_ceiling_by_run": {"cache_aware": [0.10, 0.20, None]},
    }  # fmt: skip
    assert format_virtual_table(result).splitlines()[-1] == (
        "ceiling vs cache_aware by replay: 0.100 to 0.200; a router at the floor reaches the 15% target in 1 of 2 replays"
    )
    # the order bound against cache_aware: mean of 0.12 and 0.16 = 0.14; one of the two reaches 15%
    result["ttft_p99_reduction_order_bound_by_run"] = {"cache_aware": [0.12, None, 0.16]}
    assert format_virtual_table(result).splitlines()[-1] == (
        "order-preserving bound vs cache_aware: mean cut 0.140, 0.120 to 0.160 by replay; a router that starts "
        "requests in their order of arrival reaches the 15% target in at most 1 of 2 replays, even with an ideal "
        "cache (on ours' arrivals)"
    )


def test_cli_virtual_ceiling_by_replay_uses_each_replays_own_slice_floor(capsys, routing_cli, mooncake_trace):
    argv = ["--virtual", "--window-s", "120", "--session-fraction", "0.05", "--slices", "0,1", "--engine-seeds", "0",
            "--routers", "cache_aware,headroom", "--json"]  # fmt: skip
    assert routing_cli(argv) == 0
    result = json.loads(capsys.readouterr().out)
    floors = [s["ttft_floor_p99_sim_s"] for s in result["slices"]]
    p99s = [run["ttft_p99_sim_s"] for run in result["runs"]["cache_aware"]]
    expected = [1 - floor / p99 for floor, p99 in zip(floors, p99s)]
    assert result["ttft_p99_reduction_ceiling_by_run"] == {"cache_aware": pytest.approx(expected)}
    # the order bound: ours' bound in each run against cache_aware's p99 in the same run
    bounds = [run["ttft_order_bound_p99_sim_s"] for run in result["runs"]["headroom"]]
    expected = [1 - bound / p99 for bound, p99 in zip(bounds, p99s)]
    assert result["ttft_p99_reduction_order_bound_by_run"] == {"cache_aware": pytest.approx(expected)}
    assert all(floor <= bound + 1e-9 for floor, bound in zip(floors, bounds))


def test_rule_pacing_lets_a_request_arriving_mid_prompt_in_between_the_pieces():
    # one replica; r0: an 8,192-character message -> 2,051 tokens, four full blocks of 512; r1 (another
    # session) 103 tokens, arriving at 0.1 s. Pacing from 1,000 uncached tokens in pieces of 512:
    # pieces 512, 1,024, 1,536 (2,051 - 2,048 < 256 ends them); the request itself prefills the last 515.
    # Each pass costs 26.47 ms + 0.1 ms per uncached token: a piece 77.67 ms, r0's last part 77.97 ms,
    # r1 36.77 ms.
    #   unpaced: r0 prefills 0-231.57 ms; r1 waits for it: 231.57-268.34 -> TTFTs 231.57 and 168.34 ms
    #   paced:   pieces 0-77.67, 77.67-155.34; r1 (queued at 100 ms) goes before the third piece:
    #            155.34-192.11; third piece 192.11-269.78. The replica sends r0 itself when that piece
    #            ends, by when the engine has begun r1's next verify step: 26.47 + 0.5 * 1 + 1.365e-5 *
    #            104 context + 9.80 draft + 0.0515 * 15 = 37.544 ms (the H200 profile), so r0 prefills
    #            307.32-385.29 -> TTFTs 385.29 and 92.11 ms
    requests = [trace_request("r0", "s0", 0.0, "a" * 8192), trace_request("r1", "s1", 0.1, "c" * 400)]
    one = RoutingBenchSettings(num_replicas=1, profile="h200-qwen3.8-27b")
    paced = one.model_copy(
        update={"prefill_pacing": PrefillPacingConfig(min_uncached_tokens=1_000, piece_tokens=512)}
    )
    floors = ttft_floors_by_request(requests, one)

    def ttfts(settings, policy="headroom"):
        f = replay_virtual(requests, settings, policy, engine_seed=0, floors_sim_s=floors, tail=2)
        return f, {row.request_id: row.ttft_s for row in f.slowest}

    plain, plain_ttft = ttfts(one)
    assert plain_ttft == pytest.approx({"r0": 0.23157, "r1": 0.16834})
    assert plain.num_paced == 0
    f, paced_ttft = ttfts(paced)
    assert paced_ttft == pytest.approx({"r0": 0.385294, "r1": 0.09211}, abs=2e-6)
    assert f.num_paced == 1
    # the hit rate counts r0's pieces as prefill and nothing they cached for r0 as a hit:
    # no prompt here shares a block with another, so nothing hits
    assert f.prefix_hit_rate == 0.0
    # pacing is one setting for every router's replicas: cache_aware's pace r0 the same way (one replica,
    # so the router's choice changes nothing)
    baseline, baseline_ttft = ttfts(paced, "cache_aware")
    assert baseline_ttft == pytest.approx(paced_ttft, abs=2e-6) and baseline.num_paced == 1


def test_cli_prefill_pacing_is_off_by_default_and_one_threshold_turns_it_on_for_every_router(capsys):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert settings_from_args(parser.parse_args(["routing"])).prefill_pacing is None
    settings = settings_from_args(parser.parse_args(["routing", "--prefill-pacing-tokens", "80000"]))
    assert settings.prefill_pacing.min_uncached_tokens == 80_000
    # the settings' pacing, timed by the bench profile (10,000 tokens/s, 7.09e-7 ms a pair), on every router
    expected = settings.prefill_pacing.model_copy(update={"prefill_tokens_per_s": 10_000.0, "attention_ms_per_pair": 7.09e-7})
    for policy in ("pow2", "cache_aware", "headroom"):
        assert bench_app_config(settings, policy).pools[0].engine.prefill_pacing == expected
    tuned = settings_from_args(
        parser.parse_args(["routing", "--prefill-pacing-tokens", "80000", "--prefill-pacing-yield", "0.25"])
    )
    assert (tuned.prefill_pacing.min_uncached_tokens, tuned.prefill_pacing.yield_fraction) == (80_000, 0.25)
    assert settings_from_args(parser.parse_args(["routing", "--prefill-pacing-tokens", "0"])).prefill_pacing is None
    args = parser.parse_args(["routing", "--prefill-pacing-yield", "0.5"])
    assert args.func(args) == 2
    assert "--prefill-pacing-tokens: paced prefill is off" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # one setting for every router: no per-router list
        parser.parse_args(["routing", "--prefill-pacing-routers", "headroom"])
    capsys.readouterr()
    args = parser.parse_args(["routing", "--virtual", "--prefill-pacing-tokens", "80000",
                              "--prefill-pacing-piece-tokens", "1000"])  # fmt: skip
    assert args.func(args) == 2
    assert "argument --prefill-pacing-piece-tokens: " in capsys.readouterr().err


def test_rule_figures_a_paced_request_with_a_cached_prefix_reports_that_prefix_once():
    # r1 shares r0's first two blocks (1,024 tokens) and has 4,096 more: paced from 1,000 uncached tokens
    # in 512-token pieces, its pieces hit those 1,024 tokens (and each other) again and again; the hit
    # rate must count them once, as on replicas that do not pace
    first = "a" * 4096
    requests = [trace_request("r0", "s0", 0.0, first), trace_request("r1", "s1", 10.0, first + "b" * 16_384)]
    plain = RoutingBenchSettings(num_replicas=1, prefill_pacing=None, profile="h200-qwen3.8-27b")
    paced = plain.model_copy(
        update={"prefill_pacing": PrefillPacingConfig(min_uncached_tokens=1_000, piece_tokens=512)}
    )
    floors = ttft_floors_by_request(requests, plain)
    without = replay_virtual(requests, plain, "headroom", engine_seed=0, floors_sim_s=floors)
    with_pacing = replay_virtual(requests, paced, "headroom", engine_seed=0, floors_sim_s=floors)
    assert with_pacing.num_paced == 1 and without.num_paced == 0
    # 1,024 of 1,027 + 5,123 prompt tokens hit: 0.1665, paced or not
    assert without.prefix_hit_rate == pytest.approx(1_024 / (1_027 + 5_123))
    assert with_pacing.prefix_hit_rate == pytest.approx(without.prefix_hit_rate)
