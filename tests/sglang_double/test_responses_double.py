"""OpenAI's Responses API: SGLang 0.5.23's own Responses serving judges ours, end to end, on the same double model.

Each request body goes two ways through one SGLangServerDouble (started once for the module, with the drafter and
20 ms per verify step, so both streams arrive in pieces):
  SGLang's   the body as it is, POSTed to the double's /v1/responses: SGLang's own route, ResponsesRequest and
             OpenAIServingResponses (input items to chat messages, the chat template, the qwen3 reasoning and
             qwen3_coder tool-call parsers, output items, usage, its event stream), non-streamed (JSON) and
             streamed (SSE);
  ours       openai_responses.chat_body(body) -> a GenerateRequest built from that chat body as the ingress
             builds it (`generate_request` below) -> the project's SGLangEngine, which sends it to the double's
             /v1/chat/completions (SGLang's own chat serving) -> the engine's chunks -> responses.sse_events
             (the ingress' chat stream, usage on every event) -> openai_responses_stream.ResponseStream -> our
             events and final response (ours answers both kinds from the chat stream, so one run gives both).
What is a double: the scheduler, model and tokenizer under SGLang's serving layer (double_scheduler.py,
double_model.py, double_tokenizer.py), so the text is "t0 t1 ..." one word per token, a `</think>` after three
words when the prompt opens thinking, one qwen3_coder call of the first tool listed when the prompt lists tools;
and `_Timer` below, the ingress' request metrics, which the stream only reports to. Everything else on both
sides is the installed code.

Compared: the output items' kinds in order, the message text, the reasoning text, each call's name and arguments
(parsed JSON; a cut-off call's text as it is), a message's phase, status and incomplete_details, usage input/output/
total and reasoning tokens, and for streams the sequence of event types, the text the deltas carry and each item as
it closes. The echoed settings are not compared. Where the two differ on purpose (openai_responses.py's docstring),
the test says so where it normalises:
  max tokens     SGLang generates `max_output_tokens - 2` tokens (ResponsesRequest.to_sampling_params keeps 2 of
                 headroom for BOS/EOS); ours sends max_output_tokens as the chat max_tokens. SGLang's body asks
                 for 2 more, so the double generates the same N tokens on both sides.
  ids            response, item and call ids are each side's own (random on SGLang's); they are not compared.
  usage          SGLang's input_tokens_details also has cache_write_tokens (always 0); ours adds verify_steps,
                 accept_length, accept_histogram and path after OpenAI's fields. cached_tokens depends on which
                 request reached the double's prefix cache first, so it is not compared.
  deltas         how many delta events carry a run of text follows how each stream was cut into chunks (SGLang's
                 tokenizer manager hands its Responses loop whatever has arrived; the chat stream one event per
                 engine chunk), not the translation: consecutive deltas of one kind count as one, and their joined
                 text is compared.
  phase          SGLang holds a tool-enabled request's message events back until it knows whether a call
                 follows; ours sends them at once and names the phase when the message closes. No request here
                 writes text before a call, so the event order is the same either way; output_item.added items are
                 not compared.
  strict         ours sends a function tool's `strict` only when given; SGLang renders `"strict": false` for a tool
                 that does not say (rule `tools`): the cases' tools say, and one test sends a tool that does not.
  cut-off call   ours answers a non-streamed request from the chat stream (openai_responses_stream.py rule
                 `answer`), so a call cut off by max_output_tokens keeps the arguments it streamed, as SGLang's
                 stream does; SGLang's non-streamed answer parses the whole text and closes the object.
  developer      rule `request` builds one first system message for every pool, as SGLang does for a template
                 that takes no system message but the first: the double's template is such a one (SGLang's own
                 detect_inline_system_support says so), so both sides send the same prompt (test at the end).
Token counts worked out by hand (double_tokenizer.py: added tokens alone, each other word with the whitespace before
it): the user turn "fix the failing test" is <|im_start|> "user" "\\nfix" " the" " failing" " test" <|im_end|> "\\n"
= 8; the generation prompt <|im_start|> "assistant" "\\n" then <think> "\\n" (thinking on: 5) or <think> "\\n\\n"
</think> "\\n\\n" (off: 7); a system turn "Be brief." is <|im_start|> "system" "\\nBe" " brief." <|im_end|> "\\n" = 6.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
import pytest

from ray_dspine.engines.protocol import ChatMessage, GenerateRequest
from ray_dspine.engines.sglang import SGLangEngine
from ray_dspine.routing.config import TrafficConfig
from ray_dspine.routing.traffic import reasoning_level_of
from ray_dspine.serve import openai_responses, openai_responses_stream, responses
from ray_dspine.serve.openai_schema import ChatCompletionRequest

from sglang_double_helpers import config_factory, double_launcher, run

pytest.importorskip("sglang")

MODEL = "qwen3.8-27b"  # the double's served model name (its --model-path folder)
DEFAULT_LEVEL = TrafficConfig.model_fields["default_reasoning_level"].default  # the ingress' level when none is asked
COUNT = {"type": "object", "properties": {"count": {"type": "integer"}}}
# The tools state `strict`, as agents send them: one that leaves it out is rendered differently by SGLang's Responses
# serving and ours, on purpose (rule `tools`; test_a_function_tool_without_strict).
RUN_TESTS = {"type": "function", "name": "run_tests", "description": "Run the test suite", "parameters": COUNT,
             "strict": False}
READ_FILE = {"type": "function", "name": "read_file", "parameters": COUNT, "strict": True}
ASK = "fix the failing test"

# name -> (Responses body, what the double writes for it, worked out by hand from its rules: output item kinds,
# message text, reasoning text, calls (name, arguments), status, input and output tokens)
CASES = {
    # thinking off ("none" is enable_thinking false on both sides): 7 words, cut by max_output_tokens
    "plain": (
        {"model": MODEL, "input": ASK, "max_output_tokens": 7, "reasoning": {"effort": "none"}},
        {"kinds": ["message"], "text": "t0 t1 t2 t3 t4 t5 t6 ", "status": "incomplete", "input": 8 + 7, "output": 7},
    ),
    # instructions are a first system turn (6 tokens); a message item with input_text parts is the user turn
    "instructions": (
        {"model": MODEL, "instructions": "Be brief.", "max_output_tokens": 4, "reasoning": {"effort": "none"},
         "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]}]},
        {"kinds": ["message"], "text": "t0 t1 t2 t3 ", "status": "incomplete", "input": 6 + 8 + 7, "output": 4},
    ),
    # an earlier assistant message (output_text part) is an assistant turn: <|im_start|> "assistant" "\nWhich"
    # " test?" <|im_end|> "\n" = 6; the next user turn <|im_start|> "user" "\nthe" " first" <|im_end|> "\n" = 6
    "assistant history": (
        {"model": MODEL, "max_output_tokens": 4, "reasoning": {"effort": "none"},
         "input": [{"role": "user", "content": ASK},
                   {"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Which test?"}]},
                   {"role": "user", "content": "the first"}]},
        {"kinds": ["message"], "text": "t0 t1 t2 t3 ", "status": "incomplete", "input": 8 + 6 + 6 + 7, "output": 4},
    ),
    # the prompt lists tools: one qwen3_coder call of the first tool, count = N = 12, 7 pieces + eos = 8 tokens,
    # ended by eos (completed). The tools' JSON is in the prompt: their tokens are only compared, not worked out.
    "function tool": (
        {"model": MODEL, "input": ASK, "max_output_tokens": 12, "reasoning": {"effort": "none"},
         "tools": [RUN_TESTS, READ_FILE]},
        {"kinds": ["function_call"], "calls": [("run_tests", {"count": 12})], "status": "completed", "output": 8},
    ),
    # a named tool_choice: SGLang's chat serving renders only the named tool, so the double calls it
    "named tool_choice": (
        {"model": MODEL, "input": ASK, "max_output_tokens": 10, "reasoning": {"effort": "none"},
         "tools": [RUN_TESTS, READ_FILE], "tool_choice": {"type": "function", "name": "read_file"}},
        {"kinds": ["function_call"], "calls": [("read_file", {"count": 10})], "status": "completed", "output": 8},
    ),
    # tool_choice "none": no tools rendered, so the prompt is the plain one and the double writes words
    "tool_choice none": (
        {"model": MODEL, "input": ASK, "max_output_tokens": 4, "reasoning": {"effort": "none"}, "tools": [RUN_TESTS],
         "tool_choice": "none"},
        {"kinds": ["message"], "text": "t0 t1 t2 t3 ", "status": "incomplete", "input": 8 + 7, "output": 4},
    ),
    # a tool round trip: the call is an assistant turn, its output a tool turn; the tools are listed, so the double
    # calls again
    "tool round trip": (
        {"model": MODEL, "max_output_tokens": 9, "reasoning": {"effort": "none"}, "tools": [RUN_TESTS],
         "input": [{"role": "user", "content": ASK},
                   {"type": "function_call", "call_id": "call_1", "name": "run_tests", "arguments": '{"count": 3}'},
                   {"type": "function_call_output", "call_id": "call_1", "output": "2 failed"}]},
        {"kinds": ["function_call"], "calls": [("run_tests", {"count": 9})], "status": "completed", "output": 8},
    ),
    # a call cut off by max_output_tokens: 5 of its pieces, <tool_call> ... "\n5" "\n</parameter>", so the
    # parser has sent the parameter but no closing brace: the arguments text is '{"count": 5' (not JSON)
    "call cut off": (
        {"model": MODEL, "input": ASK, "max_output_tokens": 5, "reasoning": {"effort": "none"}, "tools": [RUN_TESTS]},
        {"kinds": ["function_call"], "calls": [("run_tests", '{"count": 5')], "status": "incomplete", "output": 5},
    ),
    # thinking on: t0 t1 t2 </think> t3 ... t5 = 7 tokens; the reasoning parser splits them at </think>
    "reasoning": (
        {"model": MODEL, "input": ASK, "max_output_tokens": 7, "reasoning": {"effort": "high"}},
        {"kinds": ["reasoning", "message"], "reasoning": "t0 t1 t2 ", "text": "t3 t4 t5 ", "status": "incomplete",
         "input": 8 + 5, "output": 7},
    ),
    # no `reasoning` effort: SGLang's template default opens thinking; ours asks the ingress' default level (medium),
    # which the engine sends as reasoning_effort, so thinking is on too. summary mirrors the trace (summary events).
    "default reasoning with summary": (
        {"model": MODEL, "input": ASK, "max_output_tokens": 5, "reasoning": {"summary": "auto"}},
        {"kinds": ["reasoning", "message"], "reasoning": "t0 t1 t2 ", "text": "t3 ", "status": "incomplete",
         "input": 8 + 5, "output": 5},
    ),
    # thinking on with tools: the double calls at once (its tools rule comes first); with a tool parser active the
    # qwen3 reasoning parser ends the reasoning at <tool_call>, so there is no reasoning item
    "tools with thinking": (
        {"model": MODEL, "input": ASK, "max_output_tokens": 10, "reasoning": {"effort": "high"}, "tools": [RUN_TESTS]},
        {"kinds": ["function_call"], "calls": [("run_tests", {"count": 10})], "status": "completed", "output": 8},
    ),
}
# A function tool that does not say `strict`: the difference rule `tools` names (test_a_function_tool_without_strict).
NO_STRICT = {"model": MODEL, "input": ASK, "max_output_tokens": 10, "reasoning": {"effort": "none"},
             "tools": [{key: value for key, value in RUN_TESTS.items() if key != "strict"}]}  # fmt: skip
# A developer message on a template that drops system turns that are not first (the double's, as SGLang's own
# detect_inline_system_support finds): the difference rule `request` names (module test below).
DEVELOPER = {"model": MODEL, "instructions": "Be brief.", "max_output_tokens": 4, "reasoning": {"effort": "none"},
             "input": [{"role": "developer", "content": "Use pytest."}, {"role": "user", "content": ASK}]}


class _Timer:
    """The ingress' request metrics (metrics.RequestTimer), which sse_events only reports to."""

    def tokens(self, count):
        pass

    def finish(self, reason, usage):
        pass


class _Call:
    """The replica call as the ingress holds it (Ray's response generator): iterated, cancelled on a failure."""

    def __init__(self, chunks):
        self._chunks = chunks

    def __anext__(self):
        return self._chunks.__anext__()

    def cancel(self):
        asyncio.ensure_future(self._chunks.aclose())


def generate_request(chat: dict) -> GenerateRequest:
    """The GenerateRequest the ingress builds from a chat body (ingress.build_request's fields that a Responses chat
    body can set; routing and admission fields left out: nothing here routes)."""
    parsed = ChatCompletionRequest.model_validate(chat)
    messages = [ChatMessage(role=m.role, content=m.text(), **m.tool_fields()) for m in parsed.messages]
    response_format = parsed.response_format
    return GenerateRequest(
        request_id="chatcmpl-" + uuid.uuid4().hex[:24],
        messages=messages,
        max_tokens=parsed.max_completion_tokens or parsed.max_tokens,
        temperature=parsed.temperature,
        top_p=parsed.top_p,
        top_k=parsed.top_k,
        min_p=parsed.min_p,
        stop=parsed.stop_list(),
        reasoning_level=reasoning_level_of(chat, default=DEFAULT_LEVEL),
        tools=parsed.tool_dicts(),
        tool_choice=parsed.tool_choice if parsed.tools else None,
        parallel_tool_calls=parsed.parallel_tool_calls if parsed.tools else None,
        stream=parsed.stream is True,
        response_format=None if response_format is None or response_format.type == "text"
        else response_format.model_dump(exclude_none=True),
        frequency_penalty=parsed.frequency_penalty or 0.0,
        presence_penalty=parsed.presence_penalty or 0.0,
        repetition_penalty=parsed.repetition_penalty,
    )  # fmt: skip


def frames(sse: str) -> list[dict]:
    """The JSON payloads of an SSE text's `data:` lines, in order."""
    return [json.loads(line[len("data: "):]) for block in sse.split("\n\n") for line in block.splitlines()
            if line.startswith("data: ")]  # fmt: skip


async def ours(engine: SGLangEngine, body: dict) -> tuple[list[dict], dict]:
    """Our events and final response for a Responses body, through the engine and the ingress' stream code."""
    chat = openai_responses.chat_body(body)
    request = generate_request(chat)
    chunks = engine.generate(request)
    first = await chunks.__anext__()
    reasoning = body.get("reasoning")  # the summary flag as ingress.serve_responses reads it
    summary_asked = isinstance(reasoning, dict) and reasoning.get("summary") is not None
    translator = openai_responses_stream.ResponseStream(openai_responses.echo(body), summary=summary_asked)
    stream = chat["stream_options"]
    events = responses.sse_events(_Call(chunks), first, request, MODEL, True, stream["include_usage"],
                                  stream["continuous_usage_stats"], _Timer(), time.monotonic() + 60)  # fmt: skip
    out = []
    async for event in events:
        out += translator.feed(event)
    assert translator.done
    return frames("".join(out)), translator.response()


async def sglangs(http: httpx.AsyncClient, base: str, body: dict) -> tuple[list[dict], dict]:
    """SGLang's events and non-streamed response for the same body. SGLang generates max_output_tokens - 2 tokens
    (module docstring, `max tokens`), so it is asked for 2 more: the double then writes the same N tokens."""
    asked = {**body, "max_output_tokens": body["max_output_tokens"] + 2}
    answer = await http.post(f"{base}/v1/responses", json=asked)
    assert answer.status_code == 200, answer.text
    streamed = await http.post(f"{base}/v1/responses", json={**asked, "stream": True})
    assert streamed.status_code == 200, streamed.text
    return frames(streamed.text), answer.json()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Every body both ways through one double (one engine start for the module). The double takes 20 ms per verify
    step (SGLANG_DOUBLE_STEP_S), so both streams arrive in several pieces, as a model's would."""
    config = config_factory(tmp_path_factory.mktemp("responses"))(env={"SGLANG_DOUBLE_STEP_S": "0.02"})
    bodies = {name: body for name, (body, _) in CASES.items()} | {"no strict": NO_STRICT,
                                                                   "developer": DEVELOPER}  # fmt: skip

    async def main():
        engine = SGLangEngine(config, launcher=double_launcher)
        await engine.start()
        results = {}
        try:
            async with httpx.AsyncClient(timeout=60) as http:
                for name, body in bodies.items():
                    (events, answer), (our_events, our_response) = (
                        await sglangs(http, engine._supervisor.base_url, body), await ours(engine, body))
                    results[name] = {"events": events, "json": answer, "our_events": our_events,
                                     "ours": our_response}  # fmt: skip
        finally:
            await engine.stop()
        return results

    return run(main())


def arguments(text: str):
    """A call's arguments parsed; a cut-off call's text, which is not JSON, as it is."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def item_summary(item: dict) -> dict:
    """What is compared of an output item (module docstring): its id and call_id are each side's own."""
    if item["type"] == "message":
        return {"type": "message", "phase": item.get("phase"), "status": item["status"],
                "text": "".join(part["text"] for part in item["content"])}  # fmt: skip
    if item["type"] == "reasoning":
        return {"type": "reasoning", "status": item["status"], "content": [part["text"] for part in item["content"]],
                "summary": [part["text"] for part in item["summary"]]}  # fmt: skip
    return {"type": item["type"], "status": item["status"], "name": item["name"],
            "arguments": arguments(item["arguments"])}  # fmt: skip


def summary(response: dict) -> dict:
    """What is compared of a final response: the items, status, incomplete_details and OpenAI's token counts (the
    echoed settings are each side's reading of the request and not compared; cached_tokens: module docstring)."""
    usage = response["usage"]
    return {"status": response["status"], "incomplete_details": response["incomplete_details"],
            "output": [item_summary(item) for item in response["output"]],
            "usage": {key: usage[key] for key in ("input_tokens", "output_tokens", "total_tokens")}}  # fmt: skip


def event_outline(events: list[dict]) -> list[tuple]:
    """The event types in order with their output_index, each run of deltas of one kind as one entry with its
    joined text (module docstring, `deltas`)."""
    outline: list[tuple] = []
    for event in events:
        kind, where = event["type"], event.get("output_index")
        if kind.endswith(".delta") and outline and outline[-1][:2] == (kind, where):
            outline[-1] = (kind, where, outline[-1][2] + event["delta"])
        elif kind.endswith(".delta"):
            outline.append((kind, where, event["delta"]))
        else:
            outline.append((kind, where))
    return outline


NAMES = list(CASES)


@pytest.mark.parametrize("name", NAMES)
def test_the_double_writes_what_its_rules_say(served, name):
    """Ours, against the values worked out by hand from double_model.py's rules (CASES)."""
    expected = CASES[name][1]
    got = summary(served[name]["ours"])
    assert [item["type"] for item in got["output"]] == expected["kinds"]
    texts = {item["type"]: item for item in got["output"]}
    if "text" in expected:
        assert texts["message"]["text"] == expected["text"]
    if "reasoning" in expected:
        assert texts["reasoning"]["content"] == [expected["reasoning"]]
    calls = [(item["name"], item["arguments"]) for item in got["output"] if item["type"] == "function_call"]
    assert calls == expected.get("calls", [])
    assert got["status"] == expected["status"]
    cut_off = expected["status"] == "incomplete"
    assert got["incomplete_details"] == ({"reason": "max_output_tokens"} if cut_off else None)
    if "input" in expected:
        assert got["usage"]["input_tokens"] == expected["input"]
    assert got["usage"]["output_tokens"] == expected["output"]


@pytest.mark.parametrize("name", NAMES)
def test_final_response_matches_sglangs_stream(served, name):
    """Ours (stream and non-streamed answer are the same response) against the response SGLang's stream ends with."""
    result = served[name]
    assert summary(result["ours"]) == summary(result["events"][-1]["response"])
    assert result["our_events"][-1]["response"] == result["ours"]


@pytest.mark.parametrize("name", NAMES)
def test_final_response_matches_sglangs_non_streamed_answer(served, name):
    result = served[name]
    theirs, ours_ = summary(result["json"]), summary(result["ours"])
    if name == "call cut off":  # module docstring, cut-off call: SGLang's non-streamed answer closes the object
        assert [item["arguments"] for item in result["json"]["output"]] == ['{"count": 5}']
        assert [item["arguments"] for item in result["ours"]["output"]] == ['{"count": 5']
        theirs = summary(result["events"][-1]["response"])  # SGLang's stream, which ours matches in full
    assert ours_ == theirs


@pytest.mark.parametrize("name", NAMES)
def test_stream_event_types_match_sglangs(served, name):
    """The event types in order (runs of deltas as one, with their text: module docstring), numbered from 0; and each
    item as it closes (output_item.done), phase included. The items of output_item.added are not compared: SGLang
    holds a tool-enabled request's message events back and names the phase there, ours names it when the message
    closes (openai_responses_stream.py rule `stream`)."""
    theirs, ours_ = served[name]["events"], served[name]["our_events"]
    assert event_outline(ours_) == event_outline(theirs)
    for events in (theirs, ours_):
        assert [event["sequence_number"] for event in events] == list(range(len(events)))
    done = [[item_summary(event["item"]) for event in events if event["type"] == "response.output_item.done"]
            for events in (theirs, ours_)]  # fmt: skip
    assert done[1] == done[0]


@pytest.mark.parametrize("name", NAMES)
def test_usage_is_openais_then_ours(served, name):
    """Both usages have OpenAI's fields; SGLang's input_tokens_details adds cache_write_tokens (always 0 here), ours
    adds the speculation fields after OpenAI's (the double runs with the drafter: path "speculative"), which SGLang's
    has none of. cached_tokens is not compared (module docstring)."""
    theirs, ours_ = served[name]["json"]["usage"], served[name]["ours"]["usage"]
    openai = ["input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"]
    assert list(theirs) == openai and theirs["input_tokens_details"]["cache_write_tokens"] == 0
    assert list(ours_) == openai + list(openai_responses_stream.SPECULATION)
    assert list(ours_["input_tokens_details"]) == ["cached_tokens"]
    assert ours_["path"] == "speculative" and ours_["verify_steps"] >= 1
    assert ours_["total_tokens"] == ours_["input_tokens"] + ours_["output_tokens"]


@pytest.mark.parametrize("name", NAMES)
def test_reasoning_tokens_match_sglangs(served, name):
    """SGLang's scheduler counts the tokens up to and including </think> (every token when it never comes); its chat
    stream carries the count, the engine keeps it (engines/sglang/mapping.py rule `reasoning`) and the chat usage
    names it under completion_tokens_details: "t0 t1 t2 </think> t3 ..." is 4 on both sides."""
    theirs, ours_ = served[name]["json"]["usage"], served[name]["ours"]["usage"]
    assert ours_["output_tokens_details"] == theirs["output_tokens_details"]
    if name == "reasoning":
        assert ours_["output_tokens_details"] == {"reasoning_tokens": 4}


def test_a_function_tool_without_strict(served):
    """Rule `tools`: ours sends `strict` only when given (a tool reads as the same tool sent as a chat request), and
    SGLang's chat Function drops a strict it was not given; SGLang's ResponseTool defaults strict to False and its
    template renders '"strict": false': the tool's JSON line there ends `"integer"}}}, "strict": false},
    "defer_loading": null}` where ours ends `"integer"}}}}, "defer_loading": null}`, 2 tokens more (' "strict":'
    ' false},'). The call is the same."""
    result = served["no strict"]
    assert summary(result["ours"])["output"] == summary(result["json"])["output"]
    assert result["json"]["usage"]["input_tokens"] == result["ours"]["usage"]["input_tokens"] + 2


def test_a_developer_message_on_a_template_without_inline_system_turns(served):
    """The double's template renders only a first system turn (SGLang's detect_inline_system_support says False for
    it), so SGLang's Responses serving merges the instructions and the developer message into one leading system
    turn, "Be brief.\n\nDeveloper instructions:\nUse pytest.", 4 tokens more than "Be brief." ("\n\nDeveloper"
    " instructions:" "\nUse" " pytest."). Ours builds the same one system message for every pool (rule `request`),
    so the model sees the developer text on both sides: the same prompt and the same answer."""
    result = served["developer"]
    assert summary(result["ours"])["output"] == summary(result["json"])["output"]
    assert result["ours"]["usage"]["input_tokens"] == result["json"]["usage"]["input_tokens"] == 6 + 4 + 8 + 7
