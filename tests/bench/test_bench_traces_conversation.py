"""tau-bench and OpenAI-log parsing: the turn rule, the flatten rule, the clamp rule."""

import json

import numpy as np
import pytest

from ray_dspine.bench.traces.conversation import (
    clamp_messages,
    estimate_messages_tokens,
    requests_from_conversation,
    session_starts,
)
from ray_dspine.bench.traces.model import TraceMessage
from ray_dspine.bench.traces.openai_log import parse_openai_log
from ray_dspine.bench.traces.tau_bench import parse_tau_bench

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_user_details", "arguments": "{\"user_id\":\"u1\"}"}}
RUN = {
    "task_id": 7,
    "trial": 2,
    "reward": 1.0,
    "info": {},
    "traj": [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "book a flight"},
        {"content": None, "role": "assistant", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_user_details", "content": "{\"name\": \"Mia\"}"},
        {"content": "Found you", "role": "assistant"},
        {"role": "user", "content": "thanks ###STOP###"},
    ],
}


@pytest.fixture
def tau_file(tmp_path):
    path = tmp_path / "mini-tau.json"
    path.write_text(json.dumps([RUN]))
    return path


def test_rule_turn_each_assistant_message_is_one_request(tau_file):
    requests = parse_tau_bench(tau_file, seed=0, max_prompt_tokens=None, tool_calls="native")
    assert [r.request_id for r in requests] == ["tau-bench-7-2-t000", "tau-bench-7-2-t001"]
    assert {r.session_id for r in requests} == {"tau-bench-7-2"}
    assert {r.workload_class for r in requests} == {"agent"}
    first, second = requests
    assert [m.role for m in first.messages] == ["system", "user"]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages[2].tool_calls[0].function.name == "get_user_details"
    assert second.messages[3].tool_call_id == "call_1"
    # Recorded replies: the tool call renders as '<tool_call>\n' + 60-char JSON + '\n</tool_call>' = 85
    # characters -> ceil(85 / 4) = 22 tokens; "Found you" is 9 characters -> ceil(9 / 4) = 3 tokens.
    assert [first.max_tokens, second.max_tokens] == [22, 3]
    # Prompt estimate of turn 0: "policy" 6 chars -> 2, "book a flight" 13 -> 4, plus 4 per message = 14.
    assert first.prompt_tokens == 14
    # The trailing user message has no recorded reply, so no request.
    assert len(requests) == 2


def test_rule_flatten_tool_calls_to_qwen_text(tau_file):
    requests = parse_tau_bench(tau_file, seed=0, max_prompt_tokens=None, tool_calls="flatten")
    messages = requests[1].messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
    assert all(m.tool_calls is None and m.tool_call_id is None for m in messages)
    call = '{"name": "get_user_details", "arguments": {"user_id": "u1"}}'
    assert messages[2].content == f"<tool_call>\n{call}\n</tool_call>"
    assert messages[3].content == '<tool_response>\n{"name": "Mia"}\n</tool_response>'


def test_flatten_merges_consecutive_tool_results():
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in (1, 2)]
    messages = [
        TraceMessage(role="user", content="go"),
        TraceMessage.model_validate({"role": "assistant", "content": None, "tool_calls": calls}),
        TraceMessage(role="tool", tool_call_id="c1", name="f", content="A"),
        TraceMessage(role="tool", tool_call_id="c2", name="f", content="B"),
        TraceMessage(role="assistant", content="done"),
    ]
    (request,) = [r for r in requests_from_conversation(
        messages, session_id="s", source="x", workload_class="agent", arrival_s=0.0, tool_calls="flatten",
        max_prompt_tokens=None) if r.turn_index == 1]
    assert request.messages[-1].content == "<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response>"


def test_rule_clamp_keeps_system_head_and_newest_messages():
    messages = [
        TraceMessage(role="system", content="s" * 400),  # 100 + 4 = 104 tokens > 60 / 2
        TraceMessage(role="user", content="a" * 80),  # 20 + 4 = 24
        TraceMessage(role="assistant", content="b" * 40),  # 10 + 4 = 14
        TraceMessage(role="user", content="c" * 40),  # 10 + 4 = 14
    ]
    clamped = clamp_messages(messages, 60)
    # System cut to 60 // 2 - 4 = 26 tokens = 104 chars (cost 30); 30 left: user "c" (14, 16 left),
    # assistant "b" (14, 2 left); user "a" (24) no longer fits. Total 30 + 14 + 14 = 58 <= 60.
    assert [m.content for m in clamped] == ["s" * 104, "b" * 40, "c" * 40]
    assert estimate_messages_tokens(clamped) == 58
    assert clamp_messages(messages, 1000) is messages


def test_clamp_cuts_the_newest_message_from_the_front_when_alone_too_long():
    clamped = clamp_messages([TraceMessage(role="user", content="x" * 300 + "END!")], 20)
    # 20 - 4 = 16 tokens = the last 64 characters.
    assert clamped[0].content == "x" * 60 + "END!"


def test_clamp_flattens_orphaned_tool_results():
    messages = [
        TraceMessage(role="user", content="q" * 400),
        TraceMessage.model_validate({"role": "assistant", "content": None, "tool_calls": [CALL]}),
        TraceMessage(role="tool", tool_call_id="call_1", name="get_user_details", content="r"),
    ]
    # Budget 30: the tool result (ceil(34/4) + 4 = 13) fits, its 26-token call (22 + 4) does not.
    clamped = clamp_messages(messages, 30)
    assert [(m.role, m.content) for m in clamped] == [("user", "<tool_response>\nr\n</tool_response>")]


def test_rule_session_starts_poisson():
    assert session_starts(3, session_rate_per_s=None, seed=0) == [0.0, 0.0, 0.0]
    gaps = np.random.default_rng(4).exponential(0.5, size=2)  # rate 2/s -> mean gap 0.5 s
    assert session_starts(3, session_rate_per_s=2.0, seed=4) == pytest.approx([0.0, gaps[0], gaps[0] + gaps[1]])


def test_rule_message_reading_and_openai_log_sessions(tmp_path):
    path = tmp_path / "log.jsonl"
    rows = [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}],
        {"session_id": "abc", "arrival_s": 4.5, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "image_url"}]},
            {"role": "assistant", "content": "ok", "refusal": None}]},
        {"messages": [{"role": "user", "content": "no reply recorded"}], "workload_class": "code"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    requests = parse_openai_log(path, seed=0, max_prompt_tokens=None, tool_calls="native", source="log")
    assert [r.session_id for r in requests] == ["log-00000", "abc", "log-00002"]
    assert [r.arrival_s for r in requests] == [0.0, 4.5, 0.0]
    assert [r.workload_class for r in requests] == ["chat", "chat", "code"]
    assert requests[1].messages[0].content == "part one"
    assert [r.max_tokens for r in requests] == [3, 1, 256]  # ceil(11/4) = 3; ceil(2/4) = 1; default 256
    assert requests[2].messages[0].content == "no reply recorded"


def test_openai_log_json_list_with_tools_is_agent(tmp_path):
    path = tmp_path / "log.json"
    path.write_text(json.dumps({"conversations": [{"messages": RUN["traj"]}]}))
    requests = parse_openai_log(path, seed=0, max_prompt_tokens=None, tool_calls="native", source="log")
    assert len(requests) == 2 and {r.workload_class for r in requests} == {"agent"}
