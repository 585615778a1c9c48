"""Property-based fuzzing of the ingress's real FastAPI app (hypothesis, a bounded number of examples).

Properties, for any body, content type, method and path drawn below:
  never a 5xx; the answer is always JSON; every 4xx is an OpenAI error object
  {"error": {"message": str, "type": str, "param": str|null, "code": str|null}}.
Bodies are drawn three ways: arbitrary JSON values (surrogates, huge and negative integers, deep-ish
nesting included), request-shaped objects whose known fields take arbitrary JSON values, and raw bytes.
"""

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_app import MODEL, client, ingress_app

FIELDS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
          "stream", "stream_options", "stop", "seed", "user", "frequency_penalty", "presence_penalty", "logit_bias",
          "tools", "tool_choice", "parallel_tool_calls", "response_format", "logprobs", "top_logprobs", "echo",
          "best_of", "suffix", "reasoning_effort", "reasoning", "chat_template_kwargs", "top_k", "min_p",
          "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids", "regex", "ebnf", "stop_regex",
          "no_stop_trim", "skip_special_tokens", "continue_final_message"]
SURROGATE_TEXT = st.one_of(st.text(max_size=20), st.sampled_from(["\ud800", "a\udfffb", "\ud83d\ude00", "\x00"]))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), SURROGATE_TEXT,
)
JSON_VALUES = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(SURROGATE_TEXT, inner, max_size=4)),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "system", "assistant", "tool", "developer"]), JSON_VALUES)},
    optional={"content": JSON_VALUES, "tool_call_id": JSON_VALUES, "tool_calls": JSON_VALUES, "name": JSON_VALUES},
)
REQUEST = st.fixed_dictionaries(
    {"model": st.one_of(st.just(MODEL), JSON_VALUES)},
    optional={**{name: JSON_VALUES for name in FIELDS[1:]}, "messages": st.lists(MESSAGE, max_size=3)},
)
BIG_INTS = st.one_of(st.integers(-(2**65), 2**65), st.sampled_from([2**63, -(2**63) - 1, 2**64, 2**31, 0, -1]))
TEXT = st.one_of(SURROGATE_TEXT, st.text(max_size=5))
# A valid request with some fields given plausible values of the right JSON type, in or out of range.
NEAR_VALID = st.tuples(
    st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
    st.fixed_dictionaries({"content": TEXT, "prompt": st.one_of(TEXT, st.lists(BIG_INTS, max_size=3))}),
    st.fixed_dictionaries({}, optional={
        "max_tokens": st.one_of(st.integers(1, 4), BIG_INTS), "seed": st.one_of(st.sampled_from([2**64, 2**63, -(2**63) - 1, 7]), BIG_INTS), "n": st.just(1),
        "temperature": st.one_of(st.floats(0, 2), st.floats(-1, 3)), "top_p": st.one_of(st.just(1.0), st.floats(-1, 2)),
        "stop": st.one_of(TEXT, st.lists(TEXT, max_size=4), st.lists(TEXT, min_size=5, max_size=6)), "user": TEXT,
        "stream": st.booleans(), "top_logprobs": st.one_of(st.just(0), BIG_INTS),
        "logit_bias": st.dictionaries(TEXT, st.floats(-200, 200), max_size=2), "frequency_penalty": st.floats(-3, 3),
    }),
)
BODIES = st.one_of(
    REQUEST.map(lambda body: json.dumps(body).encode()),
    JSON_VALUES.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=200),
)
PATHS = st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/v1/x", "/"])
METHODS = st.sampled_from(["POST", "POST", "POST", "GET", "PUT"])
CONTENT_TYPES = st.sampled_from(["application/json", "application/json", "text/plain", None])


@pytest.fixture(scope="module")
def app():
    with pytest.MonkeyPatch.context() as patch:
        fastapi_app, _core = ingress_app(patch)
        yield fastapi_app


def check(response) -> None:
    assert response.status_code < 500, response.text
    body = response.json()  # always JSON
    if response.status_code >= 400:
        error = body["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert isinstance(error["message"], str) and error["message"] and isinstance(error["type"], str)
        assert error["param"] is None or isinstance(error["param"], str)
        assert error["code"] is None or isinstance(error["code"], str)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(body=BODIES, path=PATHS, method=METHODS, content_type=CONTENT_TYPES)
def test_any_request_is_answered_in_openai_shape(app, body, path, method, content_type):
    headers = {} if content_type is None else {"content-type": content_type}

    async def go():
        async with client(app) as http:
            return await http.request(method, path, content=body, headers=headers)

    check(asyncio.run(go()))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(body=REQUEST)
def test_request_shaped_bodies_on_both_routes(app, body):
    async def go():
        async with client(app) as http:
            out = []
            for path in ("/v1/chat/completions", "/v1/completions"):
                out.append(await http.post(path, content=json.dumps(body).encode(),
                                           headers={"content-type": "application/json"}))
            return out

    for response in asyncio.run(go()):
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            assert response.status_code == 200 and response.text.rstrip().endswith("data: [DONE]")
        else:
            check(response)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(drawn=NEAR_VALID)
def test_near_valid_requests(app, drawn):
    path, text, fields = drawn
    if path == "/v1/chat/completions":
        body = {"model": MODEL, "messages": [{"role": "user", "content": text["content"]}], **fields}
    else:
        body = {"model": MODEL, "prompt": text["prompt"], **fields}

    async def go():
        async with client(app) as http:
            return await http.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})

    response = asyncio.run(go())
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        assert response.status_code == 200 and response.text.rstrip().endswith("data: [DONE]")
    else:
        check(response)
