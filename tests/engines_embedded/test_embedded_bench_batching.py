"""`bench engine`'s batching section (batched vs unbatched, concurrency 1 and 4) on the tiny model."""

import asyncio

from ray_dspine.bench import engine_bench

PROMPTS = [
    {"category": "chat", "messages": [{"role": "user", "content": "Say hello hello hello"}]},
    {"category": "code", "messages": [{"role": "user", "content": "x = 1; y = 2; x = 1; y ="}]},
    {"category": "agent", "messages": [{"role": "user", "content": "call tool(a) then tool(b) then tool("}]},
    {"category": "chat", "messages": [{"role": "user", "content": "Why?"}]},
    {"category": "code", "messages": [{"role": "user", "content": "def f(a): return a\ndef g(a): return"}]},
]


def test_batching_section_reports_both_engines_side_by_side(tiny, monkeypatch, capsys):
    monkeypatch.setattr(engine_bench, "load_model", lambda _config: tiny)
    result = asyncio.run(engine_bench._run_batching("fp32", PROMPTS, 12, 4, lambda _m: None))
    assert set(result["cells"]) == {"c1", "c4"}
    for concurrency, cell in ((1, result["cells"]["c1"]), (4, result["cells"]["c4"])):
        for name in ("batched", "unbatched"):
            figures = cell[name]
            # closed loop: each of the c workers decodes all 5 prompts, 12 tokens each unless the tiny model
            # emits its end token first
            assert figures["requests"] == 5 * concurrency
            assert 0 < figures["output_tokens"] <= 60 * concurrency
            assert figures["tokens_per_s"] > 0 and figures["cpu_tokens_per_s"] > 0
        expected = round(cell["batched"]["tokens_per_s"] / cell["unbatched"]["tokens_per_s"], 3)
        assert cell["ratio_batched_over_unbatched"] == expected
    # the unbatched engine is the exact reference whatever the concurrency; concurrency 1 never batches
    assert result["greedy_mismatches_unbatched"] == 0
    assert result["cells"]["c1"]["batched"]["greedy_mismatches"] == 0
    # measured on the tiny fp32 model: batching changes no greedy token here either
    assert result["greedy_mismatches_batched"] == 0
    assert result["max_batch_requests"] == 4 and result["prompts"] == 5
    engine_bench._print_batching(result)
    printed = capsys.readouterr().out
    assert "c4" in printed and "mismatches b/u" in printed
