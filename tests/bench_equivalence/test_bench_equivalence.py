"""Answer equivalence: divergence finding, the chi-square test, and runs against a fake server."""

from __future__ import annotations

import argparse
import asyncio
import json
import math

import pytest

from ray_dspine.bench.equivalence import (
    EquivalencePrompt,
    RequestSettings,
    Side,
    chi_square_homogeneity,
    chi_square_sf,
    combine_tests,
    context_window,
    decide,
    first_divergence,
    load_prompts,
    pool_rare_categories,
    regularized_upper_gamma,
)
from ray_dspine.bench.equivalence_cli import register_equivalence, run_greedy, run_sampled


def _chat(prompt_id: str, text: str) -> EquivalencePrompt:
    return EquivalencePrompt(id=prompt_id, messages=[{"role": "user", "content": text}])


# --- pure rules ------------------------------------------------------------------------------------------


def test_rule_first_divergence_index():
    assert first_divergence("abc", "abc") is None
    assert first_divergence("abXd", "abYd") == 2
    assert first_divergence("abc", "abcdef") == 3  # strict prefix: len(shorter)
    assert first_divergence("", "x") == 0
    assert context_window("0123456789", 5, radius=2) == "34|56"


def test_rule_chi_square_statistic_hand_computed():
    # Table A = [30 yes, 10 no], B = [20, 20]; N = 80, column totals 50 and 30.
    # E = 40*50/80 = 25 (yes), 40*30/80 = 15 (no) for both rows.
    # X2 = 2 * ((30-25)^2/25 + (10-15)^2/15) = 2 * (1 + 5/3) = 16/3; dof = 1.
    # p = P(chi2_1 >= 16/3) = erfc(sqrt(16/3 / 2)) = erfc(sqrt(8/3)) = 0.020921...
    result = chi_square_homogeneity({"yes": 30, "no": 10}, {"yes": 20, "no": 20})
    assert result.categories == ["yes", "no"]
    assert result.statistic == pytest.approx(16 / 3)
    assert result.dof == 1
    assert result.p_value == pytest.approx(math.erfc(math.sqrt(8 / 3)), rel=1e-10)
    assert result.p_value == pytest.approx(0.020921, abs=1e-6)


def test_rule_chi_square_survival_matches_closed_forms():
    # dof 2: P(X >= x) = exp(-x/2); dof 1: erfc(sqrt(x/2)); Q(5, 3) = e^-3 (1 + 3 + 9/2 + 27/6 + 81/24).
    for x in (0.1, 1.0, 4.0, 30.0):
        assert chi_square_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-10)
        assert chi_square_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-9)
    assert regularized_upper_gamma(5, 3) == pytest.approx(math.exp(-3) * 16.375, rel=1e-12)
    assert chi_square_sf(0.0, 3) == 1.0
    with pytest.raises(ValueError):
        regularized_upper_gamma(0, 1)


def test_rule_rare_categories_pooled():
    # n_A = n_B = 20, N = 40: a category needs t_c >= 10 for min expected 20 * t_c / 40 >= 5.
    # "a": 12 + 10 = 22 kept; "b": 6 + 4 = 10 kept; "c": 1 + 3 = 4 and "d": 1 + 3 = 4 pool to 8 < 10,
    # so the smallest kept ("b") joins them: <other> = 6+1+1 = 8 (A), 4+3+3 = 10 (B).
    names, a, b = pool_rare_categories({"a": 12, "b": 6, "c": 1, "d": 1}, {"a": 10, "b": 4, "c": 3, "d": 3})
    assert names == ["a", "<other>"]
    assert a == [12, 8] and b == [10, 10]
    # Everything rare: one category left, not testable.
    single = chi_square_homogeneity({"x": 2}, {"y": 2})
    assert single.dof == 0 and single.p_value is None


def test_rule_combined_test_sums_statistics_and_dofs():
    skewed = chi_square_homogeneity({"yes": 30, "no": 10}, {"yes": 20, "no": 20})  # 16/3, dof 1
    even = chi_square_homogeneity({"yes": 20, "no": 20}, {"yes": 20, "no": 20})  # 0, dof 1
    untestable = chi_square_homogeneity({"x": 1}, {"x": 1})
    statistic, dof, p = combine_tests([skewed, even, untestable])
    # X2 = 16/3 + 0 = 16/3 with dof 2: p = exp(-8/3) = 0.0695
    assert statistic == pytest.approx(16 / 3) and dof == 2
    assert p == pytest.approx(math.exp(-8 / 3))


def test_rule_decision_threshold():
    assert decide(0.01, 0.01) == "no evidence of difference"
    assert decide(0.0099, 0.01) == "distributions differ"
    assert decide(None, 0.01) == "not testable"


def test_builtin_prompts_cover_the_three_kinds():
    prompts = load_prompts("builtin")
    kinds = {prompt.kind for prompt in prompts}
    assert {"open_chat", "code_edit", "agent_tool_call", "completion"} <= kinds
    assert len(load_prompts("builtin", 3)) == 3
    assert any(m["role"] == "tool" for p in prompts if p.messages for m in p.messages)


def test_prompt_file_needs_messages_or_prompt(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps([{"id": "x"}]))
    with pytest.raises(ValueError, match="exactly one of"):
        load_prompts(str(path))


# --- against the fake server ------------------------------------------------------------------------------


def test_greedy_identical_divergent_and_failed(fake_server, monkeypatch):
    monkeypatch.setenv("DSPINE_API_KEY", "k-123")
    prompts = [_chat("same", "same"), _chat("diverge", "diverge"), _chat("prefix", "prefix"),
               EquivalencePrompt(id="plain", kind="completion", prompt="plain")]
    spec = Side(label="spec", base_url=fake_server.url + "/v1/", pool="spec")
    ar = Side(label="ar", base_url=fake_server.url, pool="ar")
    report = asyncio.run(run_greedy(prompts, spec, ar, RequestSettings(max_tokens=16, concurrency=3)))
    status = {r.prompt_id: r.status for r in report.results}
    assert status == {"same": "identical", "diverge": "diverged", "prefix": "diverged", "plain": "identical"}
    diverge = report.results[1]
    # "def f(x):" 9 + "\n" 1 + "    " 4 + "return x + " 11 = 25
    assert diverge.divergence_index == 25
    assert diverge.context_a.endswith("|2\n") and diverge.context_b.endswith("|1\n")
    assert report.results[2].divergence_index == 3
    assert report.mismatch_rate == pytest.approx(2 / 4)
    assert report.paths_a == {"speculative": 4} and report.paths_b == {"autoregressive": 4}
    bodies = [body for body, _ in fake_server.requests]
    assert all(body["temperature"] == 0.0 and body["max_tokens"] == 16 for body in bodies)
    assert all(headers["authorization"] == "Bearer k-123" for _, headers in fake_server.requests)

    failing = Side(label="broken", base_url=fake_server.url, pool="fail")
    report = asyncio.run(run_greedy(prompts[:1], failing, ar, RequestSettings()))
    assert report.results[0].status == "error" and "HTTP 500" in report.results[0].a.error
    assert report.num_errors == 1 and report.mismatch_rate is None
    unreachable = Side(label="down", base_url="http://127.0.0.1:9", pool="spec")
    report = asyncio.run(run_greedy(prompts[:1], unreachable, ar, RequestSettings(timeout_s=5)))
    assert report.results[0].status == "error" and "ConnectError" in report.results[0].a.error


def test_sampled_chi_square_on_known_counts(fake_server):
    prompts = [_chat("skewed", "skewed"), _chat("even", "even")]
    spec = Side(label="spec", base_url=fake_server.url, pool="spec")
    ar = Side(label="ar", base_url=fake_server.url, pool="ar")
    settings = RequestSettings(temperature=1.0, max_tokens=8, concurrency=8)
    report = asyncio.run(run_sampled(prompts, spec, ar, settings, num_samples=40, seed=100, prefix_words=1))
    skewed, even = report.results
    assert skewed.counts_a == {"yes": 30, "no": 10} and skewed.counts_b == {"yes": 20, "no": 20}
    assert skewed.test.statistic == pytest.approx(16 / 3)
    assert skewed.verdict == "no evidence of difference"  # p = 0.0209 >= 0.01
    assert even.test.statistic == pytest.approx(0.0)
    assert report.dof == 2 and report.p_value == pytest.approx(math.exp(-8 / 3))
    assert report.verdict == "no evidence of difference"
    seeds = [body["seed"] for body, _ in fake_server.requests]
    assert sorted(seeds) == sorted(list(range(100, 180)) * 2)  # distinct per sample within each prompt
    assert "p >= 0.01" in report.test


def test_sampled_two_words_separates_categories(fake_server):
    # prefix_words=2: spec {yes indeed 30, no way 10}, ar {yes sir 20, no way 20}; all expected >= 10.
    # X2 = (30-15)^2/15*2 + (20-10)^2/10*2 + (10-15)^2/15*2 = 30 + 20 + 10/3 = 53.33, dof 2.
    spec = Side(label="spec", base_url=fake_server.url, pool="spec")
    ar = Side(label="ar", base_url=fake_server.url, pool="ar")
    report = asyncio.run(run_sampled([_chat("skewed", "skewed")], spec, ar,
                                     RequestSettings(temperature=0.7), num_samples=40, prefix_words=2))
    assert report.statistic == pytest.approx(160 / 3) and report.dof == 2
    assert report.p_value == pytest.approx(math.exp(-80 / 3))
    assert report.verdict == "distributions differ"


def test_cli_reports_and_exit_codes(fake_server, tmp_path, capsys):
    prompt_file = tmp_path / "prompts.json"
    prompt_file.write_text(json.dumps({"prompts": [{"id": "d", "messages": [{"role": "user", "content": "diverge"}]}]}))
    parser = argparse.ArgumentParser(prog="bench")
    register_equivalence(parser.add_subparsers())
    out = tmp_path / "eq.json"
    args = parser.parse_args(["equivalence", "--endpoint", fake_server.url, "--pool-a", "spec", "--pool-b", "ar",
                              "--prompts", str(prompt_file), "--out", str(out)])
    assert args.func(args) == 1
    text = capsys.readouterr().out
    assert "DIVERGED at char 25" in text and "mismatch rate 100.0%" in text
    assert json.loads(out.read_text())["num_diverged"] == 1
    args = parser.parse_args(["equivalence", "--endpoint", fake_server.url, "--pool-a", "fail", "--pool-b", "ar",
                              "--prompts", str(prompt_file), "--json"])
    assert args.func(args) == 3
    assert json.loads(capsys.readouterr().out)["num_errors"] == 1


def test_cli_stops_before_any_prompt_when_a_side_cannot_answer(fake_server, tmp_path, capsys, monkeypatch):
    prompt_file = tmp_path / "prompts.json"
    prompt_file.write_text(json.dumps([{"id": "s", "messages": [{"role": "user", "content": "same"}]}]))
    parser = argparse.ArgumentParser(prog="bench")
    register_equivalence(parser.add_subparsers())
    sides = ["--pool-a", "spec", "--pool-b", "ar", "--prompts", str(prompt_file)]

    args = parser.parse_args(["equivalence", "--endpoint", fake_server.url, *sides])
    assert args.func(args) == 0
    assert [body["model"] for body, _ in fake_server.requests] == ["fake-model", "fake-model"]  # the listed id

    fake_server.requests.clear()
    args = parser.parse_args(["equivalence", "--endpoint", fake_server.url, "--endpoint-b", "http://127.0.0.1:9", *sides])
    assert args.func(args) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach http://127.0.0.1:9 (ConnectError") and "scripts/serve-local" in err
    assert fake_server.requests == []  # no prompt was sent to the side that answers either

    fake_server.required_key = "k-123"
    monkeypatch.setenv("DSPINE_API_KEY", "wrong")
    args = parser.parse_args(["equivalence", "--endpoint", fake_server.url, *sides])
    assert args.func(args) == 3
    err = capsys.readouterr().err
    assert "refused the API key (HTTP 401: invalid API key); set DSPINE_API_KEY" in err
    assert fake_server.requests == []
    monkeypatch.setenv("DSPINE_API_KEY", "k-123")
    assert args.func(args) == 0


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--prompts", "{missing}"], "argument --prompts: cannot read"),
        (["--prompts", "{not_json}"], "argument --prompts: {not_json} is not a prompt file"),
        (["--num-prompts", "0"], "argument --num-prompts: must be >= 1 (got 0)"),
        (["--temperature", "-1"], "argument --temperature: Input should be greater than or equal to 0"),
        (["--concurrency", "0"], "argument --concurrency"),
        (["--samples", "0", "--temperature", "0.7"], "argument --samples: must be >= 1 (got 0)"),
        (["--alpha", "1.5"], "argument --alpha: must be between 0 and 1"),
    ],
)
def test_cli_bad_input_names_the_flag_and_exits_2(tmp_path, capsys, flags, named):
    not_json = tmp_path / "prompts.txt"
    not_json.write_text("fix the bug\n")
    paths = {"missing": str(tmp_path / "none.json"), "not_json": str(not_json)}
    parser = argparse.ArgumentParser(prog="bench")
    register_equivalence(parser.add_subparsers())
    # port 9 (discard) on loopback: no request is ever sent, the flags are refused first
    args = parser.parse_args(["equivalence", "--endpoint", "http://127.0.0.1:9", *(f.format(**paths) for f in flags)])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named.format(**paths) in err and "Traceback" not in err


def test_every_builtin_chat_prompt_is_a_request_the_ingress_accepts():
    from ray_dspine.serve.openai_schema import ChatCompletionRequest

    chats = [p for p in load_prompts("builtin") if p.messages is not None]
    for prompt in chats:
        ChatCompletionRequest.model_validate({"model": "m", "messages": prompt.messages})  # raises on a bad prompt
    tool_messages = [m for p in chats for m in p.messages if m["role"] == "tool"]
    assert len(tool_messages) == 2 and all(m["tool_call_id"].startswith("call_") for m in tool_messages)


def test_a_tool_message_without_its_tool_call_id_is_refused_naming_it(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps([{"id": "t", "messages": [
        {"role": "user", "content": "run the tests"},
        {"role": "assistant", "content": "ok"},
        {"role": "tool", "content": "1 failed"}]}]))
    with pytest.raises(ValueError, match=r"prompt 't'.*messages\.2.*tool_call_id"):
        load_prompts(str(path))
