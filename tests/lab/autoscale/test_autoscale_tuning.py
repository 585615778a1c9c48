"""The tuner's candidate and objective rules, and both CLIs end to end on a tiny fixture trace."""

import json

import yaml

from ray_dspine.autoscale.config import CostAutoscalingConfig, ReplicaCapacityModel, SloTargets
from dspine_lab.autoscale.tuning import SEARCH_SPACE, Trial, candidates, point_of, rank, validate
from ray_dspine.cli import main

BASE = CostAutoscalingConfig(
    slo=SloTargets(ttft_slo_s=1.0, itl_slo_ms=50.0),
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


def test_rule_validate_promotes_the_first_feasible_that_holds_on_the_other_day():
    ranked = [
        Trial({"n": 1}, Result(0.1, 0.995)),
        Trial({"n": 2}, Result(0.2, 0.996)),
        Trial({"n": 3}, Result(0.3, 0.999)),
        Trial({"n": 4}, Result(0.05, 0.98)),  # infeasible: never validated
    ]
    other_day = {1: 0.985, 2: 0.992, 3: 0.999}
    seen = []

    def evaluate(point):
        seen.append(point["n"])
        return Result(1.0, other_day[point["n"]])

    new, checked = validate(ranked, evaluate, min_attainment=0.99)
    assert [t.params["n"] for t in new] == [2, 1, 3, 4]
    assert seen == [1, 2] and [t.result.slo_attainment for t in checked] == [0.985, 0.992]
    # none holds within max_validations: the ranking stands
    other_day.update({1: 0.9, 2: 0.9})
    seen.clear()
    new, checked = validate(ranked, evaluate, min_attainment=0.99, max_validations=2)
    assert [t.params["n"] for t in new] == [1, 2, 3, 4] and seen == [1, 2]


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
    validation = document["measurements"]["validation"]
    assert validation["seeds"] == [2, 3] and 1 <= len(validation["worst_day_of_each_checked"]) <= 2
    # --start: the first (here the only) candidate is the given file's parameters
    again = tmp_path / "again.yaml"
    args = ["tune", "autoscaling", "--pool", "dspine-agent", *day, "--num-candidates", "1", "--start", str(tuned)]
    assert main([*args, "--out", str(again)]) == 0
    assert yaml.safe_load(again.read_text())["autoscaling_config"] == document["autoscaling_config"]
    assert main(["bench", "autoscaling", "--pool", "dspine-agent", *day, "--tuned", str(tuned), "--out", str(report)]) == 0
    data = json.loads(report.read_text())
    assert [p["name"] for p in data["policies"]] == ["ray-default", "ray-llm-ttft", "ours"]
    assert data["policies"][0]["settings"]["settings"]["target_ongoing_requests"] == 32.0
    for row in data["policies"]:
        assert row["simulated"] and row["num_requests"] > 0 and row["cost_per_completed_request_usd"] > 0
    assert set(data["verdict"]) >= {"goal_met", "better_baseline", "cost_reduction_vs_better_baseline"}
