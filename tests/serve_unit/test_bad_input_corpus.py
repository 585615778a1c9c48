"""Every case of the bad-input corpus (ray_dspine/drill/corpus.py) against the ingress's real FastAPI app.

Each answer has the case's status; every 4xx is an OpenAI error object whose `param` is the one the case
names (when it names one), Anthropic's under /v1/messages (its message opening with that field); no case is
answered with a 5xx or with anything but JSON.
"""

import asyncio
import json

from asgi_app import MODEL, client, ingress_app

from ray_dspine.drill.corpus import corpus

LIMIT = 64 * 1024


def run_cases(app, cases):
    async def go():
        out = []
        async with client(app) as http:
            for case in cases:
                response = await http.request(case.method, case.path, content=case.body, headers=case.headers)
                out.append((case, response))
        return out

    return asyncio.run(go())


def test_corpus_has_over_300_cases():
    cases = corpus(MODEL, LIMIT)
    assert len(cases) >= 300
    assert len({case.name for case in cases}) > 250  # not one case repeated


def test_every_case_gets_its_status_and_an_openai_error(monkeypatch):
    from asgi_app import app_config

    app, _core = ingress_app(monkeypatch, app_config(max_request_bytes=LIMIT))
    wrong = []
    for case, response in run_cases(app, corpus(MODEL, LIMIT)):
        assert response.headers["content-type"].startswith("application/json"), case.name
        body = response.json()
        if response.status_code != case.status:
            wrong.append((case.name, case.status, response.status_code, body))
            continue
        if case.status >= 400 and case.path.startswith("/v1/messages"):
            assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, case.name
            if case.param is not None and not body["error"]["message"].startswith(case.param + ":"):
                wrong.append((case.name, case.param, body["error"]["message"]))
        elif case.status >= 400:
            error = body["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["message"], case.name
            if case.param is not None and error["param"] != case.param:
                wrong.append((case.name, case.param, error["param"], error["message"]))
    assert wrong == []


def test_hand_worked_answers(monkeypatch):
    """A few answers spelled out in full."""
    app, _core = ingress_app(monkeypatch)

    async def go():
        async with client(app) as http:
            bomb = await http.post("/v1/chat/completions", content=b"[" * 10_000 + b"]" * 10_000)
            seed = await http.post("/v1/completions", json={"model": MODEL, "prompt": "x", "seed": 2**64,
                                                            "temperature": 0.7})
            nulled = await http.post("/v1/chat/completions", json={"model": MODEL, "messages": [
                {"role": "user", "content": None}]})
            tokens = await http.post("/v1/completions", json={"model": MODEL, "prompt": [7, 8, 9], "max_tokens": 2})
            empty = await http.post("/v1/completions", json={"model": MODEL, "prompt": "", "max_tokens": 3})
            method = await http.delete("/v1/models")
            return bomb, seed, nulled, tokens, empty, method

    bomb, seed, nulled, tokens, empty, method = asyncio.run(go())
    assert bomb.status_code == 400 and bomb.json()["error"] == {
        "message": "request body nests arrays/objects deeper than 64", "type": "invalid_request_error",
        "param": None, "code": "invalid_json"}
    assert seed.status_code == 400 and seed.json()["error"]["param"] == "seed"
    assert seed.json()["error"]["message"] == "seed: Input should be less than or equal to 9223372036854775807"
    assert nulled.json()["error"]["param"] == "messages[0].content"
    # the fake tokenizer spells id i as "w<i>": the engine saw the decoded ids and echoed two of them
    assert tokens.status_code == 200 and tokens.json()["choices"][0]["text"] == "w7 w8 "
    assert empty.status_code == 200 and empty.json()["choices"][0]["text"] == "<s> "  # served as the BOS token
    assert method.status_code == 405 and method.json()["error"]["code"] == "method_not_allowed"


def test_context_length_error_carries_its_code(monkeypatch):
    from asgi_app import FakeReplica

    app, _core = ingress_app(monkeypatch, replicas={"spec": FakeReplica("spec", 8), "ar": FakeReplica("ar", 8)})

    async def go():
        async with client(app) as http:
            return await http.post("/v1/completions", json={"model": MODEL, "prompt": "a b c", "max_tokens": 6})

    error = asyncio.run(go()).json()["error"]
    assert (error["param"], error["code"]) == ("max_tokens", "context_length_exceeded")


def test_token_id_outside_vocabulary_is_400(monkeypatch):
    app, _core = ingress_app(monkeypatch)

    async def go():
        async with client(app) as http:
            return await http.post("/v1/completions", json={"model": MODEL, "prompt": [1, 1000]})

    response = asyncio.run(go())
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "token id 1000 is outside the vocabulary (ids 0..999)"


def test_a_calls_arguments_that_are_not_a_json_object_are_named(monkeypatch):
    app, _core = ingress_app(monkeypatch)
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]}]

    async def go():
        async with client(app) as http:
            return await http.post("/v1/chat/completions", json={"model": MODEL, "messages": messages})

    response = asyncio.run(go())
    assert response.status_code == 400 and response.json()["error"] == {
        "message": "messages[1].tool_calls[0].function.arguments: must be a JSON object in a string, not a JSON list",
        "type": "invalid_request_error", "param": "messages[1].tool_calls[0].function.arguments",
        "code": "invalid_value"}  # fmt: skip
