"""Anthropic's Messages API (ray_dspine/serve/anthropic.py): one test per rule, expected values by hand, then the
real ingress app over ASGI with fake pools (asgi_app.py: each pool answers with the words of the last message)."""

import asyncio
import json

import pytest
from pydantic import ValidationError

from asgi_app import MODEL, FakeReplica, client, ingress_app

from ray_dspine.engines.protocol import Chunk, Usage
from ray_dspine.serve import anthropic

WEATHER = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def body(**fields):
    return {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], **fields}


def test_request_a_tool_round_trip_in_chat_order():
    chat = anthropic.chat_body(body(
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
        messages=[
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should call it.", "signature": "s"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [
                {"type": "text", "text": "(result below)"},
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "Snow"}, {"type": "text", "text": "-3 C"}]},
                {"type": "text", "text": "Thanks"}]},
        ],
    ))  # fmt: skip
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief.\nUse tools."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking.",  # the thinking block is left out
         "tool_calls": [{"id": "toolu_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "user", "content": "(result below)"},  # the text before the result comes first
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Snow"},  # one tool message per text block
        {"role": "tool", "tool_call_id": "toolu_1", "content": "-3 C"},
        {"role": "user", "content": "Thanks"},
    ]  # fmt: skip


def test_fields_carry_over_and_metadata_user_id_is_the_session():
    chat = anthropic.chat_body(body(temperature=0.2, top_p=0.5, top_k=4, stop_sequences=["END"], stream=True,
                                    metadata={"user_id": "agent-1"}))  # fmt: skip
    assert chat == {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16,
                    "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                    "temperature": 0.2, "top_p": 0.5,
                    "top_k": 4, "stop": ["END"], "user": "agent-1"}  # fmt: skip


def test_tools_server_tools_are_left_out_and_choices_map():
    tools = [WEATHER, {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]
    chat = anthropic.chat_body(body(tools=tools))
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "", "parameters": WEATHER["input_schema"]}}]
    assert "tool_choice" not in chat
    choices = {"auto": "auto", "any": "required", "none": "none"}
    for kind, expected in choices.items():
        assert anthropic.chat_body(body(tools=tools, tool_choice={"type": kind}))["tool_choice"] == expected
    named = anthropic.chat_body(body(tools=tools, tool_choice={"type": "tool", "name": "get_weather",
                                                               "disable_parallel_tool_use": True}))  # fmt: skip
    assert named["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert named["parallel_tool_calls"] is False


def test_reasoning_thinking_and_effort():
    disabled = anthropic.chat_body(body(thinking={"type": "disabled"}))
    assert disabled["chat_template_kwargs"] == {"enable_thinking": False}
    enabled = anthropic.chat_body(body(thinking={"type": "enabled", "budget_tokens": 2048}))
    assert enabled["chat_template_kwargs"] == {"enable_thinking": True}
    assert anthropic.chat_body(body(output_config={"effort": "max"}))["reasoning_effort"] == "xhigh"
    assert anthropic.chat_body(body(output_config={"effort": "low"}))["reasoning_effort"] == "low"
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    formatted = anthropic.chat_body(body(output_config={"format": {"type": "json_schema", "schema": schema}}))
    assert formatted["response_format"] == {"type": "json_schema",
                                            "json_schema": {"name": "response", "schema": schema, "strict": True}}


@pytest.mark.parametrize("fields, param", [
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                 "content": [{"type": "document", "source": {}}]}]}]},
     "messages[0].content[0].content[0].type"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "read_file"}}, "tool_choice.name"),
    ({"tools": [{"type": "bash_20250124", "name": "bash"}], "tool_choice": {"type": "any"}}, "tool_choice.type"),
])  # fmt: skip
def test_refused_names_the_anthropic_field(fields, param):
    with pytest.raises(anthropic.Refused) as caught:
        anthropic.chat_body(body(**fields))
    assert caught.value.param == param


def test_a_body_that_is_not_a_messages_request_is_pydantics_error():
    with pytest.raises(ValidationError):
        anthropic.chat_body({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})  # no max_tokens


def chat_payload(text, finish, matched=None, calls=None, prompt=10, cached=0, completion=3):
    message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return {"id": "chatcmpl-x1", "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "matched_stop": matched}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "prompt_tokens_details": {"cached_tokens": cached}}}  # fmt: skip


def test_response_blocks_stop_reasons_and_usage():
    call = {"id": "call_7", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    answer = anthropic.message(chat_payload(None, "tool_calls", calls=[call], prompt=100, cached=64))
    assert answer == {
        "id": "msg_x1", "type": "message", "role": "assistant", "model": MODEL,
        "content": [{"type": "tool_use", "id": "call_7", "name": "get_weather", "input": {"city": "Oslo"}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 36, "cache_read_input_tokens": 64, "output_tokens": 3},
    }  # fmt: skip
    assert anthropic.message(chat_payload("ab", "length"))["stop_reason"] == "max_tokens"
    stopped = anthropic.message(chat_payload("ab", "stop", matched="END"), ["END"])
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", "END")
    eos = anthropic.message(chat_payload("ab", "stop", matched=2), ["END"])  # the end token, not a sequence
    assert (eos["stop_reason"], eos["stop_sequence"]) == ("end_turn", None)
    assert anthropic.message(chat_payload("", "stop"))["content"] == [{"type": "text", "text": ""}]


def frames_of(events):
    translator = anthropic.MessageStream(MODEL, ["END"])
    out = []
    for event in events:
        out += translator.feed(event)
    return [json.loads(frame.split("\n")[1].removeprefix("data: ")) for frame in out]


def data(event):
    return f"data: {json.dumps(event)}\n\n"


def chunk_event(delta, finish=None, matched=None):
    return data({"id": "chatcmpl-s9", "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                                    "matched_stop": matched}]})  # fmt: skip


def test_stream_blocks_open_and_close_by_kind_and_end_with_the_stop_sequence():
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}}
    events = [
        chunk_event({"role": "assistant", "reasoning_content": "hmm"}),
        chunk_event({"content": "A"}),
        chunk_event({"content": "B"}),
        chunk_event({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                     "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk_event({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        chunk_event({"content": ""}, finish="stop", matched="END"),
        data({"id": "chatcmpl-s9", "choices": [], "usage": usage}),
        "data: [DONE]\n\n",
    ]  # fmt: skip
    got = [(e["type"], e.get("index"), (e.get("delta") or e.get("content_block") or {}).get("type"))
           for e in frames_of(events)]  # fmt: skip
    assert got == [
        ("message_start", None, None),
        ("content_block_start", 0, "thinking"), ("content_block_delta", 0, "thinking_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, "text"), ("content_block_delta", 1, "text_delta"),
        ("content_block_delta", 1, "text_delta"), ("content_block_stop", 1, None),
        ("content_block_start", 2, "tool_use"), ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None),
        ("message_delta", None, None), ("message_stop", None, None),
    ]  # fmt: skip
    end = frames_of(events)[-2]
    assert end["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    assert end["usage"] == {"input_tokens": 12, "output_tokens": 5}
    assert frames_of(events)[0]["message"]["id"] == "msg_s9"


def test_stream_an_events_text_goes_before_its_calls():
    # stream batching can merge the text before a call and the call's first delta into one chat event
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    frames = frames_of([chunk_event({"role": "assistant", "content": "Checking.", "tool_calls": [call]},
                                    finish="tool_calls"), "data: [DONE]\n\n"])  # fmt: skip
    starts = [f["content_block"]["type"] for f in frames if f["type"] == "content_block_start"]
    assert starts == ["text", "tool_use"]


def test_stream_a_failure_closes_the_open_block_then_error_and_message_stop():
    events = [chunk_event({"content": "A"}),
              data({"error": {"message": "replica stopped", "type": "server_error", "param": None,
                              "code": "replica_failed"}}),
              chunk_event({"content": ""}, finish="error"), "data: [DONE]\n\n"]  # fmt: skip
    frames = frames_of(events)
    assert [f["type"] for f in frames] == ["message_start", "content_block_start", "content_block_delta",
                                           "content_block_stop", "error", "message_stop"]  # fmt: skip
    assert frames[-2]["error"] == {"type": "api_error", "message": "replica stopped"}


def test_errors_take_anthropics_shape_and_type_by_status():
    busy = {"type": "error", "error": {"type": "rate_limit_error", "message": "busy"}}
    assert anthropic.error_body(429, "busy") == busy
    assert anthropic.error_body(503, "x")["error"]["type"] == "overloaded_error"
    assert anthropic.error_body(413, "x")["error"]["type"] == "request_too_large"
    assert anthropic.error_body(418, "x")["error"]["type"] == "invalid_request_error"


# --- the ingress app, over ASGI -----------------------------------------------------------------------------


def post(app, payload, path="/v1/messages"):
    async def go():
        async with client(app) as http:
            return await http.post(path, json=payload)

    return asyncio.run(go())


def test_messages_over_the_ingress_streamed_and_not(monkeypatch):
    app, _core = ingress_app(monkeypatch)
    answer = post(app, body(messages=[{"role": "user", "content": "one two three"}], max_tokens=2))
    assert answer.status_code == 200
    assert answer.headers["x-dspine-pool"] in ("spec", "ar")
    got = answer.json()
    assert got["content"] == [{"type": "text", "text": "one two "}]
    assert (got["stop_reason"], got["usage"]["input_tokens"], got["usage"]["output_tokens"]) == ("max_tokens", 3, 2)
    streamed = post(app, body(messages=[{"role": "user", "content": "one two"}], stream=True))
    assert streamed.headers["content-type"].startswith("text/event-stream")
    kinds = [line.removeprefix("event: ") for line in streamed.text.split("\n") if line.startswith("event: ")]
    assert kinds == ["message_start", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]  # fmt: skip
    # the pool's first chunk named the prompt (2 words), so message_start counts it; the end counts it again
    lines = streamed.text.split("\n")
    frames = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert frames[0]["message"]["usage"] == {"input_tokens": 2, "output_tokens": 0}
    end = frames[-2]["usage"]
    assert (end["input_tokens"], end["output_tokens"]) == (2, 2)


def test_thinking_disabled_takes_the_reasoning_level_none_pool_and_high_effort_the_other(monkeypatch):
    spec, ar = FakeReplica("spec"), FakeReplica("ar")
    app, _core = ingress_app(monkeypatch, replicas={"spec": spec, "ar": ar})
    assert post(app, body(thinking={"type": "disabled"})).headers["x-dspine-pool"] == "spec"
    assert post(app, body(output_config={"effort": "high"})).headers["x-dspine-pool"] == "ar"
    assert ar.requests[-1].reasoning_level == "high"


@pytest.mark.parametrize("fields, status, kind, words", [
    ({"model": "claude-sonnet-4-5"}, 404, "not_found_error", "this server serves `smollm2-135m-instruct`"),
    ({"max_tokens": 0}, 400, "invalid_request_error", "max_tokens"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, 400, "invalid_request_error",
     "messages[0].content[0].type: `image` blocks are not served here"),
    ({"stop_sequences": ["a", "b", "c", "d", "e"]}, 400, "invalid_request_error", "stop: at most 4"),
])  # fmt: skip
def test_bad_input_gets_an_anthropic_error(monkeypatch, fields, status, kind, words):
    app, _core = ingress_app(monkeypatch)
    answer = post(app, body(**fields))
    assert answer.status_code == status
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == kind
    assert words in answer.json()["error"]["message"]


def test_a_refusal_keeps_its_retry_after(monkeypatch):
    class Busy(FakeReplica):
        async def generate(self, request, prompt_token_ids=None):
            yield Chunk(finish_reason="error", error="replica overloaded", error_status=429)

    app, _core = ingress_app(monkeypatch, replicas={"spec": Busy("spec"), "ar": Busy("ar")})
    answer = post(app, body())
    assert answer.status_code == 429
    assert answer.json()["error"] == {"type": "rate_limit_error", "message": "replica overloaded"}
    assert answer.headers["retry-after"]


def test_cached_prompt_tokens_are_read_from_the_cache_in_the_usage(monkeypatch):
    class Cached(FakeReplica):
        async def generate(self, request, prompt_token_ids=None):
            yield Chunk(text="ok", num_tokens=1, replica=self.name)
            yield Chunk(finish_reason="stop", matched_stop=2,
                        usage=Usage(prompt_tokens=30, completion_tokens=1, total_tokens=31, cached_prompt_tokens=20,
                                    verify_steps=1, accept_length=1.0, accept_histogram=[1]))

    app, _core = ingress_app(monkeypatch, replicas={"spec": Cached("spec"), "ar": Cached("ar")})
    usage = post(app, body()).json()["usage"]
    # Anthropic's fields, then the speculation the chat usage carries (rule `response`)
    assert usage == {"input_tokens": 10, "cache_read_input_tokens": 20, "output_tokens": 1,
                     "verify_steps": 1, "accept_length": 1.0, "accept_histogram": [1], "path": "autoregressive"}


def count(app, payload):
    return post(app, payload, "/v1/messages/count_tokens")


def test_count_tokens_is_routed_as_the_request_and_counted_by_its_pool(monkeypatch):
    spec, ar = FakeReplica("spec"), FakeReplica("ar")
    app, _core = ingress_app(monkeypatch, replicas={"spec": spec, "ar": ar})
    asked = {"model": MODEL, "system": "be brief", "messages": [{"role": "user", "content": "one two three"}]}
    answer = count(app, asked)  # no max_tokens: counting needs none
    assert (answer.status_code, answer.json()) == (200, {"input_tokens": 5})  # "be brief" + "one two three"
    assert count(app, {**asked, "output_config": {"effort": "high"}}).json() == {"input_tokens": 5}
    assert ar.requests[-1].reasoning_level == "high"  # counted by the pool the request would go to


def test_count_tokens_refusals_are_anthropic_errors(monkeypatch):
    class NoTokenizer(FakeReplica):
        async def count_tokens(self, request, anthropic_body=None):
            return {"error": "simulated pools have no tokenizer", "status": 400, "param": None}

    app, _core = ingress_app(monkeypatch, replicas={"spec": NoTokenizer("spec"), "ar": NoTokenizer("ar")})
    refused = count(app, {"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert refused.status_code == 400
    assert refused.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                         "message": "simulated pools have no tokenizer"}}
    unknown = count(app, {"model": "claude-x", "messages": [{"role": "user", "content": "x"}]})
    assert (unknown.status_code, unknown.json()["error"]["type"]) == (404, "not_found_error")
    image = count(app, {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})
    assert image.status_code == 400 and image.json()["error"]["message"].startswith("messages[0].content[0].type:")


def test_count_body_keeps_what_counts_and_drops_anthropics_server_tools():
    body = {"model": MODEL, "max_tokens": 9, "stream": True, "temperature": 0.5, "metadata": {"user_id": "u"},
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "text", "text": "yo"}]}],
            "thinking": {"type": "disabled"},
            "tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search"}], "tool_choice": {"type": "auto"}}
    assert anthropic.count_body(body) == {
        "model": MODEL, "system": [{"type": "text", "text": "s"}], "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "text", "text": "yo"}]}],
        "thinking": {"type": "disabled"}, "tool_choice": {"type": "auto", "disable_parallel_tool_use": False},
        "tools": [WEATHER]}
