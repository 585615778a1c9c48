"""Azure trace parsing: arrivals from timestamps, one session per request, no shared text."""

import pytest

from ray_dspine.bench.traces.azure import parse_azure
from ray_dspine.bench.traces.synthetic import render_synthetic

CSV = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:17:03.9799600,4808,10
2023-11-16 18:17:04.0319600,3180,8
2023-11-16 18:17:05.5000000,100,5
"""


def test_rule_azure_arrivals_and_sessions(tmp_path):
    path = tmp_path / "AzureLLMInferenceTrace_code.csv"
    path.write_text(CSV)
    requests = parse_azure(path, workload_class="code", max_prompt_tokens=None, source="azure-code")
    # 04.03196 - 03.97996 = 0.052 s; 05.5 - 03.97996 = 1.52004 s
    assert [r.arrival_s for r in requests] == pytest.approx([0.0, 0.052, 1.52004])
    assert len({r.session_id for r in requests}) == 3
    assert [r.turn_index for r in requests] == [0, 0, 0]
    assert [r.max_tokens for r in requests] == [10, 8, 5]
    assert [r.prompt_tokens for r in requests] == [4808, 3180, 100]
    assert {r.workload_class for r in requests} == {"code"}
    assert requests[0].synthetic_prompt.block_ids == list(range(10))  # ceil(4808 / 512) = 10 blocks
    # Own namespace per request: no two prompts share text.
    assert render_synthetic(requests[0].synthetic_prompt)[:400] != render_synthetic(requests[1].synthetic_prompt)[:400]


def test_azure_clamp_and_bad_file(tmp_path):
    path = tmp_path / "conv.csv"
    path.write_text(CSV)
    requests = parse_azure(path, workload_class="chat", max_prompt_tokens=1000, source="azure-conv")
    assert [(r.prompt_tokens, r.recorded_prompt_tokens) for r in requests] == [(1000, 4808), (1000, 3180), (100, 100)]
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="missing columns"):
        parse_azure(bad, workload_class="chat", max_prompt_tokens=None, source="x")
