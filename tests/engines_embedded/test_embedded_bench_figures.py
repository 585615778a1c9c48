"""`bench engine`'s per-group figures from hand-made rows: end-to-end and decode-only rates, and their intervals."""

from types import SimpleNamespace

import pytest

from ray_dspine.bench import engine_bench


def _row(ar_s, ar_first, spec_s, spec_first, tokens=11):
    return {
        "category": "agent", "ar_tokens": tokens, "ar_s": ar_s, "ar_cpu": ar_s, "ar_first_s": ar_first,
        "spec_tokens": tokens, "spec_s": spec_s, "spec_cpu": spec_s, "spec_first_s": spec_first,
        "spec_verify_steps": 4, "accept_length": 2.75, "identical": True,
        "peer_tokens": tokens, "peer_s": spec_s, "peer_cpu": spec_s,
    }


def test_rule_decode_rate_excludes_the_shared_prefill():
    # Two prompts, 11 tokens each, 1 s to the first chunk on both paths.
    # End to end: ar 22 / (3 + 3) s = 3.67 tok/s, spec 22 / (2 + 2) s = 5.5 tok/s: 1.5x.
    # After the first token: ar 20 / (2 + 2) s = 5 tok/s, spec 20 / (1 + 1) s = 10 tok/s: 2.0x.
    rows = [_row(3.0, 1.0, 2.0, 1.0), _row(3.0, 1.0, 2.0, 1.0)]
    figures = engine_bench._figures(rows, rows, rows, "fp32")
    assert (figures["ar_tokens_per_s"], figures["spec_tokens_per_s"]) == (3.67, 5.5)
    assert figures["speedup"] == pytest.approx(1.499, abs=0.002)
    assert figures["decode_tokens_per_s"] == {"ar": 5.0, "spec": 10.0}
    assert figures["decode_speedup"] == 2.0


def test_decode_rate_unknown_when_a_row_never_streamed():
    rows = [_row(3.0, 1.0, 2.0, 1.0), _row(3.0, None, 2.0, 1.0)]
    figures = engine_bench._figures(rows, rows, rows, "fp32")
    assert figures["decode_tokens_per_s"] == {"ar": None, "spec": 10.0} and figures["decode_speedup"] is None


def test_rule_peer_interval_is_a_paired_bootstrap_over_prompts():
    # Every prompt: ours 2 s, the peer 3 s for the same 11 tokens -> 1.5x, and every resample says so.
    rows = [_row(3.0, 1.0, 2.0, 1.0) for _ in range(3)]
    for row in rows:
        row["peer_s"] = 3.0
    assert engine_bench.paired_interval(rows, "peer") == {"estimate": 1.5, "low": 1.5, "high": 1.5, "confidence": 0.95}
    # the peer stopped after 22 tokens where ours gave 11: its 3 s count as 1.5 s for our 11 -> 0.75x
    rows[0]["peer_tokens"], rows[1]["peer_tokens"], rows[2]["peer_tokens"] = 22, 22, 22
    assert engine_bench.paired_interval(rows, "peer")["estimate"] == 0.75
    # prompts that disagree (1.5x and 1.0x) give an interval spanning them, around (3 + 2) / (2 + 2) = 1.25
    rows = [_row(3.0, 1.0, 2.0, 1.0), _row(3.0, 1.0, 2.0, 1.0)]
    rows[0]["peer_s"], rows[1]["peer_s"] = 3.0, 2.0
    ci = engine_bench.paired_interval(rows, "peer")
    assert ci["estimate"] == 1.25 and 1.0 <= ci["low"] < 1.25 < ci["high"] <= 1.5
    assert engine_bench.paired_interval(rows[:1], "peer") is None  # one prompt: no interval


def test_rule_interval_over_autoregressive_pairs_each_prompt_with_its_own_autoregressive_decode():
    # prompt 1: ar 3 s, spec 2 s -> 1.5x; prompt 2: ar 4 s, spec 2 s -> 2.0x; all: (3 + 4) / (2 + 2) = 1.75
    rows = [_row(3.0, 1.0, 2.0, 1.0), _row(4.0, 1.0, 2.0, 1.0)]
    ci = engine_bench.paired_interval(rows, "ar")
    assert ci["estimate"] == 1.75 and 1.5 <= ci["low"] < 1.75 < ci["high"] <= 2.0
    assert engine_bench._figures(rows, rows, rows, "fp32")["speedup_ci"] == ci
    assert engine_bench._figures(rows[:1], rows, rows, "fp32")["speedup_ci"] is None  # one prompt: no interval


def test_the_text_report_prints_each_groups_intervals(monkeypatch, capsys):
    # ar 3 s and 4 s, spec 2 s each: every resample lies in [1.5, 2.0], and a quarter of them are each end;
    # the peer takes spec's 2 s on both prompts: 1.0 in every resample
    rows = [_row(3.0, 1.0, 2.0, 1.0), _row(4.0, 1.0, 2.0, 1.0)]
    figures = engine_bench._figures(rows, rows, rows, "fp32")
    result = {**figures, "per_category": {"agent": figures}, "bf16_row_exact": False, "peak_rss_mb": 1.0,
              "num_draft_tokens": 32, "peer_draft_tokens": 16,
              "concurrency": {"prompts": 2, "max_tokens": 8, "dtype": "fp32", "max_batch_requests": 4, "cells": {}}}
    monkeypatch.setattr(engine_bench, "run_engine_bench", lambda *args, **kwargs: result)
    args = SimpleNamespace(
        prompts=2, max_tokens=8, num_draft_tokens=32, peer_draft_tokens=None, dtype="fp32", json=False,
        row_exact=False, agent_conversations=0, agent_turns=1, agent_max_tokens=1, agent_concurrency="1",
        traces_dir=None,
    )
    assert engine_bench._main(args) == 0
    out = capsys.readouterr().out
    spans = "over autoregressive 1.5-2.0, over the peer 1.0-1.0"
    for group in ("all", "agent"):
        assert f"{group}: speculative, 95% paired intervals over the prompts: {spans}" in out.splitlines()
