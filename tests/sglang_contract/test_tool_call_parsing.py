"""The embedded engine reads tool calls out of an answer as SGLang 0.5.23's own `qwen25` parser does.

SGLang's side: `FunctionCallParser(tools, "qwen25").parse_non_stream(answer)`, what its chat serving calls on a
finished answer (`_process_tool_calls`): the content and each call's name and arguments. Ours: tool_parser.py's
ToolCallReader over the answer in one chunk, in two chunks split at every position, and one character a chunk.
The content the stream sends adds up to SGLang's content; the calls are SGLang's, in order. That holds for
requests read whole (rule `whole`) and, except where a block breaks after its name went out, for streamed ones
(rule `streamed`, its deltas assembled as serve/tool_calls.py and OpenAI's clients assemble them).

Streamed, one character a chunk, against SGLang's own streaming parser (`parse_stream_chunk`, what its chat
serving runs on each streamed piece): each call's name goes out at the same character, and at every character
the arguments SGLang has sent are a prefix of ours (ours run ahead: SGLang waits for a string to close).

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
from ray_dspine.serve.tool_calls import merge_tool_calls

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


def ours(pieces: list[str], streamed: bool = False) -> tuple[str, list[tuple[str, str]]]:
    reader = ToolCallReader({"get_weather", "read_file"}, streamed=streamed)
    sent = [reader.read(Chunk(text=piece, finish_reason="stop" if i == len(pieces) - 1 else None))
            for i, piece in enumerate(pieces)]  # fmt: skip
    deltas = [d for chunk in sent for d in chunk.tool_calls or []]
    if not streamed:
        assert [d["index"] for d in deltas] == list(range(len(deltas)))
    calls = merge_tool_calls(deltas)
    return "".join(chunk.text for chunk in sent), [(c["function"]["name"], c["function"]["arguments"]) for c in calls]


def splits(answer: str) -> list[list[str]]:
    return [[answer]] + [[answer[:i], answer[i:]] for i in range(1, len(answer))] + [list(answer)]


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_the_answer_reads_as_sglangs_parser_reads_it(name):
    answer = ANSWERS[name]
    expected = sglangs(answer)
    for pieces in splits(answer):
        assert ours(pieces) == expected, pieces


BREAK_AFTER_THE_NAME = {"broken json", "cut off"}  # tool_parser.py rule `streamed`: the call stays as sent


@pytest.mark.parametrize("name", sorted(set(ANSWERS) - BREAK_AFTER_THE_NAME))
def test_a_streamed_answer_reads_as_sglangs_parser_reads_it_whole(name):
    answer = ANSWERS[name]
    expected = sglangs(answer)
    for pieces in splits(answer):
        assert ours(pieces, streamed=True) == expected, pieces


def test_a_block_that_breaks_after_its_name_keeps_the_name_sent():
    assert sglangs(ANSWERS["broken json"])[1] == [] and sglangs(ANSWERS["cut off"])[1] == []
    assert ours(list(ANSWERS["broken json"]), streamed=True) == ("", [("get_weather", '{"city": ')])
    assert ours(list(ANSWERS["cut off"]), streamed=True) == ("Sure.", [("get_weather", "")])
    assert ours([ANSWERS["broken json"]], streamed=True) == ("", [])  # broken in the chunk that names it: whole


def streamed_by_character(answer: str, sglang: bool) -> list[list[tuple[int, str | None, str]]]:
    """(index, name, arguments) of each delta each one-character chunk gives, SGLang's streaming parser or ours."""
    if sglang:
        from sglang.srt.entrypoints.openai.protocol import Tool
        from sglang.srt.function_call.function_call_parser import FunctionCallParser

        parser = FunctionCallParser([Tool.model_validate(tool) for tool in TOOLS], "qwen25")
        return [[(c.tool_index, c.name, c.parameters) for c in parser.parse_stream_chunk(char)[1]] for char in answer]
    reader = ToolCallReader({"get_weather", "read_file"}, streamed=True)
    chunks = [reader.read(Chunk(text=char)) for char in answer]
    return [[(d["index"], d["function"].get("name"), d["function"]["arguments"]) for d in chunk.tool_calls or []]
            for chunk in chunks]  # fmt: skip


@pytest.mark.parametrize("name", sorted(name for name, answer in ANSWERS.items() if "<tool_call>\n{" in answer))
def test_streamed_one_character_a_chunk_names_go_out_with_sglangs_and_arguments_no_later(name):
    theirs, mine = (streamed_by_character(ANSWERS[name], sglang) for sglang in (True, False))
    named = [[(i, index, call) for i, deltas in enumerate(run) for index, call, _ in deltas if call]
             for run in (theirs, mine)]  # fmt: skip
    assert named[0] == named[1] and named[0]
    sent: list[dict[int, str]] = [{}, {}]
    for step in zip(theirs, mine):
        for so_far, deltas in zip(sent, step):
            for index, _, arguments in deltas:
                so_far[index] = so_far.get(index, "") + (arguments or "")
        assert all(sent[1].get(index, "").startswith(text) for index, text in sent[0].items())


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
