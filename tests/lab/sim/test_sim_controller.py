"""Ray's controller rules around a policy, re-stated for virtual time, checked against Ray 2.60."""

import pytest

from dspine_lab.sim.config import RayControls
from dspine_lab.sim.controller import apply_ray_controls


class Ctx:
    def __init__(self, *, current, target, now, state, total=1.0, lo=1, hi=10):
        self.current_num_replicas = current
        self.target_num_replicas = target
        self.current_time = now
        self.policy_state = state
        self.total_num_requests = total
        self.capacity_adjusted_min_replicas = lo
        self.capacity_adjusted_max_replicas = hi


def run(wishes, controls, start_target=2):
    """Feed desired counts every 10 s; return the targets the controller sets."""
    target, state, out = start_target, {}, []
    for step, wish in enumerate(wishes):
        ctx = Ctx(current=target, target=target, now=10.0 * step, state=state)
        target, state = apply_ray_controls(lambda c, w=wish: (w, {}), ctx, controls)
        out.append(target)
    return out


def test_rule_delays():
    controls = RayControls(upscale_delay_s=30.0, downscale_delay_s=60.0)
    # up wish at t=0 stamps; t=30 acts. Then a down wish from t=40 acts at t=100.
    assert run([4, 4, 4, 4, 1, 1, 1, 1, 1, 1, 1], controls) == [2, 2, 2, 4, 4, 4, 4, 4, 4, 4, 1]
    # a direction change clears the stamp
    assert run([4, 4, 2, 4, 4, 4, 4], controls) == [2, 2, 2, 2, 2, 2, 4]


def test_rule_factors_and_bounds():
    controls = RayControls(upscaling_factor=0.5)
    assert run([10], controls) == [6]  # ceil(2 + 0.5 * (10 - 2))
    assert run([50], RayControls()) == [10]  # max_replicas
    assert run([0.2], RayControls()) == [1]  # ceil and min_replicas


def test_rule_cold_start():
    ctx = Ctx(current=0, target=0, now=0.0, state={}, total=3.0)
    assert apply_ray_controls(lambda c: (99, {}), ctx, RayControls(upscale_delay_s=30.0))[0] == 1


def test_matches_ray_2_60(monkeypatch):
    config_mod = pytest.importorskip("ray.serve.config")
    policy_mod = pytest.importorskip("ray.serve.autoscaling_policy")
    wishes = [4, 4, 4, 4, 3, 1, 1, 1, 1, 1, 1, 1, 5, 2, 2]
    controls = RayControls(upscale_delay_s=30.0, downscale_delay_s=60.0)
    expected = run(wishes, controls)
    clock = {"t": 0.0}
    monkeypatch.setattr(policy_mod.time, "time", lambda: clock["t"])
    config = config_mod.AutoscalingConfig(min_replicas=1, max_replicas=10, upscale_delay_s=30.0, downscale_delay_s=60.0)
    target, state, got = 2, {}, []
    for step, wish in enumerate(wishes):
        clock["t"] = 10.0 * step
        wrapped = policy_mod._apply_autoscaling_config(lambda c, w=wish: (w, {}))
        ctx = config_mod.AutoscalingContext(
            deployment_id=None, deployment_name="d", app_name="a", current_num_replicas=target,
            target_num_replicas=target, running_replicas=[], total_num_requests=1.0, total_queued_requests=0.0,
            aggregated_metrics={}, raw_metrics={}, capacity_adjusted_min_replicas=1,
            capacity_adjusted_max_replicas=10, policy_state=state, last_scale_up_time=None,
            last_scale_down_time=None, current_time=clock["t"], config=config,
        )  # fmt: skip
        n, state = wrapped(ctx)
        target = min(10, max(1, n))
        got.append(target)
    assert got == expected
