"""The Responses API (serve/openai_responses.py) translates as SGLang 0.5.23's own OpenAIServingResponses does.

SGLang's side is its code run on the same input: `ResponsesRequest` validates each body; the chat request is
built from the arguments its `_make_request` passes to `ChatCompletionRequest` (the messages of
`_construct_input_messages`, the tools of `_response_tools_to_chat_tools`, the tool_choice of
`_chat_tool_choice(effective_tool_choice())`, parallel_tool_calls, stop, reasoning_effort,
chat_template_kwargs), the sampling from `to_sampling_params`, and the output items from `_output_items` on
the same reasoning, text and calls. The serving object is made without its constructor (which needs a
tokenizer manager): it holds only what those methods read, a template that takes no system message but the
first (the form openai_responses.py builds for every pool) and the qwen3_coder tool parser our pools run. Our
requests validate as SGLang's ChatCompletionRequest, and our responses and lifecycle events as SGLang's
ResponsesResponse and ResponsesLifecycleEvent.

Where we differ on purpose, each side is checked for what openai_responses.py says instead:
  reasoning history  SGLang makes a reasoning item an assistant's reasoning_content; ours leaves it out (the chat
                     path carries no reasoning history), so a reasoning item alone is no message at all.
  max_output_tokens  ours is the chat max_tokens; SGLang keeps 2 of them for BOS/EOS (max_new_tokens = n - 2).
  thinking off       effort "none" sets SGLang's `thinking` and `enable_thinking` both false; ours sends
                     enable_thinking, the switch the Qwen templates our pools serve read.
  phase              SGLang keeps an assistant item's phase on the chat message; ours merges by it and drops it
                     (the chat path's messages carry none; the Qwen templates our pools serve read none).
  strict             SGLang writes `strict: false` on a function tool that does not say; ours leaves it out, so
                     the tool reads as the same tool sent as a chat request.
  session            ours sends `user`, else `prompt_cache_key`, as the chat `user` (the session key); SGLang's
                     request has no prompt_cache_key.
  ids                SGLang draws new call ids; ours keeps the chat call's id, which the client sends back.
  speculation        ours adds verify_steps, accept_length, accept_histogram and path after OpenAI's usage.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from ray_dspine.serve import openai_responses as api
from ray_dspine.serve import openai_responses_stream as answer

pytest.importorskip("sglang")

MODEL = "qwen3.8-27b"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": CITY}
READ = {"type": "function", "name": "read_file", "parameters": {"type": "object"}, "strict": True}


def user(content):
    return {"role": "user", "content": content}


def call(call_id, arguments, name="get_weather"):
    return {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": name, "arguments": arguments}


def output(call_id, text):
    return {"type": "function_call_output", "call_id": call_id, "output": text}


BODIES = {
    "a string": {"input": "Hello"},
    "instructions, developer, parts": {
        "instructions": "Be brief.",
        "input": [{"role": "developer", "content": [{"type": "input_text", "text": "Repo: app"}]},
                  user([{"type": "input_text", "text": "List "}, {"type": "input_text", "text": "files"}])],
    },
    "a tool round trip": {
        "tools": [WEATHER, READ, {"type": "web_search"}],
        "input": [
            user("Weather in Tokyo?"),
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Call the tool."}]},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
            call("call_1", '{"city": "Tokyo"}'),
            output("call_1", "Sunny, 21 C"),
            user("And Rome?"),
        ],
    },
    "two calls, one cut off, results as parts": {
        "tools": [WEATHER],
        "input": [user("Tokyo and Rome?"), call("a", '{"city": "Tokyo"}'), call("b", '{"city": "Ro'),
                  output("a", [{"type": "input_text", "text": "Sunny"}]),
                  output("b", [{"type": "input_text", "text": "Rain"}, {"type": "input_text", "text": ", 9 C"}])],
    },
    "arguments sent as an object": {"tools": [WEATHER], "input": [user("go"), call("c", {"city": "Oslo"}),
                                                                  output("c", "Snow")]},
    "assistant turns by phase": {
        "input": [user("go"), {"role": "assistant", "content": "One.", "phase": "commentary"},
                  {"role": "assistant", "content": "Two.", "phase": "commentary"},
                  {"role": "assistant", "content": "Done.", "phase": "final_answer"}, user("again")],
    },
    "a reasoning item alone": {"input": [user("a"), {"type": "reasoning", "summary": [], "content": [
        {"type": "reasoning_text", "text": "hmm"}]}, user("b")]},
    "tool_choice required, no parallel calls": {"tools": [WEATHER, READ], "tool_choice": "required",
                                                "parallel_tool_calls": False, "input": "go"},
    "tool_choice named": {"tools": [WEATHER, READ], "tool_choice": {"type": "function", "name": "read_file"},
                          "input": "go"},
    "tool_choice naming a hosted tool": {"tools": [WEATHER, {"type": "web_search"}],
                                         "tool_choice": {"type": "web_search"}, "input": "go"},
    "tool_choice none": {"tools": [WEATHER], "tool_choice": "none", "input": "go"},
    "hosted tools alone": {"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}], "input": "go"},
    "reasoning effort and stop": {"reasoning": {"effort": "high", "summary": "auto"}, "stop": ["\n\n"], "input": "go"},
    "sampling": {"temperature": 0.3, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "frequency_penalty": 0.5,
                 "presence_penalty": 0.25, "repetition_penalty": 1.1, "max_output_tokens": 64, "input": "go"},
}
COMPARED = ("messages", "tools", "tool_choice", "parallel_tool_calls", "stop", "reasoning_effort")
SAMPLING = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty")


def _sglang():
    from ray_dspine.engines.module_stand_ins import install_module_stand_ins

    install_module_stand_ins()
    from sglang.srt.entrypoints.openai import protocol
    from sglang.srt.entrypoints.openai.serving_responses import OpenAIServingResponses
    from sglang.srt.function_call.core_types import ToolCallItem

    serving = object.__new__(OpenAIServingResponses)
    serving.supports_inline_system = False
    serving.tool_call_parser = "qwen3_coder"
    return SimpleNamespace(protocol=protocol, serving=serving, call=ToolCallItem)


def _full(body: dict) -> dict:
    return {"model": MODEL, **body}


def _their_chat_request(sg, request) -> dict:
    """The ChatCompletionRequest SGLang's `_make_request` builds, from the same methods it calls."""
    serving = sg.serving
    tools = serving._response_tools_to_chat_tools(request)
    chat = sg.protocol.ChatCompletionRequest(
        model=request.model, messages=serving._construct_input_messages(request, None), stream=request.stream,
        tools=tools or None,
        tool_choice=serving._chat_tool_choice(request.effective_tool_choice()) if tools else "none",
        parallel_tool_calls=request.parallel_tool_calls if request.parallel_tool_calls is not None else True,
        stop=request.stop, reasoning_effort=request.reasoning.effort if request.reasoning else None,
        chat_template_kwargs=request.chat_template_kwargs,
    )  # fmt: skip
    return chat.model_dump(exclude_none=True)


def _without_reasoning(messages: list[dict]) -> list[dict]:
    """SGLang's messages without reasoning_content and phase, and without a message that held nothing else
    (module docstring: reasoning history, phase)."""
    kept = []
    for message in messages:
        message = {k: v for k, v in message.items() if k not in ("reasoning_content", "phase")}
        if message.keys() != {"role"}:
            kept.append(message)
    return kept


@pytest.mark.parametrize("name", list(BODIES))
def test_requests_become_the_chat_request_sglang_makes(name):
    sg = _sglang()
    body = _full(BODIES[name])
    request = sg.protocol.ResponsesRequest.model_validate(body)
    theirs = _their_chat_request(sg, request)
    theirs["messages"] = _without_reasoning(theirs["messages"])
    for tool, sent in zip(theirs.get("tools") or [], [t for t in body.get("tools", []) if t["type"] == "function"]):
        if "strict" not in sent:  # `strict` (module docstring)
            assert tool["function"].pop("strict") is False
    ours = sg.protocol.ChatCompletionRequest.model_validate(api.chat_body(body)).model_dump(exclude_none=True)
    for field in COMPARED:
        assert ours.get(field) == theirs.get(field), field
    sampling = request.to_sampling_params(None, {})
    for field in SAMPLING:
        if body.get(field) is not None:
            assert ours[field] == sampling[field], field
    if "max_output_tokens" in body:  # module docstring: SGLang keeps 2 for BOS/EOS
        assert (ours["max_tokens"], sampling["max_new_tokens"]) == (64, 62)


def test_a_reasoning_item_is_reasoning_content_in_sglang_and_left_out_in_ours():
    sg = _sglang()
    body = _full(BODIES["a reasoning item alone"])
    theirs = _their_chat_request(sg, sg.protocol.ResponsesRequest.model_validate(body))["messages"]
    assert theirs[1] == {"role": "assistant", "reasoning_content": "hmm"}
    assert api.chat_body(body)["messages"] == [user("a"), user("b")]


def test_effort_none_turns_thinking_off_in_both():
    sg = _sglang()
    body = _full({"reasoning": {"effort": "none"}, "input": "go"})
    theirs = _their_chat_request(sg, sg.protocol.ResponsesRequest.model_validate(body))
    ours = api.chat_body(body)
    assert theirs["chat_template_kwargs"] == {"thinking": False, "enable_thinking": False}
    assert ours["chat_template_kwargs"] == {"enable_thinking": False}
    assert ours["reasoning_effort"] == theirs["reasoning_effort"] == "none"


def test_text_format_is_the_json_schema_sglang_constrains_to():
    sg = _sglang()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    for form, expected in (({"type": "json_schema", "name": "out", "schema": schema, "strict": True}, schema),
                           ({"type": "json_object"}, {"type": "object"})):  # fmt: skip
        body = _full({"text": {"format": form}, "input": "go"})
        sampling = sg.protocol.ResponsesRequest.model_validate(body).to_sampling_params(None, {})
        theirs = json.loads(sampling["json_schema"])
        ours = api.chat_body(body)["response_format"]
        assert theirs == expected
        assert ours.get("json_schema", {}).get("schema", {"type": "object"}) == expected


@pytest.mark.parametrize("fields, param", [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"tools": [{"type": "web_search"}], "tool_choice": "required"}, "tool_choice"),
])  # fmt: skip
def test_sglang_refuses_the_same_tool_choices(fields, param):
    # SGLang's create_responses answers these with a 400 before any work; its checks, run on the request:
    sg = _sglang()
    request = sg.protocol.ResponsesRequest.model_validate(_full({"input": "go", **fields}))
    choice = request.effective_tool_choice()
    functions = [tool for tool in request.tools if tool.type in ("function", "custom")]
    assert (choice == "required" and not functions) or (isinstance(choice, dict) and
                                                        choice["name"] not in {t.name for t in functions})  # fmt: skip
    with pytest.raises(api.Refused) as refused:
        api.chat_body(_full({"input": "go", **fields}))
    assert refused.value.param == param


def data(event):
    return f"data: {json.dumps(event)}\n\n"


def _ours(reasoning: str, text: str, calls: list[tuple[str, str]], body: dict, finish="stop") -> dict:
    """Our final response for a chat stream carrying `reasoning`, then `text`, then `calls`."""
    events = []
    if reasoning:
        events.append({"reasoning_content": reasoning})
    if text:
        events.append({"content": text})
    for index, (name, arguments) in enumerate(calls):
        events.append({"tool_calls": [{"index": index, "id": f"call_{index}", "type": "function",
                                       "function": {"name": name, "arguments": arguments}}]})  # fmt: skip
    frames = [data({"id": "chatcmpl-r1", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
              for delta in events]  # fmt: skip
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17,
             "prompt_tokens_details": {"cached_tokens": 4}}  # fmt: skip
    frames += [data({"id": "chatcmpl-r1", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                     "usage": usage}), "data: [DONE]\n\n"]  # fmt: skip
    reasoning_setting = body.get("reasoning") or {}
    translator = answer.ResponseStream(api.echo(body), summary=reasoning_setting.get("summary") is not None)
    for frame in frames:
        translator.feed(frame)
    return translator.response()


OUTPUTS = {
    "text": ("", "Hello there.", []),
    "reasoning and text": ("Six times seven.", "42.", []),
    "text then a call": ("", "Checking.", [("get_weather", '{"city": "Tokyo"}')]),
    "reasoning and two calls": ("Both.", "", [("get_weather", '{"city": "Tokyo"}'),
                                              ("get_weather", '{"city": "Rome"}')]),
}


def _compared(items: list[dict]) -> list[dict]:
    """Items without ids and call ids (module docstring) and without null fields (SGLang dumps without them)."""
    out = []
    for item in items:
        assert item["id"].startswith({"reasoning": "rs_", "message": "msg_", "function_call": "fc_"}[item["type"]])
        out.append({k: v for k, v in item.items() if k not in ("id", "call_id") and v is not None})
    return out


@pytest.mark.parametrize("summary", [False, True])
@pytest.mark.parametrize("name", list(OUTPUTS))
def test_output_items_are_the_ones_sglang_makes(name, summary):
    sg = _sglang()
    reasoning, text, calls = OUTPUTS[name]
    body = _full({"input": "go", "tools": [WEATHER], **({"reasoning": {"summary": "auto"}} if summary else {})})
    request = sg.protocol.ResponsesRequest.model_validate(body)
    parsed = [sg.call(tool_index=i, name=n, parameters=a) for i, (n, a) in enumerate(calls)]
    theirs = sg.serving._output_items(request, reasoning or None, text, parsed, set(), None)
    theirs = [item.model_dump(exclude_none=True) for item in theirs]
    ours = _ours(reasoning, text, calls, body, finish="tool_calls" if calls else "stop")
    assert _compared(ours["output"]) == _compared(theirs)
    assert [item["call_id"] for item in ours["output"] if item["type"] == "function_call"] == \
        [f"call_{i}" for i in range(len(calls))]  # fmt: skip


def test_responses_and_lifecycle_events_validate_as_sglangs():
    sg = _sglang()
    body = _full({"input": "go", "instructions": "Be brief.", "tools": [WEATHER], "reasoning": {"effort": "high"},
                  "max_output_tokens": 5, "metadata": {"run": "1"}})  # fmt: skip
    final = _ours("Think.", "Hi", [("get_weather", '{"city": "Oslo"}')], body, finish="length")
    theirs = sg.protocol.ResponsesResponse.model_validate(final)
    assert (theirs.status, theirs.incomplete_details, theirs.id) == ("incomplete", {"reason": "max_output_tokens"},
                                                                     "resp_r1")  # fmt: skip
    sg.protocol.ResponsesLifecycleEvent.model_validate({"type": "response.incomplete", "response": final})
