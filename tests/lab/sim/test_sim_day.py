"""Simulated days on a tiny hand-written trace: seeding, start-up, draining, cut-offs, billing."""

import pytest

from dspine_lab.autoscale.calibration import capacity_from_profile
from ray_dspine.autoscale.config import CostAutoscalingConfig, SloTargets
from ray_dspine.engines.simulated.profile import load_profile
from dspine_lab.sim.config import FixedPolicySpec, OursPolicy, PoolSimConfig, SimConfig, DayTraffic
from dspine_lab.sim.pool import STOPPED
from dspine_lab.sim.run import load_day, simulate_day
from dspine_lab.sim.simulator import DaySimulation

SLO = SloTargets(ttft_slo_s=2.0, itl_slo_ms=100.0)
PROFILE = load_profile("h200-qwen3.8-27b")


def config(azure_path, policy, seed=0, initial=1, **pool) -> SimConfig:
    # the fixture trace has 0.2 req/s; x10 = 2 req/s at the peak (15:00), 20 simulated minutes
    return SimConfig(
        pool=PoolSimConfig(name="tiny", slo=SLO, initial_replicas=initial, max_replicas=8, startup_s=60.0, **pool),
        traffic=DayTraffic(trace=str(azure_path), rate_scale=10.0, start_s=15 * 3600.0, duration_s=1200.0, seed=seed),
        policy=policy,
    )


def ours() -> OursPolicy:
    engine = PoolSimConfig(name="x", slo=SLO).engine
    return OursPolicy(params=CostAutoscalingConfig(slo=SLO, capacity=capacity_from_profile(PROFILE, engine), gpu_hour_usd=3.5))


def run(cfg: SimConfig) -> DaySimulation:
    trace, day = load_day(cfg)
    sim = DaySimulation(cfg, trace, PROFILE, day)
    sim.result = sim.run()
    return sim


def test_rule_same_seed_same_result(azure_path):
    a = simulate_day(config(azure_path, ours(), seed=3))
    b = simulate_day(config(azure_path, ours(), seed=3))
    c = simulate_day(config(azure_path, ours(), seed=4))
    assert a.model_dump() == b.model_dump()
    assert a.num_requests != c.num_requests or a.model_dump() != c.model_dump()
    assert a.simulated and a.num_failed == 0


def test_rule_start_up_delay_and_billing(azure_path):
    sim = run(config(azure_path, FixedPolicySpec(num_replicas=3), initial=1))
    first_control = 15 * 3600.0 + 10.0  # the first policy call, control_period_s = 10 s after the start
    added = sim.pool.replicas[1:]
    assert [r.requested_s for r in added] == [first_control, first_control]
    assert [r.ready_s for r in added] == [first_control + 60.0, first_control + 60.0]
    end = max(sim.now, 15 * 3600.0 + 1200.0)
    # 1 warm replica from the start + 2 billed from their request (start-up included), all to the end
    expected = ((end - 15 * 3600.0) + 2 * (end - first_control)) / 3600.0
    assert sim.result.replica_hours == pytest.approx(expected)
    assert sim.result.cost_usd == pytest.approx(expected * 3.5)
    assert sim.result.num_scale_ups == 1


def test_rule_scale_down_drains_without_cut_off(azure_path):
    sim = run(config(azure_path, FixedPolicySpec(num_replicas=1), initial=3))
    stopped = [r for r in sim.pool.replicas if r.state == STOPPED]
    assert len(stopped) == 2
    for replica in stopped:  # each stops at a wait-loop check after its last request finished
        assert replica.stopped_s >= replica.drain_start_s + 2.0
        assert (replica.stopped_s - replica.drain_start_s) % 2.0 == pytest.approx(0.0, abs=1e-6)
    assert sim.result.num_failed == 0 and sim.result.num_scale_downs == 1


def test_rule_shutdown_timeout_cuts_off(tmp_path):
    long_outputs = tmp_path / "long_outputs.csv"  # 2,000-token answers: ~20 s each, always some in flight
    long_outputs.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,1000,2000\n2023-11-16 18:00:05.0,1000,2000\n"
    )
    sim = run(config(long_outputs, FixedPolicySpec(num_replicas=1), initial=3, graceful_shutdown_timeout_s=0.0))
    stopped = [r for r in sim.pool.replicas if r.state == STOPPED]
    # drained replicas stop at their first check (2 s); what still runs there is cut off (failed)
    assert len(stopped) == 2 and all(r.stopped_s == pytest.approx(r.drain_start_s + 2.0) for r in stopped)
    assert sim.result.num_failed > 0
    assert sim.result.num_completed + sim.result.num_failed == sim.result.num_requests


def test_ours_scales_with_the_load(azure_path):
    result = simulate_day(config(azure_path, ours(), initial=1))
    assert result.peak_replicas >= 1 and result.num_failed == 0
    assert 0.0 < result.cost_per_completed_request_usd < 1.0
