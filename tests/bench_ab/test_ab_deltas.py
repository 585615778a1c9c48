"""Candidate minus baseline at p50/p99 with bootstrap intervals: one test per rule of ab_deltas.py."""

from __future__ import annotations

import numpy as np
import pytest

from ray_dspine.bench import ab_deltas
from ray_dspine.bench.ab_deltas import PercentileDelta, bootstrap_percentiles, percentile_deltas


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_rule_delta_is_candidate_minus_baseline_at_each_percentile():
    # candidate 100..400: p50 at rank 1.5 -> 250, p99 at rank 2.97 -> 397.
    # baseline 97..397: p50 247, p99 394. So +3 ms at both.
    deltas = percentile_deltas("ttft_ms", [400, 100, 300, 200], [97, 197, 297, 397], _rng(), 500)
    assert [d.percentile for d in deltas] == [50, 99]
    assert [d.candidate for d in deltas] == pytest.approx([250, 397])
    assert [d.baseline for d in deltas] == pytest.approx([247, 394])
    assert [d.delta for d in deltas] == pytest.approx([3, 3])
    assert {d.metric for d in deltas} == {"ttft_ms"}


def test_rule_interval_of_constant_arms_is_the_exact_difference():
    # Every resample of a constant arm has that constant as its percentile: delta* is always 10 - 4 = 6.
    deltas = percentile_deltas("e2e_ms", [10.0] * 5, [4.0] * 7, _rng(), 300)
    assert [d.delta_ci for d in deltas] == [(6.0, 6.0), (6.0, 6.0)]
    assert [d.reading for d in deltas] == ["higher", "higher"]


def test_rule_interval_stays_within_what_resamples_can_give():
    # candidate 0..99 and baseline 1000..1099: any resample's percentile lies within its arm's range,
    # so delta* lies within [0 - 1099, 99 - 1000] = [-1099, -901]. p50: 49.5 - 1049.5 = -1000.
    deltas = percentile_deltas("ttft_ms", np.arange(100.0), np.arange(1000.0, 1100.0), _rng(3), 1000)
    p50, p99 = deltas
    assert p50.delta == pytest.approx(-1000)
    for d in deltas:
        low, high = d.delta_ci
        assert -1099 <= low <= d.delta <= high <= -901
        assert d.reading == "lower"
    # p99: 98.01 - 1098.01 = -1000 too (both arms are evenly spaced by 1).
    assert p99.delta == pytest.approx(-1000)


def test_rule_interval_straddling_zero_reads_no_significant_difference():
    # The same 200 values in both arms: delta is 0, and independent resamples scatter delta* on both sides.
    values = np.random.default_rng(11).exponential(100.0, size=200)
    deltas = percentile_deltas("ttft_ms", values, values, _rng(5), 1000)
    for d in deltas:
        assert d.delta == 0.0
        low, high = d.delta_ci
        assert low < 0 < high and d.reading == "no significant difference"


def test_rule_no_interval_under_two_values_and_no_delta_without_values():
    one = percentile_deltas("ttft_ms", [5.0], [1.0, 2.0], _rng(), 200)
    assert [d.delta for d in one] == pytest.approx([3.5, 5.0 - 1.99])  # baseline p50 1.5, p99 1.99
    assert [d.delta_ci for d in one] == [None, None] and one[0].reading == "too few values"
    assert percentile_deltas("ttft_outside_ms", [], [1.0, 2.0], _rng(), 200) == []
    assert percentile_deltas("ttft_outside_ms", [1.0, 2.0], [], _rng(), 200) == []


def test_rule_reading_from_the_interval_ends():
    def delta(ci):
        return PercentileDelta(metric="m", percentile=99, num_candidate=9, num_baseline=9, candidate=0, baseline=0,
                               delta=0, delta_ci=ci)

    assert delta((-5.0, -0.1)).reading == "lower"
    assert delta((0.1, 5.0)).reading == "higher"
    assert delta((-1.0, 1.0)).reading == "no significant difference"
    assert delta((0.0, 1.0)).reading == "no significant difference"  # 0 is inside the interval


def test_bootstrap_percentiles_shape_blocks_and_seed(monkeypatch):
    values = np.asarray([1.0, 5.0, 9.0])
    draws = bootstrap_percentiles(values, [50, 99], _rng(2), 7)
    assert draws.shape == (2, 7) and draws.min() >= 1.0 and draws.max() <= 9.0
    assert np.array_equal(draws, bootstrap_percentiles(values, [50, 99], _rng(2), 7))
    monkeypatch.setattr(ab_deltas, "_BLOCK_CELLS", 4)  # one resample of 3 values per block
    blocked = bootstrap_percentiles(values, [50], _rng(2), 7)
    # the median of three draws from {1, 5, 9} is one of them
    assert blocked.shape == (1, 7) and set(np.unique(blocked)) <= {1.0, 5.0, 9.0}


def _comparison(deltas):
    from ray_dspine.bench.ab_report import ArmComparison

    return ArmComparison(candidate="spec", baseline="ar", spans_overlap=1.0, speed_metric="per-request output rate",
                         speed_ratio=None, speed_ratio_ci=None, throughput_ratio=None, throughput_ratio_ci=None,
                         e2e_mean_ratio=None, e2e_mean_ratio_ci=None, cost_per_completed_ratio=None,
                         ttft_p50_delta_ms=None, e2e_p50_delta_ms=None, percentile_deltas=deltas, verdict="")


def _delta(metric, p, ci):
    return PercentileDelta(metric=metric, percentile=p, num_candidate=50, num_baseline=60, candidate=0, baseline=0,
                           delta=0 if ci is None else sum(ci) / 2, delta_ci=ci)


def test_rule_plot_rows_in_report_order_coloured_by_reading():
    from ray_dspine.bench.ab_deltas_plot import delta_rows

    rows = delta_rows(_comparison([_delta("ttft_ms", 50, (-9.0, -1.0)), _delta("ttft_ms", 99, (2.0, 8.0)),
                                   _delta("ttft_outside_ms", 50, (-1.0, 1.0)), _delta("e2e_ms", 99, None)]))
    assert [(label, colour) for label, _, colour in rows] == [
        ("TTFT p50", "tab:green"), ("TTFT p99", "tab:red"), ("TTFT outside it p50", "tab:gray"),
        ("e2e p99", "tab:gray")]


def test_plot_draws_ttft_and_e2e_on_their_own_scales_and_refuses_nothing_to_draw(tmp_path):
    from ray_dspine.bench.ab_deltas_plot import draw_deltas, plot_deltas
    from ray_dspine.bench.ab_report import AbReport

    def report(comparisons):
        return AbReport(source="run", num_records=110, num_bad_lines=0, run_span_s=10.0, num_resamples=100, seed=0,
                        baseline="ar", arms=[], comparisons=comparisons, verdict="")

    deltas = [_delta("ttft_ms", 50, (-9.0, -1.0)), _delta("ttft_ms", 99, (-20.0, 5.0)),
              _delta("e2e_ms", 50, (-900.0, -100.0)), _delta("e2e_ms", 99, (-2000.0, 400.0))]
    figure = draw_deltas(report([_comparison(deltas)]))
    ttft_axes, e2e_axes = figure.axes
    assert [t.get_text() for t in ttft_axes.get_yticklabels()] == ["TTFT p50", "TTFT p99"]
    assert [t.get_text() for t in e2e_axes.get_yticklabels()] == ["e2e p50", "e2e p99"]
    assert "spec (50 requests) vs ar (60)" in ttft_axes.get_title()
    png = plot_deltas(report([_comparison(deltas)]), tmp_path / "deltas.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no latency differences to draw"):
        draw_deltas(report([]))


def test_rule_interval_by_conversation_draws_whole_conversations():
    # Candidate conversations a (ten 100 ms) and b (ten 300 ms); baseline 200 ms everywhere, in two
    # conversations. A draw of two candidate conversations is aa, ab or bb (1/4, 1/2, 1/4), whose p99 is
    # 100, 300, 300 ms: delta* is -100 (1/4) or +100 (3/4), so the interval is [-100, +100]. Drawn value by
    # value, 20 draws are all 100 ms with probability 2^-20, so p99* is 300 and the interval [+100, +100].
    candidate, labels = [100.0] * 10 + [300.0] * 10, ["a"] * 10 + ["b"] * 10
    baseline, base_labels = [200.0] * 20, ["c"] * 10 + ["d"] * 10
    by_conversation = percentile_deltas("e2e_ms", candidate, baseline, _rng(1), 1000, (99,),
                                        candidate_conversations=labels, baseline_conversations=base_labels)
    assert by_conversation[0].delta == pytest.approx(100) and by_conversation[0].delta_ci == (-100.0, 100.0)
    by_value = percentile_deltas("e2e_ms", candidate, baseline, _rng(1), 1000, (99,))
    assert by_value[0].delta_ci == (100.0, 100.0)
    one = percentile_deltas("e2e_ms", candidate, baseline, _rng(1), 100, (99,),
                            candidate_conversations=["a"] * 20, baseline_conversations=base_labels)
    assert one[0].delta_ci is None  # a single conversation cannot be resampled
    with pytest.raises(ValueError):
        percentile_deltas("e2e_ms", candidate, baseline, _rng(1), 100, candidate_conversations=["a"])
