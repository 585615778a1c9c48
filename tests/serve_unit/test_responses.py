"""How answers carry tool calls, reasoning and matched_stop (ray_dspine/serve/responses.py), from chunk streams."""

import asyncio
import json

import pytest

from ray_dspine.engines.protocol import Chunk, GenerateRequest, Usage
from ray_dspine.serve import responses


def delta(index, arguments, id=None, name=None):
    return {"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


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


def collect(chunks, timer=None, chat=True):
    timer = timer or Timer()
    return asyncio.run(responses.collect(Stream(chunks[1:]), chunks[0], REQUEST, "m", chat, timer, deadline=1e18))


def stream_events(chunks, chat=True, continuous=False):
    async def events():
        gen = responses.sse_events(Stream(chunks[1:]), chunks[0], REQUEST, "m", chat, False, continuous, Timer(), 1e18)
        return [e async for e in gen]

    return [json.loads(e[len("data: "):]) for e in asyncio.run(events()) if e != "data: [DONE]\n\n"]


def test_non_streaming_answer_carries_merged_calls_and_null_content():
    timer = Timer()
    choice = collect(CHUNKS, timer)["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "run_tests", "arguments": '{"k": "unit"}'}}]
    assert (timer.tokens_seen, timer.finished) == (5, "tool_calls")


def test_streaming_answer_carries_each_delta():
    out = stream_events(CHUNKS)
    deltas = [event["choices"][0]["delta"] for event in out]
    assert [d.get("tool_calls") for d in deltas] == [[CHUNKS[0].tool_calls[0]], [CHUNKS[1].tool_calls[0]], None]
    assert deltas[0]["content"] is None and out[-1]["choices"][0]["finish_reason"] == "tool_calls"


THINKING = [
    Chunk(reasoning="The test imports a removed name. ", num_tokens=6),
    Chunk(text="Restore `parse_args`.", num_tokens=5),
    Chunk(finish_reason="stop", usage=Usage(completion_tokens=11)),
]


def test_reasoning_comes_apart_from_content():
    message = collect(THINKING)["choices"][0]["message"]
    assert message["reasoning_content"] == "The test imports a removed name. "
    assert message["content"] == "Restore `parse_args`."
    deltas = [event["choices"][0]["delta"] for event in stream_events(THINKING)]
    assert (deltas[0]["content"], deltas[0]["reasoning_content"]) == (None, "The test imports a removed name. ")
    assert deltas[0]["role"] == "assistant"
    assert deltas[1] == {"content": "Restore `parse_args`."}  # the role is named once, in the first delta


def test_answer_without_reasoning_has_no_reasoning_field():
    answer = collect([Chunk(text="ok", num_tokens=1), Chunk(finish_reason="length", usage=Usage())])
    message = answer["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "ok"}


def test_usage_carries_cached_tokens_where_openai_clients_read_them():
    usage = Usage(prompt_tokens=900, completion_tokens=3, total_tokens=903, cached_prompt_tokens=512)
    body = collect([Chunk(text="ok", num_tokens=3), Chunk(finish_reason="stop", usage=usage)])
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 512}
    assert (body["usage"]["cached_prompt_tokens"], body["usage"]["total_tokens"]) == (512, 903)
    assert "completion_tokens_details" not in body["usage"] and "reasoning_tokens" not in body["usage"]


def test_usage_names_reasoning_tokens_under_completion_tokens_details_when_there_are_some():
    usage = Usage(prompt_tokens=9, completion_tokens=6, total_tokens=15, reasoning_tokens=4)
    body = collect([Chunk(reasoning="hmm", num_tokens=4), Chunk(text="ok", num_tokens=2),
                    Chunk(finish_reason="stop", usage=usage)])  # fmt: skip
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 4}  # as SGLang's and OpenAI's
    assert "reasoning_tokens" not in body["usage"]


def test_a_stream_ending_in_an_error_names_the_role_only_if_no_delta_did():
    failing = [Chunk(text="Hel", num_tokens=1), Chunk(error="boom", error_status=502)]
    deltas = [event["choices"][0]["delta"] for event in stream_events(failing) if event.get("choices")]
    assert deltas == [{"role": "assistant", "content": "Hel"}, {"content": ""}]
    deltas = [e["choices"][0]["delta"] for e in stream_events([Chunk(error="boom", error_status=502)]) if e.get("choices")]
    assert deltas == [{"role": "assistant", "content": ""}]


EOS = 151645  # Qwen's <|im_end|>


def ending(finish, matched):
    return [Chunk(text="a + b", num_tokens=3), Chunk(finish_reason=finish, matched_stop=matched, usage=Usage())]


@pytest.mark.parametrize(
    ("finish", "matched"), [("stop", "END"), ("stop", r"a \+ b$"), ("stop", EOS), ("tool_calls", EOS), ("length", None)]
)
def test_sglangs_own_response_classes_read_the_matched_stop_we_send(finish, matched):
    # SGLang 0.5.23's field is Union[None, int, str]: a stop string or pattern stays a string, a token id an int
    protocol = pytest.importorskip("sglang.srt.entrypoints.openai.protocol")
    parsed = [protocol.ChatCompletionResponse.model_validate(collect(ending(finish, matched)))]
    if finish != "tool_calls":  # a chat finish only
        parsed.append(protocol.CompletionResponse.model_validate(collect(ending(finish, matched), chat=False)))
    for choice in (body.choices[0] for body in parsed):
        assert (choice.finish_reason, choice.matched_stop, type(choice.matched_stop)) == (
            finish, matched, type(matched))  # fmt: skip


def test_a_stream_names_matched_stop_on_its_finishing_choice_only():
    protocol = pytest.importorskip("sglang.srt.entrypoints.openai.protocol")
    for chat, cls in ((True, protocol.ChatCompletionStreamResponse), (False, protocol.CompletionStreamResponse)):
        out = stream_events(ending("stop", EOS), chat)
        assert ["matched_stop" in event["choices"][0] for event in out] == [False, True]
        parsed = [cls.model_validate(event).choices[0] for event in out]
        assert [(c.finish_reason, c.matched_stop) for c in parsed] == [(None, None), ("stop", EOS)]


def test_continuous_usage_names_the_prompt_from_the_first_event():
    # a pool's first chunk names the prompt: 30 tokens, 12 of them read from the prefix cache
    chunks = [Chunk(text="a", num_tokens=1, prompt_tokens=30, cached_prompt_tokens=12), Chunk(text="bc", num_tokens=2),
              Chunk(finish_reason="stop", usage=Usage(prompt_tokens=30, completion_tokens=4, cached_prompt_tokens=12),
                    num_tokens=1)]  # fmt: skip
    out = stream_events(chunks, continuous=True)
    # completion tokens so far: 1, 3, then 4 with the finish; total = 30 + those
    assert [event["usage"] for event in out] == [{"prompt_tokens": 30, "completion_tokens": n, "total_tokens": 30 + n,
                                                  "prompt_tokens_details": {"cached_tokens": 12}} for n in (1, 3, 4)]
    protocol = pytest.importorskip("sglang.srt.entrypoints.openai.protocol")
    for event in out:  # SGLang's own stream class reads it as its UsageInfo
        usage = protocol.ChatCompletionStreamResponse.model_validate(event).usage
        assert (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens) == (30, 12)


def test_continuous_usage_before_the_prompt_is_named_counts_completion_tokens_only():
    # an engine whose first chunk does not name the prompt: its usage names it when the stream ends
    ending = Chunk(finish_reason="stop", usage=Usage(prompt_tokens=9, completion_tokens=2), num_tokens=1)
    assert [event["usage"] for event in stream_events([Chunk(text="a", num_tokens=1), ending], continuous=True)] == [
        {"completion_tokens": 1},
        {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11, "prompt_tokens_details": {"cached_tokens": 0}},
    ]
