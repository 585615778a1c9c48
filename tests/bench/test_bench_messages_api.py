"""`bench replay --api messages` (ray_dspine/bench/messages_api.py): the body and events rules by hand, then the
client against the ingress's real FastAPI app over ASGI (tests/serve_unit/asgi_app.py: each pool answers with the
words of the last message), where a Messages replay, and a Responses replay (responses_api.py), records what a chat
replay records."""

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve_unit"))
from asgi_app import MODEL, FakeReplica, ingress_app  # noqa: E402

from ray_dspine.bench.client import ClientSettings, StreamingClient  # noqa: E402
from ray_dspine.bench.messages_api import body_parts  # noqa: E402
from ray_dspine.bench.traces.model import TraceMessage, TraceRequest  # noqa: E402
from ray_dspine.engines.protocol import Chunk, Usage  # noqa: E402
from ray_dspine.serve import anthropic  # noqa: E402

CALL = {"id": "c1", "type": "function", "function": {"name": "get_user", "arguments": '{"user_id":"u7"}'}}
CONVERSATION = [
    TraceMessage(role="system", content="You are an airline agent."),
    TraceMessage(role="user", content="Change my flight"),
    TraceMessage(role="assistant", content="Let me look.", tool_calls=[CALL, {**CALL, "id": "c2"}]),
    TraceMessage(role="tool", content='{"name": "Ann"}', tool_call_id="c1"),
    TraceMessage(role="tool", content="{}", tool_call_id="c2"),
    TraceMessage(role="assistant", content="Which flight?"),
    TraceMessage(role="user", content="the one to Oslo"),
]
TOOLS = [{"type": "function", "function": {"name": "get_user", "description": "d",
                                           "parameters": {"type": "object", "properties": {"user_id": {}}}}}]


def test_rule_body():
    assert body_parts(CONVERSATION, TOOLS) == {
        "system": "You are an airline agent.",
        "messages": [
            {"role": "user", "content": "Change my flight"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "c1", "name": "get_user", "input": {"user_id": "u7"}},
                {"type": "tool_use", "id": "c2", "name": "get_user", "input": {"user_id": "u7"}}]},
            {"role": "user", "content": [  # the two results in one user message
                {"type": "tool_result", "tool_use_id": "c1", "content": '{"name": "Ann"}'},
                {"type": "tool_result", "tool_use_id": "c2", "content": "{}"}]},
            {"role": "assistant", "content": "Which flight?"},
            {"role": "user", "content": "the one to Oslo"},
        ],
        "tools": [{"name": "get_user", "description": "d", "input_schema": {"type": "object",
                                                                            "properties": {"user_id": {}}}}],
    }  # fmt: skip


def test_rule_body_comes_back_as_the_chat_request_through_the_ingress_translation():
    chat = anthropic.chat_body({"model": MODEL, "max_tokens": 8, **body_parts(CONVERSATION, TOOLS)})
    redumped = {**CALL, "function": {"name": "get_user", "arguments": '{"user_id": "u7"}'}}  # json.dumps spacing
    assert chat["messages"] == [
        {"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": "Change my flight"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [redumped, {**redumped, "id": "c2"}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"name": "Ann"}'},
        {"role": "tool", "tool_call_id": "c2", "content": "{}"},
        {"role": "assistant", "content": "Which flight?"},
        {"role": "user", "content": "the one to Oslo"},
    ]  # fmt: skip
    assert chat["tools"] == TOOLS  # the same tools, so the same prompt on an embedded pool


def trace_request(max_tokens: int = 3) -> TraceRequest:
    return TraceRequest(request_id="t-1", session_id="s", turn_index=0, arrival_s=0.0, workload_class="agent",
                        messages=CONVERSATION, prompt_tokens=20, recorded_prompt_tokens=20, max_tokens=max_tokens,
                        tools=TOOLS, source="test")  # fmt: skip


def send(app, api: str, request: TraceRequest):
    async def go():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            settings = ClientSettings(endpoint="http://127.0.0.1", model=MODEL, api=api, keep_text=True)
            return await StreamingClient(http, settings).send(request)

    return asyncio.run(go())


OTHER_APIS = pytest.mark.parametrize("api", ["messages", "responses"])


@OTHER_APIS
def test_rule_events_a_replay_records_what_a_chat_replay_records(monkeypatch, api):
    app, _core = ingress_app(monkeypatch)
    chat, messages = send(app, "chat", trace_request()), send(app, api, trace_request())
    assert messages.error_kind is None and messages.api == api
    assert messages.output_text == chat.output_text == "the one to "
    for field in ("finish_reason", "prompt_tokens", "output_tokens", "num_tools", "pool", "answer_calls"):
        assert getattr(messages, field) == getattr(chat, field), field
    assert (messages.finish_reason, messages.prompt_tokens, messages.output_tokens) == ("length", 4, 3)
    assert len(messages.chunk_offsets_s) == 3 and messages.ttft_s is not None


@OTHER_APIS
def test_rule_usage_a_replay_records_the_speculation_a_chat_replay_records(monkeypatch, api):
    class Drafted(FakeReplica):  # 3 tokens in 2 verify steps: one kept a draft token
        async def generate(self, request, prompt_token_ids=None):
            yield Chunk(text="a b", num_tokens=2, prompt_tokens=4, cached_prompt_tokens=0)
            yield Chunk(text=" c", num_tokens=1)
            yield Chunk(finish_reason="length", usage=Usage(
                prompt_tokens=4, completion_tokens=3, total_tokens=7, verify_steps=2, accept_length=1.5,
                accept_histogram=[1, 1], path="speculative"))  # fmt: skip

    app, _core = ingress_app(monkeypatch, replicas={"spec": Drafted("spec"), "ar": Drafted("ar")})
    chat, other = send(app, "chat", trace_request()), send(app, api, trace_request())
    for record in (chat, other):
        assert (record.verify_steps, record.accept_length, record.accept_histogram) == (2, 1.5, [1, 1])
        assert (record.prompt_tokens, record.output_tokens, record.path) == (4, 3, "speculative")


@OTHER_APIS
def test_rule_events_a_call_and_an_error(monkeypatch, api):
    class Calls(FakeReplica):
        async def generate(self, request, prompt_token_ids=None):
            yield Chunk(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                     "function": {"name": "get_user", "arguments": ""}}], num_tokens=1)
            yield Chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"user_id": '}}], num_tokens=1)
            if "Oslo" in request.messages[-1].content:
                yield Chunk(tool_calls=[{"index": 0, "function": {"arguments": '"u7"}'}}], num_tokens=1)
                yield Chunk(finish_reason="tool_calls", usage=None)
            else:
                yield Chunk(finish_reason="error", error="replica stopped", error_status=502)

    app, _core = ingress_app(monkeypatch, replicas={"spec": Calls("spec"), "ar": Calls("ar")})
    called = send(app, api, trace_request())
    assert (called.answer_calls, called.finish_reason, called.error_kind) == (["get_user"], "tool_calls", None)
    cut = trace_request()
    cut.messages = CONVERSATION[:-1] + [TraceMessage(role="user", content="and Rome?")]
    failed = send(app, api, cut)
    assert (failed.error_kind, failed.error, failed.answer_calls) == ("stream_error", "replica stopped", [])
