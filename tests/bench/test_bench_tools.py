"""`bench replay --tools from-trace`: the tools rule (traces/tools.py), the turn rule's recorded calls, the
client's answer calls and the agreement rule (tool_agreement.py), worked out by hand; then a replay against the
fake ingress of dspine_fake_server.py, which answers "CALL <name>" with that call when the request carries it."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dspine_fake_server import FakeDSpineServer  # noqa: E402

from ray_dspine.bench.client import ClientSettings, _Stream, build_body  # noqa: E402
from ray_dspine.bench.records import RequestRecord, read_records  # noqa: E402
from ray_dspine.bench.replay_cli import main  # noqa: E402
from ray_dspine.bench.tool_agreement import tool_agreement  # noqa: E402
from ray_dspine.bench.traces.loader import load_trace  # noqa: E402
from ray_dspine.bench.traces.tools import DESCRIPTION, NoToolsInTrace  # noqa: E402


def call(name: str, arguments: dict, id_: str = "c1") -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


CONVERSATION = {"session_id": "agent-1", "messages": [
    {"role": "user", "content": "CALL get_weather please"},
    {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {"city": "Rome"})]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "assistant", "content": "It is sunny in Rome."},
    {"role": "user", "content": "CALL get_weather again"},
    {"role": "assistant", "content": "Still sunny."},
    {"role": "user", "content": "and Oslo, Lima?"},
    {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {"city": "Oslo", "unit": "C"}, "c2"),
                                                           call("now", {}, "c3")]},
]}  # fmt: skip


@pytest.fixture
def agent_trace(tmp_path):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps([CONVERSATION]))
    return path


def test_rule_from_trace_one_tool_per_called_name_with_the_argument_names_seen(agent_trace):
    trace = load_trace(str(agent_trace), tools="from-trace")
    # get_weather is called in the histories with city (and unit in the last recorded reply, which no history
    # holds); `now` only in a recorded reply, so it has no argument names
    assert trace.requests[0].tools == [
        {"type": "function", "function": {"name": "get_weather", "description": DESCRIPTION,
                                          "parameters": {"type": "object", "properties": {"city": {}}}}},
        {"type": "function", "function": {"name": "now", "description": DESCRIPTION,
                                          "parameters": {"type": "object", "properties": {}}}},
    ]  # fmt: skip
    assert all(r.tools == trace.requests[0].tools for r in trace.requests)
    assert (trace.tools, trace.num_tools) == ("from-trace", 2)
    assert load_trace(str(agent_trace)).requests[0].tools is None


def test_rule_from_trace_reads_the_whole_file_before_the_limits(agent_trace):
    # one request left, whose own history names no call: the tools are still the trace's
    trace = load_trace(str(agent_trace), tools="from-trace", max_requests=1)
    assert [t["function"]["name"] for t in trace.requests[0].tools] == ["get_weather", "now"]


def test_rule_from_trace_a_trace_without_calls_is_named(tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"session_id": "s", "messages": [{"role": "user", "content": "hi"},
                                                                  {"role": "assistant", "content": "hello"}]}]))
    with pytest.raises(NoToolsInTrace, match="records no tool calls"):
        load_trace(str(path), tools="from-trace")


def test_rule_turn_recorded_calls(agent_trace):
    requests = load_trace(str(agent_trace)).requests
    assert [r.recorded_calls for r in requests] == [["get_weather"], [], [], ["get_weather", "now"]]


def test_the_body_carries_the_tools_on_chat_only(agent_trace):
    request = load_trace(str(agent_trace), tools="from-trace").requests[0]
    assert build_body(request, ClientSettings(endpoint="http://x", model="m"))["tools"] == request.tools
    assert "tools" not in build_body(request.model_copy(update={"tools": None}),
                                     ClientSettings(endpoint="http://x", model="m"))  # fmt: skip


def test_the_client_names_an_answers_calls_by_index():
    stream = _Stream()
    deltas = [[{"index": 0, "id": "a", "function": {"name": "now", "arguments": ""}}],
              [{"index": 0, "function": {"arguments": "{}"}}, {"index": 1, "id": "b", "function": {"name": "ls"}}],
              [{"index": 1, "function": {"name": None, "arguments": "{}"}}]]  # fmt: skip
    for offset, calls in enumerate(deltas):
        stream.feed(json.dumps({"choices": [{"delta": {"tool_calls": calls}}]}), float(offset))
    assert stream.complete_calls() == ["now", "ls"]
    assert stream.offsets == [0.0, 1.0, 2.0]  # each delta is a content chunk
    # a call cut off mid-arguments (the answer ended "length") is not a call; one with no arguments yet neither
    cut = _Stream()
    deltas = [[{"index": 0, "id": "a", "function": {"name": "now", "arguments": '{"tz": '}}],
              [{"index": 1, "id": "b", "function": {"name": "ls", "arguments": ""}}]]  # fmt: skip
    for offset, calls in enumerate(deltas):
        cut.feed(json.dumps({"choices": [{"delta": {"tool_calls": calls}}]}), float(offset))
    cut.feed(json.dumps({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"UTC"}'}}]},
                                      "finish_reason": "length"}]}), 2.0)  # fmt: skip
    assert cut.complete_calls() == ["now"]


def record(recorded: list[str], answered: list[str], num_tools: int = 2, ok: bool = True, arm: str = "a"):
    return RequestRecord(request_id="r", trace_request_id="r", session_id="s", turn_index=0, workload_class="agent",
                         repetition=0, api="chat", arm=arm, prompt_tokens=1, trace_prompt_tokens=1, max_tokens=1,
                         output_tokens=1, start_offset_s=0.0, start_unix_s=0.0, end_unix_s=0.0, num_tools=num_tools,
                         recorded_calls=recorded, answer_calls=answered,
                         error_kind=None if ok else "http_error")  # fmt: skip


def test_rule_agreement():
    records = [record(["f"], ["f"]), record(["f", "g"], ["g", "f"]), record(["f"], []), record([], ["f"]),
               record([], []), record(["f"], ["f"], ok=False), record(["f"], ["f"], num_tools=0)]  # fmt: skip
    found = tool_agreement(records)
    assert (found.call_turns, found.answered_with_call, found.same_calls) == (3, 2, 1)
    assert (found.text_turns, found.text_turns_with_call) == (2, 1)
    assert found.same_calls_share == pytest.approx(1 / 3)
    assert tool_agreement([record(["f"], ["f"], num_tools=0)]) is None


def test_a_replay_with_the_traces_tools_counts_the_answers_calls(agent_trace, tmp_path, capsys):
    server = FakeDSpineServer().start()
    try:
        code = main(["replay", "--endpoint", server.url, "--trace", str(agent_trace), "--out", str(tmp_path / "o"),
                     "--tools", "from-trace", "--no-plots", "--no-progress", "--bootstrap-resamples", "20"])
        printed = capsys.readouterr().out
        sent = [r["body"] for r in server.received if r["path"] == "/v1/chat/completions"]
    finally:
        server.stop()
    assert code == 0
    assert all([t["function"]["name"] for t in body["tools"]] == ["get_weather", "now"] for body in sent)
    records = sorted(read_records(tmp_path / "o" / "records.jsonl"), key=lambda r: r.turn_index)
    # turns 0 and 2 end in "CALL get_weather ...": answered with that call (the agent called it on turn 0 and wrote
    # text on turn 2); turns 1 and 3 are answered in text (the agent wrote text on 1 and called two on 3)
    assert [r.answer_calls for r in records] == [["get_weather"], [], ["get_weather"], []]
    # the fake writes at most 6 tokens: turn 1's recorded reply is 20 characters, 5 tokens, so it fills max_tokens
    assert [r.finish_reason for r in records] == ["tool_calls", "length", "tool_calls", "stop"]
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())["tool_calls"]
    assert summary == {"call_turns": 2, "answered_with_call": 1, "same_calls": 1, "text_turns": 2,
                       "text_turns_with_call": 1, "same_calls_share": 0.5}  # fmt: skip
    assert ("tool calls: of 2 turns where the agent called, 1 answered with a call, 1 with the agent's calls; "
            "of 2 where it wrote text, 1 answered with a call") in printed
