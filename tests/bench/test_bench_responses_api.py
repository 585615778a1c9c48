"""`bench replay --api responses` (ray_dspine/bench/responses_api.py): the body rule by hand and back through the
ingress's translation; the events and usage rules on the events the server sends (serve/openai_responses.py's
ResponseStream fed chat SSE events), read by the client into the record a chat replay of the same chat stream
records. The client against the ingress's real FastAPI app over ASGI: tests/bench/test_bench_messages_api.py, for
both APIs."""

import argparse
import asyncio
import json
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve_unit"))
from asgi_app import MODEL  # noqa: E402

from ray_dspine.bench.client import ClientSettings, StreamingClient, build_body  # noqa: E402
from ray_dspine.bench.replay_cli import options_from_args, register  # noqa: E402
from ray_dspine.bench.responses_api import body  # noqa: E402
from ray_dspine.bench.traces.model import TraceMessage, TraceRequest  # noqa: E402
from ray_dspine.serve import openai_responses, openai_responses_stream  # noqa: E402

CALL = {"id": "c1", "type": "function", "function": {"name": "get_user", "arguments": '{"user_id":"u7"}'}}
CONVERSATION = [
    TraceMessage(role="system", content="You are an airline agent."),
    TraceMessage(role="developer", content="Be brief."),
    TraceMessage(role="user", content="Change my flight"),
    TraceMessage(role="assistant", content="Let me look.", tool_calls=[CALL, {**CALL, "id": "c2"}]),
    TraceMessage(role="tool", content='{"name": "Ann"}', tool_call_id="c1"),
    TraceMessage(role="tool", content="{}", tool_call_id="c2"),
    TraceMessage(role="assistant", tool_calls=[{**CALL, "id": "c3"}]),  # calls alone: no message item
    TraceMessage(role="tool", content="ok", tool_call_id="c3"),
    TraceMessage(role="assistant", content="Which flight?"),
    TraceMessage(role="user", content="the one to Oslo"),
]
TOOLS = [{"type": "function", "function": {"name": "get_user", "description": "d",
                                           "parameters": {"type": "object", "properties": {"user_id": {}}}}}]
CHAT = {"model": MODEL, "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "stop": ["END"], "user": "s-1",
        "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "messages": [m.model_dump(exclude_none=True) for m in CONVERSATION], "tools": TOOLS}  # fmt: skip


def test_rule_body():
    assert body(CHAT) == {
        "model": MODEL,
        "instructions": "You are an airline agent.\nBe brief.",
        "input": [
            {"role": "user", "content": "Change my flight"},
            {"role": "assistant", "content": "Let me look."},
            {"type": "function_call", "call_id": "c1", "name": "get_user", "arguments": '{"user_id":"u7"}'},
            {"type": "function_call", "call_id": "c2", "name": "get_user", "arguments": '{"user_id":"u7"}'},
            {"type": "function_call_output", "call_id": "c1", "output": '{"name": "Ann"}'},
            {"type": "function_call_output", "call_id": "c2", "output": "{}"},
            {"type": "function_call", "call_id": "c3", "name": "get_user", "arguments": '{"user_id":"u7"}'},
            {"type": "function_call_output", "call_id": "c3", "output": "ok"},
            {"role": "assistant", "content": "Which flight?"},
            {"role": "user", "content": "the one to Oslo"},
        ],
        "tools": [{"type": "function", "name": "get_user", "description": "d",
                   "parameters": {"type": "object", "properties": {"user_id": {}}}}],
        "max_output_tokens": 8, "temperature": 0.5, "top_p": 0.9, "stop": ["END"],
        "stream": True, "store": False, "prompt_cache_key": "s-1",
    }  # fmt: skip


def test_rule_body_comes_back_as_the_chat_request_through_the_ingress_translation():
    chat = openai_responses.chat_body(body(CHAT))
    assert chat["messages"] == [
        {"role": "system", "content": "You are an airline agent.\nBe brief."},  # the leading two, joined
        *CHAT["messages"][2:],  # the rest as they were: arguments, ids and texts
    ]
    assert chat["tools"] == TOOLS  # the same tools, so the same prompt on an embedded pool
    assert {key: chat[key] for key in ("model", "max_tokens", "temperature", "top_p", "stop", "user", "stream")} == {
        "model": MODEL, "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "stop": ["END"], "user": "s-1",
        "stream": True}  # fmt: skip


def test_rule_body_of_a_replay_request_and_its_cli_choice():
    settings = ClientSettings(endpoint="http://x", model=MODEL, api="responses", max_tokens_cap=5)
    sent = build_body(trace_request(max_tokens=9), settings)
    # the replay's chat request: max_tokens capped, the replay's temperature, no top_p, stop or user
    assert sent == body({**CHAT, "max_tokens": 5, "temperature": 0.0, "top_p": None, "stop": None, "user": None})
    assert "prompt_cache_key" not in sent and sent["max_output_tokens"] == 5 and sent["temperature"] == 0.0
    bench = argparse.ArgumentParser().add_subparsers()
    parser = register(bench)
    args = parser.parse_args(["--trace", "t.jsonl", "--out", "o", "--api", "responses", "--tools", "from-trace"])
    options = options_from_args(args, parser)
    assert (options.api, options.tools) == ("responses", "from-trace")  # tools go with responses, as with messages


# -- events and usage, on what the server sends --------------------------------------------------


def trace_request(max_tokens: int = 3) -> TraceRequest:
    return TraceRequest(request_id="t-1", session_id="s", turn_index=0, arrival_s=0.0, workload_class="agent",
                        messages=CONVERSATION, prompt_tokens=20, recorded_prompt_tokens=20, max_tokens=max_tokens,
                        tools=TOOLS, source="test")  # fmt: skip


def chat_event(delta=None, completion=None, finish=None, usage=None) -> str:
    event = {"id": "chatcmpl-abc", "object": "chat.completion.chunk", "model": MODEL,
             "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    if completion is not None:
        event["usage"] = {"prompt_tokens": 20, "completion_tokens": completion, "total_tokens": 20 + completion,
                          "prompt_tokens_details": {"cached_tokens": 16}, **(usage or {})}  # fmt: skip
    return f"data: {json.dumps(event)}\n\n"


def calls(arguments: str, **first) -> list[dict]:
    return [{"index": 0, **first, "function": {**({"name": "get_user"} if first else {}), "arguments": arguments}}]


SPECULATION = {"verify_steps": 4, "accept_length": 1.5, "accept_histogram": [2, 2], "path": "speculative"}
# reasoning, text, then a call whose arguments come in two pieces: 6 tokens, one per event
CALLED = [
    chat_event({"role": "assistant", "reasoning_content": "Think."}, 1),
    chat_event({"content": "Let me "}, 2),
    chat_event({"content": "check."}, 3),
    chat_event({"tool_calls": calls("", id="call_1", type="function")}, 4),
    chat_event({"tool_calls": calls('{"user_id": ')}, 5),
    chat_event({"tool_calls": calls('"u7"}')}, 6),
    chat_event({}, 6, finish="tool_calls"),
    chat_event(None, 6, usage=SPECULATION),
    "data: [DONE]\n\n",
]
ANSWERED = [chat_event({"role": "assistant", "content": "Oslo"}, 1), chat_event({"content": " it is."}, 2),
            chat_event({}, 2, finish="stop"), chat_event(None, 2), "data: [DONE]\n\n"]  # fmt: skip
CUT = [chat_event({"role": "assistant", "content": "Oslo"}, 1), chat_event({"content": " it"}, 2),
       chat_event({}, 2, finish="length"), chat_event(None, 2), "data: [DONE]\n\n"]  # fmt: skip
FAILED = [chat_event({"role": "assistant", "content": "Hi"}, 1),
          'data: {"error": {"message": "replica stopped", "type": "server_error", "code": "replica_failed"}}\n\n',
          chat_event({}, 1, finish="error"), "data: [DONE]\n\n"]  # fmt: skip


def server_events(chat: list[str], summary: bool = False) -> str:
    """The /v1/responses stream the ingress sends for this chat stream."""
    asked = {"model": MODEL, "input": "hi", "stream": True, **({"reasoning": {"summary": "auto"}} if summary else {})}
    stream = openai_responses_stream.ResponseStream(openai_responses.echo(asked), summary=summary, clock=lambda: 0)
    return "".join(out for event in chat for out in stream.feed(event))


def replay(api: str, sse: str):
    """(record, request sent) of one trace request answered with this SSE text."""
    sent = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, content=sse.encode(), headers={"content-type": "text/event-stream"})

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
            settings = ClientSettings(endpoint="http://127.0.0.1", model=MODEL, api=api, keep_text=True)
            return await StreamingClient(http, settings).send(trace_request())

    return asyncio.run(go()), sent[0]


RECORDED = ("output_text", "finish_reason", "prompt_tokens", "cached_prompt_tokens", "output_tokens", "chunk_tokens",
            "answer_calls", "verify_steps", "accept_length", "accept_histogram", "path", "error_kind", "error")


def test_rule_events_a_call_read_into_the_record_a_chat_replay_records():
    record, sent = replay("responses", server_events(CALLED))
    assert sent.url.path == "/v1/responses" and "input" in json.loads(sent.content)
    assert (record.api, record.error_kind, record.output_text) == ("responses", None, "Think.Let me check.")
    assert record.answer_calls == ["get_user"] and record.finish_reason == "tool_calls"
    # one chunk per delta: reasoning, 2 texts, the call named, 2 argument pieces
    assert record.chunk_tokens == [1] * 6 and len(record.chunk_offsets_s) == 6
    assert (record.prompt_tokens, record.cached_prompt_tokens, record.output_tokens) == (20, 16, 6)
    assert (record.verify_steps, record.accept_length, record.accept_histogram, record.path) == (
        4, 1.5, [2, 2], "speculative")  # fmt: skip
    chat, _ = replay("chat", "".join(CALLED))
    assert {f: getattr(record, f) for f in RECORDED} == {f: getattr(chat, f) for f in RECORDED}


def test_rule_events_summary_deltas_are_chunks_too():
    plain, summarized = replay("responses", server_events(CALLED)), replay("responses", server_events(CALLED, True))
    assert "response.reasoning_summary_text.delta" in server_events(CALLED, True)
    assert {f: getattr(summarized[0], f) for f in RECORDED} == {f: getattr(plain[0], f) for f in RECORDED}


def test_rule_usage_finish_reasons_stop_and_length():
    answered, cut = replay("responses", server_events(ANSWERED))[0], replay("responses", server_events(CUT))[0]
    assert (answered.finish_reason, answered.output_text, answered.output_tokens, answered.answer_calls) == (
        "stop", "Oslo it is.", 2, [])  # fmt: skip
    assert "response.incomplete" in server_events(CUT)
    assert (cut.finish_reason, cut.output_text, cut.error_kind) == ("length", "Oslo it", None)
    assert (answered.verify_steps, answered.path) == (None, "")  # no speculation fields: none recorded


def test_rule_events_a_failure_and_a_stream_cut_short():
    failed = replay("responses", server_events(FAILED))[0]
    assert (failed.error_kind, failed.error, failed.output_text) == ("stream_error", "replica stopped", "Hi")
    chat = replay("chat", "".join(FAILED))[0]
    assert (chat.error_kind, chat.error) == (failed.error_kind, failed.error)
    events = server_events(ANSWERED).split("\n\n")
    short = "\n\n".join(event for event in events if "response.completed" not in event)
    cut = replay("responses", short)[0]
    assert (cut.error_kind, cut.error) == ("incomplete_stream", "stream ended without response.completed")


# -- through the ingress's real app ---------------------------------------------------------------
