"""A tiny `ray-dspine bench routing` run: real Ray Serve, 3 simulated replicas, every router, JSON out.

Runs the CLI in its own process (it starts and stops its own local Ray cluster). Skipped when the
Mooncake trace is not next to the repository.
"""

import json
import subprocess
import sys

import pytest

from dspine_lab.bench.routing_results import Goal, RouterFigures
from ray_dspine.bench.traces.loader import NAMED_TRACES, default_traces_dir

pytestmark = pytest.mark.serve

ROUTERS = ["pow2", "cache_aware", "headroom"]


def test_tiny_routing_bench_reports_every_field_for_every_router():
    if not (default_traces_dir() / NAMED_TRACES["mooncake"]).is_file():
        pytest.skip("the Mooncake trace is not present")
    # First 60 trace seconds, 5 % of the sessions, 3 replicas: a few requests per router, replayed twice.
    # Every router's replicas pace prompts from 4,096 uncached tokens (most of these), so pacing runs through Ray.
    command = [
        sys.executable, "-m", "ray_dspine.cli", "bench", "routing", "--trace", "mooncake", "--replicas", "3",
        "--window-s", "60", "--session-fraction", "0.05", "--repeats", "2", "--tail", "2", "--json",
        "--prefill-pacing-tokens", "4096", "--prefill-pacing-piece-tokens", "2048",
    ]  # fmt: skip
    # it took 196.8 s in one suite run on a 2-core AVX2 machine; the bound is there to stop a hang, not to time it
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)  # --json: stdout holds the JSON document only
    assert result["simulated"] is True
    assert result["settings"]["num_replicas"] == 3 and result["settings"]["rationale"]
    assert result["slice"]["num_requests"] > 0
    assert list(result["routers"]) == ROUTERS
    for name, figures in result["routers"].items():
        assert set(figures) == set(RouterFigures.model_fields), name
        assert figures["num_ok"] == figures["num_requests"] == 2 * result["slice"]["num_requests"], figures["errors"]
        assert len(figures["replicas"]) == 2 * 3  # each replay deploys 3 fresh replicas
        assert figures["num_replays"] == 2 and len(figures["ttft_p99_s_by_replay"]) == 2
        for key in ("ttft_p50_s", "ttft_p99_s", "e2e_p99_s", "prefix_hit_rate"):
            assert figures[key] is not None, (name, key)
    assert result["routers"]["headroom"]["num_retractions"] == 0
    # replicas merge chunks over 50 ms (Ray Serve LLM's default); every part of the serving path spent CPU
    assert result["settings"]["stream_batch_interval_ms"] == 50.0
    for name, figures in result["routers"].items():
        assert len(figures["serving_cpu_by_replay"]) == 2, name
        for cpu in figures["serving_cpu_by_replay"]:
            assert all(cpu[k] > 0 for k in ("client_s", "proxy_s", "ingress_s", "replicas_s")), (name, cpu)
            parts = cpu["client_s"] + cpu["proxy_s"] + cpu["ingress_s"] + cpu["replicas_s"]
            assert cpu["total_s"] == pytest.approx(parts)
    # Pacing is one setting for every router's replicas: each router's replicas pace (ours' router permits
    # the first long prompt of each fresh pool, routing/pacing_permit.py: 2 over 2 replays); the engine
    # counters leave the pieces out, so they agree with the answers
    assert result["settings"]["prefill_pacing"]["min_uncached_tokens"] == 4096
    assert all(result["routers"][name]["num_paced"] > 0 for name in ROUTERS)
    assert result["routers"]["headroom"]["num_paced"] == 2
    for name, figures in result["routers"].items():
        assert figures["prefix_hit_rate"] == pytest.approx(figures["prefix_hit_rate_usage"]), name
    names = {Goal.model_validate(g).name for g in result["goals"]}
    assert names == {"ttft_p99_reduction_vs_pow2", "ttft_p99_reduction_vs_cache_aware",
                     "prefix_hit_rate_minus_cache_aware", "retractions"}  # fmt: skip
    assert set(result["ttft_p99_reduction_ceiling"]) == {"pow2", "cache_aware"}
    # Repeat i of ours pairs with repeat i of each baseline: two pairs per paired goal.
    paired = {g["name"]: g for g in result["paired_goals"]}
    assert set(paired) == {"ttft_p99_reduction_vs_pow2", "ttft_p99_reduction_vs_cache_aware",
                           "prefix_hit_points_vs_cache_aware"}  # fmt: skip
    ours, ca = result["routers"]["headroom"], result["routers"]["cache_aware"]
    cuts = [1 - o / c for o, c in zip(ours["ttft_p99_s_by_replay"], ca["ttft_p99_s_by_replay"])]
    assert paired["ttft_p99_reduction_vs_cache_aware"]["per_pair"] == pytest.approx(cuts)
    assert all(g["num_pairs"] == 2 for g in paired.values())
    # --tail 2: each replay's two slowest requests, on the replicas that served them, with the replay's p99
    # in simulated seconds (wall seconds / engine_time_scale 0.5)
    assert list(result["slowest"]) == ROUTERS
    for name, replays in result["slowest"].items():
        assert [replay["repeat"] for replay in replays] == [0, 1], name
        for replay, p99_wall in zip(replays, result["routers"][name]["ttft_p99_s_by_replay"]):
            assert replay["num_requests"] == result["slice"]["num_requests"]
            assert replay["ttft_p99_sim_s"] == pytest.approx(p99_wall / 0.5)
            assert [row["rank"] for row in replay["slowest"]] == [1, 2]
            assert all(isinstance(row["replica"], str) and row["replica"] for row in replay["slowest"])
    progress = [line.removeprefix("SIMULATED ") for line in done.stderr.splitlines() if line.startswith("SIMULATED [")]
    # one progress line per replay, interleaved: pow2, cache_aware, headroom, pow2, ...
    assert [line.split("] ")[1].split(":")[0] for line in progress] == ROUTERS * 2
