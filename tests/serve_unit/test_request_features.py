"""One test per rule in ray_dspine/serve/request_features.py."""

import pytest

from ray_dspine.serve.openai_schema import ChatCompletionRequest, CompletionRequest
from ray_dspine.serve.request_features import refusal

TOOLS = [{"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object"}}}]


def chat(**fields):
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields})


def completion(**fields):
    return CompletionRequest.model_validate({"model": "m", "prompt": "def f(", **fields})


def refused(parsed, engine="embedded"):
    found = refusal(parsed, "spec", engine)
    return None if found is None else (found.param, found.code)


def test_rule_defaults_that_sdks_send_always_pass():
    defaults = dict(logprobs=False, top_logprobs=0, frequency_penalty=0, presence_penalty=0.0, logit_bias={},
                    response_format={"type": "text"}, tool_choice="none", parallel_tool_calls=True, tools=[])
    for engine in ("embedded", "simulated", "sglang"):
        assert refused(chat(**defaults), engine) is None
        assert refused(completion(echo=False, best_of=1, suffix="", frequency_penalty=0), engine) is None


def test_rule_logprobs_served_by_embedded_and_sglang_pools():
    for engine in ("embedded", "sglang"):
        assert refused(chat(logprobs=True, top_logprobs=20), engine) is None
        assert refused(completion(logprobs=0), engine) is None and refused(completion(logprobs=5), engine) is None
        # top_logprobs asks for alternatives of log-probabilities nobody asked for: OpenAI refuses it
        assert refused(chat(top_logprobs=3), engine) == ("top_logprobs", "invalid_value")
        assert refused(chat(logprobs=False, top_logprobs=1), engine) == ("top_logprobs", "invalid_value")
    # a simulated pool has no model to score tokens
    assert refused(chat(logprobs=True), "simulated") == ("logprobs", "unsupported_parameter")
    assert refused(completion(logprobs=0), "simulated") == ("logprobs", "unsupported_parameter")
    assert refused(chat(logprobs=False, top_logprobs=0), "simulated") is None


def test_rule_echo_best_of_suffix_refused_on_every_pool():
    for engine in ("embedded", "sglang"):
        assert refused(completion(echo=True), engine)[0] == "echo"
        assert refused(completion(best_of=2), engine)[0] == "best_of"
        assert refused(completion(suffix="\n    return x"), engine)[0] == "suffix"


def test_rule_response_format_on_embedded_and_sglang_pools_and_only_in_chat():
    json_mode = {"type": "json_object"}
    schema = {"type": "json_schema", "json_schema": {"name": "patch", "schema": {"type": "object"}}}
    tags = {"type": "structural_tag", "structures": [], "triggers": []}
    for engine in ("embedded", "sglang"):
        for fmt in (json_mode, schema, tags):
            assert refused(chat(response_format=fmt), engine) is None
    for fmt in (json_mode, schema, tags):
        assert refused(chat(response_format=fmt), "simulated") == ("response_format", "unsupported_parameter")
    assert refused(completion(response_format=json_mode), "sglang")[0] == "response_format"


def test_rule_response_format_json_schema_needs_its_schema():
    with pytest.raises(ValueError, match="json_schema"):
        chat(response_format={"type": "json_schema"})
    with pytest.raises(ValueError):
        chat(response_format={"type": "yaml"})


def test_sampling_controls_pass_on_every_pool():
    controls = dict(frequency_penalty=0.5, presence_penalty=-1, repetition_penalty=1.1, logit_bias={"42": -100},
                    top_k=20, min_p=0.05, min_tokens=2, ignore_eos=True, stop_token_ids=[2])  # fmt: skip
    for engine in ("embedded", "simulated", "sglang"):
        assert refused(chat(**controls), engine) is None
        assert refused(completion(**controls), engine) is None
    for bad in (0.0, 2.5):  # SGLang's SamplingParams.verify: (0, 2]
        with pytest.raises(ValueError, match="repetition_penalty"):
            chat(repetition_penalty=bad)
    for bad in ({"42": 101}, {"the": 1}):
        with pytest.raises(ValueError, match="token ids"):
            chat(logit_bias=bad)


def test_rule_tools_on_embedded_and_sglang_pools_only():
    assert refused(chat(tools=TOOLS), "simulated") == ("tools", "unsupported_parameter")
    assert refused(chat(tools=TOOLS, tool_choice="auto"), "embedded") is None
    assert refused(chat(tools=TOOLS, tool_choice="auto"), "sglang") is None
    assert refused(chat(tools=TOOLS, tool_choice="none"), "embedded") is None


def test_rule_tool_choice_forcing_a_call_on_embedded_and_sglang_pools_and_alone():
    named = {"type": "function", "function": {"name": "run_tests"}}
    for engine in ("embedded", "sglang"):
        assert refused(chat(tools=TOOLS, tool_choice="required"), engine) is None
        assert refused(chat(tools=TOOLS, tool_choice=named), engine) is None
        # a forced call and another constraint cannot both hold the answer, as SGLang refuses
        assert refused(chat(tools=TOOLS, tool_choice=named, regex="a+"), engine) == ("tool_choice", "invalid_value")
        json_mode = {"type": "json_object"}
        assert refused(chat(tools=TOOLS, tool_choice="required", response_format=json_mode), engine) == (
            "tool_choice", "invalid_value")  # fmt: skip
    # a malformed choice is named as malformed first, on every pool
    assert refused(chat(tools=TOOLS, tool_choice="always"), "embedded") == ("tool_choice", "invalid_value")


def test_rule_tool_choice_shape_and_needs_tools():
    assert refused(chat(tool_choice="always"), "sglang") == ("tool_choice", "invalid_value")
    assert refused(chat(tool_choice={"type": "function"}), "sglang") == ("tool_choice", "invalid_value")
    assert refused(chat(tool_choice="required"), "sglang") == ("tool_choice", "invalid_value")  # no tools
    named = {"type": "function", "function": {"name": "run_tests"}}
    assert refused(chat(tools=TOOLS, tool_choice=named), "sglang") is None
    assert refused(chat(tools=TOOLS, tool_choice="required"), "sglang") is None
    other = {"type": "function", "function": {"name": "rm_rf"}}
    assert refused(chat(tools=TOOLS, tool_choice=other), "sglang") == ("tool_choice", "invalid_value")
    # "none" and "auto" are fine without tools: they ask for no call
    assert refused(chat(tool_choice="auto")) is None


def test_rule_order_first_broken_rule_is_named():
    assert refused(chat(logprobs=True, tools=TOOLS, regex="a"), "simulated")[0] == "logprobs"
    assert refused(chat(regex="a", tools=TOOLS), "simulated")[0] == "regex"


def test_rule_min_tokens_not_above_the_max_tokens_asked_for():
    assert refused(chat(max_tokens=8, min_tokens=9), "sglang") == ("min_tokens", "invalid_value")
    assert refused(chat(max_tokens=100, max_completion_tokens=8, min_tokens=9)) == ("min_tokens", "invalid_value")
    assert refused(completion(max_tokens=8, min_tokens=8)) is None
    assert refused(chat(min_tokens=500)) is None  # no max asked for: the engine clamps to what fits
    with pytest.raises(ValueError, match="min_tokens"):
        chat(min_tokens=-1)


def test_rule_grammar_regex_and_ebnf_on_embedded_and_sglang_pools_and_one_constraint():
    assert refused(chat(regex="[0-9]+"), "simulated") == ("regex", "unsupported_parameter")
    assert refused(completion(ebnf='root ::= "yes" | "no"'), "simulated") == ("ebnf", "unsupported_parameter")
    for engine in ("embedded", "sglang"):
        assert refused(chat(regex="[0-9]+"), engine) is None
        assert refused(completion(ebnf='root ::= "yes" | "no"'), engine) is None
    assert refused(chat(regex=""), "embedded") is None  # empty: unset, as SGLang reads it
    assert refused(chat(regex="a", ebnf='root ::= "a"'), "sglang") == ("ebnf", "invalid_value")
    # a json_schema names its schema, as SGLang requires
    nameless = {"type": "json_schema", "json_schema": {"name": "x"}}
    assert refused(chat(response_format=nameless)) == ("response_format", "invalid_value")
    assert refused(chat(regex="a", response_format={"type": "json_object"}), "sglang") == ("response_format",
                                                                                            "invalid_value")


def test_rule_sglang_fields_not_carried_are_refused_unless_at_sglangs_default():
    for engine in ("embedded", "sglang"):
        assert refused(chat(separate_reasoning=False), engine) == ("separate_reasoning", "unsupported_parameter")
        # carried to every pool
        assert refused(chat(stop_regex="END$", no_stop_trim=True, skip_special_tokens=False), engine) is None
        assert refused(chat(continue_final_message=True), engine) is None
        assert refused(completion(skip_special_tokens=False), engine) is None
        # a chat field sent to completions
        assert refused(completion(continue_final_message=True), engine) == ("continue_final_message",
                                                                           "unsupported_parameter")
        assert refused(completion(continue_final_message=False), engine) is None
        assert refused(completion(json_schema='{"type": "object"}'), engine)[0] == "json_schema"
        assert refused(chat(session_id="s1"), engine)[0] == "session_id"
    # SGLang's defaults, and fields that change no answer here, pass
    assert refused(chat(skip_special_tokens=True, continue_final_message=False, separate_reasoning=True)) is None
    assert refused(chat(rid="mine", priority=3, return_spec_tokens_details=True), "sglang") is None
    found = refusal(chat(return_hidden_states=True), "spec", "sglang")
    assert found.message == ("`return_hidden_states` (an SGLang field) is not served by this server; send false or "
                             "leave it out")


def test_schema_stop_regex_takes_what_sglang_takes():
    assert chat(stop_regex="END$").stop_regex_list() == ["END$"] and chat().stop_regex_list() == []
    assert chat(stop_regex=[r"\d+"] * 32, no_stop_trim=True).stop_regex_list() == [r"\d+"] * 32
    for bad, message in (("(", r"`\(` is not a Python regular expression \(missing \), unterminated subpattern"),
                         (["a"] * 33, "at most 32 patterns"), ("é" * 129, "a pattern of 258 bytes"),
                         ([1], "stop_regex"), (True, "stop_regex")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            chat(stop_regex=bad)
    with pytest.raises(ValueError, match="no_stop_trim"):
        chat(no_stop_trim="yes")


def test_schema_sglang_sampling_ranges():
    assert chat(top_k=-1).top_k == -1 and chat(top_k=20).top_k == 20
    for field, bad in (("top_k", 0), ("top_k", -2), ("min_p", 1.5), ("min_p", -0.1), ("stop_token_ids", [-1]),
                       ("stop_token_ids", ["2"]), ("ignore_eos", "yes")):  # fmt: skip
        with pytest.raises(ValueError, match=field):
            chat(**{field: bad})
