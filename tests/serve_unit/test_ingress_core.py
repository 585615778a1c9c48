"""IngressCore's checks without a cluster: authentication, model name, routing, tools."""

import asyncio

import pytest
from starlette.requests import Request

from ray_dspine.config import AppConfig
from ray_dspine.serve.errors import ApiError
from ray_dspine.serve.ingress import IngressCore


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
