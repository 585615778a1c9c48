"""Synthetic text, format detection, name resolution and the limit rule."""

import json

import pytest

from ray_dspine.bench.traces.loader import (
    TraceNotFoundError,
    default_traces_dir,
    detect_format,
    limit_requests,
    load_trace,
    resolve_trace_path,
)
from ray_dspine.bench.traces.model import SyntheticPrompt, TraceRequest
from ray_dspine.bench.traces.synthetic import BLOCK_CHARS, block_text, estimate_tokens, render_synthetic


def test_rule_synthetic_block_is_fixed_and_deterministic():
    assert BLOCK_CHARS == 512 * 4
    assert len(block_text("ns", 3)) == 2048
    assert block_text("ns", 3) == block_text("ns", 3)
    assert block_text("ns", 3) != block_text("ns", 4)
    assert block_text("ns", 3) != block_text("other", 3)
    # 700 tokens over blocks [3, 4]: block 3 whole (2,048 chars) + the first 752 chars of block 4.
    text = render_synthetic(SyntheticPrompt(namespace="ns", block_ids=[3, 4, 5], num_tokens=700))
    assert text == block_text("ns", 3) + block_text("ns", 4)[:752]
    assert estimate_tokens(text) == 700 and estimate_tokens("") == 0 and estimate_tokens("abcde") == 2


def _request(rid, session, turn, arrival):
    return TraceRequest(request_id=rid, session_id=session, turn_index=turn, arrival_s=arrival,
                        workload_class="chat", prompt="p", prompt_tokens=1, recorded_prompt_tokens=1,
                        max_tokens=1, source="t")


def test_rule_limits():
    requests = [_request("a0", "a", 0, 0.0), _request("b0", "b", 0, 1.0), _request("a1", "a", 1, 2.0),
                _request("c0", "c", 0, 3.0), _request("b1", "b", 1, 4.0)]
    ids = lambda rs: [r.request_id for r in rs]  # noqa: E731
    assert ids(limit_requests(requests, max_conversations=2, max_requests=None)) == ["a0", "b0", "a1", "b1"]
    assert ids(limit_requests(requests, max_conversations=2, max_requests=3)) == ["a0", "b0", "a1"]
    assert ids(limit_requests(requests, max_conversations=None, max_requests=2)) == ["a0", "b0"]
    # sessions in order of their first request: a, b, c; skipping a leaves b and c

    def skip(k, n, m=None):
        return ids(limit_requests(requests, max_conversations=n, max_requests=m, skip_conversations=k))

    assert skip(1, None) == ["b0", "c0", "b1"]
    assert skip(1, 1) == ["b0", "b1"]
    assert skip(2, 5, 1) == ["c0"]
    assert skip(3, None) == []


def test_rule_detect_format(tmp_path):
    moon = tmp_path / "m.jsonl"
    moon.write_text(json.dumps({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}) + "\n")
    tau = tmp_path / "t.json"
    tau.write_text(json.dumps([{"task_id": 0, "traj": []}]))
    log = tmp_path / "l.jsonl"
    log.write_text(json.dumps([{"role": "user", "content": "x"}]) + "\n")
    csv = tmp_path / "code.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    assert [detect_format(p) for p in (moon, tau, log, csv)] == ["mooncake", "tau-bench", "openai-log", "azure"]


def test_load_trace_from_file_and_missing_names(tmp_path, monkeypatch):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps([{"role": "user", "content": "x"}, {"role": "assistant", "content": "yy"}]) + "\n")
    trace = load_trace(str(path), max_prompt_tokens=50)
    assert (trace.name, trace.format, len(trace.requests), trace.num_sessions) == ("chat", "openai-log", 1, 1)
    assert len(trace.sha256) == 64 and trace.max_prompt_tokens == 50
    with pytest.raises(TraceNotFoundError, match="neither a known trace"):
        resolve_trace_path(str(tmp_path / "nope.json"))
    with pytest.raises(TraceNotFoundError, match="DSPINE_TRACES_DIR"):
        resolve_trace_path("mooncake", tmp_path)
    monkeypatch.setenv("DSPINE_TRACES_DIR", str(tmp_path))
    assert default_traces_dir() == tmp_path


def test_replay_cli_passes_skip_conversations_and_refuses_a_negative_one(capsys):
    import argparse

    from ray_dspine.bench.replay_cli import add_arguments, options_from_args

    parser = argparse.ArgumentParser(prog="replay")
    add_arguments(parser)
    argv = ["--trace", "tau-bench", "--out", "runs/x", "--skip-conversations", "10", "--max-conversations", "10"]
    options = options_from_args(parser.parse_args(argv), parser)
    assert (options.skip_conversations, options.max_conversations) == (10, 10)
    assert options_from_args(parser.parse_args(argv[:4]), parser).skip_conversations == 0
    with pytest.raises(SystemExit):
        parser.parse_args(argv[:4] + ["--skip-conversations", "-1"])
    assert "--skip-conversations" in capsys.readouterr().err
