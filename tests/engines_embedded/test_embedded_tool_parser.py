"""tool_parser.py: one test a rule, expected values worked out by hand (no model: chunks are written here)."""

from __future__ import annotations

import itertools
import json

from ray_dspine.engines.embedded.tool_parser import ToolCallReader, call_text, parse_block, tools_active
from ray_dspine.engines.protocol import ChatMessage, Chunk, GenerateRequest

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "function": {"name": "now"}}]


def ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter):024x}"


def reader(parallel: bool = True, streamed: bool = False) -> ToolCallReader:
    return ToolCallReader({"get_weather", "now"}, parallel, ids(), streamed)


def run(
    pieces: list[str], finish: str = "stop", parallel: bool = True, streamed: bool = False
) -> tuple[list[str], list[dict], str]:
    """Each piece one chunk, the last one finishing: (texts sent, deltas sent, finish reason)."""
    calls = reader(parallel, streamed)
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
    assert parse_block('{"name": ["get_weather"], "arguments": {}}', {"get_weather"}) == []  # a name is a string
    assert parse_block('{"name": "get_weather", "arguments": {"n": ' + "9" * 5000 + "}}", {"get_weather"}) == []
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


def args(index: int, text: str) -> dict:
    return {"index": index, "function": {"arguments": text}}


def by_chunk(pieces: list[str], finish: str = "stop", parallel: bool = True) -> list[list[dict]]:
    """Streamed: the deltas each chunk carries."""
    calls = reader(parallel, streamed=True)
    out = [calls.read(Chunk(text=p, num_tokens=1, finish_reason=finish if i == len(pieces) - 1 else None))
           for i, p in enumerate(pieces)]  # fmt: skip
    return [c.tool_calls or [] for c in out]


def test_rule_whole_is_for_requests_not_streamed():
    assert ToolCallReader.for_request(request(tools=TOOLS))._streamed is False
    assert ToolCallReader.for_request(request(tools=TOOLS, stream=True))._streamed is True
    pieces = [WEATHER[:40], WEATHER[40:]]
    assert by_chunk(pieces) != [[], [delta(0, "get_weather", '{"city": "Tokyo"}')]]
    assert run(pieces)[1] == [delta(0, "get_weather", '{"city": "Tokyo"}')]


def test_rule_streamed_the_name_first_then_the_arguments_as_they_are_written():
    pieces = ['<tool_call>\n{"name": "get_', 'weather", "arguments": {"ci', 'ty": "Tok', 'yo"}}\n</tool_', "call>"]
    assert by_chunk(pieces) == [
        [],
        [delta(0, "get_weather", ""), args(0, '{"ci')],
        [args(0, 'ty": "Tok')],
        [args(0, 'yo"}')],
        [],
    ]
    # the arguments in json.dumps's form, whatever the spacing: a scalar when the character after it arrives
    pieces = ['<tool_call>\n{"name":"now","arguments":{ "tz" :"UTC" ,"n":1E', "2", "}}\n</tool_call>"]
    assert by_chunk(pieces) == [[delta(0, "now", ""), args(0, '{"tz": "UTC", "n": ')], [], [args(0, "100.0}")]]
    # arguments written before the name go out with it; no arguments at all is "{}" at the object's end
    pieces = ['<tool_call>\n{"arguments": {"tz": "UTC"}, "name": "n',
              'ow"}\n</tool_call>\n<tool_call>\n{"name": "now"', "}"]  # fmt: skip
    assert by_chunk(pieces) == [
        [],
        [delta(0, "now", ""), args(0, '{"tz": "UTC"}'), delta(1, "now", "")],
        [args(1, "{}")],
    ]


def test_rule_streamed_lists_unknown_names_and_early_breaks_go_whole_at_the_end_tag():
    listed = '<tool_call>\n[{"name": "now", "arguments": {}}]\n</tool_call>'
    assert by_chunk([listed[:30], listed[30:]]) == [[], [delta(0, "now", "{}")]]
    unknown = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    assert by_chunk([unknown[:25], unknown[25:]]) == [[], []]
    early = '<tool_call>\n{"name" "now"}\n</tool_call>\n' + WEATHER
    assert sum(by_chunk([early[:20], early[20:]]), []) == [delta(0, "get_weather", ""), args(0, '{"city": "Tokyo"}')]
    # parallel false: a second call is read whole and dropped
    assert sum(by_chunk([WEATHER + "\n" + WEATHER], parallel=False), []) == [
        delta(0, "get_weather", ""), args(0, '{"city": "Tokyo"}')]  # fmt: skip


def test_rule_streamed_what_went_out_stays_where_the_block_breaks_later():
    broken = ['<tool_call>\n{"name": "now", "arg', 'uments": {"tz": "UTC" "x"}}\n</tool_call>']
    assert by_chunk(broken) == [[delta(0, "now", "")], [args(0, '{"tz": "UTC"')]]
    assert run(broken)[1] == [] and by_chunk(["".join(broken)]) == [[]]  # read whole: it does not parse
    cut = '<tool_call>\n{"name": "now", "arguments": {"tz": "U'
    assert by_chunk([cut], finish="length") == [[delta(0, "now", ""), args(0, '{"tz": "U')]]
    repeated = '<tool_call>\n{"name": "now", "arguments": {"a": 1, "a": 2}}\n</tool_call>'
    (sent,) = by_chunk([repeated])
    assert sent[1] == args(0, '{"a": 1, "a": 2}') and json.loads(sent[1]["function"]["arguments"]) == {"a": 2}
    assert run([repeated])[1] == [delta(0, "now", '{"a": 2}')]


def test_rule_streamed_finish_and_text_after_calls():
    calls = reader(streamed=True)
    first = calls.read(Chunk(text=WEATHER + "\nDone <tool"))
    assert first.text == "" and len(first.tool_calls) == 2
    last = calls.read(Chunk(text="box>", finish_reason="stop", matched_stop=2))
    assert (last.text, last.tool_calls, last.finish_reason, last.matched_stop) == ("", None, "tool_calls", None)


def test_errors_pass_through():
    calls = reader()
    calls.read(Chunk(text="Hi <tool"))
    failed = calls.read(Chunk(finish_reason="error", error="boom", error_status=500))
    assert (failed.error, failed.text, failed.tool_calls) == ("boom", "", None)
