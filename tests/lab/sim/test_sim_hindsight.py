"""The hindsight schedule: each rule of sim/hindsight.py, the schedule policy, and a tiny day end to end."""

import numpy as np
import pytest

from ray_dspine.autoscale.config import SloTargets
from ray_dspine.engines.simulated.profile import load_profile
from dspine_lab.sim.config import PoolSimConfig, SchedulePolicySpec, SimConfig, DayTraffic
from dspine_lab.sim.hindsight import choose_counts, hindsight_day, misses_by_bin
from dspine_lab.sim.run import load_day
from dspine_lab.sim.simulator import DaySimulation

PROFILE = load_profile("h200-qwen3.8-27b")
START = 15 * 3600.0


def test_rule_choose_lagrangian_finds_the_fewest_replicas_within_budget():
    # bins: size 1 misses 10 / 4, size 2 misses 2 / 1, size 3 none. Budget 3: (2, 2) misses 3 with 4
    # replicas; (3, 1) also has 4 replicas but misses 4; everything with fewer replicas misses more.
    misses = np.array([[10.0, 4.0], [2.0, 1.0], [0.0, 0.0]])
    assert choose_counts([1, 2, 3], misses, budget=3) == ([2, 2], True)


def test_rule_choose_fill_spends_the_budget_the_relaxation_leaves():
    # the relaxation moves bins 1 and 2 together (both miss 3 at size 1): (1, 2, 2), 2 misses of 5.
    # fill: bin 1 or 2 down adds 3 -> 5 fits; the earlier bin goes first; then nothing else fits.
    misses = np.array([[2.0, 3.0, 3.0], [0.0, 0.0, 0.0]])
    assert choose_counts([1, 2], misses, budget=5) == ([1, 1, 2], True)


def test_rule_choose_ties_go_to_fewer_replicas():
    assert choose_counts([1, 2], np.array([[0.0], [0.0]]), budget=0) == ([1], True)


def test_rule_choose_infeasible_takes_the_largest_size():
    assert choose_counts([1, 2], np.array([[5.0, 1.0], [4.0, 0.0]]), budget=3) == ([2, 2], False)


def test_rule_misses_by_bin():
    arrivals = np.array([0.0, 100.0, 299.0, 300.0, 950.0])
    ok = np.array([True, False, False, True, False])
    missed, requests = misses_by_bin(ok, arrivals, start_s=0.0, bin_s=300.0, num_bins=3)
    assert missed.tolist() == [2.0, 0.0, 1.0]  # 950 s falls past the last bin and is clipped into it
    assert requests.tolist() == [3, 1, 1]


def test_rule_schedule_count_takes_the_lead():
    spec = SchedulePolicySpec(bin_s=100.0, counts=[1, 3, 2], lead_s=50.0)
    assert [spec.count_at(t) for t in (0.0, 49.0, 60.0, 150.0, 250.0, 1_000.0)] == [1, 1, 3, 3, 2, 2]
    with pytest.raises(ValueError, match=">= 1 replica"):
        SchedulePolicySpec(bin_s=100.0, counts=[1, 0])


def config(azure_path, policy, initial=1) -> SimConfig:
    return SimConfig(
        pool=PoolSimConfig(
            name="tiny", slo=SloTargets(ttft_slo_s=2.0, itl_slo_ms=100.0), initial_replicas=initial,
            max_replicas=8, startup_s=60.0,
        ),
        traffic=DayTraffic(trace=str(azure_path), rate_scale=10.0, start_s=START, duration_s=1200.0),
        policy=policy,
    )  # fmt: skip


def test_rule_simulator_follows_a_schedule_startup_ahead(azure_path):
    cfg = config(azure_path, SchedulePolicySpec(bin_s=600.0, counts=[1, 3], lead_s=60.0))
    trace, day = load_day(cfg)
    sim = DaySimulation(cfg, trace, PROFILE, day)
    result = sim.run()
    # control runs every 10 s; at 540 s count_at looks 60 s ahead into the 3-replica bin
    assert [r.requested_s for r in sim.pool.replicas[1:]] == [START + 540.0, START + 540.0]
    assert [r.ready_s for r in sim.pool.replicas[1:]] == [START + 600.0, START + 600.0]
    assert result.num_scale_ups == 1 and result.num_scale_downs == 0


def test_hindsight_day_end_to_end(azure_path):
    cfg = config(azure_path, SchedulePolicySpec(bin_s=300.0, counts=[1]))
    trace, day = load_day(cfg)
    messages = []
    found = hindsight_day(cfg, trace, PROFILE, day, bin_s=300.0, progress=messages.append)
    sizes = [f.num_replicas for f in found.fixed_days]
    assert sizes == list(range(1, len(sizes) + 1))  # from min_replicas upwards
    assert all(f.slo_attainment < 0.995 for f in found.fixed_days[:-1])  # stops at the first >= 0.995
    assert found.fixed_days[-1].slo_attainment >= 0.995 or sizes[-1] == 8
    assert len(found.counts) == 4 and set(found.counts) <= set(sizes)
    assert found.estimated_replica_hours == pytest.approx(sum(found.counts) * 300.0 / 3600.0)
    assert found.feasible and found.estimated_attainment >= 0.99
    assert found.replay.policy == "schedule" and found.replay.num_failed == 0
    assert found.replay.slo_attainment >= 0.99 or found.replays == 3
    assert messages[0] == "fixed pool of 1 replica(s)" and messages[-1].startswith(f"replay {found.replays}:")
