"""A corpus of bad and odd requests for the OpenAI-compatible API, and Anthropic's Messages API and OpenAI's Responses
API over it, each with the status it must get.

Rules (what each generator emits; `model` is the served model name, `limit` the body-size limit in bytes):
  wrong types   each known field x each JSON type its OpenAI type excludes (no coercion: "4", true, 4.5
                for an integer; "yes", 1 for a boolean; ...) -> 400 naming the field.
  ranges        integers just outside their bounds (seed 2^63 and -2^63-1, max_tokens 0 and 2^31, ...)
                -> 400 naming the field; the bounds themselves -> 200. SGLang's fields by SGLang's ranges
                (top_k 0, min_p 1.5, min_tokens above max_tokens, a stop_regex that does not compile, ...),
                a chat field sent to completions (continue_final_message) and its fields no pool carries
                (session_id), a regex or EBNF grammar that does not compile -> 400; their defaults and in-range
                values, a regex and JSON mode -> 200.
  messages      a message without content / with null content, a tool message without tool_call_id, an
                assistant message with neither content nor tool_calls, a call whose arguments are not a JSON
                object, unknown or missing role, a media part -> 400 naming the field.
  surrogates    a lone UTF-16 surrogate in a message, the prompt, stop, user or a key -> 400 naming it.
  depth         nesting 65, 100, 1,000 and 10,000 deep (arrays and objects, at the top or in a field) ->
                400; exactly 64 deep in an unknown field -> 200.
  bad JSON      truncated, trailing comma, single quotes, NaN, Infinity, 1e400, empty, non-UTF-8, a top
                level that is not an object -> 400.
  size          a body one byte over `limit` -> 413.
  media types   text/plain, form, multipart, XML -> 415.
  methods       a method the route does not take -> 405; unknown routes -> 404.
  odd but valid token-id prompts, an empty prompt, a one-element prompt list, null optionals, content
                parts, integer temperatures, a tool turn, tools -> 200.
  messages API  /v1/messages (serve/anthropic.py): a missing or zero max_tokens, a field of the wrong type, a
                role or block type the API does not have, blocks no pool reads (image, document, redacted
                thinking), a tool result without its tool_use_id, a custom tool without its input_schema, a
                tool_choice naming no tool of the request, sampling out of Anthropic's ranges, a thinking type it
                does not have -> 400 naming the field; an unknown model -> 404; GET -> 405; a tool round trip,
                cache_control, a server tool beside a custom one, thinking off, metadata and the client's newer
                fields -> 200. /v1/messages/count_tokens: no messages -> 400, an unknown model -> 404, a request
                without max_tokens -> 200.
  responses API /v1/responses (serve/openai_responses.py): no input or input of the wrong type, max_output_tokens
                0, an item type or role the API does not have, a message without content, a media part, a
                function_call without its call_id, what needs a stored response (item_reference,
                previous_response_id, background), truncation "auto", a custom tool, a function tool without a
                name, a tool_choice naming no tool, an unknown reasoning effort, a json_schema format without its
                schema, sampling out of range -> 400 naming the field; an unknown model -> 404; GET of a stored
                response -> 404; GET -> 405; a tool round trip, a hosted tool beside a function, reasoning off and
                the client's newer fields -> 200.
Every case is a `Case`: method, path, body bytes, headers, expected status and (for 400s) expected param.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
RESPONSES = "/v1/responses"
JSON = {"content-type": "application/json"}

# The wrong values of each OpenAI type (a JSON value of another type, or a string spelling of the right one).
WRONG = {
    "int": ["4", True, 4.5, [], {}, "x"],
    "num": ["0.7", True, [], {}, "x"],
    "bool": ["yes", "true", 1, 0, [], {}],
    "str": [5, True, 1.5, {}, ["a", 1]],
    "obj": ["x", 5, True, []],
    "list": ["x", 5, True, {}],
}
# field -> (its type in WRONG, the routes it belongs to)
FIELDS = {
    "model": ("str", (CHAT, COMPLETIONS)),
    "max_tokens": ("int", (CHAT, COMPLETIONS)),
    "max_completion_tokens": ("int", (CHAT,)),
    "temperature": ("num", (CHAT, COMPLETIONS)),
    "top_p": ("num", (CHAT, COMPLETIONS)),
    "n": ("int", (CHAT, COMPLETIONS)),
    "stream": ("bool", (CHAT, COMPLETIONS)),
    "stream_options": ("obj", (CHAT, COMPLETIONS)),
    "seed": ("int", (CHAT, COMPLETIONS)),
    "user": ("str", (CHAT, COMPLETIONS)),
    "frequency_penalty": ("num", (CHAT, COMPLETIONS)),
    "presence_penalty": ("num", (CHAT, COMPLETIONS)),
    "logit_bias": ("obj", (CHAT, COMPLETIONS)),
    "messages": ("list", (CHAT,)),
    "parallel_tool_calls": ("bool", (CHAT,)),
    "logprobs": ("bool", (CHAT,)),
    "top_logprobs": ("int", (CHAT,)),
    "tools": ("list", (CHAT,)),
    "response_format": ("obj", (CHAT,)),
    "echo": ("bool", (COMPLETIONS,)),
    "best_of": ("int", (COMPLETIONS,)),
    "suffix": ("str", (COMPLETIONS,)),
    # SGLang's own sampling fields
    "top_k": ("int", (CHAT, COMPLETIONS)),
    "min_p": ("num", (CHAT, COMPLETIONS)),
    "repetition_penalty": ("num", (CHAT, COMPLETIONS)),
    "min_tokens": ("int", (CHAT, COMPLETIONS)),
    "ignore_eos": ("bool", (CHAT, COMPLETIONS)),
    "stop_token_ids": ("list", (CHAT, COMPLETIONS)),
    "no_stop_trim": ("bool", (CHAT, COMPLETIONS)),
    "skip_special_tokens": ("bool", (CHAT, COMPLETIONS)),
    "continue_final_message": ("bool", (CHAT,)),
    "regex": ("str", (CHAT, COMPLETIONS)),
    "ebnf": ("str", (CHAT, COMPLETIONS)),
}
RANGES = [  # (route, field, value, status[, param when not the field])
    (CHAT, "seed", 2**63, 400), (CHAT, "seed", -(2**63) - 1, 400), (CHAT, "seed", 2**64, 400),
    (CHAT, "seed", 2**63 - 1, 200), (CHAT, "seed", -(2**63), 200), (COMPLETIONS, "seed", 10**30, 400),
    (CHAT, "max_tokens", 0, 400), (CHAT, "max_tokens", -1, 400), (CHAT, "max_tokens", 2**31, 400),
    (COMPLETIONS, "max_tokens", 2**40, 400), (CHAT, "max_completion_tokens", 0, 400),
    (CHAT, "temperature", 2.5, 400), (CHAT, "temperature", -0.1, 400), (CHAT, "temperature", 2, 200),
    (CHAT, "top_p", 0, 400), (CHAT, "top_p", 1.5, 400), (CHAT, "n", 2, 400), (CHAT, "n", 0, 400),
    (CHAT, "top_logprobs", 21, 400), (CHAT, "top_logprobs", -1, 400), (COMPLETIONS, "logprobs", 6, 400),
    (CHAT, "top_logprobs", 2, 400), (CHAT, "logprobs", True, 200), (COMPLETIONS, "logprobs", 2, 200),
    (CHAT, "frequency_penalty", 2.5, 400), (CHAT, "presence_penalty", -3, 400),
    (CHAT, "stop", ["a", "b", "c", "d", "e"], 400), (CHAT, "stop", [1], 400, "stop[0]"),
    (CHAT, "logit_bias", {"x": 1}, 400), (CHAT, "logit_bias", {"5": 101}, 400),
    (CHAT, "top_k", 0, 400), (CHAT, "top_k", -2, 400), (CHAT, "top_k", -1, 200), (COMPLETIONS, "top_k", 20, 200),
    (CHAT, "min_p", 1.5, 400), (CHAT, "min_p", 0.05, 200), (CHAT, "repetition_penalty", 0, 400),
    (CHAT, "repetition_penalty", 2.5, 400), (CHAT, "repetition_penalty", 1, 200), (CHAT, "min_tokens", 5, 400),
    (CHAT, "min_tokens", 4, 200), (CHAT, "min_tokens", -1, 400), (CHAT, "stop_token_ids", [-1], 400,
    "stop_token_ids[0]"), (CHAT, "ignore_eos", True, 200), (CHAT, "stop_regex", "END$", 200),
    (COMPLETIONS, "stop_regex", ["a", "(b"], 400), (CHAT, "stop_regex", ["x"] * 33, 400),
    (CHAT, "no_stop_trim", True, 200), (COMPLETIONS, "skip_special_tokens", False, 200),
    (CHAT, "skip_special_tokens", True, 200), (CHAT, "continue_final_message", True, 200),
    (COMPLETIONS, "continue_final_message", True, 400), (CHAT, "session_id", "s1", 400),
    (CHAT, "tool_choice", "required", 400), (CHAT, "regex", "[0-9]{2}", 200), (COMPLETIONS, "regex", "a(b", 400),
    (CHAT, "ebnf", "root ::= undefined_rule", 400), (CHAT, "response_format", {"type": "json_object"}, 200),
]


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    body: bytes
    status: int
    param: str | None = None
    headers: dict = field(default_factory=lambda: dict(JSON))


def base(route: str, model: str) -> dict:
    if route == CHAT:
        return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return {"model": model, "prompt": "def f(", "max_tokens": 4}


def _post(name: str, route: str, body: dict, status: int, param: str | None = None) -> Case:
    return Case(name, "POST", route, json.dumps(body).encode(), status, param)


def wrong_types(model: str) -> list[Case]:
    cases = []
    for name, (kind, routes) in FIELDS.items():
        for route in routes:
            for value in WRONG[kind]:
                body = {**base(route, model), name: value}
                cases.append(_post(f"{route} {name}={json.dumps(value)}", route, body, 400, name))
    for value in (5, True, {}, [True], [1.5], [["a"]]):
        cases.append(_post(f"prompt={json.dumps(value)}", COMPLETIONS, {**base(COMPLETIONS, model), "prompt": value}, 400, "prompt"))
    return cases


def ranges(model: str) -> list[Case]:
    cases = []
    for route, name, value, status, *param in RANGES:
        body = {**base(route, model), name: value}
        expected = (param[0] if param else name) if status == 400 else None
        cases.append(_post(f"{route} {name}={value}", route, body, status, expected))
    return cases


def messages(model: str) -> list[Case]:
    def chat(name, msgs, param):
        return _post(name, CHAT, {**base(CHAT, model), "messages": msgs}, 400, param)

    user = {"role": "user", "content": "hi"}
    cases = [
        chat("user without content", [{"role": "user"}], "messages[0].content"),
        chat("user content null", [{"role": "user", "content": None}], "messages[0].content"),
        chat("system content null", [user, {"role": "system", "content": None}], "messages[1].content"),
        chat("tool without tool_call_id", [user, {"role": "tool", "content": "ok"}], "messages[1].tool_call_id"),
        chat("tool_call_id not a string", [user, {"role": "tool", "content": "ok", "tool_call_id": 7}],
             "messages[1].tool_call_id"),
        chat("assistant says nothing", [user, {"role": "assistant"}], "messages[1]"),
        chat("unknown role", [{"role": "robot", "content": "hi"}], "messages[0].role"),
        chat("missing role", [{"content": "hi"}], "messages[0].role"),
        chat("role not a string", [{"role": 1, "content": "hi"}], "messages[0].role"),
        chat("message not an object", ["hi"], "messages[0]"),
        chat("no messages", [], "messages"),
        chat("content a number", [{"role": "user", "content": 5}], "messages[0].content"),
        chat("part without text", [{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text"),
        chat("part of unknown type", [{"role": "user", "content": [{"type": "video", "text": "x"}]}],
             "messages[0].content[0].type"),
        chat("image part", [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
             "messages[0].content"),
        chat("tool call without id", [user, {"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}], "messages[1].tool_calls[0].id"),
        chat("tool call arguments an object", [user, {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]}],
             "messages[1].tool_calls[0].function.arguments"),
    ]
    for name, arguments in (("not JSON", "{path: a}"), ("a JSON list", "[1]"), ("NaN", '{"x": NaN}')):
        cases.append(chat(f"tool call arguments {name}", [user, {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]}],
            "messages[1].tool_calls[0].function.arguments"))
    cases.append(_post("missing messages", CHAT, {"model": model}, 400, "messages"))
    cases.append(_post("missing prompt", COMPLETIONS, {"model": model}, 400, "prompt"))
    cases.append(_post("missing model", CHAT, {"messages": [user]}, 400, "model"))
    cases.append(_post("empty model", CHAT, {**base(CHAT, model), "model": ""}, 400, "model"))
    cases.append(_post("unknown model", CHAT, {**base(CHAT, model), "model": model + "-x"}, 404, "model"))
    cases.append(_post("empty prompt list", COMPLETIONS, {**base(COMPLETIONS, model), "prompt": []}, 400, "prompt"))
    cases.append(_post("two prompts", COMPLETIONS, {**base(COMPLETIONS, model), "prompt": ["a", "b"]}, 400, "prompt"))
    cases.append(_post("empty token list", COMPLETIONS, {**base(COMPLETIONS, model), "prompt": [[]]}, 400, "prompt"))
    cases.append(_post("negative token id", COMPLETIONS, {**base(COMPLETIONS, model), "prompt": [1, -2]}, 400, "prompt"))
    return cases


def surrogates(model: str) -> list[Case]:
    def raw(name, route, text, param):
        return Case(name, "POST", route, text.encode(), 400, param)

    m = json.dumps(model)
    return [
        raw("surrogate in content", CHAT, '{"model": %s, "messages": [{"role": "user", "content": "a\\ud800b"}]}' % m,
            "messages[0].content"),
        raw("low surrogate in second message", CHAT, '{"model": %s, "messages": [{"role": "user", "content": "x"}, '
            '{"role": "assistant", "content": "\\udfff"}]}' % m, "messages[1].content"),
        raw("surrogate in a text part", CHAT, '{"model": %s, "messages": [{"role": "user", "content": '
            '[{"type": "text", "text": "\\ud83d"}]}]}' % m, "messages[0].content[0].text"),
        raw("surrogate in prompt", COMPLETIONS, '{"model": %s, "prompt": "a\\ud800b"}' % m, "prompt"),
        raw("surrogate in prompt list", COMPLETIONS, '{"model": %s, "prompt": ["\\udc00"]}' % m, "prompt[0]"),
        raw("surrogate in stop", COMPLETIONS, '{"model": %s, "prompt": "x", "stop": ["ok", "\\ud800"]}' % m, "stop[1]"),
        raw("surrogate in user", CHAT, '{"model": %s, "user": "\\ud800", "messages": []}' % m, "user"),
        raw("surrogate in model", CHAT, '{"model": "\\ud800", "messages": []}', "model"),
        raw("surrogate in a key", CHAT, '{"model": %s, "\\ud800": 1, "messages": []}' % m, "\\ud800"),
    ]


def _nest(depth: int, open_: str, close: str, inner: str = "1") -> str:
    return open_ * depth + inner + close * depth


def depth(model: str) -> list[Case]:
    cases = []
    m = json.dumps(model)
    for n in (65, 100, 1000, 10_000):
        cases.append(Case(f"array bomb {n}", "POST", CHAT, _nest(n, "[", "]").encode(), 400))
        cases.append(Case(f"object bomb {n}", "POST", CHAT, _nest(n, '{"a":', "}").encode(), 400))
        bomb = _nest(n - 1, "[", "]")
        body = '{"model": %s, "messages": [{"role": "user", "content": "hi"}], "extra": %s}' % (m, bomb)
        cases.append(Case(f"bomb in a field {n}", "POST", CHAT, body.encode(), 400))
        cases.append(Case(f"unclosed bomb {n}", "POST", COMPLETIONS, ("[" * n).encode(), 400))
    fine = '{"model": %s, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "extra": %s}' % (
        m, _nest(63, "[", "]"))
    cases.append(Case("63 deep in a field (64 in all)", "POST", CHAT, fine.encode(), 200))
    brackets = '{"model": %s, "prompt": "%s", "max_tokens": 2}' % (m, "[" * 5000)
    cases.append(Case("brackets inside a string", "POST", COMPLETIONS, brackets.encode(), 200))
    return cases


def bad_json(model: str) -> list[Case]:
    m = json.dumps(model)
    bodies = {
        "truncated": '{"model": %s, "messages": [' % m,
        "trailing comma": '{"model": %s, "prompt": "x",}' % m,
        "single quotes": "{'model': 'x'}",
        "NaN": '{"model": %s, "prompt": "x", "temperature": NaN}' % m,
        "Infinity": '{"model": %s, "prompt": "x", "temperature": Infinity}' % m,
        "-Infinity": '{"model": %s, "prompt": "x", "seed": -Infinity}' % m,
        "1e400": '{"model": %s, "prompt": "x", "temperature": 1e400}' % m,
        "5000-digit integer": '{"model": %s, "prompt": "x", "seed": %s}' % (m, "9" * 5000),
        "empty": "",
        "whitespace": "   ",
        "array": "[1, 2]",
        "string": '"hello"',
        "number": "42",
        "null": "null",
        "two objects": '{"a": 1} {"b": 2}',
        "bare word": "hello",
        "unterminated string": '{"model": "abc',
        "control character in string": '{"model": "a\x01b"}',
    }
    cases = [Case(f"bad JSON: {name}", "POST", route, text.encode(), 400)
             for name, text in bodies.items() for route in (CHAT, COMPLETIONS)]
    cases.append(Case("latin-1 bytes", "POST", CHAT, b'{"model": "caf\xe9"}', 400))
    cases.append(Case("utf-16 body", "POST", CHAT, json.dumps({"model": model}).encode("utf-16"), 400))
    return cases


def size(model: str, limit: int) -> list[Case]:
    prefix = '{"model": %s, "prompt": "' % json.dumps(model)
    filler = "x" * (limit + 1 - len(prefix) - 2)
    over = (prefix + filler + '"}').encode()
    assert len(over) == limit + 1
    return [Case("one byte over the limit", "POST", COMPLETIONS, over, 413),
            Case("one byte over the limit (chat)", "POST", CHAT, over, 413)]


def media_types(model: str) -> list[Case]:
    body = json.dumps(base(CHAT, model)).encode()
    types = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml",
             "text/html", "image/png"]
    cases = [Case(f"content-type {t}", "POST", route, body, 415, None, {"content-type": t})
             for t in types for route in (CHAT, COMPLETIONS)]
    cases.append(Case("content-type with charset", "POST", CHAT, body, 200, None,
                      {"content-type": "application/json; charset=utf-8"}))
    cases.append(Case("no content-type", "POST", CHAT, body, 200, None, {}))
    return cases


def methods_and_routes() -> list[Case]:
    cases = []
    for path in (CHAT, COMPLETIONS):
        for method in ("GET", "PUT", "DELETE", "PATCH"):
            cases.append(Case(f"{method} {path}", method, path, b"", 405, None, {}))
    for path in ("/v1/models", "/v1/dspine/engine"):
        for method in ("POST", "PUT", "DELETE"):
            cases.append(Case(f"{method} {path}", method, path, b"{}", 405, None, {}))
    for path in ("/", "/v1", "/v1/chat", "/v1/embeddings", "/v1/chat/completions/x", "/v2/completions",
                 "/v1/assistants", "/admin", "/%2e%2e/etc/passwd", "/v1/completion"):
        cases.append(Case(f"unknown route {path}", "POST", path, b"{}", 404, None, dict(JSON)))
    return cases


def odd_but_valid(model: str) -> list[Case]:
    c = base(COMPLETIONS, model)
    ch = base(CHAT, model)
    valid = [
        ("token-id prompt", COMPLETIONS, {**c, "prompt": [1, 2, 3]}),
        ("one token-id list", COMPLETIONS, {**c, "prompt": [[5, 6]]}),
        ("empty prompt", COMPLETIONS, {**c, "prompt": ""}),
        ("one-element prompt list", COMPLETIONS, {**c, "prompt": ["hello"]}),
        ("nulls", CHAT, {**ch, "stream": None, "seed": None, "temperature": None, "stop": None, "n": None}),
        ("integer temperature", CHAT, {**ch, "temperature": 1}),
        ("text parts", CHAT, {**ch, "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}),
        ("tool turn", CHAT, {**ch, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
         {"role": "tool", "content": "done", "tool_call_id": "c1"}]}),
        ("tools", CHAT, {**ch, "tool_choice": "auto", "tools": [{"type": "function", "function": {
         "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}),
        ("unknown fields", CHAT, {**ch, "metadata": {"a": "b"}, "store": False, "service_tier": "auto"}),
        ("empty content", CHAT, {**ch, "messages": [{"role": "user", "content": ""}]}),
        ("unicode", CHAT, {**ch, "messages": [{"role": "user", "content": "héllo 😀 \u0000"}]}),
        ("stream false", COMPLETIONS, {**c, "stream": False}),
        ("developer role", CHAT, {**ch, "messages": [{"role": "developer", "content": "be brief"},
                                                     {"role": "user", "content": "x"}]}),
    ]
    return [_post(name, route, body, 200) for name, route, body in valid]


def messages_api(model: str) -> list[Case]:
    base_body = {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    weather = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}

    def with_(**fields):
        return {**base_body, **fields}

    def said(*blocks):
        return with_(messages=[{"role": "user", "content": list(blocks)}])

    bad = [
        ("no max_tokens", {"model": model, "messages": base_body["messages"]}, "max_tokens"),
        ("max_tokens 0", with_(max_tokens=0), "max_tokens"),
        ("max_tokens a string", with_(max_tokens="4"), "max_tokens"),
        ("no messages", with_(messages=[]), "messages"),
        ("system role in messages", with_(messages=[{"role": "system", "content": "x"}]), "messages[0].role"),
        ("content a number", with_(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
        ("unknown block", said({"type": "video", "text": "x"}), "messages[0].content[0].type"),
        ("image block", said({"type": "image", "source": {"type": "url", "url": "x"}}), "messages[0].content[0].type"),
        ("document block", said({"type": "document", "source": {}}), "messages[0].content[0].type"),
        ("redacted thinking", said({"type": "redacted_thinking", "data": "x"}), "messages[0].content[0].type"),
        ("tool result without its id", said({"type": "tool_result", "content": "ok"}),
         "messages[0].content[0].tool_use_id"),
        ("tool input a string", with_(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}]), "messages[1].content[0].input"),
        ("tool_choice names no tool", with_(tools=[weather], tool_choice={"type": "tool", "name": "rm"}),
         "tool_choice.name"),
        ("tool_choice any, server tools only", with_(tools=[{"type": "bash_20250124", "name": "bash"}],
                                                     tool_choice={"type": "any"}), "tool_choice.type"),
        ("temperature 1.5", with_(temperature=1.5), "temperature"),
        ("top_k 0", with_(top_k=0), "top_k"),
        ("thinking type unknown", with_(thinking={"type": "sometimes"}), "thinking.type"),
        ("system a number", with_(system=5), "system"),
        ("custom tool without input_schema", with_(tools=[{"name": "f"}]), "tools[0]"),
    ]  # fmt: skip
    good = [
        ("plain", base_body),
        ("a tool round trip", with_(tools=[weather], messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather",
                                               "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Snow"}]}])),
        ("cache_control everywhere", with_(
            system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": [{"type": "text", "text": "hi",
                                                    "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}])),
        ("a server tool beside a custom one", with_(tools=[weather, {"type": "web_search_20250305",
                                                                     "name": "web_search"}])),
        ("thinking off", with_(thinking={"type": "disabled"})),
        ("metadata and newer fields", with_(metadata={"user_id": "u1"}, service_tier="auto", betas=["x"],
                                            context_management={"edits": []})),
    ]  # fmt: skip
    cases = [_post(f"messages: {name}", MESSAGES, body, 400, param) for name, body, param in bad]
    cases.append(_post("messages: unknown model", MESSAGES, with_(model=model + "-x"), 404))
    counting = {"model": model, "messages": base_body["messages"]}
    cases.append(_post("count_tokens: no messages", COUNT, {"model": model}, 400, "messages"))
    cases.append(_post("count_tokens: unknown model", COUNT, {**counting, "model": model + "-x"}, 404))
    cases.append(_post("count_tokens", COUNT, counting, 200))
    cases.append(Case("messages: GET", "GET", MESSAGES, b"", 405, None, {}))
    return cases + [_post(f"messages: {name}", MESSAGES, body, 200) for name, body in good]


def responses_api(model: str) -> list[Case]:
    base_body = {"model": model, "max_output_tokens": 4, "input": "hi"}
    weather = {"type": "function", "name": "get_weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}  # fmt: skip

    def with_(**fields):
        return {**base_body, **fields}

    def items(*given):
        return with_(input=list(given))

    bad = [
        ("no input", {"model": model}, "input"),
        ("input a number", with_(input=5), "input"),
        ("max_output_tokens 0", with_(max_output_tokens=0), "max_output_tokens"),
        ("max_output_tokens a string", with_(max_output_tokens="4"), "max_output_tokens"),
        ("unknown item type", items({"type": "web_search_call", "id": "ws_1"}), "input[0].type"),
        ("unknown role", items({"role": "root", "content": "x"}), "input[0].role"),
        ("message without content", items({"role": "user"}), "input[0].content"),
        ("image part", items({"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}),
         "input[0].content[0].type"),
        ("function_call without call_id", items({"type": "function_call", "name": "f", "arguments": "{}"}),
         "input[0].call_id"),
        ("item_reference", items({"type": "item_reference", "id": "msg_1"}), "input[0].type"),
        ("previous_response_id", with_(previous_response_id="resp_1"), "previous_response_id"),
        ("background", with_(background=True), "background"),
        ("truncation auto", with_(truncation="auto"), "truncation"),
        ("custom tool", with_(tools=[{"type": "custom", "name": "apply_patch"}]), "tools[0].type"),
        ("function tool without a name", with_(tools=[{"type": "function", "parameters": {}}]), "tools[0]"),
        ("tool_choice names no tool", with_(tools=[weather], tool_choice={"type": "function", "name": "rm"}),
         "tool_choice"),
        ("reasoning effort unknown", with_(reasoning={"effort": "extreme"}), "reasoning.effort"),
        ("json_schema without schema", with_(text={"format": {"type": "json_schema", "name": "x"}}), "text.format"),
        ("temperature 3", with_(temperature=3), "temperature"),
    ]  # fmt: skip
    good = [
        ("plain", base_body),
        ("a tool round trip", with_(tools=[weather], input=[
            {"role": "user", "content": "Weather in Oslo?"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "Snow"}])),
        ("a hosted tool beside a function", with_(tools=[weather, {"type": "web_search"}])),
        ("reasoning off", with_(reasoning={"effort": "none"})),
        ("the client's newer fields", with_(store=False, include=["reasoning.encrypted_content"],
                                            prompt_cache_key="conv-1", service_tier="auto", safety_identifier="u",
                                            text={"verbosity": "low"})),
    ]  # fmt: skip
    cases = [_post(f"responses: {name}", RESPONSES, body, 400, param) for name, body, param in bad]
    cases.append(_post("responses: unknown model", RESPONSES, with_(model=model + "-x"), 404))
    cases.append(Case("responses: GET a stored response", "GET", RESPONSES + "/resp_1", b"", 404, None, {}))
    cases.append(Case("responses: GET", "GET", RESPONSES, b"", 405, None, {}))
    return cases + [_post(f"responses: {name}", RESPONSES, body, 200) for name, body in good]


def corpus(model: str, limit: int) -> list[Case]:
    return (wrong_types(model) + ranges(model) + messages(model) + surrogates(model) + depth(model)
            + bad_json(model) + size(model, limit) + media_types(model) + methods_and_routes() + odd_but_valid(model)
            + messages_api(model) + responses_api(model))
