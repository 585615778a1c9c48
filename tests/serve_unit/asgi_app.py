"""The real FastAPI app of the ingress deployment, served in-process over ASGI with fake pool handles.

`serve.ingress` binds the deployment's route methods to the replica's instance through
`serve.get_replica_context().servable_object`; here that context is replaced by one holding an `Ingress`
built around an `IngressCore` whose handles stream from `FakeReplica` (no Ray cluster).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx

from ray_dspine.config import AppConfig
from ray_dspine.engines.embedded.grammar import constraint
from ray_dspine.engines.protocol import Chunk, EngineError, GenerateRequest, Usage
from ray_dspine.serve.ingress import IngressCore
from ray_dspine.serve.replica_prompt import error_chunk, prepared

MODEL = "smollm2-135m-instruct"


def app_config(**server) -> AppConfig:
    return AppConfig.model_validate({
        "server": {"served_model_name": MODEL, "api_key_env": "DSPINE_ASGI_TEST_KEY", **server},
        "pools": [{"name": "spec", "engine": {"kind": "embedded"}},
                  {"name": "ar", "engine": {"kind": "embedded", "speculative": False}}],
        "traffic": {"default_reasoning_level": "none", "rules": [
            {"reasoning_levels": ["none", "low", "medium"], "pool": "spec"},
            {"reasoning_levels": ["high", "xhigh"], "pool": "ar"}]},
    })  # fmt: skip


class FakeTokenizer:
    """Token id i is the word "w<i>"; a vocabulary of 1000 ids; BOS is "<s>"."""

    bos_token, eos_token = "<s>", "</s>"

    def __len__(self) -> int:
        return 1000

    def decode(self, ids, skip_special_tokens=False) -> str:
        return " ".join(f"w{i}" for i in ids)


def compiles(request: GenerateRequest) -> None:
    """As the embedded engine's grammar compile (grammar.py) refuses a constraint xgrammar cannot parse (here
    without a tokenizer: xgrammar's own parsers)."""
    found = constraint(request)
    if found is None:
        return
    import xgrammar

    kind, text, param = found
    parse = {"json": xgrammar.Grammar.from_json_schema, "regex": xgrammar.Grammar.from_regex,
             "ebnf": xgrammar.Grammar.from_ebnf}[kind]  # fmt: skip
    try:
        parse(text)
    except RuntimeError as exc:
        raise EngineError(f"{param}: does not compile", status=400, param=param, code="invalid_value") from exc


class FakeEngine:
    def __init__(self):
        self._loaded = SimpleNamespace(tokenizer=FakeTokenizer())


class FakeReplica:
    """Answers every request with the words of its prompt (at most max_tokens of them), like an echo engine."""

    def __init__(self, name: str, context_tokens: int = 4096):
        self.name = name
        self.context_tokens = context_tokens
        self.engine = FakeEngine()
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest, prompt_token_ids=None):
        try:
            request = prepared(self.engine, request, prompt_token_ids)
            self.requests.append(request)
            text = request.prompt if request.messages is None else (request.messages[-1].content or "")
            # as the embedded engine's tokenizer and torch.Generator.manual_seed do, fail on what they cannot take
            for message in request.messages or []:
                (message.content or "").encode("utf-8")
            text.encode("utf-8")
            if request.seed is not None and not -(2**63) <= request.seed < 2**64:
                raise ValueError("Overflow when unpacking long")
            compiles(request)
            words = text.split() or ["."]
            if len(words) + request.max_tokens > self.context_tokens and not request.clamp_max_tokens:
                raise EngineError("prompt and max_tokens exceed the context window", param="max_tokens",
                                  code="context_length_exceeded")
        except EngineError as exc:
            yield error_chunk(exc, self.name)
            return
        out = words[: request.max_tokens]
        for index, word in enumerate(out):
            first = {"replica": self.name, "prompt_tokens": len(words), "cached_prompt_tokens": 0} if index == 0 else {}
            yield Chunk(text=word + " ", num_tokens=1, **first)
            await asyncio.sleep(0)
        usage = Usage(prompt_tokens=len(words), completion_tokens=len(out), total_tokens=len(words) + len(out))
        yield Chunk(finish_reason="length" if len(out) == request.max_tokens else "stop", usage=usage)

    async def count_tokens(self, request: GenerateRequest, anthropic_body=None) -> dict:
        """The words of every message, as generate() counts the last one's."""
        self.requests.append(request)
        return {"input_tokens": sum(len((m.content or "").split()) for m in request.messages)}

    async def load(self) -> dict:
        return {"healthy": True}

    async def describe(self) -> dict:
        return {"pool": self.name}


class FakeStream:
    def __init__(self, agen):
        self._agen = agen

    def __aiter__(self):
        return self

    def __anext__(self):
        return self._agen.__anext__()

    def cancel(self):
        pass


class _Method:
    def __init__(self, call):
        self._call = call

    def remote(self, *args):
        return self._call(*args)


class FakeHandle:
    def __init__(self, replica: FakeReplica):
        self.replica = replica
        self.generate = _Method(lambda *args: FakeStream(replica.generate(*args)))
        self.load = _Method(replica.load)
        self.count_tokens = _Method(replica.count_tokens)
        self.describe = _Method(replica.describe)

    def options(self, **_):
        return self


class NoMetrics:
    def record_refusal(self, *a):
        pass

    def record_first_chunk(self, *a):
        pass

    def start(self, *a):
        return SimpleNamespace(tokens=lambda n: None, finish=lambda *a: None)


_KEPT: list = []


def ingress_app(monkeypatch, config: AppConfig | None = None, replicas: dict | None = None):
    """(fastapi_app, core): the deployment's FastAPI app bound to an in-process Ingress."""
    from ray import serve

    from ray_dspine.serve import app as app_module

    config = config or app_config()
    replicas = replicas or {"spec": FakeReplica("spec"), "ar": FakeReplica("ar")}
    core = IngressCore(config, {name: FakeHandle(r) for name, r in replicas.items()}, metrics=NoMetrics())
    instance = object.__new__(app_module.Ingress.func_or_class)
    instance.core = core
    _KEPT.append(instance)  # the wrapper's async __del__ is Ray's to await: never collect it here
    monkeypatch.setattr(serve, "get_replica_context", lambda: SimpleNamespace(servable_object=instance))
    return app_module.fastapi_app, core


def client(app) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")
