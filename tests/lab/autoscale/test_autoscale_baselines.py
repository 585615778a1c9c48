"""Baselines: Ray's default queue-length rule and Ray Serve LLM's TTFT rule, as their sources state them."""

import pytest

from dspine_lab.autoscale.baselines import RayDefaultPolicy, RayDefaultSettings, TtftRulePolicy, TtftRuleSettings


class Ctx:
    def __init__(self, *, current, target, total, state=None):
        self.current_num_replicas = current
        self.target_num_replicas = target
        self.total_num_requests = total
        self.policy_state = state or {}


def test_rule_ray_default_desired_is_ongoing_over_target():
    policy = RayDefaultPolicy(RayDefaultSettings())
    assert RayDefaultSettings().target_ongoing_requests == 32.0
    assert policy(Ctx(current=2, target=2, total=96.0))[0] == pytest.approx(3.0)  # 96 / 32
    assert policy(Ctx(current=4, target=4, total=8.0))[0] == pytest.approx(0.25)  # Ray's delay/bounds round later


def test_rule_ray_default_cold_start():
    policy = RayDefaultPolicy(RayDefaultSettings())
    assert policy(Ctx(current=0, target=0, total=3.0))[0] == 1
    assert policy(Ctx(current=0, target=2, total=0.0))[0] == 2


def test_rule_ttft_rule_up_down_hold():
    p99 = {"value": 3.0}
    policy = TtftRulePolicy(TtftRuleSettings(ttft_target_s=2.0), lambda ctx: p99["value"])
    assert policy(Ctx(current=3, target=3, total=30.0))[0] == 4  # 3.0 s > 2.0 s: target + 1
    p99["value"] = 1.0
    assert policy(Ctx(current=3, target=3, total=30.0))[0] == 3  # 10 per replica: busy, hold
    assert policy(Ctx(current=3, target=3, total=2.0))[0] == 2  # 0.67 per replica < 1.0: idle, target - 1
    p99["value"] = None
    assert policy(Ctx(current=3, target=3, total=2.0))[0] == 3  # no data: hold


def test_ray_default_matches_ray_2_60():
    """The re-statement gives what Ray's own function gives on a real AutoscalingContext."""
    config_mod = pytest.importorskip("ray.serve.config")
    from ray.serve.autoscaling_policy import replica_queue_length_autoscaling_policy

    ours = RayDefaultPolicy(RayDefaultSettings(target_ongoing_requests=32.0))
    for current, target, total in ((2, 2, 96.0), (4, 4, 8.0), (0, 0, 5.0), (3, 5, 250.0)):
        ctx = config_mod.AutoscalingContext(
            deployment_id=None, deployment_name="d", app_name="a", current_num_replicas=current,
            target_num_replicas=target, running_replicas=[], total_num_requests=total, total_queued_requests=0.0,
            aggregated_metrics={}, raw_metrics={}, capacity_adjusted_min_replicas=1,
            capacity_adjusted_max_replicas=100, policy_state={}, last_scale_up_time=None,
            last_scale_down_time=None, current_time=0.0,
            config=config_mod.AutoscalingConfig(target_ongoing_requests=32.0, min_replicas=1, max_replicas=100),
        )  # fmt: skip
        assert ours(ctx)[0] == pytest.approx(replica_queue_length_autoscaling_policy(ctx)[0])
