"""Cold vs warm-cache greedy answers (engines/reuse_identity.py) on the tiny random-weight Llama."""

import pytest

from dspine_lab.engines.reuse_identity import compare, main
from ray_dspine.engines.embedded.config import EmbeddedEngineConfig


def test_rules_cold_and_warm_pair_every_prompt_with_its_second_pass(tiny):
    config = EmbeddedEngineConfig(
        dtype="fp32", max_running_requests=1, context_length_tokens=256, kv_budget_tokens=2048, prefix_block_tokens=8
    )
    prompts = [
        {"category": "chat", "messages": [{"role": "user", "content": "abcabcabcabcabcabcabc"}]},
        {"category": "chat", "messages": [{"role": "user", "content": "abcabcabcabc and more words here"}]},
    ]
    rows = compare(tiny, config, prompts, 12)
    # the tiny tokenizer renders "user: <text>|assistant: " one token per character: 6 + 21 + 1 + 11 = 39 and
    # 6 + 32 + 1 + 11 = 50 tokens; on the second pass each prompt's own whole blocks of 8 are cached: 32 and 48
    assert [r["cached_tokens"] for r in rows] == [32, 48]
    # fp32 on two layers: moving the chunk boundary moves bits far below any argmax margin here
    assert [r["differs"] for r in rows] == [False, False]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--row-exact"], "--row-exact needs --dtype bf16"),
        (["--prompts", "0"], "--prompts and --max-tokens must be at least 1"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
