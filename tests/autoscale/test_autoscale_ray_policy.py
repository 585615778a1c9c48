"""The Ray adapter on Ray 2.60's own AutoscalingContext, ReplicaID keys and TimeStampedValue series."""

import pytest

from ray_dspine.autoscale.config import CostAutoscalingConfig, ReplicaCapacityModel, SloTargets
from ray_dspine.autoscale.observation import observation_from_context
from ray_dspine.autoscale.ray_policy import CostAutoscalingPolicy

config_mod = pytest.importorskip("ray.serve.config")
common = pytest.importorskip("ray.serve._private.common")

CONFIG = CostAutoscalingConfig(
    slo=SloTargets(ttft_slo_s=100.0, itl_slo_ms=35.714286),
    capacity=ReplicaCapacityModel(
        base_ms=20.0, per_running_ms=1.0, per_kv_token_ms=0.0, prefill_per_token_ms=0.1,
        max_running_requests=64, total_kv_tokens=1_000_000, itl_tail_factor=1.0,
    ),
    headroom=0.0,
)  # fmt: skip
VALUES = {
    "arrivals_per_s": 3.0, "num_window_requests": 50.0, "prompt_tokens_mean": 1000.0, "prompt_tokens_p95": 1000.0,
    "uncached_prompt_tokens_mean": 1000.0, "output_tokens_mean": 101.0, "accept_length_ema": 1.0,
}  # fmt: skip


def context(replicas, reporting, now=1000.0, age_s=5.0, state=None):
    aggregated = {k: {r: v for r in reporting} for k, v in VALUES.items()}
    raw = {k: {r: [common.TimeStampedValue(now - age_s, v)] for r in reporting} for k, v in VALUES.items()}
    return config_mod.AutoscalingContext(
        deployment_id=replicas[0].deployment_id if replicas else None, deployment_name="pool-a", app_name="dspine",
        current_num_replicas=len(replicas), target_num_replicas=len(replicas), running_replicas=replicas,
        total_num_requests=lambda: 10.0, total_queued_requests=lambda: 0.0,
        aggregated_metrics=lambda: aggregated, raw_metrics=lambda: raw,
        capacity_adjusted_min_replicas=1, capacity_adjusted_max_replicas=20, policy_state=state or {},
        last_scale_up_time=None, last_scale_down_time=None, current_time=now,
        config=config_mod.AutoscalingConfig(min_replicas=1, max_replicas=20),
    )  # fmt: skip


def replicas(n):
    deployment = common.DeploymentID(name="pool-a", app_name="dspine")
    return [common.ReplicaID(unique_id=f"r{i}", deployment_id=deployment) for i in range(n)]


def test_observation_reads_ray_context():
    r = replicas(2)
    obs = observation_from_context(context(r, r[:1], age_s=7.0))
    assert (obs.num_running_replicas, obs.target_replicas, obs.max_replicas) == (2, 2, 20)
    assert len(obs.reports) == 1 and obs.reports[0].age_s == pytest.approx(7.0)


def test_policy_on_ray_context():
    r = replicas(2)
    # 2 running, 1 reports 3 req/s -> 6 req/s; capacity 2.0 req/s per replica -> 3
    n, state = CostAutoscalingPolicy(**CONFIG.model_dump())(context(r, r[:1]))
    assert n == 3 and isinstance(n, int)
    assert isinstance(state, dict) and state["dspine_capacity_per_s"] == pytest.approx(2.0, rel=1e-5)


def test_policy_holds_on_empty_metrics_right_after_start():
    r = replicas(3)
    n, _ = CostAutoscalingPolicy(**CONFIG.model_dump())(context(r, []))
    assert n == 3


def test_policy_is_importable_by_ray_path():
    policy = config_mod.AutoscalingPolicy(
        policy_function="ray_dspine.autoscale.ray_policy:CostAutoscalingPolicy",
        policy_kwargs=CONFIG.model_dump(mode="json"),
    )
    assert policy.get_policy().__name__ == "CostAutoscalingPolicy"
