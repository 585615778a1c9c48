"""A real local Ray Serve app whose pool runs the sglang engine, against SGLangServerDouble.

The engine launches `<python_executable> -m sglang.launch_server ...` as it would on a GPU node; here
`python_executable` is `sglang_python`, which runs the double (tests/sglang_double/sglang_double.py)
with the same flags; the double answers through SGLang 0.5.23's own HTTP routes and OpenAI layer. Its model
writes "t0 t1 ...", one word per token, 3 tokens per verify step with the drafter; when the prompt lists tools
it writes one qwen3_coder call of the first tool listed (SGLang lists only the named one when tool_choice
names one) with `count` = max_tokens: 7 pieces, then eos (8 tokens); when the prompt opens thinking it thinks
"t0 t1 t2 ", writes `</think>`, then answers. So everything between the OpenAI client and SGLang is real.
"""

import hashlib
import json
import sys
from pathlib import Path

import httpx
import openai
import pytest

from ray_dspine.config import AppConfig

pytestmark = pytest.mark.serve

HERE = Path(__file__).resolve().parent
MODEL = "qwen3.8-27b"
COUNT = {"type": "object", "properties": {"count": {"type": "integer"}}}
TOOLS = [
    {"type": "function", "function": {"name": "run_tests", "parameters": COUNT}},
    {"type": "function", "function": {"name": "read_file", "parameters": COUNT}},
]


def _artifact(folder: Path, files: dict[str, bytes]) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    pins = []
    for name, data in files.items():
        (folder / name).write_bytes(data)
        pins.append({"path": name, "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)})
    return {"uri": str(folder), "files": pins}


def _app_config(root: Path) -> AppConfig:
    engine = {
        "kind": "sglang", "served_model_name": MODEL, "speculative_algorithm": "DSPINE",
        "target": _artifact(root / "target", {"model-00001-of-00001.safetensors": b"target weights"}),
        "draft": _artifact(root / "draft", {"model.safetensors": b"draft weights"}),
        "capacity": {"gpu": "H200", "mem_fraction_static": 0.85, "mamba_strategy": "replay_ssm",
                     "draft": {"name": "DSpine", "draft_params_b": 2.03, "draft_num_layers": 5,
                               "speculative_num_draft_tokens": 16, "draft_window_tokens": 8192}},
        "python_executable": str(HERE / "sglang_python"),
        "env": {"SGLANG_DOUBLE_PYTHON": sys.executable, "SGLANG_DOUBLE_EVENTS": str(root / "events.jsonl")},
        "log_dir": str(root / "logs"), "cache_dir": str(root / "cache"),
        "startup_timeout_s": 180.0, "health_poll_s": 0.1, "load_poll_s": 0.5, "request_timeout_s": 30.0,
    }  # fmt: skip
    return AppConfig.model_validate(
        {
            "server": {"served_model_name": MODEL, "api_key_env": None},
            "pools": [{"name": "dspine", "gpu_hour_usd": 3.5, "engine": engine,
                       "deployment": {"num_replicas": 1, "num_cpus": 0.5, "num_gpus": 0}}],
            "traffic": {"default_reasoning_level": "none", "rules": [
                {"reasoning_levels": ["none", "low", "medium", "high", "xhigh"], "pool": "dspine"}]},
        }  # fmt: skip
    )


@pytest.fixture(scope="module")
def sglang_app(tmp_path_factory, local_serve_app):
    from ray_dspine.serve.app import build_app

    root = tmp_path_factory.mktemp("sglang-pool")
    return local_serve_app(build_app(_app_config(root)), "sglang-double"), root / "events.jsonl"


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def _requests_seen(events: Path) -> list[dict]:
    return [e for e in map(json.loads, events.read_text().splitlines()) if e["event"] == "request"]


def test_tool_call_comes_back_as_tool_calls(sglang_app):
    url, events = sglang_app
    answer = _client(url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "read the failing test"}], max_tokens=10,
        tools=TOOLS, tool_choice={"type": "function", "function": {"name": "read_file"}},
    )  # fmt: skip
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.id.startswith("call_") and (call.function.name, call.function.arguments) == (
        "read_file", '{"count": 10}')
    assert answer.usage.completion_tokens == 8  # 7 pieces of the call + eos
    sent = _requests_seen(events)[-1]["keys"]
    assert {"tools", "tool_choice"} <= set(sent)


def test_streamed_tool_call_assembles_from_deltas(sglang_app):
    url, _ = sglang_app
    stream = _client(url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "run the tests"}], max_tokens=9, tools=TOOLS,
        stream=True,
    )  # fmt: skip
    name, arguments, finish = None, "", None
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or []:
            name = name or delta.function.name
            arguments += delta.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    # 8 tokens (the call, then eos: a stop, which SGLang reports as tool_calls); tool_choice "auto": the first tool
    assert (name, arguments, finish) == ("run_tests", '{"count": 9}', "tool_calls")


def test_reasoning_comes_back_apart_from_content(sglang_app):
    url, _ = sglang_app
    answer = _client(url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "why does it fail?"}], max_tokens=7,
        reasoning_effort="high",
    )  # fmt: skip
    message = answer.choices[0].message
    # 7 tokens: t0 t1 t2 </think> t3 t4 t5, split at </think> by SGLang's qwen3 reasoning parser
    assert message.model_extra["reasoning_content"] == "t0 t1 t2 "
    assert message.content == "t3 t4 t5 "
    assert answer.usage.model_extra["path"] == "speculative"


def test_stop_controls_and_a_continued_message_reach_sglangs_scheduler(sglang_app):
    url, events = sglang_app
    messages = [{"role": "user", "content": "fix the test"}, {"role": "assistant", "content": "I will first"}]
    body = {"model": MODEL, "messages": messages, "max_tokens": 4, "stop_regex": ["t9$"], "no_stop_trim": True,
            "skip_special_tokens": False, "continue_final_message": True}  # fmt: skip
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    dispatched = [e for e in map(json.loads, events.read_text().splitlines()) if e["event"] == "dispatch"][-1]
    # SGLang's own OpenAI layer normalized the fields into its SamplingParams ...
    assert (dispatched["stop_regex_strs"], dispatched["no_stop_trim"], dispatched["skip_special_tokens"]) == (
        ["t9$"], True, False)  # fmt: skip
    # ... and continued the assistant's message: the generation prompt (thinking closed), then its text
    assert dispatched["prompt_tail"].endswith(
        "<|im_start|>user\nfix the test<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nI will first")


def test_what_ended_an_answer_comes_back_as_matched_stop(sglang_app):
    url, _ = sglang_app
    body = {"model": MODEL, "messages": [{"role": "user", "content": "count"}], "max_tokens": 6}
    stopped = httpx.post(f"{url}/v1/chat/completions", json={**body, "stop": ["t2"]}, timeout=60).json()
    # the double writes "t0 t1 t2 ...": "t2" completes at the third token, and SGLang cuts the text before it
    choice = stopped["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"], choice["matched_stop"]) == ("t0 t1 ", "stop", "t2")
    ran_out = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()["choices"][0]
    assert (ran_out["finish_reason"], ran_out["matched_stop"]) == ("length", None)
    # streamed, the choice that carries the finish reason carries it, and only that one
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stop": ["t2"], "stream": True},
                      timeout=60) as response:  # fmt: skip
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    choices = [choice for event in events for choice in event["choices"]]
    assert [(c["finish_reason"], c["matched_stop"]) for c in choices if "matched_stop" in c] == [("stop", "t2")]
    assert "".join(c["delta"].get("content") or "" for c in choices) == "t0 t1 "


def test_json_schema_and_penalties_reach_sglang(sglang_app):
    url, events = sglang_app
    schema = {"type": "json_schema", "json_schema": {"name": "plan", "schema": {"type": "object"}}}
    answer = _client(url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "plan the fix"}], max_tokens=4, response_format=schema,
        frequency_penalty=0.3, logit_bias={"42": -100},
    )  # fmt: skip
    assert answer.choices[0].finish_reason == "length"
    sent = set(_requests_seen(events)[-1]["keys"])
    assert {"response_format", "frequency_penalty", "logit_bias"} <= sent and "tools" not in sent
    refused = httpx.post(f"{url}/v1/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})  # fmt: skip
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "top_logprobs"


def _top(token: str, logprob: float) -> dict:
    return {"token": token, "bytes": list(token.encode()), "logprob": logprob}


def _entry(token: str, logprob: float, top: list) -> dict:
    return {**_top(token, logprob), "top_logprobs": top}


def test_log_probabilities_come_back_from_sglang(sglang_app):
    """The double gives output token i log-probability -(i + 1) / 8, and as alternatives the eos token
    `<|im_end|>` at one less and the pad token `<|endoftext|>` at two less (double_scheduler.py rule `logprobs`);
    SGLang's tokenizer manager spells each token and its OpenAI layer shapes the answer."""
    url, events = sglang_app
    body = {"model": MODEL, "messages": [{"role": "user", "content": "count"}], "max_tokens": 3, "logprobs": True,
            "top_logprobs": 2}  # fmt: skip
    top = lambda token, value: [_top(token, value), _top("<|im_end|>", value - 1)]  # noqa: E731
    expected = [_entry(f"t{i} ", -(i + 1) / 8, top(f"t{i} ", -(i + 1) / 8)) for i in range(3)]
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()
    assert answer["choices"][0]["logprobs"] == {"content": expected}
    assert answer["usage"]["completion_tokens"] == 3
    sent = _requests_seen(events)[-1]["keys"]
    assert "logprobs" in sent and "top_logprobs" in sent
    # streamed (3 tokens a verify step: one content event), the entries add up to the same list
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as response:
        streamed = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    choices = [choice for event in streamed for choice in event["choices"]]
    assert [entry for c in choices for entry in (c["logprobs"] or {}).get("content", [])] == expected
    # completions: OpenAI's parallel lists, alternatives as {token: logprob}, offsets into the text "t0 t1 t2 "
    text = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "count", "max_tokens": 3,
                                                     "logprobs": 1}, timeout=60).json()["choices"][0]  # fmt: skip
    assert text["text"] == "t0 t1 t2 "
    assert text["logprobs"] == {
        "tokens": ["t0 ", "t1 ", "t2 "], "token_logprobs": [-0.125, -0.25, -0.375],
        "top_logprobs": [{"t0 ": -0.125}, {"t1 ": -0.25}, {"t2 ": -0.375}], "text_offset": [0, 3, 6],
    }
    # `logprobs: 0` asks for no alternatives: SGLang and this stack leave top_logprobs empty
    bare = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "count", "max_tokens": 2,
                                                     "logprobs": 0}, timeout=60).json()["choices"][0]  # fmt: skip
    assert bare["logprobs"]["token_logprobs"] == [-0.125, -0.25] and bare["logprobs"]["top_logprobs"] == []
    # without logprobs, none
    plain = httpx.post(f"{url}/v1/chat/completions", json={**body, "logprobs": False, "top_logprobs": 0}, timeout=60)
    assert plain.json()["choices"][0]["logprobs"] is None
