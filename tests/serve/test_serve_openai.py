"""The OpenAI-compatible endpoint, and Anthropic's Messages API and OpenAI's Responses API over it, over real HTTP with
the official clients."""

import json
import threading

import httpx
import openai
import pytest

from dspine_lab.engines.tool_call_rate import WEATHER, two_shot

pytestmark = pytest.mark.serve

MODEL = "smollm2-135m-instruct"
CODE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


def chat(url, body, headers=None, timeout=120):
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers or {}, timeout=timeout)


def user(text):
    return [{"role": "user", "content": text}]


def test_models_and_health(serve_url):
    assert httpx.get(f"{serve_url}/health").json()["status"] == "ok"
    assert [m["id"] for m in httpx.get(f"{serve_url}/v1/models").json()["data"]] == [MODEL]
    client = openai.OpenAI(base_url=f"{serve_url}/v1", api_key="unused")
    assert client.models.retrieve(MODEL).id == MODEL
    missing = httpx.get(f"{serve_url}/v1/models/gpt-9")
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"


def test_openai_client_streams_with_spec_stats_and_headers(serve_url):
    client = openai.OpenAI(base_url=f"{serve_url}/v1", api_key="unused")
    with client.chat.completions.with_streaming_response.create(
        model=MODEL,
        messages=user("Rename add to plus and return the whole code:\n" + CODE),
        temperature=0,
        max_tokens=48,
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        extra_headers={"x-dspine-pool": "spec"},
    ) as response:
        headers = response.headers
        chunks = list(response.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert "def" in text  # coherent: the model repeats the code it was given
    assert headers["x-dspine-pool"] == "spec" and headers["x-dspine-path"] == "speculative"
    assert headers["x-dspine-arm"] == "spec" and headers["x-dspine-replica"]
    assert usage.completion_tokens > 0
    # continuous usage: the prompt's count from the first event on, completion tokens as they are sent
    running = [c.usage for c in chunks[:-1]]
    assert {u.prompt_tokens for u in running} == {usage.prompt_tokens}
    assert [u.completion_tokens for u in running] == sorted(u.completion_tokens for u in running)
    assert running[-1].completion_tokens == usage.completion_tokens
    extra = usage.model_extra
    assert extra["verify_steps"] > 0 and extra["accept_length"] >= 1.0
    assert sum((k + 1) * n for k, n in enumerate(extra["accept_histogram"])) == usage.completion_tokens


def test_non_streaming_and_greedy_identity_across_pools(serve_url):
    body = {"model": MODEL, "messages": user("List three colours."), "temperature": 0, "max_tokens": 32}
    spec = chat(serve_url, body, {"x-dspine-pool": "spec"})
    ar = chat(serve_url, body, {"x-dspine-pool": "ar"})
    assert spec.status_code == ar.status_code == 200
    assert ar.headers["x-dspine-path"] == "autoregressive"
    assert spec.json()["choices"][0]["message"]["content"] == ar.json()["choices"][0]["message"]["content"]
    assert ar.json()["usage"]["accept_length"] == 1.0


def test_stop_regex_and_no_stop_trim_end_the_answer_on_both_pools(serve_url):
    body = {"model": MODEL, "messages": user("Rename add to plus and return the whole code:\n" + CODE),
            "temperature": 0, "max_tokens": 48}  # fmt: skip
    full = chat(serve_url, body, {"x-dspine-pool": "ar"}).json()["choices"][0]["message"]["content"]
    assert "return a + b" in full and not full.endswith("return a + b")  # the control: it goes on after it
    for pool in ("spec", "ar"):
        by_pattern = chat(serve_url, {**body, "stop_regex": r"a \+ b$"}, {"x-dspine-pool": pool})
        kept = chat(serve_url, {**body, "stop": "return", "no_stop_trim": True}, {"x-dspine-pool": pool})
        for answer in (by_pattern, kept):
            assert answer.status_code == 200 and answer.json()["choices"][0]["finish_reason"] == "stop", pool
        # the pattern's match is kept, as SGLang keeps it; the stop string is kept, as no_stop_trim asks
        assert by_pattern.json()["choices"][0]["message"]["content"] == full[: full.index("a + b") + 5], pool
        assert kept.json()["choices"][0]["message"]["content"] == full[: full.index("return") + 6], pool
        # SGLang's matched_stop names what ended each: the pattern as given, the stop string
        assert by_pattern.json()["choices"][0]["matched_stop"] == r"a \+ b$", pool
        assert kept.json()["choices"][0]["matched_stop"] == "return", pool


def test_log_probabilities_one_per_completion_token_with_the_openai_client(serve_url):
    client = openai.OpenAI(base_url=f"{serve_url}/v1", api_key="unused", max_retries=0)
    ask = dict(model=MODEL, messages=user("What is the capital of France?"), temperature=0, max_tokens=16,
               logprobs=True, top_logprobs=2)  # fmt: skip
    answers = {}
    for pool in ("spec", "ar"):
        answer = client.chat.completions.create(**ask, extra_headers={"x-dspine-pool": pool})
        content = answer.choices[0].logprobs.content
        assert len(content) == answer.usage.completion_tokens, pool  # a trimmed EOS is scored too
        for entry in content:  # greedy: the chosen token is the likeliest of its two alternatives
            assert entry.top_logprobs[0].token == entry.token and len(entry.top_logprobs) == 2, pool
            assert entry.logprob <= 0 and entry.bytes == list(entry.token.encode()), pool
        answers[pool] = content
    assert [e.token for e in answers["spec"]] == [e.token for e in answers["ar"]]
    assert [e.logprob for e in answers["spec"]] == pytest.approx([e.logprob for e in answers["ar"]], abs=1e-3)
    # streamed, the events' entries add up to the same tokens
    stream = client.chat.completions.create(**ask, stream=True, extra_headers={"x-dspine-pool": "spec"})
    streamed = [e for event in stream for choice in event.choices for e in (choice.logprobs.content or [])
                if choice.logprobs]  # fmt: skip
    assert [e.token for e in streamed] == [e.token for e in answers["spec"]]
    # completions: parallel lists, at most `logprobs` alternatives a token, offsets into the text
    text = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=8, temperature=0, logprobs=3)
    scored = text.choices[0].logprobs
    assert len(scored.tokens) == len(scored.token_logprobs) == text.usage.completion_tokens
    assert all(len(top) <= 3 for top in scored.top_logprobs) and scored.text_offset[0] == 0
    shown = [token for token, offset in zip(scored.tokens, scored.text_offset) if offset < len(text.choices[0].text)]
    assert "".join(shown) == text.choices[0].text
    # without logprobs, none
    plain = client.chat.completions.create(**{**ask, "logprobs": False, "top_logprobs": None})
    assert plain.choices[0].logprobs is None


def test_structured_output_with_the_openai_client_on_both_pools(serve_url):
    client = openai.OpenAI(base_url=f"{serve_url}/v1", api_key="unused")
    trip = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"], "additionalProperties": False}  # fmt: skip
    ask = dict(model=MODEL, messages=user("Plan a 3 day trip to Paris. Reply in JSON."), temperature=0, max_tokens=48,
               response_format={"type": "json_schema", "json_schema": {"name": "trip", "schema": trip}})  # fmt: skip
    answers = {}
    for pool in ("spec", "ar"):
        choice = client.chat.completions.create(**ask, extra_headers={"x-dspine-pool": pool}).choices[0]
        assert choice.finish_reason == "stop", pool
        answers[pool] = json.loads(choice.message.content)
        assert set(answers[pool]) == {"city", "days"} and isinstance(answers[pool]["days"], int)
    assert answers["spec"] == answers["ar"]
    # a regular expression, on completions too
    text = client.completions.create(model=MODEL, prompt="Pick a number:", max_tokens=8, temperature=0,
                                     extra_body={"regex": "[0-9]{3}"}).choices[0].text  # fmt: skip
    assert len(text) == 3 and text.isdigit()


def test_tool_calls_with_the_openai_client_streamed_or_not_on_both_pools(serve_url):
    client = openai.OpenAI(base_url=f"{serve_url}/v1", api_key="unused")
    ask = dict(model=MODEL, messages=two_shot("What's the weather in Tokyo?"), tools=[WEATHER], temperature=0,
               max_tokens=40)  # fmt: skip
    for pool in ("spec", "ar"):
        choice = client.chat.completions.create(**ask, extra_headers={"x-dspine-pool": pool}).choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None, pool
        (call,) = choice.message.tool_calls
        assert (call.type, call.function.name, json.loads(call.function.arguments)) == (
            "function", "get_weather", {"city": "Tokyo"})
        assert call.id.startswith("call_") and len(call.id) == 29
        events = list(client.chat.completions.create(**ask, stream=True, extra_headers={"x-dspine-pool": pool}))
        deltas = [d for e in events for c in e.choices for d in c.delta.tool_calls or []]
        # the name first, with an id; then arguments only (how many deltas depends on the stream's batching)
        assert (deltas[0].index, deltas[0].function.name, deltas[0].id[:5]) == (0, "get_weather", "call_"), pool
        assert all((d.index, d.id, d.function.name) == (0, None, None) for d in deltas[1:])
        assert "".join(d.function.arguments or "" for d in deltas) == '{"city": "Tokyo"}'
        assert [c.finish_reason for e in events for c in e.choices if c.finish_reason] == ["tool_calls"]
    # a question no tool answers is text
    text = client.chat.completions.create(**{**ask, "messages": two_shot("Thanks! What is 2+2?")}).choices[0]
    assert (text.message.content, text.message.tool_calls, text.finish_reason) == ("2 + 2 = 4", None, "stop")
    # unless a call is forced: "required" (any tool), here without the earlier calls, the tool strict
    strict = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
    forced = client.chat.completions.create(**{**ask, "messages": user("What's the weather in Tokyo?"),
                                               "tools": [strict], "tool_choice": "required"}).choices[0]  # fmt: skip
    (call,) = forced.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments), forced.finish_reason) == (
        "get_weather", {"city": "Tokyo"}, "tool_calls")


def anthropic_two_shot(question: str) -> list[dict]:
    """two_shot's conversation in Anthropic's Messages form (the same chat messages once translated)."""
    turns = []
    for n, city in enumerate(("Paris", "London")):
        turns += [{"role": "user", "content": f"What's the weather in {city}?"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": f"c{n}", "name": "get_weather",
                                                     "input": {"city": city}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{n}",
                                                "content": '{"temperature_c": 18}'}]},
                  {"role": "assistant", "content": f"It is 18 °C in {city}."}]  # fmt: skip
    return turns + [{"role": "user", "content": question}]


def test_tool_use_with_the_anthropic_client_streamed_or_not(serve_url):
    import anthropic

    client = anthropic.Anthropic(base_url=serve_url, api_key="unused")
    tool = {"name": "get_weather", "description": WEATHER["function"]["description"],
            "input_schema": WEATHER["function"]["parameters"]}  # fmt: skip
    # greedy: the client no longer has sampling arguments, the API still takes `temperature`
    ask = dict(model=MODEL, max_tokens=40, tools=[tool], extra_headers={"x-dspine-pool": "spec"},
               extra_body={"temperature": 0}, messages=anthropic_two_shot("What's the weather in Tokyo?"))  # fmt: skip
    answer = client.messages.create(**ask)
    (call,) = answer.content
    assert (answer.stop_reason, call.type, call.name, call.input) == ("tool_use", "tool_use", "get_weather",
                                                                      {"city": "Tokyo"})  # fmt: skip
    with client.messages.stream(**ask) as stream:
        events = list(stream)
        streamed = stream.get_final_message()
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    assert [(b.type, b.name, b.input) for b in streamed.content] == [("tool_use", "get_weather", {"city": "Tokyo"})]
    assert streamed.stop_reason == "tool_use"
    # the same prompt: what the prefix cache holds is counted apart, and the total is the same
    first, second = answer.usage, streamed.usage
    assert first.input_tokens + (first.cache_read_input_tokens or 0) == \
        second.input_tokens + (second.cache_read_input_tokens or 0)  # fmt: skip
    assert second.cache_read_input_tokens and second.output_tokens == first.output_tokens
    (delta,) = [event for event in events if event.type == "message_delta"]
    for usage in (first, delta.usage):  # the speculation each answer got, after Anthropic's fields
        extra = usage.model_extra
        assert extra["path"] == "speculative" and extra["verify_steps"] >= 1
        assert sum((k + 1) * n for k, n in enumerate(extra["accept_histogram"])) == usage.output_tokens
    start = events[0].message.usage  # the prompt is counted from the first event, as at the end
    assert (start.input_tokens, start.cache_read_input_tokens) == (second.input_tokens, second.cache_read_input_tokens)
    # counting the same request gives the prompt tokens generation prefilled
    counted = client.messages.count_tokens(model=MODEL, tools=[tool], messages=ask["messages"],
                                           extra_headers={"x-dspine-pool": "spec"})  # fmt: skip
    assert counted.input_tokens == first.input_tokens + (first.cache_read_input_tokens or 0)
    # a question no tool answers is text, ended by the end token
    text = client.messages.create(**{**ask, "messages": anthropic_two_shot("Thanks! What is 2+2?")})
    assert ([(b.type, b.text) for b in text.content], text.stop_reason) == ([("text", "2 + 2 = 4")], "end_turn")
    # errors are Anthropic's, which the client raises as its own types
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(**{**ask, "model": "claude-sonnet-4-5"})
    with pytest.raises(anthropic.BadRequestError, match="not served here"):
        client.messages.create(**{**ask, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "http://127.0.0.1/x.png"}}]}]})


def responses_two_shot(question: str) -> list[dict]:
    """two_shot's conversation as Responses input items (the same chat messages once translated)."""
    items = []
    for n, city in enumerate(("Paris", "London")):
        items += [{"role": "user", "content": f"What's the weather in {city}?"},
                  {"type": "function_call", "call_id": f"c{n}", "name": "get_weather",
                   "arguments": json.dumps({"city": city})},
                  {"type": "function_call_output", "call_id": f"c{n}", "output": '{"temperature_c": 18}'},
                  {"role": "assistant", "content": f"It is 18 °C in {city}."}]  # fmt: skip
    return items + [{"role": "user", "content": question}]


def test_function_calls_with_the_openai_responses_client_streamed_or_not(serve_url):
    client = openai.OpenAI(base_url=f"{serve_url}/v1", api_key="unused")
    tool = {"type": "function", **WEATHER["function"]}
    ask = dict(model=MODEL, input=responses_two_shot("What's the weather in Tokyo?"), tools=[tool], temperature=0,
               max_output_tokens=40, store=False, extra_headers={"x-dspine-pool": "spec"})  # fmt: skip
    answer = client.responses.create(**ask)
    (call,) = answer.output
    assert (answer.status, call.type, call.name, json.loads(call.arguments)) == (
        "completed", "function_call", "get_weather", {"city": "Tokyo"})
    assert call.call_id.startswith("call_") and answer.id.startswith("resp_")
    # the same request, streamed: the SDK's own accumulation gives the same call
    with client.responses.stream(**ask) as stream:
        events = list(stream)
        streamed = stream.get_final_response()
    assert [e.type for e in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [(o.type, o.name, json.loads(o.arguments)) for o in streamed.output] == [
        ("function_call", "get_weather", {"city": "Tokyo"})]
    # the same prompt: the prefix cache holds part of it the second time; the speculation each answer got
    first, second = answer.usage, streamed.usage
    assert first.input_tokens == second.input_tokens and second.input_tokens_details.cached_tokens > 0
    assert second.output_tokens == first.output_tokens
    extra = first.model_extra
    assert extra["path"] == "speculative"
    assert sum((k + 1) * n for k, n in enumerate(extra["accept_histogram"])) == first.output_tokens
    # a question no tool answers is text; the SDK's output_text reads it
    text = client.responses.create(**{**ask, "input": responses_two_shot("Thanks! What is 2+2?")})
    assert (text.output_text, text.output[0].type, text.status) == ("2 + 2 = 4", "message", "completed")
    # errors are OpenAI's, which the client raises as its own types
    with pytest.raises(openai.NotFoundError):
        client.responses.create(**{**ask, "model": "gpt-5-codex"})
    with pytest.raises(openai.BadRequestError, match="nothing is stored here"):
        client.responses.create(**{**ask, "previous_response_id": answer.id})
    with pytest.raises(openai.NotFoundError, match="nothing is stored here"):
        client.responses.retrieve(answer.id)


def test_completions_endpoint(serve_url):
    r = httpx.post(f"{serve_url}/v1/completions", json={"model": MODEL, "prompt": "The sky is", "max_tokens": 8, "temperature": 0}, timeout=60)
    assert r.status_code == 200 and r.json()["object"] == "text_completion"
    assert r.json()["usage"]["completion_tokens"] <= 8


def test_same_session_same_arm(serve_url):
    arms = set()
    for _ in range(3):
        r = chat(serve_url, {"model": MODEL, "messages": user("hi"), "max_tokens": 1, "temperature": 0}, {"x-session-id": "session-42"})
        arms.add(r.headers["x-dspine-arm"])
    assert len(arms) == 1


def test_reasoning_level_chooses_pool(serve_url):
    r = chat(serve_url, {"model": MODEL, "messages": user("hi"), "max_tokens": 1, "reasoning_effort": "high"})
    assert r.status_code == 200 and r.headers["x-dspine-pool"] == "ar"


BAD = [
    ("malformed json", b"{not json", 400, None),
    ("unknown model", {"model": "gpt-9", "messages": user("hi")}, 404, "model"),
    ("wrong type", {"model": MODEL, "messages": "hello"}, 400, "messages"),
    ("empty messages", {"model": MODEL, "messages": []}, 400, "messages"),
    ("max_tokens beyond context", {"model": MODEL, "messages": user("hi"), "max_tokens": 5000}, 400, "max_tokens"),
    ("prompt beyond context", {"model": MODEL, "messages": user("word " * 1500), "max_tokens": 1}, 400, "messages"),
    ("bad reasoning_effort", {"model": MODEL, "messages": user("hi"), "reasoning_effort": "extreme"}, 400, "reasoning_effort"),
    ("negative temperature", {"model": MODEL, "messages": user("hi"), "temperature": -1}, 400, "temperature"),
    ("forced call beside a regex", {"model": MODEL, "messages": user("hi"), "tool_choice": "required", "regex": "a",
                                    "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tool_choice"),
    ("top_logprobs without logprobs", {"model": MODEL, "messages": user("hi"), "top_logprobs": 2}, 400, "top_logprobs"),
    ("regex that does not compile", {"model": MODEL, "messages": user("hi"), "regex": "a(b"}, 400, "regex"),
    ("structural tag that does not compile", {"model": MODEL, "messages": user("hi"), "response_format": {
        "type": "structural_tag", "structures": [{"begin": "<a>", "schema": {"type": 5}, "end": "</a>"}],
        "triggers": ["<a>"]}}, 400, "response_format"),
    ("tool_choice without tools", {"model": MODEL, "messages": user("hi"), "tool_choice": "required"}, 400, "tool_choice"),
]


@pytest.mark.parametrize("name,body,status,param", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_openai_error(serve_url, name, body, status, param):
    if isinstance(body, bytes):
        r = httpx.post(f"{serve_url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    else:
        r = chat(serve_url, body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] and error["type"]
    if param is not None:
        assert error["param"] == param
    # the server keeps serving
    ok = chat(serve_url, {"model": MODEL, "messages": user("hi"), "max_tokens": 1})
    assert ok.status_code == 200


def test_values_sdks_send_by_default_are_served(serve_url):
    body = {"model": MODEL, "messages": user("hi"), "max_tokens": 2, "logprobs": False, "frequency_penalty": 0,
            "presence_penalty": 0, "logit_bias": {}, "response_format": {"type": "text"}, "tool_choice": "none"}
    r = chat(serve_url, body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]


def test_no_api_key_configured_accepts_any_bearer(serve_url):
    # DSPINE_TEST_API_KEY is unset in the ingress: requests need no key (the refusal path is a unit test).
    r = chat(serve_url, {"model": MODEL, "messages": user("hi"), "max_tokens": 1}, {"authorization": "Bearer anything"})
    assert r.status_code == 200


def test_overload_gets_429_with_retry_after(serve_url):
    # The engine runs 2 and queues none; the router holds requests no replica can take (they would
    # only be refused or retracted there) and the handle holds at most 2 of those: the rest are refused.
    # 100 tokens keep the first 2 running for seconds while the other 6 arrive (all within milliseconds)
    body = {"model": MODEL, "messages": user("Write a long story about a dragon."), "max_tokens": 100, "temperature": 0}
    results = []

    def send():
        results.append(chat(serve_url, body, {"x-dspine-pool": "ar"}, timeout=300))

    threads = [threading.Thread(target=send) for _ in range(8)]  # 8 at once: 2 run, 2 wait, the rest refused
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    refused = [r for r in results if r.status_code in (429, 503)]
    assert refused, [r.status_code for r in results]
    assert all(r.headers.get("retry-after") for r in refused)
    assert any(r.status_code == 200 for r in results)


def test_client_disconnect_frees_slot_and_kv(serve_url, pool_load):
    import time

    body = {"model": MODEL, "messages": user("Write a long story about a knight."), "max_tokens": 400, "stream": True}
    with httpx.stream("POST", f"{serve_url}/v1/chat/completions", json=body, headers={"x-dspine-pool": "spec"}, timeout=60) as r:
        lines = r.iter_lines()
        received = [next(lines) for _ in range(3)]
        assert any(line.startswith("data: ") for line in received)
        busy = pool_load("spec")
    assert busy["num_running"] == 1
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        idle = pool_load("spec")
        if idle["num_running"] == 0:
            break
        time.sleep(0.5)
    assert idle["num_running"] == 0 and idle["free_kv_tokens"] == idle["total_kv_tokens"]


def test_streaming_error_before_first_token_is_http_error(serve_url):
    r = chat(serve_url, {"model": MODEL, "messages": user("hi"), "max_tokens": 5000, "stream": True})
    assert r.status_code == 400 and json.loads(r.text)["error"]["param"] == "max_tokens"
