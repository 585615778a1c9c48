"""Draft-prior tuning study (engines/draft_prior_tuning.py): its split and its choice, by hand."""

import pytest

from dspine_lab.engines.draft_prior_tuning import REPORT_PROMPTS, choose_weight, main, tuning_prompts
from ray_dspine.bench.engine_bench import load_prompts


def test_tuning_prompts_never_include_the_report_set():
    report = load_prompts(REPORT_PROMPTS)
    tuning = tuning_prompts(6)
    assert len(tuning) == 6 and not [p for p in tuning if p in report]
    assert sorted(p["category"] for p in tuning) == ["agent", "agent", "chat", "chat", "code_edit", "code_edit"]
    with pytest.raises(ValueError, match="at most"):
        tuning_prompts(100)


def test_rule_choice_is_the_fastest_weight_that_keeps_chat():
    ar = {"chat": 10.0, "overall": 10.0}
    rates = {
        0.0: {"chat": 10.5, "overall": 20.0},
        2.0: {"chat": 10.0, "overall": 22.0},  # chat 1.0x: allowed, and fastest
        4.0: {"chat": 9.0, "overall": 25.0},  # chat 0.9x < 0.97: not allowed however fast
    }
    assert choose_weight(rates, ar, chat_floor=0.97) == 2.0
    assert choose_weight({4.0: rates[4.0]}, ar, chat_floor=0.97) == 0.0  # none qualifies: the neutral start
    # a tie goes to the smaller weight
    assert choose_weight({0.0: {"chat": 10.0, "overall": 20.0}, 2.0: {"chat": 10.0, "overall": 20.0}}, ar, 0.97) == 0.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--weights", "a"], "comma-separated numbers"),
        (["--weights", "-1"], "between 0 and 64"),
        (["--rounds", "0"], "must be >= 1"),
        (["--prompts", "100"], "--prompts: only"),
    ],
)
def test_bad_arguments_name_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
