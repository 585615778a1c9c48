"""The cost policy, rule by rule, on hand-built contexts with Ray 2.60's AutoscalingContext fields.

Capacity is made round: the replica of test_autoscale_capacity_model (base 20 ms, 1 ms per running
request, prefill 0.1 ms/token), the reported workload P = 1000, O = 101 tokens, acceptance 1, and an
ITL target of 35.714286 ms with no headroom, so one replica's capacity is mu = 2.0 requests/s.
"""

from dataclasses import dataclass

import pytest

from ray_dspine.autoscale.config import CostAutoscalingConfig, ReplicaCapacityModel, SloTargets
from ray_dspine.autoscale.policy import cost_per_completed_request_usd, demand_slope
from ray_dspine.autoscale.ray_policy import CostAutoscalingPolicy

CAP = ReplicaCapacityModel(
    base_ms=20.0, per_running_ms=1.0, per_kv_token_ms=0.0, prefill_per_token_ms=0.1,
    max_running_requests=64, total_kv_tokens=1_000_000, itl_tail_factor=1.0,
)  # fmt: skip
CONFIG = CostAutoscalingConfig(
    slo=SloTargets(ttft_slo_s=100.0, itl_slo_ms=35.714286), capacity=CAP, gpu_hour_usd=3.5,
    headroom=0.0, scale_down_utilization=0.8, upscale_delay_s=0.0, downscale_delay_s=300.0,
    lookahead_s=0.0, stale_after_s=60.0, guard_min_requests=20, backlog_drain_s=60.0,
)  # fmt: skip


@dataclass
class Point:
    timestamp: float
    value: float


class Ctx:
    """Only the AutoscalingContext attributes the policy reads."""

    def __init__(self, *, target, reports, current=None, now=1000.0, state=None, queued=0.0, ages=None, hi=16):
        names = [f"replica-{i}" for i in range(current if current is not None else len(reports))]
        self.current_num_replicas = len(names)
        self.target_num_replicas = target
        self.running_replicas = names
        self.capacity_adjusted_min_replicas = 1
        self.capacity_adjusted_max_replicas = hi
        self.total_queued_requests = queued
        self.current_time = now
        self.policy_state = state or {}
        self.aggregated_metrics = {}
        self.raw_metrics = {}
        for name, values in zip(names, reports):
            for key, value in values.items():
                self.aggregated_metrics.setdefault(key, {})[name] = value
            if ages is not None:
                self.raw_metrics.setdefault("arrivals_per_s", {})[name] = [Point(now - ages, 1.0)]


def report(arrivals: float, **extra) -> dict:
    values = {
        "arrivals_per_s": arrivals, "num_window_requests": 50.0, "prompt_tokens_mean": 1000.0,
        "prompt_tokens_p95": 1000.0, "uncached_prompt_tokens_mean": 1000.0, "output_tokens_mean": 101.0,
        "accept_length_ema": 1.0, "drafter_active": 0.0, "num_running": 1.0, "num_queued": 0.0,
        "ttft_p95_s": 0.2, "itl_p95_ms": 20.0,
    }  # fmt: skip
    values.update(extra)
    return values


def call(ctx, config=CONFIG):
    policy = CostAutoscalingPolicy(**config.model_dump())
    n, state = policy(ctx)
    return n, state, policy.last_decision


def test_rule_missing_metrics_hold_never_zero():
    assert call(Ctx(target=3, reports=[{}, {}, {}]))[0] == 3  # empty metrics: hold, not 0
    assert call(Ctx(target=3, reports=[{"num_running": 2.0}] * 3))[0] == 3  # no arrivals_per_s yet


def test_rule_stale_metrics_hold():
    n, _, decision = call(Ctx(target=3, reports=[report(10.0)] * 3, ages=100.0))  # 100 s > stale_after 60 s
    assert n == 3 and decision.reason.startswith("hold: no fresh")
    assert call(Ctx(target=3, reports=[report(10.0)] * 3, ages=5.0))[0] == 15  # fresh: 30 req/s / 2.0


def test_rule_demand_extrapolates_unreported_replicas_and_backlog():
    # 2 running, 1 reports 3 req/s -> 3 * 2 / 1 = 6 req/s; mu = 2.0 -> ceil(6 / 2) = 3
    n, _, decision = call(Ctx(target=2, current=2, reports=[report(3.0)]))
    assert decision.demand_per_s == pytest.approx(6.0)
    assert decision.capacity_per_s == pytest.approx(2.0, rel=1e-5)
    assert n == 3
    # backlog: 2 req/s arriving + 120 queued at the handle / 60 s = 4 req/s -> 2 replicas
    _, _, decision = call(Ctx(target=2, reports=[report(1.0), report(1.0)], queued=120.0))
    assert decision.demand_per_s == pytest.approx(4.0)


def test_rule_upscale_waits_for_delay():
    config = CONFIG.model_copy(update={"upscale_delay_s": 30.0})
    n, state, _ = call(Ctx(target=2, reports=[report(3.0)] * 2, now=1000.0), config)
    assert n == 2  # demand 6 wants 3, first wish stamped
    n, _, _ = call(Ctx(target=2, reports=[report(3.0)] * 2, now=1030.0, state=state), config)
    assert n == 3


def test_rule_guard_adds_a_replica_on_measured_breach():
    # model says 1 replica; measured: pooled misses (50 * 0.2 + 50 * 0) / 100 = 0.1 > 0.05
    breach = [report(0.5, slo_miss_ratio=0.2), report(0.5)]
    n, _, decision = call(Ctx(target=2, reports=breach))
    assert n == 3 and decision.reason == "up: guard"
    # a replica still starting (current 2 < target 3): wait for it, and do not scale down either
    n, _, decision = call(Ctx(target=3, current=2, reports=breach))
    assert n == 3
    # too few requests in the windows (5 + 5 < 20): the breach is noise
    few = [report(0.5, slo_miss_ratio=1.0, num_window_requests=5.0), report(0.5, num_window_requests=5.0)]
    n, _, _ = call(Ctx(target=2, reports=few))
    assert n == 2


def test_rule_guard_pools_the_misses_over_replicas():
    # one replica misses 8% of its 50 requests, three miss none: (50 * 0.08) / 200 = 0.02 <= 0.05
    n, _, decision = call(Ctx(target=4, reports=[report(0.5, slo_miss_ratio=0.08)] + [report(0.5)] * 3))
    assert decision.reason != "up: guard" and n <= 4
    # exactly at the ratio is not a breach; just past it is: 100 * 0.05 / 100 vs 100 * 0.06 / 100
    n, _, decision = call(Ctx(target=2, reports=[report(0.5, slo_miss_ratio=0.05)] * 2))
    assert decision.reason != "up: guard"
    n, _, decision = call(Ctx(target=2, reports=[report(0.5, slo_miss_ratio=0.06)] * 2))
    assert (n, decision.reason) == (3, "up: guard")


def test_rule_hysteresis_band_holds():
    # demand 3.5: N_up = ceil(3.5 / 2) = 2, N_down = ceil(3.5 / (0.8 * 2)) = ceil(2.19) = 3
    for target in (2, 3):
        n, _, decision = call(Ctx(target=target, reports=[report(3.5 / target)] * target))
        assert (n, decision.num_up, decision.num_down) == (target, 2, 3)


def test_rule_scale_down_after_delay_to_window_peak():
    state: dict = {}
    # N_down: demand 2 -> ceil(2 / 1.6) = 2; demand 4 -> 3; demand 1 -> 1
    for now, demand in ((0.0, 2.0), (100.0, 4.0), (200.0, 1.0)):
        n, state, decision = call(Ctx(target=4, reports=[report(demand / 4)] * 4, now=now, state=state))
        assert n == 4 and decision.reason == "down: waiting"
    n, state, decision = call(Ctx(target=4, reports=[report(1.0 / 4)] * 4, now=300.0, state=state))
    assert (n, decision.reason) == (3, "down")  # max(2, 3, 1, 1) after 300 s


def test_rule_drain_floor_keeps_capacity_for_inflight():
    config = CONFIG.model_copy(update={"downscale_delay_s": 0.0})
    # 2 replicas x 100 running = 200 in flight, 64 per replica -> ceil(200 / 64) = 4, although
    # demand 0.5 req/s alone would need 1
    n, _, _ = call(Ctx(target=5, reports=[report(0.25, num_running=100.0)] * 2, current=2), config)
    assert n == 4


def test_rule_bounds():
    assert call(Ctx(target=2, reports=[report(50.0)] * 2, hi=16))[0] == 16  # ceil(100 / 2) = 50 > 16


def test_rule_demand_trend():
    history = [(t, 1.0 + 0.01 * t) for t in range(0, 601, 60)]
    assert demand_slope(history, 600.0) == pytest.approx(0.01)
    assert demand_slope(history[:3], 600.0) == 0.0  # spans 120 s < 300 s
    assert demand_slope([(t, 10.0 - 0.01 * t) for t in range(0, 601, 60)], 600.0) == 0.0  # falling: 0
    config = CONFIG.model_copy(update={"lookahead_s": 100.0})
    state = {"dspine_history": [[1000.0 - 600.0 + t, 2.0 + 0.01 * t] for t in range(0, 600, 60)]}
    # slope 0.01 req/s per s; demand now 8 -> lambda_up = 8 + 0.01 * 100 = 9 -> ceil(9 / 2) = 5
    _, _, decision = call(Ctx(target=2, reports=[report(4.0)] * 2, state=state), config)
    assert decision.num_up == 5


def test_rule_cost_per_completed_request():
    # 3.5 USD/GPU-h * 1 GPU * 4 replicas / (3600 s/h * 2 req/s) = 0.00194444 USD
    assert cost_per_completed_request_usd(4, 2.0, 3.5, 1.0) == pytest.approx(0.0019444444)
    assert cost_per_completed_request_usd(4, 0.0, 3.5, 1.0) == float("inf")


def test_state_keeps_ray_keys():
    _, state, _ = call(Ctx(target=2, reports=[report(1.0)] * 2, state={"__ray_key": 7}))
    assert state["__ray_key"] == 7 and "dspine_history" in state


def test_drafter_gain_reported():
    config = CONFIG.model_copy(
        update={"capacity": CAP.model_copy(update={"draft_ms": 4.0, "verify_per_token_ms": 0.5, "draft_tokens": 4})}
    )
    low = call(Ctx(target=2, reports=[report(1.0, drafter_active=1.0, accept_length_ema=1.0)] * 2), config)[1]
    high = call(Ctx(target=2, reports=[report(1.0, drafter_active=1.0, accept_length_ema=3.5)] * 2), config)[1]
    assert low["dspine_drafter_gain"] < 1.0 < high["dspine_drafter_gain"]
