"""One test per rule in ray_dspine/serve/tool_calls.py."""

from ray_dspine.serve.tool_calls import join_deltas, merge_tool_calls


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


def test_rule_join_one_calls_consecutive_deltas():
    deltas = [delta(0, "", "c0", "f"), delta(0, '{"x": '), delta(0, "1}"), delta(1, "", "c1", "g"), delta(1, "{}"),
              delta(0, " ")]  # fmt: skip
    joined = join_deltas(deltas)
    assert [(d["index"], d["id"], d["function"]["name"], d["function"]["arguments"]) for d in joined] == [
        (0, "c0", "f", '{"x": 1}'), (1, "c1", "g", "{}"), (0, None, None, " ")]
    assert merge_tool_calls(joined) == merge_tool_calls(deltas)
    assert deltas[0]["function"]["arguments"] == ""  # the input is not changed
