"""Trace tables from hand-written Azure and Mooncake fixtures."""

from dspine_lab.sim.traces import load_trace_table


def test_rule_azure_columns_and_span(azure_path):
    t = load_trace_table(str(azure_path), max_context_tokens=100_000)
    assert list(t.prompt_tokens) == [1000, 2000, 600, 1500]
    assert list(t.output_tokens) == [20, 5, 40, 1]
    assert t.prefix_blocks is None
    assert t.span_s == 20.0  # 18:00:20 - 18:00:00
    assert t.mean_rate_per_s == 0.2  # 4 rows / 20 s
    assert len(t.sha256) == 64


def test_rule_mooncake_full_blocks(mooncake_path):
    t = load_trace_table(str(mooncake_path), max_context_tokens=100_000)
    # full 512-token blocks: 1100 // 512 = 2, 1600 // 512 = 3, 300 // 512 = 0
    assert t.prefix_blocks == (("0", "1"), ("0", "1", "3"), ())
    assert t.span_s == 9.0


def test_rule_clamp_to_context(mooncake_path):
    t = load_trace_table(str(mooncake_path), max_context_tokens=1000)
    # prompt <= 1000 - output: 1100 -> 970 (one full block), 1600 -> 990, 300 stays
    assert list(t.prompt_tokens) == [970, 990, 300]
    assert t.prefix_blocks == (("0",), ("0",), ())
