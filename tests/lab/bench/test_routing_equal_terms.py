"""`bench routing` compares routers on equal terms: identical replicas, verdicts from paired intervals only,
a held-out split no setting was chosen on, and SIMULATED on every line it prints."""

import json
from pathlib import Path
from typing import get_args

import pytest

from dspine_lab.bench.paired import paired_goals, verdict
from dspine_lab.bench.routing_bench import rationale, simulated_lines
from dspine_lab.bench.routing_virtual import _Replay
from dspine_lab.bench.routing_workload import (
    SPLITS,
    USED_ENGINE_SEEDS,
    USED_SLICES,
    RoutingBenchSettings,
    SliceKey,
    bench_app_config,
    pool_size,
    split_settings,
)
from ray_dspine.engines.prefill_pacing_config import PrefillPacingConfig
from ray_dspine.routing.config import PolicyName

RECEIPTS = Path(__file__).resolve().parents[3] / "docs" / "receipts" / "routing"
POLICIES = list(get_args(PolicyName))
PACED = RoutingBenchSettings(num_replicas=2, prefill_pacing=PrefillPacingConfig(min_uncached_tokens=80_000))


# --- identical replicas ---


def _replica_side(settings: RoutingBenchSettings, policy: str) -> dict:
    """The app for `policy` with the router's policy blanked: what its replicas run."""
    dump = bench_app_config(settings, policy).model_dump()
    dump["pools"][0]["deployment"]["router"]["policy"] = "same"
    return dump


@pytest.mark.parametrize("settings", [RoutingBenchSettings(num_replicas=2), PACED], ids=["default", "paced"])
def test_every_router_gets_the_same_replicas(settings):
    # Before, ours' replicas alone paced long prompts by default: headroom's app differed from the others'.
    apps = [_replica_side(settings, policy) for policy in POLICIES]
    assert all(app == apps[0] for app in apps[1:])
    pacing = {str(bench_app_config(settings, policy).pools[0].engine.prefill_pacing) for policy in POLICIES}
    assert len(pacing) == 1


def test_default_replicas_run_as_sglang_replicas_do_and_no_per_router_list_exists():
    assert RoutingBenchSettings().prefill_pacing is None
    assert "prefill_pacing_routers" not in RoutingBenchSettings.model_fields


@pytest.mark.parametrize("settings", [RoutingBenchSettings(num_replicas=2), PACED], ids=["default", "paced"])
def test_virtual_replay_gives_every_router_the_same_pacers(settings):
    replays = [_Replay(settings, policy, engine_seed=0, config=None) for policy in ("pow2", "cache_aware", "headroom")]
    configs = [None if r.pacers is None else [p.config for p in r.pacers] for r in replays]
    assert configs[0] == configs[1] == configs[2]
    assert (configs[0] is None) == (settings.prefill_pacing is None)


def test_pool_sizes_come_from_the_planner():
    # `ray-dspine plan clusters/sim.yaml`: 463,360 free KV tokens and 71 running requests per H200 replica
    kv_tokens, running = pool_size()
    assert (kv_tokens, running) == (463_360, 71)
    assert f"{kv_tokens:,} KV tokens and {running} running requests each" in rationale()


# --- verdicts from paired intervals ---


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (16.0, 20.0, "met"),  # the whole interval clears 15
        (10.0, 20.0, "undecided"),  # 15 lies inside it
        (5.0, 12.0, "missed"),  # the whole interval falls short of 15
        (None, None, "undecided"),  # one pair: no interval, no decision
    ],
)
def test_verdict_of_an_interval_against_target_15(low, high, expected):
    assert verdict(low, high, 15.0) == expected


def test_a_single_pair_is_undecided_even_far_above_its_target():
    # one pair cutting pow2's p99 by 90% (target 30%): a point estimate, no interval -> undecided
    (goal,) = paired_goals({"headroom": [1.0], "pow2": [10.0]}, {"headroom": [0.3], "pow2": [0.1]}, "headroom")
    assert goal.mean == pytest.approx(0.9) and goal.verdict == "undecided"


# --- data splits ---


def test_held_out_split_shares_no_slice_or_engine_seed_with_the_bench_split_or_the_old_receipts():
    bench, held_out = SPLITS["bench"], SPLITS["held-out"]
    assert not set(held_out.slices) & set(bench.slices)
    assert not set(held_out.slices) & USED_SLICES
    assert not set(held_out.engine_seeds) & (set(bench.engine_seeds) | USED_ENGINE_SEEDS)
    # its windows start where the bench slice's 1,200 s window ends, or later: no trace second is shared
    window = RoutingBenchSettings().window_s
    assert all(k.window_start_s >= b.window_start_s + window for k in held_out.slices for b in bench.slices)
    # distinct session seeds, so each slice is named by its seed in the replays' tags
    assert len({k.seed for k in held_out.slices}) == len(held_out.slices) == 6


def _receipt_slices(document: dict) -> set[SliceKey]:
    settings = document["settings"]
    seeds = document.get("slice_seeds") or [s["seed"] for s in document.get("slices", [])] or [settings["seed"]]
    return {SliceKey(window_start_s=settings["window_start_s"], seed=s) for s in seeds}


def test_old_receipts_used_only_the_slices_and_engine_seeds_listed_as_used():
    # Every Mooncake receipt written without a named split used window start 0 and seeds inside USED_*.
    checked = 0
    for path in sorted(RECEIPTS.glob("*.json")):
        document = json.loads(path.read_text())
        if "split" in document or document.get("settings", {}).get("trace") != "mooncake":
            continue
        assert _receipt_slices(document) <= USED_SLICES, path.name
        assert set(document.get("engine_seeds", [])) <= USED_ENGINE_SEEDS, path.name
        checked += 1
    assert checked >= 10


def test_split_settings_take_each_slices_window_and_seed():
    base = RoutingBenchSettings(num_replicas=2)
    slices = split_settings(base, SPLITS["held-out"])
    assert [(s.window_start_s, s.seed) for s in slices] == [
        (1200.0, 20), (1200.0, 21), (1200.0, 22), (2300.0, 23), (2300.0, 24), (2300.0, 25)
    ]  # fmt: skip
    assert all(s.model_copy(update={"window_start_s": 0.0, "seed": 0}) == base for s in slices)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--split", "held-out"], "argument --split: a split's slices are replayed in virtual time; add --virtual"),
        (["--virtual", "--split", "held-out", "--slices", "1"], "argument --split: the split names its slices and "
         "engine seeds; drop --slices"),  # fmt: skip
        (["--virtual", "--split", "bench", "--engine-seeds", "3"], "argument --split: the split names its slices "
         "and engine seeds; drop --engine-seeds"),  # fmt: skip
        (["--virtual", "--split", "held-out", "--seed", "3"], "argument --split: the split names"),
        (["--virtual", "--split", "held-out", "--window-s", "600"], "argument --split: the split names its "
         "slices and engine seeds; drop --window-s"),  # fmt: skip
        (["--virtual", "--split", "held-out", "--sweep-tolerance", "4,6"], "argument --split: settings are not "
         "chosen on a named split's replays"),  # fmt: skip
        (["--engine-seeds", "0,1"], "argument --engine-seeds: engine seeds are replayed in virtual time"),
    ],
)
def test_cli_split_conflicts_are_named(capsys, routing_cli, argv, message):
    assert routing_cli(argv) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")


# --- SIMULATED on every line ---


def test_every_printed_line_says_simulated():
    text = "router  TTFT p99\nheadroom  1.00\nSIMULATED paired x: met"
    assert simulated_lines(text).splitlines() == [
        "SIMULATED router  TTFT p99", "SIMULATED headroom  1.00", "SIMULATED paired x: met"
    ]  # fmt: skip


def test_cli_virtual_prints_simulated_on_every_line(capsys, routing_cli, mooncake_trace):
    argv = ["--virtual", "--window-s", "120", "--session-fraction", "0.05", "--engine-seeds", "0,1"]
    assert routing_cli(argv) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines() + out.err.splitlines()
    assert lines and all("SIMULATED" in line for line in lines)
    assert any(line.startswith("SIMULATED paired ttft_p99_reduction_vs_cache_aware") for line in lines)
    assert not any(line.endswith(" met") and "paired" not in line for line in lines)  # no point-estimate verdict


def test_help_says_simulated(capsys, routing_cli):
    with pytest.raises(SystemExit):
        routing_cli(["--help"])
    text = capsys.readouterr().out
    assert "SIMULATED" in text and "--prefill-pacing-routers" not in text and "--split" in text
