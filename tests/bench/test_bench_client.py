"""SSE parsing and request bodies of the replay client."""

import json

from ray_dspine.bench.client import ClientSettings, _Stream, build_body
from ray_dspine.bench.traces.model import SyntheticPrompt, TraceMessage, TraceRequest


def _chunk(content=None, usage=None, finish=None, choices=True):
    event = {"choices": [{"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}]
             if choices else []}
    if usage is not None:
        event["usage"] = usage
    return json.dumps(event)


def test_rule_chunk_tokens_from_cumulative_usage_else_one():
    s = _Stream()
    s.feed(_chunk("a", {"completion_tokens": 3}), 0.10)  # 3 tokens
    s.feed(_chunk("b", {"completion_tokens": 8}), 0.15)  # 8 - 3 = 5 tokens
    s.feed(_chunk("c"), 0.20)  # no usage: 1 token
    s.feed(_chunk(finish="stop"), 0.21)  # no text: not a content chunk
    s.feed(_chunk(usage={"completion_tokens": 9, "accept_length": 3.0}, choices=False), 0.22)
    s.feed("[DONE]", 0.23)
    assert s.offsets == [0.10, 0.15, 0.20]
    assert s.tokens == [3, 5, 1]
    assert s.finish_reason == "stop" and s.done and s.usage["accept_length"] == 3.0


def test_stream_errors_and_reasoning_chunks():
    s = _Stream()
    assert s.feed(json.dumps({"choices": [{"delta": {"reasoning_content": "hmm"}}]}), 0.1) is None
    assert s.offsets == [0.1]  # reasoning text is a content chunk too
    assert s.feed("not json", 0.2) == ("bad_response", "unparseable SSE data: 'not json'")
    assert s.feed(json.dumps({"error": {"message": "engine died"}}), 0.3) == ("stream_error", "engine died")


def test_build_body_chat_completions_and_cap():
    settings = ClientSettings(endpoint="http://x", model="m", max_tokens_cap=5)
    request = TraceRequest(request_id="r", session_id="s", turn_index=0, arrival_s=0.0, workload_class="chat",
                           synthetic_prompt=SyntheticPrompt(namespace="n", block_ids=[0], num_tokens=10),
                           prompt_tokens=10, recorded_prompt_tokens=10, max_tokens=50, source="t")
    body = build_body(request, settings)
    assert body["max_tokens"] == 5 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["messages"][0]["role"] == "user" and len(body["messages"][0]["content"]) == 40
    body = build_body(request, settings.model_copy(update={"api": "completions"}))
    assert len(body["prompt"]) == 40 and "messages" not in body
    chat = request.model_copy(update={"synthetic_prompt": None, "messages": [TraceMessage(role="user", content="q")]})
    assert build_body(chat, settings)["messages"] == [{"role": "user", "content": "q"}]
