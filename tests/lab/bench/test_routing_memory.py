"""`bench routing-memory` (dspine_lab/bench/routing_memory.py): the workload rule, the replay's figures on a
hand-worked replica, the paired intervals and the retraction goal's verdict."""

from __future__ import annotations

import argparse
import io
import math

import pytest

from dspine_lab.bench.routing_memory import (
    MemoryFigures,
    MemoryRequest,
    MemorySettings,
    format_paired,
    make_requests,
    paired,
    register,
    replay,
    retraction_goal,
    run,
)
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from tests.engines_simulated.test_sim_core import round_profile


def test_rule_request_sizes_and_shared_openings():
    settings = MemorySettings(
        window_s=200.0, arrival_rate_per_s=1.0, prompt_tokens_min=1024, prompt_tokens_max=4096,
        output_tokens_min=100, output_tokens_max=200, num_agents=2, agent_prefix_tokens=1024,
    )  # fmt: skip
    requests = make_requests(settings, seed=3, block_tokens=512)
    assert 150 <= len(requests) <= 250  # Poisson(200): within 3.5 standard deviations (14.1)
    assert all(0 <= r.arrival_s < 200.0 for r in requests)
    assert [r.arrival_s for r in requests] == sorted(r.arrival_s for r in requests)
    assert all(1024 <= r.prompt_tokens <= 4096 and 100 <= r.max_tokens <= 200 for r in requests)
    for r in requests:
        assert len(r.prefix_hashes) == r.prompt_tokens // 512  # one hash per full block
        assert r.prefix_hashes[:2] == (f"{r.session_id}:0", f"{r.session_id}:1")  # 1024 / 512 shared blocks
        assert all(h.startswith(f"s3r{r.index}:") for h in r.prefix_hashes[2:])  # the rest its own
    assert {r.session_id for r in requests} == {"agent0", "agent1"}
    assert make_requests(settings, seed=3, block_tokens=512) == requests  # same seed, same requests


def test_rule_figures_of_one_request_on_an_idle_round_replica():
    # round profile, no drafter: prefill 20 + 0.1 * 100 = 30 ms -> TTFT 0.030 s; decode steps over context
    # 101 and 102: 20 + 1 + 0.101 = 21.101 ms and 21.102 ms, the two ITL gaps; p99 of the two (numpy's
    # linear rule) = 21.101 + 0.99 * 0.001 ms; it ends at 0.030 + 0.042203 s, inside the 1 s window.
    engine = SimulatedEngineConfig(profile="round", workload="full", drafter="none", total_kv_tokens=1000)
    settings = MemorySettings(num_replicas=2, window_s=1.0)
    request = MemoryRequest(0, 0.0, 100, 3, (), "agent0")
    f = replay(settings, "pow2", 0, engine=engine, profile=round_profile(), requests=[request])
    assert f.ttft_p99_sim_s == pytest.approx(0.030)
    assert f.itl_p99_sim_s == pytest.approx(0.021101 + 0.99 * 0.000001)
    assert (f.num_completed, f.num_requests, f.num_retractions, f.num_recomputed_tokens) == (1, 1, 0, 0)
    assert sorted(f.requests_per_replica) == [0, 1]


def test_rule_a_retraction_shows_in_the_replay_figures():
    # test_sim_retraction.py's case on each of two replicas: four requests (100, 600) at t = 0 on 1,000-token
    # replicas at ratio 0.1. pow2 with two replicas: r0 to the first drawn, r1 to the other (fewer in flight),
    # r2 ties again (first drawn), r3 to the one with fewer: two per replica, so each replica admits its
    # second request at its first's prefill end, retracts it when both hold 401 tokens beyond their prompts,
    # and recomputes its 100 + 401 = 501 fill tokens once the first is done.
    engine = SimulatedEngineConfig(
        profile="round", workload="full", drafter="none", total_kv_tokens=1000, new_token_ratio_init=0.1
    )
    settings = MemorySettings(num_replicas=2, window_s=1000.0)
    requests = [MemoryRequest(i, 0.0, 100, 600, (), "agent0") for i in range(4)]
    f = replay(settings, "pow2", 0, engine=engine, profile=round_profile(), requests=requests)
    assert f.requests_per_replica == [2, 2] and f.num_completed == 4
    assert (f.num_retractions, f.num_recomputed_tokens, f.num_retracted_output_tokens) == (2, 1002, 802)


def _figures(router, seed, retractions, ttft):
    return MemoryFigures(
        router=router, seed=seed, num_requests=10, num_completed=8, ttft_p99_sim_s=ttft, itl_p99_sim_s=0.05,
        num_retractions=retractions, num_recomputed_tokens=100 * retractions, num_retracted_output_tokens=0,
        num_waited_for_memory=0, num_waited_for_state_slots=0, peak_kv_utilization=1.0, requests_per_replica=[5, 5],
    )  # fmt: skip


def test_rule_paired_differences_and_their_interval():
    runs = [
        _figures("pow2", 0, 4, 10.0), _figures("pow2", 1, 6, 12.0), _figures("pow2", 2, 5, 11.0),
        _figures("headroom", 0, 1, 9.0), _figures("headroom", 1, 2, 10.0), _figures("headroom", 2, 3, 11.0),
    ]  # fmt: skip
    by_name = {p.figure: p for p in paired(runs, "pow2")}
    # retractions: headroom - pow2 = -3, -4, -2: mean -3, s = 1, half = t(2) 4.303 * 1 / sqrt(3) = 2.484
    r = by_name["num_retractions"]
    assert r.per_seed == [-3.0, -4.0, -2.0] and r.mean == pytest.approx(-3.0)
    assert (r.ci95_low, r.ci95_high) == (pytest.approx(-3 - 4.303 / math.sqrt(3), abs=1e-3),
                                         pytest.approx(-3 + 4.303 / math.sqrt(3), abs=1e-3))  # fmt: skip
    assert by_name["num_recomputed_tokens"].mean == pytest.approx(-300.0)
    assert by_name["ttft_p99_sim_s"].per_seed == [-1.0, -2.0, 0.0]
    assert all(line.startswith("SIMULATED paired headroom - pow2 ") for line in format_paired(list(by_name.values())))


def test_rule_retraction_goal_verdicts():
    assert retraction_goal([_figures("headroom", s, 0, 1.0) for s in range(3)])[0] == "met"
    assert retraction_goal([_figures("headroom", s, c, 1.0) for s, c in enumerate((3, 4, 5))])[0] == "missed"
    # 0, 0, 6: mean 2, s = 3.46, half = 4.303 * 3.46 / sqrt(3) = 8.6: the interval spans 0
    assert retraction_goal([_figures("headroom", s, c, 1.0) for s, c in enumerate((0, 0, 6))])[0] == "undecided"


def test_every_printed_line_says_simulated():
    engine_settings = MemorySettings(
        num_replicas=2, window_s=60.0, arrival_rate_per_s=0.2, prompt_tokens_min=1024, prompt_tokens_max=2048,
        output_tokens_min=64, output_tokens_max=128,
    )  # fmt: skip
    out = io.StringIO()
    receipt = run(engine_settings, (0, 1), ("pow2", "cache_aware", "headroom"), out=out)
    lines = out.getvalue().splitlines()
    assert lines and all("SIMULATED" in line for line in lines)
    assert receipt["simulated"] is True and len(receipt["runs"]) == 6
    assert {p["baseline"] for p in receipt["paired"]} == {"pow2", "cache_aware"}


def test_command_is_registered():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["routing-memory", "--seeds", "7,8", "--rate", "0.5"])
    assert args.seeds == "7,8" and args.rate == 0.5 and callable(args.func)
