"""A drafter launch must show speculation before it serves (supervision.py P1-P3, process.py S3/S6), and a
pool that lost its drafter says so: describe(), the dspine_drafter_fallback gauge, x-dspine-path."""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.requests import Request

from ray_dspine.config import AppConfig
from ray_dspine.engines.protocol import Chunk, GenerateRequest, LoadSnapshot, Usage
from ray_dspine.engines.sglang import SGLangEngine
from ray_dspine.engines.sglang.supervision import SupervisionStatus, probe_payload, probe_verdict, spec_details_of
from ray_dspine.serve.ingress import IngressCore
from ray_dspine.serve.replica import EngineReplica
from ray_dspine.serve.supervision_metrics import SupervisionMetrics

from sglang_double_helpers import run
from supervisor_helpers import SERVER, FakeProcess, fast_supervision, policy, script_launcher, supervisor, wait_for

SPEC_0 = "drafter probe: spec_verify_ct 0 (spec details in a 16-token greedy completion)"


# -- the rules --------------------------------------------------------------------------------------
def test_rule_probe_request_is_one_short_greedy_completion_asking_for_spec_details():
    from sglang.srt.entrypoints.openai.protocol import CompletionRequest  # SGLang 0.5.23's own request model

    payload = probe_payload("qwen3.8-27b", 16)
    assert set(payload) <= set(CompletionRequest.model_fields)  # every field is one SGLang reads
    parsed = CompletionRequest.model_validate(payload)
    assert (parsed.max_tokens, parsed.temperature, parsed.stream) == (16, 0.0, True)
    assert parsed.return_spec_tokens_details is True and parsed.model == "qwen3.8-27b"


def test_rule_p1_p2_verdicts():
    assert probe_verdict({"spec_verify_ct": 5, "spec_accept_length": 3.2}, 16, None) is None  # P1
    assert probe_verdict({"spec_verify_ct": 0, "spec_accept_length": 0.0}, 16, None) == SPEC_0  # P2
    assert probe_verdict(None, 16, None) == (
        "drafter probe: spec_verify_ct 0 (no spec details in a 16-token greedy completion)")  # P2: no sglext
    # P2b: 16 tokens in 16 verify steps is acceptance 1.0, under a floor of 1.5
    assert probe_verdict({"spec_verify_ct": 16, "spec_accept_length": 1.0}, 16, 1.5) == (
        "drafter probe: spec_accept_length 1.00 < 1.5 over 16 verify steps")
    assert probe_verdict({"spec_verify_ct": 4, "spec_accept_length": 4.0}, 16, 1.5) is None


def test_rule_spec_details_are_read_from_sglext_object_or_list():
    assert spec_details_of({"choices": [], "sglext": {"spec_tokens_details": {"spec_verify_ct": 3}}}) == {
        "spec_verify_ct": 3}
    assert spec_details_of({"sglext": {"spec_tokens_details": [{"spec_verify_ct": 2}, {"spec_verify_ct": 9}]}}) == {
        "spec_verify_ct": 2}  # n > 1: the first choice's
    assert spec_details_of({"choices": [{"text": "x"}]}) is None and spec_details_of({"sglext": {}}) is None


# -- the supervisor ---------------------------------------------------------------------------------
def _probed_supervisor(tmp_path, verdicts: list, launched: list[bool], **overrides):
    async def launcher(command, env, log_path):
        launched.append("--draft" in command)
        return FakeProcess()

    async def drafter_probe(base_url: str):
        outcome = verdicts.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return supervisor(tmp_path, launcher, drafter_probe=drafter_probe, supervision=fast_supervision(), **overrides)


def test_rule_s3_broken_drafter_relaunches_without_it_at_once(tmp_path):
    launched: list[bool] = []

    async def main():
        sup = _probed_supervisor(tmp_path, [SPEC_0], launched)
        await sup.start()
        result = (sup.state, sup.status(), sup.command)
        await sup.stop()
        return result

    state, status, command = run(main())
    assert state == "ready" and launched == [True, False] and "--draft" not in command
    assert (status.path, status.drafter_fallback, status.fallback_reason) == ("autoregressive-fallback", True, SPEC_0)
    assert (status.num_probe_failures, status.num_crashes) == (1, 0)  # a fallback, not a crash


def test_rule_s3_silent_probe_counts_as_a_crash_with_the_drafter(tmp_path):
    launched: list[bool] = []

    async def main():
        sup = _probed_supervisor(tmp_path, [ConnectionError("reset"), ConnectionError("reset")], launched,
                                 policy=policy(fallback_after_crashes=2))  # fmt: skip
        await sup.start()
        result = sup.status()
        await sup.stop()
        return result

    status = run(main())
    # two silent probes with the drafter = 2 crashes >= fallback_after_crashes (2): the third launch has none
    assert launched == [True, True, False] and (status.num_crashes, status.num_probe_failures) == (2, 0)
    assert status.fallback_reason == (
        "2 crashes with the drafter on within the crash window (last: drafter probe: no answer "
        "(ConnectionError: reset))")
    assert status.path == "autoregressive-fallback"


def test_rule_s6_operator_switch_off_is_not_a_fallback_and_switch_on_probes_again(tmp_path):
    launched: list[bool] = []

    async def main():
        sup = _probed_supervisor(tmp_path, [SPEC_0, None], launched)
        await sup.start()
        fell_back = sup.path
        sup.set_drafter_enabled(False)  # the operator takes the drafter off: plain autoregressive
        switched_off = (sup.path, sup.drafter_fallback)
        sup.set_drafter_enabled(True)  # clears the fallback and relaunches with the drafter, probed (works)
        await wait_for(lambda: sup.state == "ready" and sup.drafter_active, what="the drafter relaunch")
        result = fell_back, switched_off, sup.path, sup.fallback_reason
        await sup.stop()
        return result

    assert run(main()) == ("autoregressive-fallback", ("autoregressive", False), "speculative", None)
    assert launched == [True, False, True]


# -- the engine, the replica and the ingress --------------------------------------------------------
def _request(**fields) -> GenerateRequest:
    return GenerateRequest(request_id="r1", prompt="hello", max_tokens=4, pool="spec", arm="spec", **fields)


def test_engine_falls_back_when_its_server_does_not_speculate(make_config):
    # supervisor_server.py answers the probe with spec_verify_ct 0: the engine relaunches without the drafter
    launcher = script_launcher(SERVER, {"SUPERVISOR_SERVER_SPEC_VERIFY_CT": "0"}, argv=lambda command: command[3:])

    async def main():
        engine = SGLangEngine(make_config(), launcher=launcher)
        await engine.start()
        try:
            chunks = [chunk async for chunk in engine.generate(_request())]
            return engine.describe(), engine.supervision_status(), chunks, engine.load()
        finally:
            await engine.stop()

    described, status, chunks, load = run(main(), timeout_s=60)
    assert described["path"] == "autoregressive-fallback" and described["drafter_fallback"] is True
    assert described["fallback_reason"] == SPEC_0 and described["num_probe_failures"] == 1
    assert (described["num_launches"], described["num_crashes"]) == (2, 0)
    assert "--speculative-algorithm" not in described["command"]
    assert status.path == "autoregressive-fallback" and load.drafter_active is False and load.healthy is True
    assert chunks[-1].usage.path == "autoregressive"  # the decode path; the header tells the fallback


class StubEngine:
    """An engine whose stream and supervision status the test sets."""

    def __init__(self, status: SupervisionStatus | None, drafter_active: bool, chunks: list[Chunk]):
        self.status, self.drafter_active, self.chunks = status, drafter_active, chunks

    def load(self) -> LoadSnapshot:
        return LoadSnapshot(drafter_active=self.drafter_active)

    def supervision_status(self):
        return self.status

    async def generate(self, request):
        for chunk in self.chunks:
            yield chunk.model_copy()

    async def stop(self):
        pass


def _status(fallback: bool, state: str = "ready") -> SupervisionStatus:
    path = "autoregressive-fallback" if fallback else "autoregressive"
    return SupervisionStatus(state=state, path=path, drafter_fallback=fallback, num_crashes=2 if fallback else 0)


def test_rule_replica_stamps_the_served_path():
    usage = Usage(completion_tokens=1, verify_steps=1, accept_length=1.0, path="autoregressive")
    cases = [  # (status, drafter active, first chunk carries usage, expected x-dspine-path)
        (None, True, False, "speculative"),
        (None, False, False, "autoregressive"),  # engines without supervision: no fallback notion
        (_status(False), False, False, "autoregressive"),  # a pool without drafter, or switched off
        (_status(True), False, False, "autoregressive-fallback"),
        (_status(True), False, True, "autoregressive-fallback"),  # usage.path autoregressive, fallen back
    ]
    replica = EngineReplica.__new__(EngineReplica)
    got = []
    for status, active, with_usage, _ in cases:
        replica.engine = StubEngine(status, active, [])
        got.append(replica._served_path(Chunk(text="x", usage=usage if with_usage else None)))
    assert got == [case[-1] for case in cases]


class RecordingGauge:
    values: dict[str, float] = {}

    def __init__(self, name, description, tags):
        self.name = name

    def set(self, value, tags=None):
        RecordingGauge.values[self.name] = value


class FakeHandle:
    """A deployment handle whose `generate.remote` streams from a replica in this process."""

    def __init__(self, replica):
        self.replica, self.generate = replica, self

    def options(self, **_):
        return self

    def remote(self, request):
        return FakeStream(self.replica.generate(request))


class FakeStream:
    def __init__(self, agen):
        self._agen = agen

    def __aiter__(self):
        return self

    def __anext__(self):
        return self._agen.__anext__()

    def cancel(self):
        pass


class NoMetrics:
    def record_first_chunk(self, *args):
        pass

    def record_refusal(self, *args):
        pass

    def start(self, *args):
        return self

    def tokens(self, count):
        pass

    def finish(self, reason, usage):
        pass


def _asgi_request(body: bytes) -> Request:
    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({"type": "http", "method": "POST", "path": "/v1/completions", "headers": []}, receive)


def test_fallen_back_pool_shows_in_header_and_gauge():
    config = AppConfig.model_validate({
        "pools": [{"name": "spec", "engine": {"kind": "embedded"}}],
        "traffic": {"default_reasoning_level": "none", "rules": [{"reasoning_levels": ["none"], "pool": "spec"}]},
    })  # fmt: skip
    pool = config.pool("spec")
    chunks = [Chunk(text="w0 ", num_tokens=1),
              Chunk(finish_reason="length", usage=Usage(completion_tokens=1, verify_steps=1, accept_length=1.0))]

    async def serve(status):
        replica = EngineReplica.__new__(EngineReplica)
        replica.pool, replica.replica_id = pool, "replica-1"
        replica.engine = StubEngine(status, False, chunks)
        replica.window = type("Window", (), {"record_arrival": lambda self: None,
                                             "record_finished": lambda self, *a: None})()  # fmt: skip
        replica.metrics = type("Metrics", (), {"record": lambda self, load: None})()
        replica.supervision_metrics = SupervisionMetrics("spec", gauge=RecordingGauge)
        ingress = IngressCore(config, {"spec": FakeHandle(replica)}, metrics=NoMetrics())
        body = b'{"model": "%s", "prompt": "hello", "max_tokens": 1}' % config.server.served_model_name.encode()
        response = await ingress.serve(_asgi_request(body), chat=False)
        await replica.record_routing_stats()
        return response.status_code, response.headers["x-dspine-path"], dict(RecordingGauge.values)

    fallen = asyncio.run(serve(_status(True)))
    plain = asyncio.run(serve(_status(False)))
    config_error = asyncio.run(serve(_status(False, state="config_error")))
    assert fallen == (200, "autoregressive-fallback",
                      {"dspine_drafter_fallback": 1.0, "dspine_config_error": 0.0, "dspine_server_crashes": 2.0})
    assert plain == (200, "autoregressive",
                     {"dspine_drafter_fallback": 0.0, "dspine_config_error": 0.0, "dspine_server_crashes": 0.0})
    assert config_error[2] == {"dspine_drafter_fallback": 0.0, "dspine_config_error": 1.0, "dspine_server_crashes": 0.0}
