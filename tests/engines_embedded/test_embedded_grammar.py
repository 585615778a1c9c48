"""grammar.py: one test a rule. Masks are worked out by hand over a five-token vocabulary; the real model's
answers (fp32, greedy) are checked against what they were constrained to."""

from __future__ import annotations

import asyncio
import json
import re
import threading

import pytest
import torch

from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
from ray_dspine.engines.embedded.engine import EmbeddedEngine
from ray_dspine.engines.embedded.grammar import (
    JSON_OBJECT,
    RequestGrammar,
    _call_grammar,
    constraint,
    forced_tools,
    unenforced,
)
from ray_dspine.engines.embedded.model import load_model
from ray_dspine.engines.protocol import ChatMessage, EngineError, GenerateRequest

xgrammar = pytest.importorskip("xgrammar")

EOS, A, B, AB, C = range(5)  # the vocabulary: "<eos>", "a", "b", "ab", "c"


def tiny(regex: str) -> RequestGrammar:
    info = xgrammar.TokenizerInfo(["<eos>", "a", "b", "ab", "c"], vocab_type=xgrammar.VocabType.RAW, stop_token_ids=[0])
    compiled = xgrammar.GrammarCompiler(info).compile_regex(regex)
    return RequestGrammar(xgrammar.GrammarMatcher(compiled))


def allowed(masked: torch.Tensor) -> list[list[int]]:
    return [torch.isfinite(row).nonzero().flatten().tolist() for row in masked]


def request(**fields) -> GenerateRequest:
    fields = {"request_id": "g", "max_tokens": 8, "messages": [ChatMessage(role="user", content="hi")], **fields}
    return GenerateRequest(**fields)


def test_rule_constraint_is_what_sglang_hands_its_grammar_backend():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "trip", "schema": schema}}
    assert constraint(request(response_format=fmt)) == ("json", json.dumps(schema), "response_format")
    assert constraint(request(response_format={"type": "json_object"})) == ("json", JSON_OBJECT, "response_format")
    assert constraint(request(regex="[0-9]+")) == ("regex", "[0-9]+", "regex")
    assert constraint(request(ebnf='root ::= "a"')) == ("ebnf", 'root ::= "a"', "ebnf")
    assert constraint(request()) is None
    with pytest.raises(EngineError) as missing:
        constraint(request(response_format={"type": "json_schema", "json_schema": {"name": "x"}}))
    assert (missing.value.status, missing.value.param) == (400, "response_format")


def test_rule_mask_each_row_after_the_draft_tokens_before_it():
    grammar = tiny("ab*c")
    # row 0: "a" or "ab"; after d1 = "a": "b" or "c"; after "a", "b": "b" or "c"
    assert allowed(grammar.mask(torch.zeros(3, 5), [A, B])) == [[A, AB], [B, C], [B, C]]
    # the draft tokens were taken back: the next mask starts from the same place
    assert allowed(grammar.mask(torch.zeros(1, 5), [])) == [[A, AB]]
    # a draft token the grammar refuses ends the masking; rows after it are never read
    masked = grammar.mask(torch.zeros(3, 5), [B, C])
    assert allowed(masked[:1]) == [[A, AB]] and allowed(masked[1:]) == [[EOS, A, B, AB, C]] * 2
    # so does a drafted end token that ends the grammar: the request ends at it, and it is taken back too
    masked = grammar.mask(torch.zeros(4, 5), [A, C, EOS])
    assert allowed(masked[:3]) == [[A, AB], [B, C], [EOS]] and allowed(masked[3:]) == [[EOS, A, B, AB, C]]
    assert allowed(grammar.mask(torch.zeros(1, 5), [])) == [[A, AB]]


def test_rule_end_the_token_that_ends_the_grammar():
    grammar = tiny("ab*c")
    assert grammar.advance([AB, B]) is None
    assert allowed(grammar.mask(torch.zeros(1, 5), [])) == [[B, C]]
    assert grammar.advance([C]) is None
    assert allowed(grammar.mask(torch.zeros(1, 5), [])) == [[EOS]]  # complete: only the end token
    assert grammar.advance([EOS, A]) == 0


@pytest.fixture(scope="module")
def loaded():
    return load_model(EmbeddedEngineConfig(dtype="fp32"))


def answer(loaded, req: GenerateRequest, speculative: bool = True) -> tuple[str, str]:
    async def main():
        engine = EmbeddedEngine(EmbeddedEngineConfig(dtype="fp32", speculative=speculative), loader=lambda _c: loaded)
        await engine.start()
        try:
            chunks = [chunk async for chunk in engine.generate(req)]
        finally:
            await engine.stop()
        return "".join(c.text for c in chunks), chunks[-1].finish_reason

    return asyncio.run(main())


TRIP = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


def ask(question: str, **fields) -> GenerateRequest:
    return request(messages=[ChatMessage(role="user", content=question)], max_tokens=48, **fields)


@pytest.mark.parametrize("speculative", [True, False])
def test_the_model_answers_in_the_schema_and_speculation_changes_nothing(loaded, speculative):
    jsonschema = pytest.importorskip("jsonschema")
    fmt = {"type": "json_schema", "json_schema": {"name": "trip", "schema": TRIP}}
    text, finish = answer(loaded, ask("Plan a 3 day trip to Paris. Reply in JSON.", response_format=fmt), speculative)
    assert finish == "stop"
    jsonschema.validate(json.loads(text), TRIP)
    assert (text, finish) == answer(loaded, ask("Plan a 3 day trip to Paris. Reply in JSON.", response_format=fmt),
                                    not speculative)  # fmt: skip


def test_rule_compile_runs_off_the_event_loop(loaded):
    compiled_on = []

    async def main():
        engine = EmbeddedEngine(EmbeddedEngineConfig(dtype="fp32"), loader=lambda _c: loaded)
        await engine.start()
        compile_ = engine._grammars.for_request

        def recorded(req):
            compiled_on.append(threading.get_ident())
            return compile_(req)

        engine._grammars.for_request = recorded
        try:
            for req in (request(max_tokens=3, regex="[0-9]{3}"), request(max_tokens=2)):
                [chunk async for chunk in engine.generate(req)]
        finally:
            await engine.stop()
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert len(compiled_on) == 1 and compiled_on[0] != loop_thread  # the unconstrained request compiles nothing


def test_json_object_regex_and_ebnf_hold_on_the_real_model(loaded):
    question = 'What is the capital of France? Answer in JSON with the key "capital".'
    text, finish = answer(loaded, ask(question, response_format={"type": "json_object"}).model_copy(
        update={"max_tokens": 60}))  # fmt: skip
    assert finish == "stop" and isinstance(json.loads(text), dict)
    text, finish = answer(loaded, ask("Pick a number between 100 and 999.", regex="[0-9]{3}"))
    assert finish == "stop" and re.fullmatch("[0-9]{3}", text)
    text, finish = answer(loaded, ask("Is the sky blue?", ebnf='root ::= "yes" | "no"', ignore_eos=True))
    assert finish == "stop" and text in ("yes", "no")  # rule `end`: the grammar ends it, ignore_eos or not
    text, finish = answer(loaded, ask("Is the sky blue?", ebnf='root ::= "yes" | "no"', min_tokens=6))
    assert finish == "stop" and text in ("yes", "no")  # rule `min_tokens`: nothing else is left to choose


def test_a_structural_tag_holds_on_the_real_model(loaded):
    tag = {"type": "structural_tag", "triggers": ["<weather>"], "at_least_one": True,
           "structures": [{"begin": "<weather>", "schema": TRIP, "end": "</weather>"}]}  # fmt: skip
    text, finish = answer(loaded, ask("Plan a 3 day trip to Paris.", response_format=tag))
    assert text.startswith("<weather>") and "</weather>" in text  # at_least_one: a tag first
    body = json.loads(text[len("<weather>") : text.index("</weather>")])
    assert set(body) == {"city", "days"}


@pytest.mark.parametrize(("fields", "param"), [
    ({"regex": "a(b"}, "regex"),
    ({"ebnf": "root ::= undefined_rule"}, "ebnf"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
     "response_format"),
])  # fmt: skip
def test_rule_compile_refuses_what_xgrammar_refuses_with_a_400_naming_the_field(loaded, fields, param):
    with pytest.raises(EngineError) as refused:
        answer(loaded, ask("hi", **fields))
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, param, "invalid_value")
    assert "does not compile" in str(refused.value)


def test_rule_unenforced_searches_subschemas_only():
    tags = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    assert unenforced({"type": "object", "properties": {"tags": tags}}) == "`uniqueItems` at schema.properties.tags"
    assert unenforced({"anyOf": [{"type": "string", "format": "regex"}]}) == '`format` "regex" at schema.anyOf[0]'
    assert unenforced({"$defs": {"t": {"not": {}}}, "$ref": "#/$defs/t"}) == "`not` at schema.$defs.t"
    # a property named like a keyword, and keywords inside instance values, are not keywords of the schema
    named = {"type": "object", "properties": {"not": {"type": "string", "const": {"if": 1}, "enum": [{"not": 2}]}}}
    assert unenforced(named) is None
    # values that ask for nothing
    assert unenforced({"type": "array", "uniqueItems": False, "dependentRequired": {}}) is None
    assert unenforced({"allOf": [{"type": "integer"}]}) is None


def test_rule_unenforced_is_a_400_before_decoding(loaded):
    fmt = {"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(EngineError) as refused:
        answer(loaded, ask("hi", response_format=fmt))
    assert (refused.value.status, refused.value.param) == (400, "response_format")
    assert "`uniqueItems` at schema" in str(refused.value) and "not enforce" in str(refused.value)


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
NOW = {"type": "function", "function": {"name": "now", "strict": True, "parameters": {
    "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"], "additionalProperties": False}}}
CHARACTERS = ["<eos>"] + [chr(code) for code in range(32, 127)] + ["\n"]


def takes(forced: list[list], answer: str) -> bool:
    """Whether the forced-call grammar, one character a token, takes `answer` whole (then the end token)."""
    info = xgrammar.TokenizerInfo(CHARACTERS, vocab_type=xgrammar.VocabType.RAW, stop_token_ids=[0])
    matcher = xgrammar.GrammarMatcher(xgrammar.GrammarCompiler(info).compile_grammar(_call_grammar(forced)))
    return all(matcher.accept_token(CHARACTERS.index(char)) for char in answer) and matcher.accept_token(0)


def call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def test_rule_forced_which_tools_and_which_arguments():
    named = {"type": "function", "function": {"name": "now"}}
    assert forced_tools(request(tools=[WEATHER, NOW], tool_choice="auto")) is None
    assert forced_tools(request(tools=[WEATHER, NOW], tool_choice=named)) == [["now", NOW["function"]["parameters"]]]
    # "required": any tool; a tool that is not strict promises no schema, so its arguments are any object
    assert forced_tools(request(tools=[WEATHER, NOW], tool_choice="required")) == [
        ["get_weather", {"type": "object"}], ["now", NOW["function"]["parameters"]]]  # fmt: skip
    assert constraint(request(tools=[NOW], tool_choice="required"))[::2] == ("call", "tools")


def test_rule_forced_the_grammar_takes_one_call_of_a_forced_tool():
    both = forced_tools(request(tools=[WEATHER, NOW], tool_choice="required"))
    assert takes(both, call("get_weather", '{"city": "Tokyo"}'))
    assert takes(both, call("now", '{"tz": "UTC"}'))
    assert not takes(both, call("now", '{"city": "Tokyo"}'))  # a strict tool's schema holds
    assert not takes(both, call("get_weather", '"Tokyo"'))  # arguments are an object
    assert not takes(both, "The weather is fine.")  # no text instead of the call
    assert not takes(both, call("get_weather", "{}") + "\n" + call("now", '{"tz": "UTC"}'))  # one call
    named = {"type": "function", "function": {"name": "now"}}
    only_now = forced_tools(request(tools=[WEATHER, NOW], tool_choice=named))
    assert not takes(only_now, call("get_weather", "{}"))


@pytest.mark.parametrize("speculative", [True, False])
def test_a_forced_call_on_the_real_model(loaded, speculative):
    from dspine_lab.engines.tool_call_rate import WEATHER as LAB_WEATHER

    async def main(req):
        engine = EmbeddedEngine(EmbeddedEngineConfig(dtype="fp32", speculative=speculative), loader=lambda _c: loaded)
        await engine.start()
        try:
            return [chunk async for chunk in engine.generate(req)]
        finally:
            await engine.stop()

    # alone, the model answers this in text (dspine_lab's tool-call rate: 0 of 24); forced, it calls. A strict
    # tool holds the arguments to its schema; a loose one to any object (here the model writes a schema-like one).
    strict = {"type": "function", "function": {**LAB_WEATHER["function"], "strict": True}}
    named = {"type": "function", "function": {"name": "get_weather"}}
    for tool, max_tokens, expected in ((strict, 48, {"city": "Tokyo"}),
                                       (LAB_WEATHER, 80, {"city": {"type": "string", "description": "Tokyo"}})):
        req = ask("What's the weather in Tokyo?", tools=[tool], tool_choice=named).model_copy(
            update={"max_tokens": max_tokens})
        chunks = asyncio.run(main(req))
        calls = [d for c in chunks for d in c.tool_calls or []]
        assert [(d["function"]["name"], json.loads(d["function"]["arguments"])) for d in calls] == [
            ("get_weather", expected)]
        assert chunks[-1].finish_reason == "tool_calls" and "".join(c.text for c in chunks) == ""
