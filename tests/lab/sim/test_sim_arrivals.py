"""The diurnal day: curve, Poisson thinning and seeding."""

import numpy as np
import pytest

from dspine_lab.sim.arrivals import DAY_S, diurnal_factor, sample_day
from dspine_lab.sim.traces import load_trace_table


def test_rule_curve():
    f, h = 0.25, 3.0
    assert diurnal_factor(3 * 3600.0, f, h) == pytest.approx(0.25)  # trough
    assert diurnal_factor(15 * 3600.0, f, h) == pytest.approx(1.0)  # 12 h later: peak
    # 9:00 is a quarter day after the trough: sin^2(pi / 4) = 0.5 -> 0.25 + 0.75 * 0.5 = 0.625
    assert diurnal_factor(9 * 3600.0, f, h) == pytest.approx(0.625)
    grid = np.arange(0.0, DAY_S, 60.0)
    assert diurnal_factor(grid, f, h).mean() == pytest.approx((1 + f) / 2, rel=1e-6)


def test_rule_arrivals_follow_the_rate(azure_path):
    trace = load_trace_table(str(azure_path), max_context_tokens=100_000)  # 0.2 req/s
    day = sample_day(trace, rate_scale=50.0, trough_fraction=0.25, trough_hour=3.0, duration_s=DAY_S, seed=7)
    # peak 10 req/s; mean (1 + 0.25) / 2 = 0.625 -> 540,000 expected, Poisson sd ~ 735
    assert day.peak_rate_per_s == pytest.approx(10.0)
    assert abs(day.num_requests - 540_000) < 5 * 735
    assert np.all(np.diff(day.arrival_s) >= 0)
    night = np.count_nonzero((day.arrival_s >= 2.5 * 3600) & (day.arrival_s < 3.5 * 3600))
    noon = np.count_nonzero((day.arrival_s >= 14.5 * 3600) & (day.arrival_s < 15.5 * 3600))
    assert night / noon == pytest.approx(0.25 / 1.0, abs=0.02)


def test_rule_same_seed_same_day(azure_path):
    trace = load_trace_table(str(azure_path), max_context_tokens=100_000)
    kwargs = dict(rate_scale=5.0, trough_fraction=0.5, trough_hour=0.0, duration_s=3600.0)
    a, b = sample_day(trace, seed=1, **kwargs), sample_day(trace, seed=1, **kwargs)
    c = sample_day(trace, seed=2, **kwargs)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.row, b.row)
    assert not np.array_equal(a.arrival_s[:10], c.arrival_s[:10])
