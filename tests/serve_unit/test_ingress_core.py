"""IngressCore's checks without a cluster: authentication, model name, routing, tools."""

import asyncio
from pathlib import Path

import pytest
from starlette.requests import Request

from ray_dspine.config import AppConfig
from ray_dspine.serve.errors import ApiError
from ray_dspine.serve.ingress import IngressCore

REPO = Path(__file__).resolve().parents[2]


class NoMetrics:
    pass


def config(**server):
    return AppConfig.model_validate(
        {
            "server": {"api_key_env": "DSPINE_UNIT_KEY", **server},
            "pools": [{"name": "spec", "engine": {"kind": "embedded"}}, {"name": "ar", "engine": {"kind": "embedded", "speculative": False}}],
            "traffic": {"default_reasoning_level": "none", "rules": [
                {"reasoning_levels": ["none", "low", "medium"], "pool": "spec"},
                {"reasoning_levels": ["high", "xhigh"], "pool": "ar"}]},
        }
    )


def request(headers=None, body=b"{}"):
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw}, receive)


def core(**server):
    return IngressCore(config(**server), {"spec": object(), "ar": object()}, metrics=NoMetrics())


def test_api_key_required_when_env_set(monkeypatch):
    monkeypatch.setenv("DSPINE_UNIT_KEY", "s3cret")
    ingress = core()
    with pytest.raises(ApiError) as refused:
        ingress.authenticate(request({"authorization": "Bearer wrong"}))
    assert refused.value.status == 401
    ingress.authenticate(request({"authorization": "Bearer s3cret"}))


def test_unknown_model_is_404_naming_model():
    with pytest.raises(ApiError) as err:
        core().check_model("gpt-9")
    assert err.value.status == 404 and err.value.param == "model"


def test_reasoning_level_and_forced_pool():
    ingress = core()
    _level, _session, pool, arm = ingress.route(request(), {"reasoning_effort": "xhigh", "messages": [{"role": "user", "content": "x"}]}, None)
    assert (pool, arm) == ("ar", "control")
    _level, _session, pool, arm = ingress.route(request({"x-dspine-pool": "spec"}), {"reasoning_effort": "xhigh", "user": "u1"}, None)
    assert (pool, arm) == ("spec", "spec")
    with pytest.raises(ApiError) as err:
        ingress.route(request({"x-dspine-pool": "nope"}), {"user": "u1"}, None)
    assert err.value.param == "x-dspine-pool"


def test_body_too_large_and_not_json():
    ingress = core(max_request_bytes=1024)
    with pytest.raises(ApiError) as big:
        asyncio.run(ingress.read_json(request(body=b"x" * 2000)))
    assert big.value.status == 413
    with pytest.raises(ApiError) as bad:
        asyncio.run(ingress.read_json(request(body=b"[1, 2]")))
    assert bad.value.status == 400


def test_sglang_pool_gets_tools_tool_choice_and_json_schema():
    from ray_dspine.config_io import load_app_configs

    [(_, prod)] = load_app_configs(REPO / "clusters" / "prod.yaml")
    ingress = IngressCore(prod, {pool.name: object() for pool in prod.pools}, metrics=NoMetrics())
    tools = [{"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object"}}}]
    schema = {"type": "json_schema", "json_schema": {"name": "plan", "schema": {"type": "object"}}}
    body = {"model": prod.server.served_model_name, "messages": [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1 failed"}],
        "tools": tools, "tool_choice": "auto", "parallel_tool_calls": False, "response_format": schema,
        "frequency_penalty": 0.2}
    typed, _ = ingress.build_request(body, request({"x-session-id": "s1"}), chat=True)
    assert prod.pool(typed.pool).engine.kind == "sglang"
    assert (typed.tools, typed.tool_choice, typed.parallel_tool_calls) == (tools, "auto", False)
    assert typed.response_format == schema and typed.frequency_penalty == 0.2
    assert typed.messages[2].model_dump(exclude_none=True) == {"role": "tool", "content": "1 failed", "tool_call_id": "c1"}


def test_sampling_fields_left_out_stay_unset_and_sglangs_own_fields_are_carried():
    from ray_dspine.config_io import load_app_configs

    [(_, prod)] = load_app_configs(REPO / "clusters" / "prod.yaml")
    ingress = IngressCore(prod, {pool.name: object() for pool in prod.pools}, metrics=NoMetrics())
    base = {"model": prod.server.served_model_name, "messages": [{"role": "user", "content": "fix it"}]}
    typed, _ = ingress.build_request(base, request(), chat=True)
    # left out: None, so SGLang applies the model's generation_config (rule `omitted`)
    assert (typed.temperature, typed.top_p, typed.top_k, typed.min_p, typed.repetition_penalty) == (None,) * 5
    asked = {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05,
             "min_tokens": 4, "ignore_eos": True, "stop_token_ids": [151645], "stop_regex": ["END$"],
             "no_stop_trim": True, "skip_special_tokens": False, "continue_final_message": True, "regex": "[a-z]+",
             "max_tokens": 64}
    typed, _ = ingress.build_request({**base, **asked}, request(), chat=True)
    assert {name: getattr(typed, name) for name in asked} == asked


def test_the_prompt_estimate_counts_the_tools_the_template_will_render():
    ingress = core()
    read = [{"type": "function", "function": {"name": "read"}}]  # json.dumps: 52 characters

    def estimate(**fields):
        body = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "x" * 392}], **fields}
        typed, _ = ingress.build_request(body, request(), chat=True)
        return typed.estimated_prompt_tokens

    # the conversation's canonical text: "user", a separator, 392 x, three separators and a newline = 400 characters
    assert estimate() == 400 // 4 + 1 == 101
    assert estimate(tools=read) == (400 + 52) // 4 + 1 == 114
    assert estimate(tools=read, tool_choice="none") == 101  # no template renders them
