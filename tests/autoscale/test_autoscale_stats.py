"""ReplicaWindowStats: one test per rule in stats.py, values worked out by hand."""

import pytest

from ray_dspine.autoscale.config import SloTargets, StatsWindowConfig
from ray_dspine.autoscale.stats import STAT_KEYS, ReplicaWindowStats, percentile
from ray_dspine.engines.protocol import LoadSnapshot, Usage


class Clock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(window_s: float = 60.0, started_s: float | None = 0.0):
    clock = Clock()
    config = StatsWindowConfig(window_s=window_s, slo=SloTargets(ttft_slo_s=2.0, itl_slo_ms=50.0))
    return clock, ReplicaWindowStats(config, clock, started_s=started_s)


def usage(prompt: int, output: int, steps: int, cached: int = 0) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=output, verify_steps=steps, cached_prompt_tokens=cached)


def test_rule_window_and_rates():
    clock, stats = make()
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        clock.t = t
        stats.record_arrival()
    clock.t = 6.0
    stats.record_finished(0.5, 1.0, usage(100, 11, 5))
    stats.record_finished(0.5, 1.0, usage(100, 31, 5))
    clock.t = 10.0
    s = stats.snapshot(LoadSnapshot())
    # W' = min(60, 10 - 0) = 10 s: 5 arrivals -> 0.5/s, 2 finished -> 0.2/s, 42 tokens -> 4.2/s.
    assert s["window_s"] == 10.0
    assert s["arrivals_per_s"] == pytest.approx(0.5)
    assert s["completed_per_s"] == pytest.approx(0.2)
    assert s["output_tokens_per_s"] == pytest.approx(4.2)
    assert set(s) == set(STAT_KEYS) and all(isinstance(v, float) for v in s.values())


def test_rule_window_drops_old_requests():
    clock, stats = make(window_s=60.0)
    clock.t = 10.0
    stats.record_arrival()
    stats.record_finished(0.5, 1.0, usage(100, 11, 5))
    clock.t = 80.0  # the window is (20, 80]: both events at t = 10 are out
    s = stats.snapshot(LoadSnapshot())
    assert s["window_s"] == 60.0
    assert s["arrivals_per_s"] == 0.0 and s["num_window_requests"] == 0.0


def test_rule_percentiles_nearest_rank():
    values = [float(v) for v in range(1, 21)]
    # p95 of 20 values: v[ceil(0.95 * 20) - 1] = v[18] = 19; p50: v[9] = 10.
    assert percentile(values, 0.95) == 19.0
    assert percentile(values, 0.50) == 10.0
    assert percentile([], 0.95) == 0.0


def test_rule_itl_and_slo_misses():
    clock, stats = make()
    clock.t = 5.0
    stats.record_finished(0.5, 0.4, usage(100, 11, 5))  # itl = 1000 * 0.4 / 10 = 40 ms: within 50
    stats.record_finished(3.0, 0.4, usage(100, 11, 5))  # ttft 3.0 > 2.0: a TTFT miss
    stats.record_finished(0.5, 0.6, usage(100, 11, 5))  # itl = 60 ms > 50: an ITL miss
    stats.record_finished(0.5, 0.0, usage(100, 1, 1))  # one token: no ITL
    s = stats.snapshot(LoadSnapshot())
    assert s["ttft_slo_miss_ratio"] == pytest.approx(1 / 4)
    assert s["itl_slo_miss_ratio"] == pytest.approx(1 / 3)  # 3 requests have an ITL
    assert s["slo_miss_ratio"] == pytest.approx(2 / 4)
    assert s["itl_p95_ms"] == pytest.approx(60.0)  # sorted [40, 40, 60]: v[ceil(2.85) - 1] = v[2]
    assert s["ttft_p95_s"] == 3.0


def test_rule_acceptance_and_load():
    clock, stats = make()
    clock.t = 5.0
    stats.record_finished(0.5, 1.0, usage(1000, 40, 10, cached=512))
    load = LoadSnapshot(
        total_kv_tokens=1000, free_kv_tokens=250, total_state_slots=8, free_state_slots=6,
        num_running=3, num_queued=2, accept_length_ema=4.5, drafter_active=True,
    )  # fmt: skip
    s = stats.snapshot(load)
    assert s["accept_length_window"] == 4.0  # 40 tokens / 10 verify steps
    assert s["accept_length_ema"] == 4.5 and s["drafter_active"] == 1.0
    assert s["kv_utilization"] == 0.75  # 1 - 250 / 1000
    assert s["state_utilization"] == 0.25  # 1 - 6 / 8
    assert s["uncached_prompt_tokens_mean"] == 488.0  # 1000 - 512
    assert (s["num_running"], s["num_queued"]) == (3.0, 2.0)


def test_rule_busy_and_concurrency():
    clock, stats = make()
    clock.t = 2.0
    stats.snapshot(LoadSnapshot(num_running=1))
    clock.t = 4.0
    stats.record_finished(1.0, 3.0, usage(10, 5, 5))
    stats.snapshot(LoadSnapshot(num_running=0))
    clock.t = 8.0
    s = stats.snapshot(LoadSnapshot(num_running=2))
    assert s["busy_fraction"] == pytest.approx(2 / 3)  # 2 of 3 snapshots had a running request
    assert s["concurrency_mean"] == pytest.approx(0.5)  # (1 + 3) s in system / W' = 8 s


def test_started_s_defaults_to_first_event():
    clock, stats = make(started_s=None)
    clock.t = 100.0
    stats.record_arrival()
    clock.t = 104.0
    assert stats.snapshot(LoadSnapshot())["arrivals_per_s"] == pytest.approx(0.25)  # 1 / (104 - 100)
