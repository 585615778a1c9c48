"""tool_parser.py: one test a rule, expected values worked out by hand (no model: chunks are written here)."""

from __future__ import annotations

import itertools

from ray_dspine.engines.embedded.tool_parser import ToolCallReader, call_text, parse_block, tools_active
from ray_dspine.engines.protocol import ChatMessage, Chunk, GenerateRequest

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "function": {"name": "now"}}]


def ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter):024x}"


def reader(parallel: bool = True) -> ToolCallReader:
    return ToolCallReader({"get_weather", "now"}, parallel, ids())


def run(pieces: list[str], finish: str = "stop", parallel: bool = True) -> tuple[list[str], list[dict], str]:
    """Each piece one chunk, the last one finishing: (texts sent, deltas sent, finish reason)."""
    calls = reader(parallel)
    out = [calls.read(Chunk(text=p, num_tokens=1, finish_reason=finish if i == len(pieces) - 1 else None))
           for i, p in enumerate(pieces)]  # fmt: skip
    return [c.text for c in out], [d for c in out for d in c.tool_calls or []], out[-1].finish_reason


def delta(index: int, name: str, arguments: str) -> dict:
    return {"index": index, "id": f"call_{index:024x}", "type": "function",
            "function": {"name": name, "arguments": arguments}}  # fmt: skip


def request(**fields) -> GenerateRequest:
    return GenerateRequest(request_id="r", max_tokens=8, messages=[ChatMessage(role="user", content="hi")], **fields)


def test_rule_active():
    assert tools_active(request(tools=TOOLS))
    assert tools_active(request(tools=TOOLS, tool_choice="auto"))
    assert not tools_active(request(tools=TOOLS, tool_choice="none"))
    assert not tools_active(request())
    assert not tools_active(GenerateRequest(request_id="r", max_tokens=8, prompt="hi", tools=TOOLS))
    assert ToolCallReader.for_request(request(tools=TOOLS, tool_choice="none")) is None


def test_rule_content_without_a_marker_is_the_whole_answer():
    texts, calls, finish = run(["  Hello", " there  "])
    assert "".join(texts) == "  Hello there  " and calls == [] and finish == "stop"


def test_rule_content_before_a_call_is_stripped_and_nothing_after_a_marker_is_content():
    texts, calls, finish = run([f"Let me check. \n{WEATHER}\nDone!"])
    assert texts == ["Let me check."]
    assert calls == [delta(0, "get_weather", '{"city": "Tokyo"}')]


def test_rule_calls_left_to_right_lists_and_parameters():
    second = '<tool_call>\n[{"name": "now", "parameters": {"tz": "UTC"}}, {"name": "now"}]\n</tool_call>'
    _, calls, _ = run([f"{WEATHER}\n{second}"])
    assert calls == [delta(0, "get_weather", '{"city": "Tokyo"}'), delta(1, "now", '{"tz": "UTC"}'),
                     delta(2, "now", "{}")]  # fmt: skip


def test_rule_calls_broken_json_unknown_names_and_non_objects_are_dropped():
    assert parse_block('{"name": "get_weather", "arguments": {', {"get_weather"}) == []
    assert parse_block('{"name": "rm_rf", "arguments": {}}', {"get_weather"}) == []
    assert parse_block('[3, {"name": "get_weather", "arguments": {"q": "é"}}]', {"get_weather"}) == [
        ("get_weather", '{"q": "é"}')
    ]
    # a call the answer's end cut off is not a call; its text is not content either
    texts, calls, finish = run(["Sure\n<tool_call>\n{\"name\": \"now\""], finish="length")
    assert "".join(texts) == "Sure" and calls == [] and finish == "length"


def test_rule_parallel_false_keeps_the_first_call():
    _, calls, _ = run([WEATHER + "\n" + WEATHER.replace("Tokyo", "Rome")], parallel=False)
    assert calls == [delta(0, "get_weather", '{"city": "Tokyo"}')]


def test_rule_ids_are_sglangs_form_and_differ():
    calls = ToolCallReader.for_request(request(tools=TOOLS))
    first = calls.read(Chunk(text=WEATHER + "\n" + WEATHER, finish_reason="stop")).tool_calls
    assert [len(d["id"]) for d in first] == [29, 29] and first[0]["id"] != first[1]["id"]
    assert all(d["id"].startswith("call_") and int(d["id"][5:], 16) >= 0 for d in first)


def test_rule_finish_stop_becomes_tool_calls_and_length_stays():
    calls = reader()
    last = calls.read(Chunk(text=WEATHER, finish_reason="stop", matched_stop=95))
    assert (last.finish_reason, last.matched_stop) == ("tool_calls", None)
    assert run([WEATHER], finish="length")[2] == "length"
    assert run(["no call"], finish="stop")[2] == "stop"


def test_rule_stream_holds_a_possible_marker_and_whitespace_then_sends_a_call_whole():
    pieces = ["Checking", " \n<tool", "_call>", '\n{"name": "now", ', '"arguments": {}}\n</tool_', "call>"]
    texts, calls, _ = run(pieces)
    # " \n<tool" may still be whitespace before a marker: held; the marker drops it
    assert texts == ["Checking", "", "", "", "", ""]
    assert calls == [delta(0, "now", "{}")]
    # a held tail that turns out not to be a marker is sent with what decided it
    texts, _, _ = run(["a <tool", "box> b ", " "])
    assert texts == ["a", " <toolbox> b", "  "]


def test_rule_stream_a_call_is_sent_in_the_chunk_that_closes_it():
    calls = reader()
    sent = [calls.read(Chunk(text=p)) for p in (WEATHER[:30], WEATHER[30:], "\n" + WEATHER[:-1])]
    assert [len(c.tool_calls or []) for c in sent] == [0, 1, 0]
    last = calls.read(Chunk(text=WEATHER[-1], finish_reason="stop"))
    assert [d["index"] for d in last.tool_calls] == [1]


def test_leading_whitespace_already_sent_is_kept():
    texts, calls, _ = run(["\n\nHi", "\n" + WEATHER])
    assert "".join(texts) == "\n\nHi" and len(calls) == 1


def test_call_text_writes_arguments_as_json():
    assert call_text("now", '{"tz": "UTC"}') == '<tool_call>\n{"name": "now", "arguments": {"tz": "UTC"}}\n</tool_call>'
    assert call_text("now", "") == '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
    assert call_text("now", "not json") == '<tool_call>\n{"name": "now", "arguments": "not json"}\n</tool_call>'


def test_errors_pass_through():
    calls = reader()
    calls.read(Chunk(text="Hi <tool"))
    failed = calls.read(Chunk(finish_reason="error", error="boom", error_status=500))
    assert (failed.error, failed.text, failed.tool_calls) == ("boom", "", None)
