"""The tool-call rate study's rules (engines/tool_call_rate.py), worked out by hand; the real model's answers to
its conversation are checked in tests/engines_embedded/test_embedded_tool_calls.py."""

import json

import pytest

from dspine_lab.engines.tool_call_rate import ARMS, CITIES, main, outcome, questions, two_shot


def call(name: str, arguments: dict) -> dict:
    return {"index": 0, "id": "call_0", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_rule_questions_two_ways_for_each_city_none_of_the_earlier_calls_cities():
    asked = questions()
    assert len(asked) == 2 * len(CITIES) == 24
    assert asked[:2] == [("Tokyo", "What's the weather in Tokyo?"), ("Tokyo", "Is it raining in Tokyo right now?")]
    assert not {"Paris", "London"} & set(CITIES)


def test_rule_arms_the_question_alone_or_after_two_earlier_calls():
    assert ARMS["tools alone"]("Q?") == [{"role": "user", "content": "Q?"}]
    turns = ARMS["two-shot"]("Q?")
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant"] * 2 + ["user"]
    assert turns[-1]["content"] == "Q?"
    assert [json.loads(t["tool_calls"][0]["function"]["arguments"]) for t in turns if t.get("tool_calls")] == [
        {"city": "Paris"}, {"city": "London"}]
    assert two_shot("Q?") == turns


def test_rule_outcome():
    assert outcome([], "Rome") == "text"
    assert outcome([call("get_weather", {"city": "Rome"})], "Rome") == "right call"
    assert outcome([call("get_weather", {"city": "Roma"})], "Rome") == "other call"
    assert outcome([call("get_weather", {"city": "Rome", "unit": "C"})], "Rome") == "other call"
    assert outcome([call("get_weather", {"city": "Rome"})] * 2, "Rome") == "other call"
    assert outcome([call("now", {})], "Rome") == "other call"


def test_a_bad_max_tokens_is_named(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--max-tokens", "0"])
    assert stopped.value.code == 2 and "--max-tokens must be at least 1" in capsys.readouterr().err
