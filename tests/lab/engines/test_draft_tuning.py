"""Drafting-settings study (engines/draft_tuning.py): its rules and its refusals, without decoding."""

import pytest

from dspine_lab.engines.draft_tuning import choose_variant, main, parse_variant, tuning_prompts


def test_variant_syntax():
    assert parse_variant("w2=draft_prior_weight:2") == ("w2", {"draft_prior_weight": 2})
    assert parse_variant("off=adaptive_draft:false;num_draft_tokens:4") == (
        "off",
        {"adaptive_draft": False, "num_draft_tokens": 4},
    )
    with pytest.raises(ValueError, match="NAME=FIELD:VALUE"):
        parse_variant("draft_prior_weight:2")
    with pytest.raises(ValueError, match="must be JSON"):
        parse_variant("x=adaptive_draft:False")


def test_rule_choice_fastest_overall_that_keeps_chat():
    ar = {"chat": 10.0, "overall": 10.0}
    rates = {
        "a": {"chat": 10.0, "overall": 15.0},
        "b": {"chat": 9.0, "overall": 18.0},  # chat 0.9x: under the 0.97 floor, out
        "c": {"chat": 9.8, "overall": 16.0},  # chat 0.98x: allowed, fastest allowed
    }
    assert choose_variant(rates, ar, 0.97) == "c"
    assert choose_variant({"a": {"chat": 9.0, "overall": 1.0}, "b": {"chat": 9.0, "overall": 2.0}}, ar, 0.97) == "a"
    # ties go to the variant named first
    assert choose_variant({"a": {"chat": 10.0, "overall": 2.0}, "b": {"chat": 10.0, "overall": 2.0}}, ar, 0.97) == "a"


def test_tuning_prompts_never_include_the_report_set():
    from ray_dspine.bench.engine_bench import REPORT_PROMPTS, load_prompts

    report = load_prompts(REPORT_PROMPTS)
    tuning = tuning_prompts(6)
    assert len(tuning) == 6 and not any(p in report for p in tuning)
    assert sorted(p["category"] for p in tuning) == ["agent", "agent", "chat", "chat", "code_edit", "code_edit"]
    with pytest.raises(ValueError, match="only 6 prompts tune the engine's settings"):
        tuning_prompts(7)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--variant", "ar=adaptive_draft:false"], "not 'ar'"),
        (["--variant", "x=draft_prior_weight:1", "--variant", "x=draft_prior_weight:2"], "must be unique"),
        (["--variant", "x=draft_prior_weight:-1"], "not a valid engine setting"),
        (["--variant", "x=no_such_field:1"], "not a valid engine setting"),
        (["--variant", "x"], "NAME=FIELD:VALUE"),
        (["--prompts", "7"], "only 6 prompts"),
        (["--rounds", "0"], "must be >= 1"),
        (["--peer-tokens", "8,x"], "comma-separated integers"),
        (["--base", "num_draft_tokens:99"], "--base: not a valid engine setting"),
        (["--base", "num_draft_tokens"], "--base: not a valid engine setting"),
        (["--base", "dtype:\"bf16\""], "pass --dtype"),
        (["--dtype", "fp16"], "invalid choice: 'fp16'"),
        (["--peer-tokens", "0,8"], "between 1 and 64"),
        (["--variant", "peer-k8=draft_prior_weight:1"], "not start with 'peer-'"),
    ],
)
def test_bad_input_is_a_cli_error_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
