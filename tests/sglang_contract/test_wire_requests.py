"""Every request body the SGLang engine sends is one SGLang 0.5.23's own request classes take whole.

mapping.build_payload is checked against `ChatCompletionRequest` / `CompletionRequest` from the installed
`sglang.srt.entrypoints.openai.protocol`: the body validates, no key at any depth is outside the classes'
declared fields (sglang_fields.unknown_keys: SGLang would drop it silently), and what SGLang reads back out of
it (sampling params, reasoning, stream options, rid) is what was asked. Expected bodies are written out by hand.
"""

from __future__ import annotations

import itertools

import pytest

from ray_dspine.engines.module_stand_ins import install_module_stand_ins
from ray_dspine.engines.protocol import ChatMessage, GenerateRequest
from ray_dspine.engines.sglang import mapping
from ray_dspine.engines.sglang.mapping import build_payload, endpoint_for

from sglang_fields import unknown_keys

protocol = pytest.importorskip("sglang.srt.entrypoints.openai.protocol")

MODEL = "qwen3.8-27b"
STREAM = {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
          "return_spec_tokens_details": True}  # fmt: skip
READ_FILE = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}  # fmt: skip
RUN_TESTS = {"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object"}}}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "patch", "schema": {"type": "object"}, "strict": True}}


def _sglang_class(payload: dict):
    return protocol.ChatCompletionRequest if "messages" in payload else protocol.CompletionRequest


def test_plain_chat_body():
    request = GenerateRequest(request_id="r1", messages=[ChatMessage(role="user", content="fix the failing test")],
                              max_tokens=10)
    payload = build_payload(request, MODEL)
    assert payload == {
        "model": MODEL, "max_tokens": 10, "temperature": 0.0, "top_p": 1.0, **STREAM, "rid": "r1",
        "messages": [{"role": "user", "content": "fix the failing test"}],
        "chat_template_kwargs": {"enable_thinking": False},
    }  # fmt: skip
    assert endpoint_for(request) == "/v1/chat/completions"
    assert unknown_keys(protocol.ChatCompletionRequest, payload) == []
    sglang = protocol.ChatCompletionRequest.model_validate(payload)
    assert (sglang.rid, sglang.stream, sglang.return_spec_tokens_details) == ("r1", True, True)
    assert (sglang.stream_options.include_usage, sglang.stream_options.continuous_usage_stats) == (True, True)
    assert (sglang.chat_template_kwargs, sglang.reasoning_effort) == ({"enable_thinking": False}, None)


def test_chat_sampling_controls_reach_sglangs_sampling_params():
    request = GenerateRequest(
        request_id="r2", messages=[ChatMessage(role="system", content="be brief"),
                                   ChatMessage(role="user", content="hi", name="bob")],
        max_tokens=10, reasoning_level="xhigh", seed=7, stop=["\n\n", "END"], temperature=0.6, top_p=0.95,
        frequency_penalty=0.5, presence_penalty=-1.0, logit_bias={"42": -100.0},
    )  # fmt: skip
    payload = build_payload(request, MODEL)
    # The user message's `name` is not sent: SGLang's ChatCompletionMessageUserParam has no such field.
    assert payload == {
        "model": MODEL, "max_tokens": 10, "temperature": 0.6, "top_p": 0.95, **STREAM, "rid": "r2", "seed": 7,
        "stop": ["\n\n", "END"], "frequency_penalty": 0.5, "presence_penalty": -1.0, "logit_bias": {"42": -100.0},
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "reasoning_effort": "xhigh",
    }  # fmt: skip
    assert unknown_keys(protocol.ChatCompletionRequest, payload) == []
    sglang = protocol.ChatCompletionRequest.model_validate(payload)
    # SGLang turns a reasoning effort other than "none" into thinking on for the chat template
    assert sglang.reasoning_effort == "xhigh"
    assert sglang.chat_template_kwargs == {"thinking": True, "enable_thinking": True}
    params = sglang.to_sampling_params(stop=sglang.stop, model_generation_config={})
    assert {key: params[key] for key in ("max_new_tokens", "temperature", "top_p", "stop", "frequency_penalty",
                                         "presence_penalty", "logit_bias", "sampling_seed")} == {
        "max_new_tokens": 10, "temperature": 0.6, "top_p": 0.95, "stop": ["\n\n", "END"],
        "frequency_penalty": 0.5, "presence_penalty": -1.0, "logit_bias": {"42": -100.0}, "sampling_seed": 7,
    }  # fmt: skip


def test_tool_turns_tools_and_response_format_keep_only_sglangs_fields():
    call = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    foreign_tool = {"type": "function", "cache_control": {"type": "ephemeral"},
                    "function": {**READ_FILE["function"], "x-origin": "mcp"}}  # fmt: skip
    request = GenerateRequest(
        request_id="r3", max_tokens=64, reasoning_level="low",
        messages=[ChatMessage(role="user", content="open a.py"),
                  ChatMessage(role="assistant", content=None, tool_calls=[{**call, "extra": 1}]),
                  ChatMessage(role="tool", tool_call_id="call_1", name="read_file", content="print(1)")],
        tools=[foreign_tool, RUN_TESTS], tool_choice={"type": "function", "function": {"name": "read_file"}},
        parallel_tool_calls=False, response_format=SCHEMA,
    )  # fmt: skip
    payload = build_payload(request, MODEL)
    assert payload == {
        "model": MODEL, "max_tokens": 64, "temperature": 0.0, "top_p": 1.0, **STREAM, "rid": "r3",
        "messages": [{"role": "user", "content": "open a.py"}, {"role": "assistant", "tool_calls": [call]},
                     {"role": "tool", "content": "print(1)", "tool_call_id": "call_1", "name": "read_file"}],
        "tools": [READ_FILE, RUN_TESTS], "tool_choice": {"type": "function", "function": {"name": "read_file"}},
        "parallel_tool_calls": False, "response_format": SCHEMA, "reasoning_effort": "low",
    }  # fmt: skip
    assert unknown_keys(protocol.ChatCompletionRequest, payload) == []
    sglang = protocol.ChatCompletionRequest.model_validate(payload)
    assert [tool.function.name for tool in sglang.tools] == ["read_file", "run_tests"]
    assert (sglang.tool_choice.function.name, sglang.parallel_tool_calls) == ("read_file", False)
    assert sglang.messages[1].tool_calls[0].function.arguments == '{"path": "a.py"}'
    assert sglang.messages[2].tool_call_id == "call_1"
    assert sglang.response_format.json_schema.schema_ == {"type": "object"}


def test_completion_body_has_no_chat_fields():
    request = GenerateRequest(request_id="c1", prompt="def f():", max_tokens=16, stop=["\n"], presence_penalty=0.25,
                              logit_bias={"7": 5.0}, seed=1, reasoning_level="high", tools=[RUN_TESTS],
                              response_format=SCHEMA)  # fmt: skip
    payload = build_payload(request, MODEL)
    assert payload == {
        "model": MODEL, "max_tokens": 16, "temperature": 0.0, "top_p": 1.0, **STREAM, "rid": "c1", "seed": 1,
        "stop": ["\n"], "presence_penalty": 0.25, "logit_bias": {"7": 5.0}, "prompt": "def f():",
    }  # fmt: skip
    assert endpoint_for(request) == "/v1/completions"
    assert unknown_keys(protocol.CompletionRequest, payload) == []
    sglang = protocol.CompletionRequest.model_validate(payload)
    assert (sglang.prompt, sglang.max_tokens, sglang.rid, sglang.seed) == ("def f():", 16, "c1", 1)
    assert (sglang.presence_penalty, sglang.logit_bias, sglang.stream_options.continuous_usage_stats) == (
        0.25, {"7": 5.0}, True)


def test_the_check_catches_what_sglang_drops_silently():
    body = {"model": MODEL, "max_tokens": 5, "return_meta_infos": True,
            "messages": [{"role": "user", "content": "x", "name": "bob"}],
            "tools": [{"type": "function", "function": {"name": "f", "cache_control": {}}}]}  # fmt: skip
    protocol.ChatCompletionRequest.model_validate(body)  # SGLang accepts it ...
    # ... and drops three keys without a word
    assert unknown_keys(protocol.ChatCompletionRequest, body) == [
        "return_meta_infos", "messages.0.name", "tools.0.function.cache_control"]


def test_message_tool_and_call_fields_are_sglangs():
    assert set(mapping.USER_MESSAGE_FIELDS) == set(protocol.ChatCompletionMessageUserParam.model_fields)
    assert set(mapping.MESSAGE_FIELDS) == set(protocol.ChatCompletionMessageGenericParam.model_fields)
    assert set(mapping.TOOL_CALL_FIELDS) == set(protocol.ToolCall.model_fields)
    assert set(mapping.FUNCTION_CALL_FIELDS) == set(protocol.FunctionResponse.model_fields)
    assert set(mapping.TOOL_FIELDS) == set(protocol.Tool.model_fields)
    assert set(mapping.FUNCTION_FIELDS) == set(protocol.Function.model_fields)


LEVELS = ("none", "low", "medium", "high", "xhigh")


COMBINATIONS = list(itertools.product(LEVELS, (True, False), (False, True), (None, "json_object", "json_schema"),
                                     (False, True)))  # fmt: skip


@pytest.mark.parametrize(("level", "chat", "tools", "response_format", "controls"), COMBINATIONS)
def test_every_combination_validates_with_no_dropped_key(level, chat, tools, response_format, controls):
    formats = {None: None, "json_object": {"type": "json_object"}, "json_schema": SCHEMA}
    extra = dict(seed=3, stop=["\n"], frequency_penalty=0.1, presence_penalty=0.2, logit_bias={"1": 1.0},
                 temperature=0.7, top_p=0.9) if controls else {}  # fmt: skip
    source = dict(messages=[ChatMessage(role="user", content="q")]) if chat else dict(prompt="q")
    request = GenerateRequest(request_id="m", max_tokens=4, reasoning_level=level,
                              response_format=formats[response_format], tools=[READ_FILE] if tools else None,
                              tool_choice="auto" if tools else None, parallel_tool_calls=True if tools else None,
                              **source, **extra)  # fmt: skip
    payload = build_payload(request, MODEL)
    assert unknown_keys(_sglang_class(payload), payload) == []
    sglang = _sglang_class(payload).model_validate(payload)
    assert (sglang.rid, sglang.max_tokens, sglang.stream) == ("m", 4, True)
    if chat:
        # "none" turns thinking off in the template; every other level is SGLang's reasoning_effort, which SGLang
        # turns into thinking on
        assert (sglang.reasoning_effort, sglang.chat_template_kwargs) == (
            (None, {"enable_thinking": False}) if level == "none"
            else (level, {"thinking": True, "enable_thinking": True}))
        assert (sglang.tools is not None, sglang.response_format is not None) == (tools, response_format is not None)


QWEN_GENERATION_CONFIG = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}  # a generation_config.json's sampling


def test_sampling_left_out_lets_sglang_apply_the_models_generation_config():
    request = GenerateRequest(request_id="d1", messages=[ChatMessage(role="user", content="hi")], max_tokens=8,
                              temperature=None, top_p=None)  # fmt: skip
    payload = build_payload(request, MODEL)
    assert not {"temperature", "top_p", "top_k", "min_p", "repetition_penalty"} & set(payload)
    sglang = protocol.ChatCompletionRequest.model_validate(payload)
    params = sglang.to_sampling_params(stop=sglang.stop, model_generation_config=QWEN_GENERATION_CONFIG)
    # what SGLang's own --sampling-defaults model gives a client that sent none of them
    assert {key: params[key] for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")} == {
        "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0}
    # a value the client gave wins over the model's
    request = request.model_copy(update={"temperature": 0.0})
    sglang = protocol.ChatCompletionRequest.model_validate(build_payload(request, MODEL))
    assert sglang.to_sampling_params(stop=None, model_generation_config=QWEN_GENERATION_CONFIG)["temperature"] == 0.0


@pytest.mark.parametrize("chat", [True, False])
def test_sglangs_own_sampling_fields_reach_its_sampling_params_and_pass_its_verify(chat):
    from sglang.srt.sampling.sampling_params import SamplingParams

    source = dict(messages=[ChatMessage(role="user", content="q")]) if chat else dict(prompt="q")
    request = GenerateRequest(request_id="x1", max_tokens=32, temperature=0.7, top_p=0.8, top_k=20, min_p=0.05,
                              repetition_penalty=1.05, min_tokens=4, ignore_eos=True, stop_token_ids=[151645],
                              stop_regex=[r"\d{3}$"], no_stop_trim=True, skip_special_tokens=False,
                              continue_final_message=chat, regex="[a-z ]+", **source)  # fmt: skip
    payload = build_payload(request, MODEL)
    expected = {"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05, "min_tokens": 4, "ignore_eos": True,
                "stop_token_ids": [151645], "stop_regex": [r"\d{3}$"], "no_stop_trim": True,
                "skip_special_tokens": False, "regex": "[a-z ]+"}  # fmt: skip
    assert {key: payload[key] for key in expected} == expected
    assert payload.get("continue_final_message") is (True if chat else None)  # a chat field
    assert unknown_keys(_sglang_class(payload), payload) == []
    sglang = _sglang_class(payload).model_validate(payload)
    if chat:
        params = sglang.to_sampling_params(stop=None, model_generation_config=QWEN_GENERATION_CONFIG)
    else:
        install_module_stand_ins()  # serving_completions imports vision code at module level
        from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion

        params = OpenAIServingCompletion._build_sampling_params(None, sglang)
    assert {key: params[key] for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                         "min_new_tokens", "ignore_eos", "stop_token_ids", "stop_regex",
                                         "no_stop_trim", "skip_special_tokens", "regex")} == {
        "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05,
        "min_new_tokens": 4, "ignore_eos": True, "stop_token_ids": [151645], "stop_regex": [r"\d{3}$"],
        "no_stop_trim": True, "skip_special_tokens": False, "regex": "[a-z ]+"}  # fmt: skip
    accepted = {key: value for key, value in params.items() if key in SamplingParams.__struct_fields__}
    SamplingParams(**accepted).verify(vocab_size=151_936)  # SGLang's own range checks pass


def test_every_sglang_request_field_is_carried_refused_or_ignored_with_a_reason():
    from ray_dspine.serve.openai_schema import ChatCompletionRequest, CompletionRequest
    from ray_dspine.serve.request_features import SGLANG_FIELDS_IGNORED, SGLANG_FIELDS_REFUSED

    ours = set(ChatCompletionRequest.model_fields) | set(CompletionRequest.model_fields)
    assert not ours & set(SGLANG_FIELDS_REFUSED) and not ours & set(SGLANG_FIELDS_IGNORED)
    for sglang_class in (protocol.ChatCompletionRequest, protocol.CompletionRequest):
        for name, info in sglang_class.model_fields.items():
            assert name in ours | set(SGLANG_FIELDS_REFUSED) | set(SGLANG_FIELDS_IGNORED), name
            if name in SGLANG_FIELDS_REFUSED:  # the value that passes is SGLang's own default
                assert SGLANG_FIELDS_REFUSED[name] == info.get_default(call_default_factory=True), name


@pytest.mark.parametrize("chat", [True, False])
def test_log_probabilities_are_asked_for_in_each_endpoints_own_fields(chat):
    source = dict(messages=[ChatMessage(role="user", content="q")]) if chat else dict(prompt="q")
    for top in (0, 3):
        payload = build_payload(GenerateRequest(request_id="x2", max_tokens=4, logprobs=True, top_logprobs=top,
                                                **source), MODEL)  # fmt: skip
        assert unknown_keys(_sglang_class(payload), payload) == []
        sglang = _sglang_class(payload).model_validate(payload)
        if chat:  # SGLang's chat layer: return_logprob=request.logprobs, top_logprobs_num=request.top_logprobs or 0
            assert (sglang.logprobs, sglang.top_logprobs or 0) == (True, top)
            assert ("top_logprobs" in payload) is (top > 0)
        else:  # its completions layer: return_logprob=logprobs is not None, top_logprobs_num=logprobs
            assert sglang.logprobs == top
    plain = build_payload(GenerateRequest(request_id="x3", max_tokens=4, **source), MODEL)
    assert "logprobs" not in plain and "top_logprobs" not in plain


ARGUMENTS = ["{}", '{"path": "a.py"}', '  {"a": [1, 2]}  ', "{path: a}", "[1]", '"a.py"', "", '{"x": NaN}',
             '{"x": Infinity}', '{"a": 1} trailing', "null"]  # fmt: skip


@pytest.mark.parametrize("arguments", ARGUMENTS)
def test_a_calls_arguments_are_refused_where_sglangs_chat_serving_refuses_them(arguments):
    """openai_schema's rule: the conversation's calls' arguments hold a JSON object, judged by SGLang's own
    `parse_tool_call_arguments` (what its chat serving runs on every assistant call before the template)."""
    from pydantic import ValidationError

    from ray_dspine.serve.openai_schema import FunctionCall

    install_module_stand_ins()
    from sglang.srt.entrypoints.openai.serving_chat import parse_tool_call_arguments

    try:
        parse_tool_call_arguments(arguments)
        theirs = True
    except ValueError:
        theirs = False
    try:
        FunctionCall(name="f", arguments=arguments)
        ours = True
    except ValidationError:
        ours = False
    assert ours == theirs
    assert theirs == (arguments in ("{}", '{"path": "a.py"}', '  {"a": [1, 2]}  '))
