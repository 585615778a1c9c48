"""The tuner's candidate and objective rules, and both CLIs end to end on a tiny fixture trace."""

import json

import yaml

from ray_dspine.autoscale.config import CostAutoscalingConfig, ReplicaCapacityModel, SloTargets
from ray_dspine.autoscale.tuning import SEARCH_SPACE, Trial, candidates, point_of, rank
from ray_dspine.cli import main

BASE = CostAutoscalingConfig(
    slo=SloTargets(ttft_p95_s=1.0, itl_p95_ms=50.0),
    capacity=ReplicaCapacityModel(
        base_ms=20.0, per_running_ms=1.0, per_kv_token_ms=0.0, prefill_per_token_ms=0.1,
        max_running_requests=64, total_kv_tokens=100_000,
    ),
)  # fmt: skip


class Result:
    def __init__(self, cost, attainment, hours=1.0):
        self.cost_per_completed_request_usd, self.slo_attainment, self.replica_hours = cost, attainment, hours


def test_rule_candidates_start_from_the_config_and_are_seeded():
    a, b = candidates(BASE, 5, seed=3), candidates(BASE, 5, seed=3)
    assert a == b and a[0] == point_of(BASE) and len({tuple(p.items()) for p in a}) == 5
    assert all(p[k] in SEARCH_SPACE[k] for p in a[1:] for k in SEARCH_SPACE)


def test_rule_rank_feasible_by_cost_then_infeasible_by_attainment():
    trials = [
        Trial({"n": 1}, Result(0.5, 0.98)),
        Trial({"n": 2}, Result(0.9, 0.995)),
        Trial({"n": 3}, Result(0.7, 0.991)),
        Trial({"n": 4}, Result(0.4, 0.97)),
    ]
    assert [t.params["n"] for t in rank(trials, 0.99)] == [3, 2, 1, 4]


def test_cli_tune_then_bench(tmp_path, azure_path):
    tuned, report = tmp_path / "tuned.yaml", tmp_path / "bench.json"
    day = ["--trace", str(azure_path), "--rate-scale", "10", "--duration-s", "600"]
    assert main(["tune", "autoscaling", "--pool", "dspine-agent", *day, "--num-candidates", "2", "--out", str(tuned)]) == 0
    document = yaml.safe_load(tuned.read_text())
    assert document["simulated"] is True and document["command"].startswith("ray-dspine tune autoscaling")
    policy = document["autoscaling_config"]["policy"]
    assert policy["policy_function"] == "ray_dspine.autoscale.ray_policy:CostAutoscalingPolicy"
    CostAutoscalingConfig.model_validate(policy["policy_kwargs"])
    assert len(document["measurements"]["candidates"]) == 2
    assert main(["bench", "autoscaling", "--pool", "dspine-agent", *day, "--tuned", str(tuned), "--out", str(report)]) == 0
    data = json.loads(report.read_text())
    assert [p["name"] for p in data["policies"]] == ["ray-default", "ray-llm-ttft", "ours"]
    assert data["policies"][0]["settings"]["settings"]["target_ongoing_requests"] == 32.0
    for row in data["policies"]:
        assert row["simulated"] and row["num_requests"] > 0 and row["cost_per_completed_request_usd"] > 0
    assert set(data["verdict"]) >= {"goal_met", "better_baseline", "cost_reduction_vs_better_baseline"}
