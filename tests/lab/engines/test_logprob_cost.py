"""Log-probabilities' cost (engines/logprob_cost.py) on the tiny random-weight Llama, timed by a fake clock."""

import itertools

import pytest

from dspine_lab.engines.logprob_cost import main, measure, variants
from ray_dspine.engines.embedded.config import EmbeddedEngineConfig


def test_rule_variants_ask_for_nothing_the_chosen_tokens_and_alternatives():
    assert variants(5) == {"off": {}, "logprobs": {"logprobs": True}, "top5": {"logprobs": True, "top_logprobs": 5}}


def test_rules_order_and_figures_every_decode_timed_once_and_the_answers_compared(tiny):
    config = EmbeddedEngineConfig(dtype="fp32", max_running_requests=1, prefix_reuse=False, context_length_tokens=256,
                                  kv_budget_tokens=2048)  # fmt: skip
    prompts = [{"messages": [{"role": "user", "content": "abcabcabc"}]},
               {"messages": [{"role": "user", "content": "hello there"}]}]  # fmt: skip
    ticks = itertools.count()
    figures = measure(tiny, config, prompts, 8, top=3, rounds=2, clock=lambda: float(next(ticks)))
    # each decode reads the clock twice, one tick apart: 1 s each, 2 rounds x 2 prompts = 4 s per variant
    assert figures["seconds"] == {"off": 4.0, "logprobs": 4.0, "top3": 4.0}
    assert figures["ratio"] == {"off": 1.0, "logprobs": 1.0, "top3": 1.0}
    assert figures["same_text"] is True  # asking for log-probabilities changes no answer


@pytest.mark.parametrize(
    "argv, message",
    [(["--rounds", "0"], "must be at least 1"), (["--top", "21"], "--top must be between 1 and 20")],
)
def test_bad_flags_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
