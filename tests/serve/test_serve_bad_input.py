"""Bad and odd input against the real local Serve app (embedded engine, real tokenizer), over HTTP."""

import httpx
import pytest

pytestmark = pytest.mark.serve

MODEL = "smollm2-135m-instruct"
JSON = {"content-type": "application/json"}


def post(url, path, content):
    return httpx.post(f"{url}{path}", content=content, headers=JSON, timeout=120)


def test_inputs_that_used_to_crash_are_400s_in_openai_shape(serve_url):
    cases = [
        ("/v1/chat/completions", b"[" * 10_000 + b"]" * 10_000, None),
        ("/v1/chat/completions", ('{"model": "%s", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
                                  % MODEL).encode(), "messages[0].content"),
        ("/v1/completions", ('{"model": "%s", "prompt": "x", "seed": %d, "temperature": 0.7}' % (MODEL, 2**64)).encode(),
         "seed"),
        ("/v1/chat/completions", ('{"model": "%s", "messages": [{"role": "user", "content": null}]}' % MODEL).encode(),
         "messages[0].content"),
    ]
    for path, body, param in cases:
        response = post(serve_url, path, body)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == param


def test_token_ids_and_empty_prompt_are_served(serve_url):
    ids = httpx.post(f"{serve_url}/v1/completions", json={"model": MODEL, "prompt": [504, 3125, 288], "max_tokens": 3,
                                                          "temperature": 0}, timeout=120)
    assert ids.status_code == 200, ids.text
    assert ids.json()["usage"]["completion_tokens"] == 3
    empty = httpx.post(f"{serve_url}/v1/completions", json={"model": MODEL, "prompt": "", "max_tokens": 2,
                                                            "temperature": 0}, timeout=120)
    assert empty.status_code == 200, empty.text
    assert empty.json()["usage"]["prompt_tokens"] >= 1  # served from the tokenizer's start-of-text token


def test_framework_errors_and_context_length_in_openai_shape(serve_url):
    missing = httpx.get(f"{serve_url}/nope", timeout=30)
    method = httpx.get(f"{serve_url}/v1/chat/completions", timeout=30)
    live = httpx.get(f"{serve_url}/health/live", timeout=30)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "unknown_url")
    assert (method.status_code, method.json()["error"]["code"]) == (405, "method_not_allowed")
    assert live.json() == {"status": "alive"}
    long = httpx.post(f"{serve_url}/v1/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000}, timeout=120)
    assert long.status_code == 400
    assert (long.json()["error"]["param"], long.json()["error"]["code"]) == ("max_tokens", "context_length_exceeded")
