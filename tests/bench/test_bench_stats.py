"""Statistics with answers worked out by hand."""

import numpy as np
import pytest

from ray_dspine.bench.stats import (
    bootstrap_mean_ci,
    bootstrap_ratio_ci,
    cluster_mean_ci,
    cluster_ratio_ci,
    describe,
    mean,
    paired_cluster_ratio_ci,
    percentile,
)


def test_rule_percentile_linear_interpolation():
    x = list(range(1, 101))
    # h = 99 q / 100: q=50 -> h=49.5 -> 50 + 0.5 * 1 = 50.5; q=95 -> h=94.05 -> 95.05; q=99 -> 99.01.
    assert percentile(x, 50) == pytest.approx(50.5)
    assert percentile(x, 95) == pytest.approx(95.05)
    assert percentile(x, 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    assert percentile([10, 20], 25) == pytest.approx(12.5)  # h = 0.25 -> 10 + 0.25 * 10
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1], 101)


def test_describe():
    d = describe([4.0, 1.0, 3.0, 2.0])
    # sorted 1..4, mean 2.5; p50: h = 1.5 -> 2.5; p95: h = 2.85 -> 3.85; p99: h = 2.97 -> 3.97.
    assert (d.count, d.mean, d.min, d.max) == (4, 2.5, 1.0, 4.0)
    assert (d.p50, d.p95, d.p99) == pytest.approx((2.5, 3.85, 3.97))
    assert describe([]).count == 0 and describe([]).mean is None
    assert mean([1, 2, 6]) == 3.0


def test_rule_bootstrap_mean_ci_constant_is_exact():
    ci = bootstrap_mean_ci([3.25] * 20, np.random.default_rng(0), num_resamples=200)
    assert (ci.estimate, ci.low, ci.high) == (3.25, 3.25, 3.25)
    assert ci.confidence == 0.95 and ci.num_resamples == 200


def test_bootstrap_mean_ci_covers_mean_and_is_reproducible():
    values = np.random.default_rng(1).normal(10.0, 2.0, size=400)
    a = bootstrap_mean_ci(values, np.random.default_rng(7), num_resamples=500)
    b = bootstrap_mean_ci(values, np.random.default_rng(7), num_resamples=500)
    assert a == b
    assert a.low < values.mean() < a.high
    # Standard error 2 / sqrt(400) = 0.1, so the 95% interval is about +-0.2 wide on each side.
    assert 0.3 < a.high - a.low < 0.5


def test_rule_ratio_ci_identical_arms_contains_one():
    values = np.random.default_rng(2).exponential(1.0, size=200)
    ci = bootstrap_ratio_ci(values, values.copy(), np.random.default_rng(3), num_resamples=500)
    assert ci.estimate == 1.0
    assert ci.low < 1.0 < ci.high


def test_ratio_ci_known_ratio_and_errors():
    ci = bootstrap_ratio_ci([2.0] * 10, [3.0] * 5, np.random.default_rng(0), num_resamples=50)
    assert (ci.estimate, ci.low, ci.high) == (1.5, 1.5, 1.5)  # constant groups: 3 / 2 exactly
    with pytest.raises(ValueError):
        bootstrap_ratio_ci([0.0, 0.0], [1.0], np.random.default_rng(0))
    with pytest.raises(ValueError):
        bootstrap_ratio_ci([], [1.0], np.random.default_rng(0))
    with pytest.raises(ValueError):
        bootstrap_mean_ci([1.0], np.random.default_rng(0), confidence=1.0)


def test_rule_cluster_ratio_resamples_whole_conversations():
    # Two baseline conversations of 10 turns each, all 1s and all 3s; the treatment is 2 everywhere. A
    # resample draws 2 conversations: means 1, 2 or 3 with probability 1/4, 1/2, 1/4, so the ratio 2 / mean
    # is 2, 1 or 2/3, and the 2.5th and 97.5th percentiles sit inside the two 25% masses: [2/3, 2].
    baseline = [[1.0] * 10, [3.0] * 10]
    treatment = [[2.0] * 10, [2.0] * 10]
    ci = cluster_ratio_ci(baseline, treatment, np.random.default_rng(0), num_resamples=2000)
    assert ci.estimate == pytest.approx(1.0)  # 2 / ((10 + 30) / 20)
    assert (ci.low, ci.high) == pytest.approx((2 / 3, 2.0))
    # The same 20 turns drawn one by one: the baseline mean's standard error is 1 / sqrt(20) = 0.22, so
    # the interval on the ratio stays within about [0.8, 1.3].
    by_turn = bootstrap_ratio_ci(sum(baseline, []), sum(treatment, []), np.random.default_rng(0), num_resamples=2000)
    assert 0.75 < by_turn.low < 1.0 < by_turn.high < 1.35


def test_rule_cluster_mean_resamples_whole_clusters():
    # Clusters [1 x 10] and [3 x 10]: a resample's mean is 1, 2 or 3 (probability 1/4, 1/2, 1/4), so the
    # 2.5th and 97.5th percentiles sit in the two 25% masses: [1, 3].
    ci = cluster_mean_ci([[1.0] * 10, [3.0] * 10], np.random.default_rng(0), num_resamples=2000)
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((2.0, 1.0, 3.0))
    # the same 20 values one by one: standard error 1 / sqrt(20) = 0.22, interval within about [1.5, 2.5]
    by_value = bootstrap_mean_ci([1.0] * 10 + [3.0] * 10, np.random.default_rng(0), num_resamples=2000)
    assert 1.5 < by_value.low < 2.0 < by_value.high < 2.5
    # one value per cluster is the mean bootstrap; empty clusters are ignored; none at all is an error
    assert cluster_mean_ci([[4.0], [], [4.0]], np.random.default_rng(0), num_resamples=50).high == 4.0
    with pytest.raises(ValueError):
        cluster_mean_ci([[]], np.random.default_rng(0))


def test_cluster_ratio_one_value_per_cluster_and_errors():
    ci = cluster_ratio_ci([[2.0], [2.0]], [[3.0], [], [3.0, 3.0]], np.random.default_rng(0), num_resamples=50)
    assert (ci.estimate, ci.low, ci.high) == (1.5, 1.5, 1.5)  # constant groups; the empty cluster ignored
    with pytest.raises(ValueError):
        cluster_ratio_ci([[0.0]], [[1.0]], np.random.default_rng(0))
    with pytest.raises(ValueError):
        cluster_ratio_ci([[]], [[1.0]], np.random.default_rng(0))


def test_rule_paired_cluster_ratio_proportional_pairs_are_exact():
    # Every arm value is half its baseline value: p50s 4 and 2, means 4 and 2, and every resample of the
    # clusters keeps the proportion, so the interval is exactly [0.5, 0.5].
    pairs = [("a", 2.0, 1.0), ("a", 4.0, 2.0), ("b", 6.0, 3.0)]
    for stat in ("p50", "mean"):
        ci = paired_cluster_ratio_ci(pairs, np.random.default_rng(0), stat=stat, num_resamples=200)
        assert (ci.estimate, ci.low, ci.high) == pytest.approx((0.5, 0.5, 0.5))


def test_rule_paired_cluster_ratio_resamples_whole_clusters():
    # Clusters a = (1, 1) and b = (3, 1): the data give p50s 2 and 1, ratio 0.5. A resample is {a, a}
    # (ratio 1), {b, b} (1/3) or {a, b} (0.5), a quarter, a quarter and a half of the time, so the 2.5th
    # and 97.5th percentiles of the ratios are 1/3 and 1.
    ci = paired_cluster_ratio_ci([("a", 1.0, 1.0), ("b", 3.0, 1.0)], np.random.default_rng(1), num_resamples=2000)
    assert ci.estimate == pytest.approx(0.5)
    assert (ci.low, ci.high) == pytest.approx((1 / 3, 1.0))


def test_paired_cluster_ratio_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="at least one pair"):
        paired_cluster_ratio_ci([], rng)
    with pytest.raises(ValueError, match="'mean' or 'p50'"):
        paired_cluster_ratio_ci([("a", 1.0, 1.0)], rng, stat="max")
    with pytest.raises(ValueError, match="statistic is 0"):
        paired_cluster_ratio_ci([("a", 0.0, 1.0)], rng)
