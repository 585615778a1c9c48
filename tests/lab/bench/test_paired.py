"""Paired goals (ray_dspine/bench/paired.py): one test per stated rule, values worked out by hand."""

import pytest

from dspine_lab.bench.paired import (
    format_paired,
    hit_points,
    interval95,
    p99_cuts,
    paired_goals,
    t975,
    verdict,
)


def test_rule_t_quantiles_from_the_table_and_the_expansion():
    assert t975(1) == 12.706 and t975(11) == 2.201 and t975(30) == 2.042
    # Above 30 degrees of freedom: Cornish-Fisher, against the table values 2.021 (40) and 1.980 (120).
    assert t975(40) == pytest.approx(2.021, abs=5e-4)
    assert t975(120) == pytest.approx(1.980, abs=5e-4)
    with pytest.raises(ValueError, match=">= 1"):
        t975(0)


def test_rule_p99_cut_per_pair_leaves_out_missing_and_zero_baselines():
    # 1 - 4/5 = 0.2; 1 - 5/5 = 0; ours missing in the third pair; a zero baseline in the fourth.
    assert p99_cuts([4.0, 5.0, None, 1.0], [5.0, 5.0, 4.0, 0.0]) == pytest.approx([0.2, 0.0])


def test_rule_hit_points_are_percentage_points():
    assert hit_points([0.30, 0.28, None], [0.28, 0.29, 0.3]) == pytest.approx([2.0, -1.0])


def test_rule_mean_spread_and_t_interval():
    # mean 2, s = sqrt(((1-2)^2 + (3-2)^2) / 1) = sqrt(2), se = 1, t(1) = 12.706.
    assert interval95([1.0, 3.0]) == pytest.approx((2.0, 2.0 - 12.706, 2.0 + 12.706))
    # mean 0.2, s = 0.1, se = 0.1 / sqrt(3) = 0.057735, half = 4.303 * se = 0.248434.
    assert interval95([0.1, 0.2, 0.3]) == pytest.approx((0.2, -0.048434, 0.448434), abs=1e-6)


def test_rule_one_pair_has_no_interval():
    assert interval95([0.5]) == (0.5, None, None)
    assert verdict(None, None, 0.15) == "undecided"  # no interval decides nothing
    with pytest.raises(ValueError, match="no pairs"):
        interval95([])


def test_rule_verdicts():
    assert verdict(0.15, 0.30, 0.15) == "met"  # the low end reaches the target
    assert verdict(0.02, 0.149, 0.15) == "missed"  # even the high end falls short
    assert verdict(0.10, 0.20, 0.15) == "undecided"


def test_rule_goals_per_baseline_on_hand_built_pairs():
    p99 = {"headroom": [8.0, 8.0, 9.0], "cache_aware": [10.0, 9.6, 10.0], "pow2": [16.0, 16.0, 18.0]}
    hit = {"headroom": [0.281, 0.283, 0.279], "cache_aware": [0.280, 0.281, 0.282], "pow2": [0.1, 0.1, 0.1]}
    goals = {g.name: g for g in paired_goals(p99, hit, "headroom")}
    assert list(goals) == [
        "ttft_p99_reduction_vs_pow2", "ttft_p99_reduction_vs_cache_aware", "prefix_hit_points_vs_cache_aware",
    ]  # fmt: skip
    pow2 = goals["ttft_p99_reduction_vs_pow2"]
    # Every pair cuts pow2's p99 by exactly half: s = 0, the interval is the point.
    assert (pow2.mean, pow2.ci95_low, pow2.ci95_high, pow2.verdict) == pytest.approx((0.5, 0.5, 0.5, "met"))
    ca = goals["ttft_p99_reduction_vs_cache_aware"]
    # cuts 0.2, 1 - 8/9.6 = 0.166667, 0.1: mean 0.155556, s = 0.050918, half = 4.303 * s / sqrt(3) = 0.126497.
    assert ca.per_pair == pytest.approx([0.2, 1 - 8 / 9.6, 0.1])
    assert (ca.mean, ca.ci95_low, ca.ci95_high) == pytest.approx((0.155556, 0.029059, 0.282053), abs=1e-5)
    assert ca.verdict == "undecided" and ca.target == 0.15 and ca.num_pairs == 3
    points = goals["prefix_hit_points_vs_cache_aware"]
    # d = +0.1, +0.2, -0.3 points: mean 0, s = sqrt(0.07), half = 4.303 * 0.264575 / sqrt(3) = 0.657297.
    assert points.per_pair == pytest.approx([0.1, 0.2, -0.3])
    assert (points.mean, points.ci95_low, points.ci95_high) == pytest.approx((0.0, -0.657297, 0.657297), abs=1e-5)
    assert points.verdict == "undecided"


def test_rule_goals_of_absent_baselines_are_left_out():
    goals = paired_goals({"headroom": [8.0], "cache_aware": [10.0]}, {"headroom": [0.3], "cache_aware": [0.29]}, "headroom")
    assert [g.name for g in goals] == ["ttft_p99_reduction_vs_cache_aware", "prefix_hit_points_vs_cache_aware"]
    assert [g.verdict for g in goals] == ["undecided", "undecided"]  # one pair: no interval
    assert paired_goals({"cache_aware": [10.0]}, {"cache_aware": [0.29]}, "headroom") == []


def test_format_names_the_interval_and_the_verdict():
    p99 = {"headroom": [8.0, 8.0], "pow2": [16.0, 16.0], "cache_aware": [10.0, 10.0]}
    hit = {"headroom": [0.30, 0.29], "pow2": [0.1, 0.1], "cache_aware": [0.29, 0.29]}
    lines = format_paired(paired_goals(p99, hit, "headroom"))
    assert lines[0] == "SIMULATED paired ttft_p99_reduction_vs_pow2: 50.0% (95% CI 50.0 to 50.0, 2 pairs) vs target >= 30%: met"
    assert lines[1] == (
        "SIMULATED paired ttft_p99_reduction_vs_cache_aware: 20.0% (95% CI 20.0 to 20.0, 2 pairs) vs target >= 15%: met"
    )
    # d = +1, 0 points: mean 0.5, s = 0.707107, se = 0.5, half = 12.706 * 0.5 = 6.353.
    assert lines[2] == (
        "SIMULATED paired prefix_hit_points_vs_cache_aware: +0.50 pt (95% CI -5.85 to +6.85, 2 pairs) "
        "vs target >= +0.00 pt: undecided"
    )
    one = format_paired(paired_goals({"headroom": [8.0], "pow2": [16.0]}, {"headroom": [0.3], "pow2": [0.1]}, "headroom"))
    assert one == ["SIMULATED paired ttft_p99_reduction_vs_pow2: 50.0% (one pair, no interval) vs target >= 30%: undecided"]


def test_plot_draws_one_panel_per_goal_with_band_and_target(tmp_path):
    from dspine_lab.bench.paired_plot import draw_paired, plot_paired

    p99 = {"headroom": [8.0, 8.0, 9.0], "cache_aware": [10.0, 9.6, 10.0], "pow2": [16.0, 16.0, 18.0]}
    hit = {"headroom": [0.281, 0.283, 0.279], "cache_aware": [0.280, 0.281, 0.282], "pow2": [0.1, 0.1, 0.1]}
    goals = paired_goals(p99, hit, "headroom")
    figure = draw_paired(goals, "title")
    panels = figure.get_axes()
    assert len(panels) == 3
    assert panels[1].get_title() == (
        "ttft_p99_reduction_vs_cache_aware\n15.6% (95% CI 2.9 to 28.2, 3 pairs)\nvs target >= 15%: undecided"
    )
    # the dots are the per-pair cuts in percent; the dashed target line sits at 15
    dots = panels[1].collections[0].get_offsets()
    assert [round(float(y), 4) for _, y in dots] == [20.0, round(100 * (1 - 8 / 9.6), 4), 10.0]
    assert any(list(line.get_ydata()) == [15.0, 15.0] for line in panels[1].get_lines())
    assert panels[2].get_ylabel() == "ours - cache_aware, points"
    png = plot_paired({"virtual": True, "paired_goals": [g.model_dump() for g in goals]}, tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no paired goal"):
        draw_paired([], "title")
