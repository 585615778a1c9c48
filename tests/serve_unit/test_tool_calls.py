"""Tool calls: the merge rules (ray_dspine/serve/tool_calls.py) and how answers carry them."""

import asyncio
import json

from ray_dspine.engines.protocol import Chunk, GenerateRequest, Usage
from ray_dspine.serve import responses
from ray_dspine.serve.tool_calls import merge_tool_calls


def delta(index, arguments, id=None, name=None):
    return {"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_rule_first_delta_names_the_call_and_arguments_concatenate():
    calls = merge_tool_calls([delta(0, "", "call_a", "read_file"), delta(0, '{"path": '), delta(0, '"a.py"}')])
    assert calls == [{"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]


def test_rule_calls_are_keyed_and_ordered_by_index():
    calls = merge_tool_calls([delta(1, "{}", "call_b", "g"), delta(0, "", "call_a", "f"), delta(0, "{}")])
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("call_a", "f", "{}"), ("call_b", "g", "{}")]


def test_rule_delta_without_index_joins_the_last_call():
    no_index = {"function": {"arguments": "1}"}}
    calls = merge_tool_calls([delta(0, "", "c0", "f"), delta(1, '{"x": ', "c1", "g"), no_index])
    assert calls[1]["function"]["arguments"] == '{"x": 1}' and calls[0]["function"]["arguments"] == ""


def test_rule_null_id_or_name_never_replaces():
    calls = merge_tool_calls([delta(0, "", "c0", "f"), delta(0, "{}", None, None)])
    assert (calls[0]["id"], calls[0]["function"]["name"]) == ("c0", "f")


def test_rule_no_deltas_no_calls():
    assert merge_tool_calls([]) == []


class Timer:
    def __init__(self):
        self.tokens_seen, self.finished = 0, None

    def tokens(self, n):
        self.tokens_seen += n

    def finish(self, reason, usage):
        self.finished = reason


class Stream:
    def __init__(self, chunks):
        self._chunks = iter(chunks)

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None

    def cancel(self):
        pass


CHUNKS = [
    Chunk(tool_calls=[delta(0, "", "call_a", "run_tests")], num_tokens=2),
    Chunk(tool_calls=[delta(0, '{"k": "unit"}')], num_tokens=3),
    Chunk(finish_reason="tool_calls", usage=Usage(completion_tokens=5)),
]
REQUEST = GenerateRequest(request_id="chatcmpl-1", prompt="x", max_tokens=8)


def test_non_streaming_answer_carries_merged_calls_and_null_content():
    stream = Stream(CHUNKS[1:])
    timer = Timer()
    body = asyncio.run(responses.collect(stream, CHUNKS[0], REQUEST, "m", True, timer, deadline=1e18))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "run_tests", "arguments": '{"k": "unit"}'}}]
    assert (timer.tokens_seen, timer.finished) == (5, "tool_calls")


def test_streaming_answer_carries_each_delta():
    async def events():
        gen = responses.sse_events(Stream(CHUNKS[1:]), CHUNKS[0], REQUEST, "m", True, False, False, Timer(), 1e18)
        return [e async for e in gen]

    out = [json.loads(e[len("data: "):]) for e in asyncio.run(events()) if e != "data: [DONE]\n\n"]
    deltas = [event["choices"][0]["delta"] for event in out]
    assert [d.get("tool_calls") for d in deltas] == [[CHUNKS[0].tool_calls[0]], [CHUNKS[1].tool_calls[0]], None]
    assert deltas[0]["content"] is None and out[-1]["choices"][0]["finish_reason"] == "tool_calls"
