"""Our load reader (engines/sglang/load.py) reads what SGLang 0.5.23's own code emits for /v1/loads and /metrics.

The bodies come from SGLang itself (sglang_outputs.py, run once as a child interpreter): the /v1/loads JSON of
its route over LoadSnapshot structs, and the Prometheus text of its SchedulerMetricsCollector after `log_stats`.
Pool states, two DP ranks (rank 0 with two TP ranks), and the values our reader must derive, worked out by hand:

  /v1/loads   rank 0: 3 running, 1 waiting, 1,200 KV tokens used of 50,000, max running 36
              rank 1: 2 running, 0 waiting,   800 KV tokens used of 50,000, max running 36
  /metrics    rank 0 TP 0: kv available 48,000, evictable 500, mamba available 30, evictable 5, used 3, usage 0.25
              rank 0 TP 1: kv available 47,000 (the rest as TP 0): the largest over a rank's TP ranks counts
              rank 1 TP 0: kv available 49,000, evictable 200, mamba available 20, evictable 3, used 2, usage 0.5
  plan        3 state slots per request, 72 max running, 90,000 KV tokens (pinned, not the planner's arithmetic)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ray_dspine.capacity import CapacityConfig, DraftConfig, plan_capacity, resolve_profile
from ray_dspine.engines.sglang.load import GAUGES, LOAD_KEYS, LoadInputs, build_snapshot, parse_gauges

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parent / "sglang_outputs.py"

LABELS = {"model_name": "qwen3.8-27b", "engine_type": "unified", "pp_rank": 0, "moe_ep_rank": 0}
RANK0 = {"num_running_reqs": 3, "num_queue_reqs": 1, "kv_available_tokens": 48_000, "kv_evictable_tokens": 500,
         "kv_used_tokens": 1_200, "mamba_available_tokens": 30, "mamba_evictable_tokens": 5, "mamba_used_tokens": 3,
         "mamba_usage": 0.25}  # fmt: skip
SPEC = {
    "argv": ["--model-path", "qwen3.8-27b", "--dp-size", "2"],
    "include": "core,memory,spec",
    "loads": [
        {"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 1, "num_used_tokens": 1_200,
         "num_total_tokens": 1_500, "max_total_num_tokens": 50_000, "max_running_requests": 36, "token_usage": 0.024,
         "memory": {"weight_gb": 50.1, "kv_cache_gb": 60.0, "graph_gb": 2.5, "token_capacity": 50_000},
         "speculative": {"accept_length": 2.5, "accept_rate": 0.1}},
        {"dp_rank": 1, "num_running_reqs": 2, "num_waiting_reqs": 0, "num_used_tokens": 800, "num_total_tokens": 800,
         "max_total_num_tokens": 50_000, "max_running_requests": 36, "token_usage": 0.016},
    ],
    "stats": [
        {"labels": {**LABELS, "tp_rank": 0, "dp_rank": 0}, "fields": RANK0},
        {"labels": {**LABELS, "tp_rank": 1, "dp_rank": 0}, "fields": {**RANK0, "kv_available_tokens": 47_000}},
        {"labels": {**LABELS, "tp_rank": 0, "dp_rank": 1},
         "fields": {"num_running_reqs": 2, "num_queue_reqs": 0, "kv_available_tokens": 49_000,
                    "kv_evictable_tokens": 200, "kv_used_tokens": 800, "mamba_available_tokens": 20,
                    "mamba_evictable_tokens": 3, "mamba_used_tokens": 2, "mamba_usage": 0.5}},
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def sglang_outputs() -> dict:
    pytest.importorskip("sglang")
    done = subprocess.run([sys.executable, str(SCRIPT)], input=json.dumps(SPEC), capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def plan():
    draft = DraftConfig(name="DSpine", draft_params_b=2.03, draft_num_layers=5, speculative_num_draft_tokens=16,
                        draft_window_tokens=8192)  # fmt: skip
    config = CapacityConfig(gpu="H200", mem_fraction_static=0.85, draft=draft, mamba_strategy="replay_ssm")
    computed = plan_capacity(config, resolve_profile(config))
    return computed.model_copy(update={"state_slots_per_request": 3, "max_running_requests": 72,
                                       "free_kv_tokens": 90_000, "draft_vram_gb": 9.5})  # fmt: skip


def test_every_gauge_we_read_is_a_gauge_sglangs_collector_declares(sglang_outputs):
    declared = sglang_outputs["declared"]
    assert {name: declared.get(name) for name in GAUGES} == {name: "gauge" for name in GAUGES}


def mentioned_names() -> set[str]:
    """Every `sglang:<name>` our code, dashboards and docs mention."""
    mentioned = set()
    for folder in ("ray_dspine", "observability", "docs"):
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".json", ".md", ".yaml", ".yml"}:
                mentioned |= set(re.findall(r"sglang:[a-z_]+", path.read_text(encoding="utf-8", errors="ignore")))
    return mentioned


def test_every_sglang_metric_our_code_and_docs_name_is_declared(sglang_outputs):
    mentioned = mentioned_names()
    assert set(GAUGES) | {"sglang:full_token_usage", "sglang:spec_accept_length"} <= mentioned
    assert mentioned - set(sglang_outputs["declared"]) == set()


def test_v1_loads_body_from_sglangs_route_has_the_keys_we_read(sglang_outputs):
    body = sglang_outputs["loads_body"]
    assert (body["version"], [entry["dp_rank"] for entry in body["loads"]]) == ("0.5.23", [0, 1])
    for entry in body["loads"]:
        assert set(LOAD_KEYS) <= set(entry)
    assert body["loads"][0]["speculative"] == {"accept_length": 2.5, "accept_rate": 0.1}
    assert "speculative" not in body["loads"][1]  # a section SGLang leaves out when the rank has none


def test_sglangs_gauges_parse_to_sums_over_dp_of_max_over_tp(sglang_outputs):
    gauges = parse_gauges(sglang_outputs["metrics_text"])
    assert gauges == {
        "sglang:num_running_reqs": 5.0, "sglang:num_queue_reqs": 1.0,  # 3 + 2, 1 + 0
        "sglang:kv_available_tokens": 97_000.0,  # max(48,000, 47,000) + 49,000
        "sglang:kv_evictable_tokens": 700.0, "sglang:mamba_available_tokens": 50.0,
        "sglang:mamba_evictable_tokens": 8.0, "sglang:mamba_used_tokens": 5.0,
        "sglang:mamba_usage": 0.375,  # a share: the mean over DP ranks, (0.25 + 0.5) / 2
        "sglang:full_token_usage": 0.0, "sglang:spec_accept_length": 0.0,  # log_stats' defaults: not set here
    }  # fmt: skip  (max_total_num_tokens is emitted once at start-up, not by log_stats)


def test_snapshot_from_sglangs_loads_alone(sglang_outputs, plan):
    snap = build_snapshot(LoadInputs(loads=sglang_outputs["loads_body"]), plan, healthy=True, drafter_active=True,
                          accept_ema=2.4)  # fmt: skip
    # total 50,000 + 50,000; free = 100,000 - (1,200 + 800); N = 36 + 36 = 72; left = 72 - 5 = 67 -> 67 * 3
    assert (snap.num_running, snap.num_queued, snap.total_kv_tokens, snap.free_kv_tokens) == (5, 1, 100_000, 98_000)
    assert (snap.total_state_slots, snap.free_state_slots, snap.evictable_kv_tokens) == (216, 201, None)
    assert (snap.accept_length_ema, snap.draft_vram_gb, snap.drafter_active) == (2.4, 9.5, True)


def test_snapshot_from_sglangs_loads_and_gauges(sglang_outputs, plan):
    inputs = LoadInputs(loads=sglang_outputs["loads_body"], gauges=parse_gauges(sglang_outputs["metrics_text"]))
    snap = build_snapshot(inputs, plan, healthy=True, drafter_active=False, accept_ema=2.4)
    # free KV = 97,000 available + 700 evictable; Mamba pool free = 50 + 8 = 58 < 67 left -> 58 * 3 = 174
    assert (snap.num_running, snap.total_kv_tokens, snap.free_kv_tokens, snap.evictable_kv_tokens) == (
        5, 100_000, 97_700, 700)
    assert (snap.total_state_slots, snap.free_state_slots) == (216, 174)
    assert (snap.accept_length_ema, snap.draft_vram_gb) == (1.0, 0.0)  # the drafter is off


def test_snapshot_from_sglangs_gauges_alone(sglang_outputs, plan):
    inputs = LoadInputs(gauges=parse_gauges(sglang_outputs["metrics_text"]))
    snap = build_snapshot(inputs, plan, healthy=True, drafter_active=True, accept_ema=2.0)
    # no /v1/loads: total KV = the plan's 90,000 (no max_total_num_tokens sample), free 97,700 clipped to it;
    # N = the plan's 72, left = min(72 - 5, 58) = 58
    assert (snap.num_running, snap.num_queued, snap.total_kv_tokens, snap.free_kv_tokens) == (5, 1, 90_000, 90_000)
    assert (snap.free_state_slots, snap.evictable_kv_tokens) == (174, 700)
