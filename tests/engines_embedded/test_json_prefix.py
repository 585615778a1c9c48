"""json_prefix.py: one test a rule, expected texts worked out by hand."""

from __future__ import annotations

import json

import pytest

from ray_dspine.engines.embedded.json_prefix import JsonPrefix


def fed(pieces: list[str]) -> tuple[JsonPrefix, list[str]]:
    reader = JsonPrefix()
    return reader, [reader.feed(piece) for piece in pieces]


def test_rule_tokens_drop_whitespace_and_space_separators_as_json_dumps():
    reader, added = fed(['{ "a" :[ 1 ,', "\t2 ]\n,\r", '"b":{} }'])
    assert added == ['{"a": [1, ', "2], ", '"b": {}}']
    assert reader.done and reader.text == json.dumps({"a": [1, 2], "b": {}})


def test_rule_strings_go_out_a_character_at_a_time_escaped_as_json_dumps_escapes():
    reader, added = fed(['"caf', "\\u00e9 \\", 'n\\/ ☕', '"'])
    assert added == ['"caf', "é ", "\\n/ ☕", '"']  # \u00e9 decoded and kept; \n stays escaped; \/ is "/"
    _, added = fed(['"\\ud83d', "\\ude00", '!"'])
    assert added == ['"', "😀", '!"']  # the high surrogate waits for its pair: one character
    reader, _ = fed(['"\\ud83d"'])
    assert reader.text == json.dumps(json.loads('"\\ud83d"'), ensure_ascii=False)  # a lone one is written as is


def test_rule_scalars_go_out_when_the_character_after_them_arrives():
    _, added = fed(["[12", "3", ", 1E2", ", -0, tr", "ue, NaN]"])
    assert added == ["[", "", "123, ", "100.0, 0, ", "true, NaN]"]


def test_rule_done_counts_what_was_read():
    reader, _ = fed(['{"a": 1}\n</tool_call>'])
    assert (reader.done, reader.consumed) == (True, 8)
    reader, _ = fed(["12 tail"])  # a top-level scalar ends at the space, which is not the value's
    assert (reader.done, reader.consumed, reader.text) == (True, 2, "12")
    reader.feed("more")
    assert reader.text == "12"


@pytest.mark.parametrize("text", [
    '{"a" 1}', '{"a": 1,}', "[1 2]", '{"a": "x\ny"}', '{"a": tru}', '{"a": 01}', '{"a": "\\x"}', '{"a": "\\u12g4"}',
    "[}", '{"a": [1}', "<tool_call>",
])  # fmt: skip
def test_rule_broken_stops_writing_where_json_loads_refuses(text):
    with pytest.raises(ValueError):
        json.loads(text)
    reader, _ = fed([text])
    assert reader.broken and not reader.done
    assert reader.feed(' "more"}') == ""


def test_rule_repeated_keys_are_written_again_and_load_to_the_same_value():
    reader, _ = fed(['{"a": 1, "a": 2}'])
    assert reader.text == '{"a": 1, "a": 2}'
    assert json.loads(reader.text) == json.loads('{"a": 1, "a": 2}') == {"a": 2}


def test_rule_members_span_each_top_level_keys_first_value():
    reader, _ = fed(['{"name": "f", "arguments": {"x": [1]'])
    # '{"name": ' is 9 characters, '"f", "arguments": ' 18 more
    assert reader.members == {"name": [9, 12], "arguments": [27, None]}
    reader.feed(', "y": 2}, "name": "g"}')  # a repeated key keeps its first value's span
    assert reader.members == {"name": [9, 12], "arguments": [27, 45]}
    assert reader.text[27:45] == '{"x": [1], "y": 2}'


def test_any_split_writes_json_dumps_of_the_value():
    raw = ' {"path": "src/a.py", "edits": [{"old": "x = 1\\n", "new": "x = 2\\t# \\"two\\""}], "n": 3.50, "ok": false}'
    expected = json.dumps(json.loads(raw), ensure_ascii=False)
    for cut in range(1, len(raw)):
        reader, added = fed([raw[:cut], raw[cut:]])
        assert (reader.done, "".join(added)) == (True, expected), cut
    reader, added = fed(list(raw))
    assert "".join(added) == expected
