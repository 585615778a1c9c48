"""Tool calls through the embedded engine on the real SmolLM2-135M model (fp32, greedy).

The conversation shows the model two earlier calls (prompt.py rule `history`) under the tools block (rule
`tools`); asked about a third city it answers with a call in the same format, which tool_parser.py reads:
no content, one call, finish "tool_calls" (streamed: the name first, then the arguments as they are written). Asked
something no tool answers, it answers in text. These answers
are the model's own, greedy: the smallest gap between the two likeliest tokens at a position is 3.08 logits
over the call's 32 tokens and 1.49 over the text's 8 (MEASURED with top_logprobs: 2, not speculative).
"""

import asyncio

import pytest

from dspine_lab.engines.tool_call_rate import WEATHER, two_shot
from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
from ray_dspine.engines.embedded.engine import EmbeddedEngine
from ray_dspine.engines.embedded.model import load_model
from ray_dspine.engines.protocol import ChatMessage, GenerateRequest
from ray_dspine.serve.tool_calls import merge_tool_calls

def request(question: str, **fields) -> GenerateRequest:
    turns = [ChatMessage.model_validate(m) for m in two_shot(question)]
    return GenerateRequest(request_id="t", max_tokens=40, messages=turns, **{"tools": [WEATHER], **fields})


@pytest.fixture(scope="module")
def loaded():
    return load_model(EmbeddedEngineConfig(dtype="fp32"))


def decode(loaded, req: GenerateRequest, speculative: bool = True):
    async def main():
        ids = iter(f"call_{n:024x}" for n in range(9))
        engine = EmbeddedEngine(EmbeddedEngineConfig(dtype="fp32", speculative=speculative),
                                loader=lambda _c: loaded, new_call_id=lambda: next(ids))  # fmt: skip
        await engine.start()
        try:
            return [chunk async for chunk in engine.generate(req)]
        finally:
            await engine.stop()

    return asyncio.run(main())


@pytest.mark.parametrize("speculative", [True, False])
def test_the_model_calls_the_tool_and_the_engine_reads_the_call(loaded, speculative):
    chunks = decode(loaded, request("What's the weather in Tokyo?"), speculative)
    calls = [d for c in chunks for d in c.tool_calls or []]
    assert "".join(c.text for c in chunks) == ""
    assert calls == [{"index": 0, "id": "call_" + "0" * 24, "type": "function",
                      "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}}]  # fmt: skip
    assert (chunks[-1].finish_reason, chunks[-1].matched_stop) == ("tool_calls", None)
    assert chunks[-1].usage.completion_tokens == sum(c.num_tokens for c in chunks)


@pytest.mark.parametrize("speculative", [True, False])
def test_a_streamed_call_goes_out_name_first_then_arguments_as_written(loaded, speculative):
    chunks = decode(loaded, request("What's the weather in Tokyo?", stream=True), speculative)
    carrying = [c.tool_calls for c in chunks if c.tool_calls]
    assert carrying[0][0] == {"index": 0, "id": "call_" + "0" * 24, "type": "function",
                              "function": {"name": "get_weather", "arguments": ""}}  # fmt: skip
    if not speculative:  # a token a chunk: the arguments come over several
        assert len(carrying) >= 3
    assert merge_tool_calls(d for c in carrying for d in c) == [{"id": "call_" + "0" * 24, "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}}]  # fmt: skip
    assert (chunks[-1].finish_reason, "".join(c.text for c in chunks)) == ("tool_calls", "")


def test_a_question_no_tool_answers_is_text(loaded):
    chunks = decode(loaded, request("Thanks! What is 2+2?"))
    assert "".join(c.text for c in chunks) == "2 + 2 = 4"
    assert not any(c.tool_calls for c in chunks) and chunks[-1].finish_reason == "stop"


def test_tool_choice_none_hides_the_tools_and_reads_no_calls(loaded):
    with_tools = decode(loaded, request("What's the weather in Tokyo?"))[-1].usage.prompt_tokens
    chunks = decode(loaded, request("What's the weather in Tokyo?", tool_choice="none"))
    assert chunks[-1].usage.prompt_tokens < with_tools  # no tools block
    assert not any(c.tool_calls for c in chunks) and chunks[-1].finish_reason != "tool_calls"
