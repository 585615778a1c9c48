"""Suffix prefill study (engines/suffix_prefill.py): a test per rule, values worked by hand."""

import json

import pytest

from dspine_lab.engines.suffix_prefill import fit_costs, load_turns, main, prefix_share, price_ms, reuse_ratios


def test_share_is_the_part_the_cached_prefix_adds():
    assert prefix_share(4.0, 1.0) == pytest.approx(0.75)  # (4 - 1) / 4
    assert prefix_share(2.0, 2.0) == 0.0


def test_fit_recovers_base_and_pair_costs():
    # S = 2: pairs(0, 2) = 1, pairs(10, 2) = 2 * 10 + 1 = 21. With base 1 ms and 0.5 ms a pair:
    # t(0) = 2 + 0.5 = 2.5, t(10) = 2 + 10.5 = 12.5; two lengths, two unknowns, an exact fit.
    base, pair = fit_costs(2, {0: 2.5, 10: 12.5})
    assert base == pytest.approx(1.0)
    assert pair == pytest.approx(0.5)


def test_fit_needs_two_distinct_lengths():
    with pytest.raises(ValueError, match="two distinct cached lengths"):
        fit_costs(2, {10: 12.5})


def test_price_is_tokens_plus_attended_pairs():
    assert price_ms(1.0, 0.5, 10, 2) == pytest.approx(12.5)  # 2 * 1 + 0.5 * 21
    assert price_ms(1.0, 0.5, 0, 1) == pytest.approx(1.0)  # one token attends nothing before it


def test_ratio_per_turn_of_median_prices_and_ttft_against_price():
    # base 1, pair 0: turn (100, 90) costs 100 in full and 10 with reuse, ratio 10; turn (50, 0) costs 50
    # both ways, ratio 1. Median ratio (10 + 1) / 2 = 5.5; median prices 75 and 30, ratio 2.5.
    # Measured TTFT 25 and 60 ms: excess 15 and 10 (median 12.5), ttft / price 2.5 and 1.2 (median 1.85).
    r = reuse_ratios(1.0, 0.0, [(100, 90, 25.0), (50, 0, 60.0)])
    assert r["median_turn_ratio"] == 5.5
    assert r["ratio_of_median_prices"] == 2.5
    assert (r["median_full_prefill_ms"], r["median_prefill_ms"], r["median_ttft_ms"]) == (75.0, 30.0, 42.5)
    assert r["median_ttft_minus_price_ms"] == 12.5
    assert r["median_ttft_over_price"] == 1.85


def test_turns_are_the_answered_requests_by_arm_else_pool(tmp_path):
    records = tmp_path / "records.jsonl"
    def row(status, arm, pool, prompt, cached, ttft):
        keys = ("http_status", "arm", "pool", "prompt_tokens", "cached_prompt_tokens", "ttft_s")
        return dict(zip(keys, (status, arm, pool, prompt, cached, ttft)))

    rows = [
        row(200, "reuse", "spec", 100, 64, 0.5), row(400, "reuse", "spec", 9000, 0, None), row(200, None, "ar", 80, None, 2.0)
    ]
    records.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert load_turns(records) == {"reuse": [(100, 64, 500.0)], "ar": [(80, 0, 2000.0)]}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cached", "0"], "two or more lengths"),
        (["--cached", "0,x"], "comma-separated integers"),
        (["--suffix", "0"], "must be >= 1"),
        (["--cached", "0,8000", "--suffix", "400"], "8,192-token window"),
        (["--records", "/nonexistent/records.jsonl"], "no such file"),
        (["--records", "{tmp}/broken.jsonl"], "is not a replay's records.jsonl"),
        (["--records", "{tmp}/refused.jsonl"], "no answered requests"),
    ],
)
def test_bad_arguments_name_the_flag(argv, message, capsys, tmp_path):
    (tmp_path / "broken.jsonl").write_text("not json\n")
    (tmp_path / "refused.jsonl").write_text(json.dumps({"http_status": 400}) + "\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
