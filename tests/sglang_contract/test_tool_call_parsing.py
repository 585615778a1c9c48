"""The embedded engine reads tool calls out of an answer as SGLang 0.5.23's own `qwen25` parser does.

SGLang's side: `FunctionCallParser(tools, "qwen25").parse_non_stream(answer)`, what its chat serving calls on a
finished answer (`_process_tool_calls`): the content and each call's name and arguments. Ours: tool_parser.py's
ToolCallReader over the answer in one chunk, in two chunks split at every position, and one character a chunk.
The content the stream sends adds up to SGLang's content; the calls are SGLang's, in order.

Two answers differ on purpose, each checked for what tool_parser.py says instead:
  leading whitespace   "\\n\\nHi\\n" + call: SGLang strips the content to "Hi"; a stream has sent "\\n\\nHi" before the
                       call arrives and keeps it.
  non-object entry     a block [3, call]: SGLang's parser raises on the 3 and its serving sends the whole answer as
                       text with no call; ours drops the 3 and keeps the call.
"""

from __future__ import annotations

import pytest

from ray_dspine.engines.embedded.tool_parser import ToolCallReader
from ray_dspine.engines.protocol import Chunk

pytest.importorskip("sglang")

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
]


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


WEATHER = block('{"name": "get_weather", "arguments": {"city": "Tokyo"}}')
READ = block('{"name": "read_file", "arguments": {"path": "src/app.py", "note": "café ☕"}}')
ANSWERS = {
    "text only": "The weather is fine.",
    "text with spaces": "  spaced out \n",
    "a call": WEATHER,
    "text then a call": "Let me look that up. \n" + WEATHER,
    "two calls": WEATHER + "\n" + READ,
    "text after calls": WEATHER + "\nI asked for it.",
    "a list in one block": block('[{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "read_file"}]'),
    "parameters": block('{"name": "read_file", "parameters": {"path": "a"}}'),
    "arguments a string": block('{"name": "read_file", "arguments": "a.py"}'),
    "empty arguments": block('{"name": "get_weather", "arguments": {}}'),
    "unknown tool": block('{"name": "rm_rf", "arguments": {}}') + "\n" + WEATHER,
    "broken json": block('{"name": "get_weather", "arguments": {"city": '),
    "cut off": "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"argu",
    "no newline after the tag": '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
    "end tag inside arguments": block('{"name": "read_file", "arguments": {"path": "</tool_call>"}}'),
    "marker in the middle": "Here is how: use <tool_call>\n tags.",
}


def sglangs(answer: str) -> tuple[str, list[tuple[str, str]]]:
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    parser = FunctionCallParser([Tool.model_validate(tool) for tool in TOOLS], "qwen25")
    if not parser.has_tool_call(answer):  # as _process_tool_calls: no marker, the answer is content
        return answer, []
    content, calls = parser.parse_non_stream(answer)
    return content, [(call.name, call.parameters) for call in calls]


def ours(pieces: list[str]) -> tuple[str, list[tuple[str, str]]]:
    reader = ToolCallReader({"get_weather", "read_file"})
    sent = [reader.read(Chunk(text=piece, finish_reason="stop" if i == len(pieces) - 1 else None))
            for i, piece in enumerate(pieces)]  # fmt: skip
    calls = [d for chunk in sent for d in chunk.tool_calls or []]
    assert [d["index"] for d in calls] == list(range(len(calls)))
    return "".join(chunk.text for chunk in sent), [(d["function"]["name"], d["function"]["arguments"]) for d in calls]


def splits(answer: str) -> list[list[str]]:
    return [[answer]] + [[answer[:i], answer[i:]] for i in range(1, len(answer))] + [list(answer)]


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_the_answer_reads_as_sglangs_parser_reads_it(name):
    answer = ANSWERS[name]
    expected = sglangs(answer)
    for pieces in splits(answer):
        assert ours(pieces) == expected, pieces


def test_the_corpus_holds_calls_and_answers_without_them():
    found = [len(sglangs(answer)[1]) for answer in ANSWERS.values()]
    assert found.count(0) == 6 and sum(found) == 12


def test_leading_whitespace_before_a_call_is_kept_where_sglang_strips_it():
    answer = "\n\nHi\n" + WEATHER
    assert sglangs(answer) == ("Hi", [("get_weather", '{"city": "Tokyo"}')])
    assert ours([answer]) == ("\n\nHi", [("get_weather", '{"city": "Tokyo"}')])


def test_a_non_object_entry_is_dropped_where_sglang_gives_up_on_the_answer():
    answer = block('[3, {"name": "get_weather", "arguments": {}}]')
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    parser = FunctionCallParser([Tool.model_validate(tool) for tool in TOOLS], "qwen25")
    with pytest.raises(AttributeError):  # its serving catches this and sends `answer` as text, no call
        parser.parse_non_stream(answer)
    assert ours([answer]) == ("", [("get_weather", "{}")])
