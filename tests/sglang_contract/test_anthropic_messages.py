"""The Messages API (serve/anthropic.py) translates as SGLang 0.5.23's own AnthropicServing translates.

SGLang's side is its code run on the same input: `_convert_to_chat_completion_request` on each request body,
`_convert_response` on each chat completion, and `_generate_anthropic_stream` on each chat stream, the
streams being the events our own chat path sends (responses.sse_events over a pool's chunks). Its chat
serving is a stand-in holding only what those three methods read of it: whether the template takes system
messages inline, and the chat stream. Each of our answers and events also validates as SGLang's Anthropic
response and event classes.

Where we differ on purpose, each side is checked for what anthropic.py says instead:
  user             ours sends `metadata.user_id` as the chat `user` (the session key); SGLang drops it.
  strict           SGLang writes `strict: false` on a tool that does not say; ours leaves it out, so the tool
                   reads as the same tool sent as a chat request (a template that writes tools out shows it).
  stop_sequence    a stop ended by one of the request's stop_sequences is stop_reason "stop_sequence" with that
                   sequence, as Anthropic's API answers; SGLang says end_turn.
  message_delta    ours carries the whole usage (input, cached, output tokens) at the end; SGLang's carries the
                   output tokens only.
  speculation      ours adds verify_steps, accept_length, accept_histogram and path after Anthropic's usage
                   fields, as the chat usage carries them; SGLang's has none (its usage class ignores them).
  event order      a chat event holding both text and a call (stream batching can merge them) opens the text
                   block first, as the model wrote it; SGLang opens the call first. No stream here holds such an
                   event; tests/serve_unit/test_anthropic_api.py checks ours.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from pydantic import TypeAdapter

from ray_dspine.engines.protocol import Chunk, GenerateRequest, Usage
from ray_dspine.serve import anthropic, responses

pytest.importorskip("sglang")

MODEL = "qwen3.8-27b"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"name": "get_weather", "description": "Weather in a city", "input_schema": CITY}
READ = {"name": "read_file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}


def user(content):
    return {"role": "user", "content": content}


BODIES = {
    "plain": {"messages": [user("Hello")]},
    "system string and sampling": {"system": "Be brief.", "messages": [user("Hi")], "temperature": 0.3,
                                   "top_p": 0.9, "top_k": 20, "stop_sequences": ["\n\n"]},  # fmt: skip
    "system blocks with cache_control": {
        "system": [{"type": "text", "text": "You are a coding agent."},
                   {"type": "text", "text": "Repo: app", "cache_control": {"type": "ephemeral"}}],
        "messages": [user([{"type": "text", "text": "List files", "cache_control": {"type": "ephemeral"}}])],
    },
    "a tool round trip": {
        "tools": [WEATHER, READ],
        "messages": [
            user("Weather in Tokyo?"),
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Tokyo"}}]},
            user([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 C"},
                  {"type": "text", "text": "And tomorrow?"}]),
        ],
    },
    "text before a tool result, result as blocks": {
        "tools": [READ],
        "messages": [
            user("Read it"),
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "read_file",
                                               "input": {"path": "a.py"}}]},
            user([{"type": "text", "text": "Here:"},
                  {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "x = 1"}]}]),
        ],
    },
    "two calls, two results": {
        "tools": [WEATHER],
        "messages": [
            user("Tokyo and Rome?"),
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "a", "name": "get_weather", "input": {"city": "Tokyo"}},
                {"type": "tool_use", "id": "b", "name": "get_weather", "input": {"city": "Rome"}}]},
            user([{"type": "tool_result", "tool_use_id": "a", "content": "Sunny"},
                  {"type": "tool_result", "tool_use_id": "b", "content": "Rain"}]),
        ],
    },
    "empty assistant turn": {"messages": [user("a"), {"role": "assistant", "content": []}, user("b")]},
    "tool_choice any": {"tools": [WEATHER, READ], "tool_choice": {"type": "any"}, "messages": [user("go")]},
    "tool_choice named, no parallel": {
        "tools": [WEATHER, READ], "messages": [user("go")],
        "tool_choice": {"type": "tool", "name": "read_file", "disable_parallel_tool_use": True},
    },
    "tool_choice none": {"tools": [WEATHER], "tool_choice": {"type": "none"}, "messages": [user("go")]},
    "a server tool beside a custom one": {
        "tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search"}],
        "tool_choice": {"type": "auto"}, "messages": [user("go")],
    },
    "streamed": {"stream": True, "messages": [user("Hello")]},
}
COMPARED = ("messages", "max_tokens", "temperature", "top_p", "top_k", "stop", "tools", "tool_choice",
            "parallel_tool_calls", "stream")  # fmt: skip


def _sglang():
    from ray_dspine.engines.module_stand_ins import install_module_stand_ins

    install_module_stand_ins()
    from sglang.srt.entrypoints.anthropic import protocol
    from sglang.srt.entrypoints.anthropic.serving import AnthropicServing
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, ChatCompletionResponse

    return SimpleNamespace(protocol=protocol, serving=AnthropicServing, chat_request=ChatCompletionRequest,
                           chat_response=ChatCompletionResponse)  # fmt: skip


def _serving(sg, chat_events: list[str] | None = None):
    async def chat_stream(*_):
        for event in chat_events or []:
            yield event

    chat = SimpleNamespace(supports_inline_system=True, _generate_chat_stream=chat_stream)
    return sg.serving(chat)


def _full(body: dict) -> dict:
    return {"model": MODEL, "max_tokens": 64, **body}


@pytest.mark.parametrize("name", list(BODIES))
def test_requests_become_the_chat_request_sglang_makes(name):
    sg = _sglang()
    body = _full(BODIES[name])
    theirs = _serving(sg)._convert_to_chat_completion_request(sg.protocol.AnthropicMessagesRequest.model_validate(body))
    ours = sg.chat_request.model_validate(anthropic.chat_body(body))
    theirs, ours = theirs.model_dump(exclude_none=True), ours.model_dump(exclude_none=True)
    for tool in theirs.get("tools") or []:  # `strict` (module docstring)
        assert tool["function"].pop("strict") is False
    for field in COMPARED:
        assert ours.get(field) == theirs.get(field), field
    assert ours.get("stream_options") == theirs.get("stream_options")  # usage on every event when streamed


def test_metadata_user_id_is_the_chat_user_which_sglang_drops():
    sg = _sglang()
    body = _full({"messages": [user("hi")], "metadata": {"user_id": "session-7"}})
    theirs = _serving(sg)._convert_to_chat_completion_request(sg.protocol.AnthropicMessagesRequest.model_validate(body))
    assert theirs.user is None
    assert anthropic.chat_body(body)["user"] == "session-7"


def _payload(text="", reasoning="", calls=None, finish="stop", matched=None, cached=0):
    message = {"role": "assistant", "content": None if (calls or reasoning) and not text else text}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-abc123", "object": "chat.completion", "created": 1, "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "matched_stop": matched,
                     "logprobs": None}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57,
                  "prompt_tokens_details": {"cached_tokens": cached}},
    }  # fmt: skip


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}}
PAYLOADS = {
    "text": _payload("Hello there."),
    "cut by max_tokens": _payload("Hello th", finish="length"),
    "reasoning and text": _payload("42.", reasoning="Six times seven."),
    "text and a call": _payload("Checking.", calls=[CALL], finish="tool_calls"),
    "a call alone, cached prompt": _payload(calls=[CALL], finish="tool_calls", cached=32),
    "arguments that do not parse": _payload(calls=[{**CALL, "function": {"name": "f", "arguments": "{"}}],
                                            finish="tool_calls"),  # fmt: skip
    "nothing": _payload(""),
    "ended by the end token": _payload("Done.", matched=2),
}


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_non_streamed_answers_are_the_message_sglang_makes(name):
    sg = _sglang()
    payload = PAYLOADS[name]
    theirs = _serving(sg)._convert_response(sg.chat_response.model_validate(payload)).model_dump(exclude_none=True)
    ours = anthropic.message(payload)
    sg.protocol.AnthropicMessagesResponse.model_validate(ours)
    assert ours["id"] == "msg_abc123"
    assert {k: v for k, v in ours.items() if k not in ("id", "stop_sequence")} == \
        {k: v for k, v in theirs.items() if k != "id"}  # fmt: skip


def test_a_stop_sequence_ends_with_stop_reason_stop_sequence_where_sglang_says_end_turn():
    sg = _sglang()
    payload = _payload("Line one", matched="\n\n")
    theirs = _serving(sg)._convert_response(sg.chat_response.model_validate(payload))
    assert theirs.stop_reason == "end_turn"
    ours = anthropic.message(payload, ["\n\n"])
    assert (ours["stop_reason"], ours["stop_sequence"]) == ("stop_sequence", "\n\n")
    assert anthropic.message(payload, ["END"])["stop_reason"] == "end_turn"  # a stop not of the request's


class _Timer:
    def tokens(self, count):
        pass

    def finish(self, reason, usage):
        pass


def chat_events(chunks: list[Chunk]) -> list[str]:
    """What our chat path streams for a pool's `chunks` (a Messages request's chat body asks for usage on every
    event)."""
    request = GenerateRequest(request_id="chatcmpl-s1", messages=[{"role": "user", "content": "x"}], max_tokens=64)

    async def stream():
        for chunk in chunks[1:]:
            yield chunk

    async def run():
        events = responses.sse_events(stream(), chunks[0], request, MODEL, True, True, True, _Timer(), 1e12)
        return [event async for event in events]

    return asyncio.run(run())


USAGE = Usage(prompt_tokens=40, completion_tokens=6, total_tokens=46, cached_prompt_tokens=16, verify_steps=4,
              accept_length=1.5, accept_histogram=[3, 0, 1], path="speculative")  # 3 steps of 1 token, 1 of 3
PROMPT = {"prompt_tokens": 40, "cached_prompt_tokens": 16}  # on a pool's first chunk
TOOL_START = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
STREAMS = {
    "text": [Chunk(text="Hel", num_tokens=1, **PROMPT), Chunk(text="lo", num_tokens=1),
             Chunk(finish_reason="stop", usage=USAGE, num_tokens=1)],
    "reasoning then text": [Chunk(reasoning="Think", num_tokens=2, **PROMPT), Chunk(text="Answer", num_tokens=2),
                            Chunk(finish_reason="length", usage=USAGE)],
    "text then a streamed call": [
        Chunk(text="Let me check.", num_tokens=3, **PROMPT),
        Chunk(tool_calls=[TOOL_START], num_tokens=1),
        Chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}], num_tokens=1),
        Chunk(tool_calls=[{"index": 0, "function": {"arguments": '"Tokyo"}'}}], num_tokens=1),
        Chunk(finish_reason="tool_calls", usage=USAGE),
    ],
    "two calls": [
        Chunk(tool_calls=[TOOL_START, {"index": 0, "function": {"arguments": "{}"}}], num_tokens=2, **PROMPT),
        Chunk(tool_calls=[{**TOOL_START, "index": 1, "id": "call_10"},
                          {"index": 1, "function": {"arguments": '{"city": "Rome"}'}}], num_tokens=2),
        Chunk(finish_reason="tool_calls", usage=USAGE),
    ],
    "an error after text": [Chunk(text="Partial", num_tokens=1, **PROMPT),
                            Chunk(finish_reason="error", error="engine step failed", error_status=500)],
}


def _events(frames: list[str]) -> list[dict]:
    events = []
    for frame in frames:
        kind, data = frame.strip().split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        events.append(event)
    return events


def _compared(value):
    """`value` without message ids and null fields (SGLang leaves nulls out; Anthropic's API sends them)."""
    if isinstance(value, list):
        return [_compared(item) for item in value]
    if isinstance(value, dict):
        return {k: _compared(v) for k, v in value.items() if v is not None and not (k == "id" and "role" in value)}
    return value


@pytest.mark.parametrize("name", list(STREAMS))
def test_streams_are_the_events_sglang_sends(name):
    sg = _sglang()
    events_in = chat_events(STREAMS[name])
    request = sg.protocol.AnthropicMessagesRequest.model_validate(_full({"stream": True, "messages": [user("x")]}))

    async def theirs():
        return [frame async for frame in _serving(sg, events_in)._generate_anthropic_stream(None, None, request, None)]

    theirs = _events(asyncio.run(theirs()))
    translator = anthropic.MessageStream(MODEL)
    ours = _events([frame for event in events_in for frame in translator.feed(event)])
    adapter = TypeAdapter(sg.protocol.AnthropicStreamEvent)
    for event in ours:
        adapter.validate_python(event)
    assert ours[0]["message"]["id"] == "msg_s1"
    # from the first event: 40 prompt tokens, 16 of them read from the prefix cache
    assert ours[0]["message"]["usage"] == {"input_tokens": 24, "cache_read_input_tokens": 16, "output_tokens": 0}
    for event in ours + theirs:  # rule `stream`: the final usage differs on purpose (module docstring)
        if event["type"] == "message_delta":
            event["usage"] = {"output_tokens": event["usage"]["output_tokens"]}
    assert _compared(ours) == _compared(theirs)


def test_the_end_of_a_stream_carries_the_whole_usage():
    translator = anthropic.MessageStream(MODEL)
    frames = [frame for event in chat_events(STREAMS["text"]) for frame in translator.feed(event)]
    delta = next(event for event in _events(frames) if event["type"] == "message_delta")
    # 40 prompt tokens, 16 of them read from the prefix cache; 3 completion tokens sent, 6 counted; then ours
    assert delta["usage"] == {"input_tokens": 24, "cache_read_input_tokens": 16, "output_tokens": 6, "verify_steps": 4,
                              "accept_length": 1.5, "accept_histogram": [3, 0, 1], "path": "speculative"}
