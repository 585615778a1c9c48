"""Concurrency A/B study (engines/concurrency_ab.py): a test per rule, values worked by hand."""

import math

import pytest

import dspine_lab.engines.concurrency_ab as study


def test_rule_figures_equal_ratios_have_a_point_interval():
    out = study.paired_ratio_interval([1.1, 1.1])  # sd of the logs 0: the interval is the point
    assert out["geometric_mean"] == pytest.approx(1.1)
    assert out["low"] == pytest.approx(1.1) and out["high"] == pytest.approx(1.1)
    assert out["verdict"] == "B faster"


def test_rule_figures_two_opposite_pairs_cannot_tell():
    # logs +-ln 2: mean 0, sd ln 2 * sqrt(2) = 0.9803, half width 12.706 * 0.9803 / sqrt(2) = 8.807
    out = study.paired_ratio_interval([2.0, 0.5])
    assert out["geometric_mean"] == pytest.approx(1.0)
    assert math.log(out["high"]) == pytest.approx(12.706 * math.log(2), rel=1e-6)
    assert out["verdict"] == "cannot tell"


def test_rule_figures_three_pairs_by_hand():
    # logs 0.18232, 0.09531, 0.13976: mean 0.13913, sd 0.04351, half 4.303 * 0.04351 / sqrt(3) = 0.10810
    out = study.paired_ratio_interval([1.2, 1.1, 1.15])
    assert out["geometric_mean"] == pytest.approx(math.exp(0.13913), abs=1e-4)
    assert out["low"] == pytest.approx(math.exp(0.13913 - 0.10810), abs=1e-3)  # 1.0315: above 1
    assert out["verdict"] == "B faster"
    assert study.paired_ratio_interval([0.8, 0.85, 0.9])["verdict"] == "B slower"
    with pytest.raises(ValueError):
        study.paired_ratio_interval([1.1])  # one pair has no spread to judge by


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--variant", "a=mixed_chunk:true"], "give exactly two"),
        (["--variant", "a=mixed_chunk:true", "--variant", "b=mixed_chunk:false", "--pairs", "1"], "--pairs must be"),
        (["--variant", "a=mixed_chunk:true", "--variant", "b=no_such_field:1"], "no_such_field"),
        (["--variant", "a=mixed_chunk:true", "--variant", "a=mixed_chunk:false"], "names must differ"),
        (["--variant", "a=dtype:\"bf16\"", "--variant", "b=mixed_chunk:false"], "dtype stays fp32"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        study.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
