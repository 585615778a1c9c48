"""OpenAI's Responses API (ray_dspine/serve/openai_responses.py): one test per rule, expected values by hand, then
the real ingress app over ASGI with fake pools (asgi_app.py: each pool answers with the words of the last
message), and the events and responses checked against the OpenAI SDK's own types."""

import asyncio
import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter, ValidationError

from asgi_app import MODEL, FakeReplica, client, ingress_app

from ray_dspine.engines.protocol import Chunk, Usage
from ray_dspine.serve import openai_responses as api
from ray_dspine.serve import openai_responses_stream as answer

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}  # fmt: skip
STREAMED = {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
EVENTS = TypeAdapter(ResponseStreamEvent)


def body(**fields):
    return {"model": MODEL, "input": "hi", **fields}


def test_request_items_become_chat_messages_in_order_with_one_system_message():
    chat = api.chat_body(body(instructions="Be brief.", input=[
        {"role": "developer", "content": "Use tools."},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in "},
                                     {"type": "input_text", "text": "Oslo?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "call it"}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Oslo"}'},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city": '},  # cut off
        {"type": "function_call_output", "call_id": "call_1", "output": "Snow"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "Rain"},
                                                                         {"type": "input_text", "text": ", 4 C"}]},
    ], tools=[WEATHER]))  # fmt: skip
    assert chat["messages"] == [
        # the instructions and the labelled developer message: one first system message
        {"role": "system", "content": "Be brief.\n\nDeveloper instructions:\nUse tools."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Oslo?"}]},
        # the reasoning item is left out; the message and both calls are one assistant turn
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."}], "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Snow"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Rain, 4 C"},
    ]  # fmt: skip


def test_request_assistant_turns_merge_by_phase_and_texts_join_with_a_blank_line():
    said = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": "One.", "phase": "commentary"},
            {"role": "assistant", "content": "Two.", "phase": "commentary"},
            {"role": "assistant", "content": "Done.", "phase": "final_answer"}]  # fmt: skip
    assert api.chat_body(body(input=said))["messages"] == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "One.\n\nTwo."},
        {"role": "assistant", "content": "Done."},
    ]


def test_fields_carry_over_and_the_session_is_user_else_prompt_cache_key():
    chat = api.chat_body(body(max_output_tokens=32, temperature=0.2, top_p=0.5, top_k=4, stop=["END"],
                              prompt_cache_key="conv-7", parallel_tool_calls=False, store=False))  # fmt: skip
    assert chat == {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **STREAMED, "max_tokens": 32,
                    "temperature": 0.2, "top_p": 0.5, "top_k": 4, "stop": ["END"], "user": "conv-7",
                    "tool_choice": "none", "parallel_tool_calls": False}  # fmt: skip
    assert api.chat_body(body(user="u1", prompt_cache_key="conv-7"))["user"] == "u1"


def test_reasoning_effort_and_text_format():
    assert api.chat_body(body(reasoning={"effort": "high"}))["reasoning_effort"] == "high"
    assert api.chat_body(body(reasoning={"summary": "auto"}))["reasoning_effort"] == "medium"  # SGLang's default
    assert api.chat_body(body(reasoning={"effort": "max"}))["reasoning_effort"] == "xhigh"
    off = api.chat_body(body(reasoning={"effort": "none"}))
    assert (off["reasoning_effort"], off["chat_template_kwargs"]) == ("none", {"enable_thinking": False})
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    form = {"type": "json_schema", "name": "out", "schema": schema, "strict": True}
    chat = api.chat_body(body(text={"format": form}))
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "out", "schema": schema,
                                                                              "strict": True}}  # fmt: skip
    assert api.chat_body(body(text={"format": {"type": "json_object"}}))["response_format"] == {"type": "json_object"}
    assert "response_format" not in api.chat_body(body(text={"format": {"type": "text"}}))


def test_tools_hosted_ones_are_left_out_and_choices_map():
    chat = api.chat_body(body(tools=[WEATHER, {"type": "web_search"}], tool_choice="required"))
    function = {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER["parameters"]}
    assert chat["tools"] == [{"type": "function", "function": function}]
    assert chat["tool_choice"] == "required"
    named = api.chat_body(body(tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"}))
    assert named["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    # an object naming anything but a function is "auto", as SGLang reduces it; no function tools: "none"
    assert api.chat_body(body(tools=[WEATHER], tool_choice={"type": "web_search"}))["tool_choice"] == "auto"
    assert api.chat_body(body(tools=[{"type": "web_search"}]))["tool_choice"] == "none"


@pytest.mark.parametrize("fields, param, words", [
    ({"previous_response_id": "resp_1"}, "previous_response_id", "nothing is stored here"),
    ({"conversation": "conv_1"}, "conversation", "nothing is stored here"),
    ({"background": True}, "background", "not served"),
    ({"truncation": "auto"}, "truncation", "must fit the context"),
    ({"include": ["message.output_text.logprobs"]}, "include", "/v1/chat/completions serves `logprobs`"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "nothing is stored here"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type", "`input_image` parts are not served"),
    ({"tools": [{"type": "custom", "name": "apply_patch"}]}, "tools[0].type", "custom tools (free-form input)"),
    ({"tools": [{"type": "local_shell"}]}, "tools[0].type", "`local_shell` tools are not served"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "read"}}, "tool_choice",
     "'read' is not declared"),
    ({"tools": [{"type": "web_search"}], "tool_choice": "required"}, "tool_choice",
     'at least one tool of type "function"'),
])  # fmt: skip
def test_refused_names_the_field(fields, param, words):
    with pytest.raises(api.Refused) as refused:
        api.chat_body(body(**fields))
    assert refused.value.param == param
    assert words in str(refused.value)


def test_an_item_of_an_unknown_type_fails_validation_naming_the_types():
    with pytest.raises(ValidationError) as failed:
        api.chat_body(body(input=[{"type": "web_search_call", "id": "ws_1"}]))
    assert "'message', 'function_call'" in str(failed.value)


def data(event):
    return f"data: {json.dumps(event)}\n\n"


def chunk_event(delta, finish=None, usage=None):
    event = {"id": "chatcmpl-s9", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return data({**event, "usage": usage} if usage else event)


def translate(events, summary=False, request=None):
    translator = answer.ResponseStream(api.echo(request or body()), summary=summary, clock=lambda: 1700000000)
    frames = []
    for event in events:
        frames += translator.feed(event)
    parsed = []
    for frame in frames:
        kind, line = frame.strip().split("\n")
        event = json.loads(line.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        EVENTS.validate_python(event)  # every event is one of the OpenAI SDK's
        parsed.append(event)
    return translator, parsed


def usage(prompt, completion, cached=0, **extra):
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}, **extra}  # fmt: skip


def test_stream_items_open_and_close_by_kind_with_sequence_numbers():
    call = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    translator, events = translate([
        chunk_event({"role": "assistant", "reasoning_content": "Need "}, usage=usage(30, 2, cached=16)),
        chunk_event({"reasoning_content": "weather."}, usage=usage(30, 4, cached=16)),
        chunk_event({"content": "Checking."}, usage=usage(30, 6, cached=16)),
        chunk_event({"tool_calls": [call]}, usage=usage(30, 7, cached=16)),
        chunk_event({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]},
                    usage=usage(30, 9, cached=16)),
        chunk_event({}, finish="tool_calls", usage=usage(30, 9, cached=16)),
        data({"id": "chatcmpl-s9", "choices": [], "usage": usage(
            30, 9, cached=16, verify_steps=5, accept_length=1.8, accept_histogram=[3, 1, 1], path="speculative",
            completion_tokens_details={"reasoning_tokens": 4})}),
        "data: [DONE]\n\n",
    ])  # fmt: skip
    assert [e["type"].removeprefix("response.") for e in events] == [
        "created", "in_progress",
        "output_item.added", "content_part.added", "reasoning_text.delta", "reasoning_text.delta",
        "reasoning_text.done", "content_part.done", "output_item.done",
        "output_item.added", "content_part.added", "output_text.delta",
        "output_text.done", "content_part.done", "output_item.done",
        "output_item.added", "function_call_arguments.delta", "function_call_arguments.done", "output_item.done",
        "completed",
    ]  # fmt: skip
    assert [e["sequence_number"] for e in events] == list(range(20))
    assert [e.get("output_index") for e in events if e["type"] == "response.output_item.added"] == [0, 1, 2]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done[0]["content"] == [{"type": "reasoning_text", "text": "Need weather."}]
    assert (done[1]["content"][0]["text"], done[1]["phase"]) == ("Checking.", "commentary")  # a call followed it
    assert (done[2]["call_id"], done[2]["arguments"], done[2]["status"]) == ("call_9", '{"city": "Oslo"}', "completed")
    final = events[-1]["response"]
    Response.model_validate(final)
    assert (final["id"], final["status"], final["created_at"]) == ("resp_s9", "completed", 1700000000)
    assert final["output"] == done
    # 30 prompt tokens, 16 cached; 9 completion tokens, 4 of them reasoning (the chat usage's completion_tokens_details)
    assert final["usage"] == {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 16}, "output_tokens": 9,
                              "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 39,
                              "verify_steps": 5, "accept_length": 1.8, "accept_histogram": [3, 1, 1],
                              "path": "speculative"}  # fmt: skip
    assert translator.response() == final


def test_stream_reasoning_summary_events_when_asked():
    chat = [chunk_event({"reasoning_content": "Think."}), chunk_event({"content": "Yes."}, finish="stop"),
            "data: [DONE]\n\n"]  # fmt: skip
    _, events = translate(chat, summary=True, request=body(reasoning={"summary": "auto"}))
    kinds = [e["type"].removeprefix("response.") for e in events]
    assert kinds[2:8] == ["output_item.added", "reasoning_summary_part.added", "reasoning_summary_text.delta",
                          "reasoning_summary_text.done", "reasoning_summary_part.done", "output_item.done"]  # fmt: skip
    item = events[7]["item"]
    assert item["summary"] == [{"type": "summary_text", "text": "Think."}]
    assert item["content"] == [{"type": "reasoning_text", "text": "Think."}]
    assert events[-1]["response"]["reasoning"] == {"effort": "medium", "summary": "auto"}


def test_stream_a_new_call_closes_the_last_and_a_message_without_calls_is_the_final_answer():
    start = {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    _, events = translate([chunk_event({"tool_calls": [start]}),
                           chunk_event({"tool_calls": [{**start, "index": 1, "id": "b"}]}, finish="tool_calls"),
                           "data: [DONE]\n\n"])  # fmt: skip
    calls = [e["item"]["call_id"] for e in events if e["type"] == "response.output_item.done"]
    assert calls == ["a", "b"]
    _, events = translate([chunk_event({"content": "Hi"}, finish="stop"), "data: [DONE]\n\n"])
    assert events[-1]["response"]["output"][0]["phase"] == "final_answer"


def test_stream_max_output_tokens_is_incomplete():
    _, events = translate([chunk_event({"content": "Hel"}, finish="length"), "data: [DONE]\n\n"])
    final = events[-1]
    assert (final["type"], final["response"]["status"]) == ("response.incomplete", "incomplete")
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_stream_a_failure_closes_the_open_item_then_response_failed():
    error = {"message": "replica stopped after 1 tokens", "type": "server_error", "param": None,
             "code": "replica_failed"}  # fmt: skip
    translator, events = translate([chunk_event({"content": "A"}), data({"error": error}),
                                    chunk_event({}, finish="error"), "data: [DONE]\n\n"])  # fmt: skip
    assert [e["type"].removeprefix("response.") for e in events][-4:] == [
        "output_text.done", "content_part.done", "output_item.done", "failed"]
    failed = events[-1]["response"]
    assert failed["error"] == {"code": "server_error", "message": "replica stopped after 1 tokens"}
    assert failed["output"][0]["content"][0]["text"] == "A"
    assert answer.status_of(translator.error) == 502
    assert answer.status_of({"type": "timeout", "code": "timeout"}) == 504
    assert answer.status_of({"type": "invalid_request_error", "code": None}) == 400


def test_response_echoes_the_settings():
    request = body(instructions="Be brief.", max_output_tokens=8, tools=[WEATHER], tool_choice="auto",
                   metadata={"run": "7"}, user="u1")  # fmt: skip
    settings = api.echo(request)
    assert settings == {"instructions": "Be brief.", "max_output_tokens": 8, "model": MODEL,
                        "parallel_tool_calls": True, "previous_response_id": None, "reasoning": None, "store": False,
                        "temperature": None, "text": {"format": {"type": "text"}}, "tool_choice": "auto",
                        "tools": [WEATHER], "top_p": None, "truncation": "disabled", "user": "u1",
                        "metadata": {"run": "7"}}  # fmt: skip


# --- the ingress app, over ASGI -----------------------------------------------------------------------------


def post(app, payload, path="/v1/responses"):
    async def go():
        async with client(app) as http:
            return await http.post(path, json=payload)

    return asyncio.run(go())


def test_responses_over_the_ingress_streamed_and_not(monkeypatch):
    spec, ar = FakeReplica("spec"), FakeReplica("ar")
    app, _core = ingress_app(monkeypatch, replicas={"spec": spec, "ar": ar})
    answer = post(app, body(input="one two three", max_output_tokens=2))
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["x-dspine-pool"] in ("spec", "ar")
    got = Response.model_validate(answer.json())
    assert (got.status, got.output_text) == ("incomplete", "one two ")
    assert got.incomplete_details.reason == "max_output_tokens"
    assert (got.usage.input_tokens, got.usage.output_tokens, got.usage.total_tokens) == (3, 2, 5)
    streamed = post(app, body(input="one two", stream=True))
    assert streamed.headers["content-type"].startswith("text/event-stream")
    kinds = [line.removeprefix("event: ") for line in streamed.text.split("\n") if line.startswith("event: ")]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.completed"]  # fmt: skip
    final = json.loads(streamed.text.strip().split("\n")[-1].removeprefix("data: "))["response"]
    assert final["output"][0]["content"][0]["text"] == "one two "
    assert final["usage"]["input_tokens"] == 2
    sent = (spec.requests + ar.requests)[-1]
    assert sent.stream is True  # both kinds take the chat stream


def test_reasoning_none_takes_the_reasoning_level_none_pool_and_high_effort_the_other(monkeypatch):
    spec, ar = FakeReplica("spec"), FakeReplica("ar")
    app, _core = ingress_app(monkeypatch, replicas={"spec": spec, "ar": ar})
    assert post(app, body(reasoning={"effort": "none"})).headers["x-dspine-pool"] == "spec"
    assert post(app, body(reasoning={"effort": "high"})).headers["x-dspine-pool"] == "ar"
    assert ar.requests[-1].reasoning_level == "high"


@pytest.mark.parametrize("fields, status, param, words", [
    ({"model": "gpt-5-codex"}, 404, "model", "this server serves `smollm2-135m-instruct`"),
    ({"max_output_tokens": 0}, 400, "max_output_tokens", "greater than or equal to 1"),
    ({"input": [{"role": "user"}]}, 400, "input[0].content", "is required"),
    ({"previous_response_id": "resp_1"}, 400, "previous_response_id", "nothing is stored here"),
    ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop", "at most 4"),
])  # fmt: skip
def test_bad_input_gets_an_openai_error_naming_the_field(monkeypatch, fields, status, param, words):
    app, _core = ingress_app(monkeypatch)
    answer = post(app, body(**fields))
    assert answer.status_code == status
    error = answer.json()["error"]
    assert error["param"] == param
    assert words in error["message"]


def test_a_replica_failure_without_streaming_is_the_chat_paths_status(monkeypatch):
    class Dies(FakeReplica):
        async def generate(self, request, prompt_token_ids=None):
            yield Chunk(text="a ", num_tokens=1, replica=self.name)
            yield Chunk(finish_reason="error", error="engine step failed", error_status=500)

    app, _core = ingress_app(monkeypatch, replicas={"spec": Dies("spec"), "ar": Dies("ar")})
    answer = post(app, body())
    assert answer.status_code == 500
    assert answer.json()["error"]["message"] == "engine step failed"


def test_cached_tokens_and_speculation_in_the_usage(monkeypatch):
    class Cached(FakeReplica):
        async def generate(self, request, prompt_token_ids=None):
            yield Chunk(text="ok", num_tokens=1, replica=self.name, prompt_tokens=30, cached_prompt_tokens=20)
            yield Chunk(finish_reason="stop", matched_stop=2,
                        usage=Usage(prompt_tokens=30, completion_tokens=1, total_tokens=31, cached_prompt_tokens=20,
                                    verify_steps=1, accept_length=1.0, accept_histogram=[1]))

    app, _core = ingress_app(monkeypatch, replicas={"spec": Cached("spec"), "ar": Cached("ar")})
    got = post(app, body()).json()["usage"]
    assert got == {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 20}, "output_tokens": 1,
                   "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 31, "verify_steps": 1,
                   "accept_length": 1.0, "accept_histogram": [1], "path": "autoregressive"}  # fmt: skip


def test_a_stored_response_is_not_found(monkeypatch):
    app, _core = ingress_app(monkeypatch)

    async def go():
        async with client(app) as http:
            return await http.get("/v1/responses/resp_abc")

    answer = asyncio.run(go())
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"
    assert "nothing is stored here" in answer.json()["error"]["message"]


def test_an_error_finish_without_an_error_event_fails_the_response_both_ways():
    translator, events = translate([chunk_event({"content": "A"}), chunk_event({}, finish="error"), "data: [DONE]\n\n"])
    final = events[-1]
    assert (final["type"], final["response"]["status"]) == ("response.failed", "failed")
    assert final["response"]["error"] == {"code": "server_error", "message": "the answer ended with an error"}
    assert translator.response() == final["response"]  # the answer of a request that did not stream


def test_null_optionals_are_their_defaults():
    chat = api.chat_body(body(tool_choice=None, stream=None, tools=[WEATHER], reasoning=None, text=None, user=None))
    assert (chat["tool_choice"], chat["tools"][0]["function"]["name"]) == ("auto", "get_weather")
    assert "reasoning_effort" not in chat and "response_format" not in chat and "user" not in chat
    assert api.echo(body(tool_choice=None))["tool_choice"] == "auto"
