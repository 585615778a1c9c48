"""`bench autoscaling` and `tune autoscaling` on the command line: the hindsight report and bad input."""

import json
from pathlib import Path

import numpy as np
import pytest

from dspine_lab.autoscale.plot import arrivals_per_quarter_hour
from ray_dspine.cli import main

SIM_YAML = str(Path(__file__).resolve().parents[3] / "clusters" / "sim.yaml")


def test_bench_reports_the_hindsight_schedule_against_the_better_baseline(tmp_path, azure_path):
    report = tmp_path / "bench.json"
    day = ["--trace", str(azure_path), "--rate-scale", "10", "--duration-s", "600"]
    args = ["bench", "autoscaling", *day, "--hindsight", "--hindsight-bin-s", "200"]  # --pool defaults to dspine-agent
    plot = tmp_path / "day.png"
    assert main([*args, "--tuned", str(tmp_path / "none.yaml"), "--out", str(report), "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(report.read_text())
    assert data["pool"]["name"] == "dspine-agent"
    hindsight, verdict = data["hindsight"], data["verdict"]
    assert hindsight["bin_s"] == 200.0 and len(hindsight["counts"]) == 3
    assert hindsight["replay"]["policy"] == "schedule"
    better = next(p for p in data["policies"] if p["name"] == verdict["better_baseline"])
    best = hindsight["replay"]["cost_per_completed_request_usd"]
    assert verdict["hindsight_cost_reduction_vs_better_baseline"] == pytest.approx(
        1.0 - best / better["cost_per_completed_request_usd"]
    )
    ours = data["policies"][2]["cost_per_completed_request_usd"]
    assert verdict["ours_cost_over_hindsight"] == pytest.approx(ours / best - 1.0)
    assert verdict["goal_reachable_in_hindsight"] == (
        hindsight["replay"]["slo_attainment"] >= 0.99 and verdict["hindsight_cost_reduction_vs_better_baseline"] >= 0.25
    )
    assert "--hindsight" in data["command"]


def test_frontier_writes_receipt_and_plot_and_prints_only_simulated_lines(tmp_path, capsys, azure_path):
    out, plot = tmp_path / "frontier.json", tmp_path / "frontier.png"
    day = ["--trace", str(azure_path), "--rate-scale", "10", "--duration-s", "300", "--start-s", "54000"]
    assert main(["bench", "autoscaling", "--frontier", *day, "--out", str(out), "--plot", str(plot)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines and all("SIMULATED" in line for line in lines)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(out.read_text())
    assert (data["tuning_seed"], data["held_out_seed"]) == (0, 1)
    assert {p: len(rows) for p, rows in data["tuning_day"].items()} == {"ray-default": 8, "ray-llm-ttft": 8, "ours": 8}
    assert [e["target"] for e in data["frontier"]] == [0.95, 0.97, 0.98, 0.99, 0.995]
    assert data["traffic"]["start_s"] == 54000.0 and data["traffic"]["seed"] == 1
    for entry in data["frontier"]:  # a chosen configuration met its target on the tuning day
        for policy, chosen in entry["policies"].items():
            if chosen is not None:
                assert chosen["tuning"]["slo_attainment"] >= entry["target"]
                assert data["tuning_day"][policy][chosen["index"]]["params"] == chosen["params"]


def test_arrivals_per_quarter_hour():
    # 900 s bins from 100 s: 3 arrivals in the first, 1 in the second, the one past the end clipped into it
    rate = arrivals_per_quarter_hour(np.array([100.0, 500.0, 999.0, 1000.0, 5000.0]), 100.0, 1800.0)
    assert rate.tolist() == [3 / 900.0, 2 / 900.0]


@pytest.mark.parametrize(
    ("command", "flags", "named"),
    [
        ("bench", ["--rate-scale", "-1"], "argument --rate-scale: Input should be greater than 0"),
        ("bench", ["--max-replicas", "0"], "argument --max-replicas"),
        ("bench", ["--trace", "no-such-trace"], "argument --trace: 'no-such-trace' is neither a known trace"),
        ("bench", ["--profile", "b300-nothing"], "argument --profile: no simulated profile 'b300-nothing'"),
        ("bench", ["--config", "no-such.yaml"], "argument --config:"),
        ("bench", ["--config", SIM_YAML, "--pool", "nope"], f"no pool 'nope' in {SIM_YAML}; its pools: dspine, dflash2"),
        ("bench", ["--pool", "nope"], "argument --pool: 'nope' is not a built-in twin (dspine-agent, dflash2, dspine-reasoning, dspine-agent-fleet)"),
        ("tune", ["--pool", "nope"], "argument --pool: 'nope' is not a built-in twin"),
        ("bench", ["--hindsight-bin-s", "0"], "argument --hindsight-bin-s"),
        ("bench", ["--frontier", "--tuning-seed", "1"], "argument --tuning-seed: must differ from --seed"),
        ("tune", ["--duration-s", "-5"], "argument --duration-s"),
        ("tune", ["--num-candidates", "0"], "argument --num-candidates"),
        ("tune", ["--min-attainment", "99"], "argument --min-attainment"),
        ("tune", ["--validation-seeds", "2,x"], "argument --validation-seeds: comma-separated seeds"),
        ("tune", ["--start", "no-such-tuned.yaml"], "argument --start: no-such-tuned.yaml is not a tuned autoscaling file"),
    ],
)
def test_bad_input_names_the_flag_and_exits_2(tmp_path, capsys, command, flags, named):
    args = [command, "autoscaling", "--pool", "dspine-agent", *flags]
    if command == "tune":
        args += ["--out", str(tmp_path / "tuned.yaml")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err and "Traceback" not in err
