"""Faults the client sees: error endings of cut streams, retry of unstarted work, the deadline header,
admission refusals and the router dropping a dead replica, through the real ingress app (no cluster)."""

import asyncio
import json
from types import SimpleNamespace

import pytest
from ray.exceptions import ActorDiedError, ActorUnavailableError
from ray.serve.exceptions import BackPressureError

from ray_dspine.engines.protocol import Chunk, GenerateRequest, LoadSnapshot, Usage
from ray_dspine.serve import responses
from ray_dspine.serve.admission import Admission
from ray_dspine.serve.errors import ApiError

from asgi_app import FakeReplica, app_config, client, ingress_app

MODEL = "smollm2-135m-instruct"
STOPPED = "the replica serving this request stopped (ActorDiedError); 2 tokens were sent before it stopped"


class Timer:
    def __init__(self):
        self.finished = None

    def tokens(self, n):
        pass

    def finish(self, reason, usage):
        self.finished = reason


class DyingStream:
    """Yields `chunks`, then raises `error` (as Ray's generator does when the replica's actor dies)."""

    def __init__(self, chunks, error):
        self._chunks = list(chunks)
        self._error = error
        self.cancelled = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._chunks:
            return self._chunks.pop(0)
        raise self._error

    def cancel(self):
        self.cancelled = True


REQUEST = GenerateRequest(request_id="chatcmpl-1", prompt="x", max_tokens=8)


def sse(stream, first, timer, deadline=1e18):
    async def events():
        gen = responses.sse_events(stream, first, REQUEST, "m", True, False, False, timer, deadline)
        return [e async for e in gen]

    return asyncio.run(events())


def test_a_stream_cut_by_actor_death_ends_with_error_terminal_chunk_and_done():
    timer = Timer()
    stream = DyingStream([Chunk(text="b", num_tokens=1)], ActorDiedError())
    events = sse(stream, Chunk(text="a", num_tokens=1), timer)
    assert len(events) == 5 and all(e.startswith("data: ") and e.endswith("\n\n") for e in events)
    bodies = [json.loads(e[6:]) for e in events[:4]]
    # two content events, as the replica sent them
    assert [b["choices"][0]["delta"]["content"] for b in bodies[:2]] == ["a", "b"]
    assert [b["choices"][0]["finish_reason"] for b in bodies[:2]] == [None, None]
    # the error event names the cause and the tokens sent (1 + 1)
    assert bodies[2] == {"error": {"message": STOPPED, "type": "server_error", "param": None, "code": "replica_failed"}}
    # the terminal chunk: same id, finish_reason "error"
    assert bodies[3]["id"] == "chatcmpl-1" and bodies[3]["choices"][0]["finish_reason"] == "error"
    assert events[4] == "data: [DONE]\n\n"
    assert timer.finished == "error" and stream.cancelled


@pytest.mark.parametrize(
    "error, cause",
    [
        (ActorUnavailableError("gone", None), "stopped (ActorUnavailableError)"),
        (ValueError("secret prompt text"), "failed (ValueError)"),
        (StopAsyncIteration(), "ended the stream without a finish reason"),
        # Ray turns a replica call cancelled on its side into asyncio.CancelledError; this task was not cancelled
        (asyncio.CancelledError(), "failed (CancelledError)"),
    ],
)
def test_every_other_cut_ends_the_same_way_naming_its_cause(error, cause):
    timer = Timer()
    events = sse(DyingStream([], error), Chunk(text="a", num_tokens=1), timer)
    error_event = json.loads(events[1][6:])["error"]
    assert cause in error_event["message"] and "1 tokens were sent" in error_event["message"]
    assert "secret" not in error_event["message"]  # the type only, never the exception's text
    assert json.loads(events[2][6:])["choices"][0]["finish_reason"] == "error" and events[3] == "data: [DONE]\n\n"
    assert timer.finished == "error"


def test_a_client_that_leaves_gets_no_error_ending_and_counts_as_abort():
    class Slow(DyingStream):
        async def __anext__(self):
            await asyncio.sleep(5)

    timer, seen = Timer(), []
    stream = Slow([], None)

    async def consume():
        gen = responses.sse_events(stream, Chunk(text="a", num_tokens=1), REQUEST, "m", True, False, False, timer, 1e18)
        async for event in gen:
            seen.append(event)

    async def main():
        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        task.cancel()  # what the server does when the client disconnects
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(seen) == 1 and '"error"' not in seen[0]  # the first content event only
    assert timer.finished == "abort" and stream.cancelled


def test_a_stream_past_its_deadline_ends_with_504_terminal_chunk_and_done():
    class Slow(DyingStream):
        async def __anext__(self):
            await asyncio.sleep(5)

    timer = Timer()
    import time

    events = sse(Slow([], None), Chunk(text="a", num_tokens=1), timer, deadline=time.monotonic() + 0.05)
    assert json.loads(events[1][6:])["error"]["code"] == "timeout"
    assert json.loads(events[2][6:])["choices"][0]["finish_reason"] == "error" and events[3] == "data: [DONE]\n\n"


def test_a_non_streaming_request_cut_by_actor_death_is_502_replica_failed():
    timer = Timer()
    stream = DyingStream([Chunk(text="b", num_tokens=1)], ActorDiedError())
    with pytest.raises(ApiError) as failed:
        asyncio.run(responses.collect(stream, Chunk(text="a", num_tokens=1), REQUEST, "m", True, timer, 1e18))
    assert (failed.value.status, failed.value.code, failed.value.message) == (502, "replica_failed", STOPPED)
    assert timer.finished == "error"


# -- through the ingress app -------------------------------------------------------------------------


class Recorder:
    """Metrics that remember what the ingress recorded."""

    def __init__(self):
        self.finished, self.refused = [], []

    def record_refusal(self, request, chunk):
        self.refused.append(chunk.error_status)

    def record_first_chunk(self, *a):
        pass

    def start(self, *a):
        return SimpleNamespace(tokens=lambda n: None, finish=lambda reason, usage: self.finished.append(reason))


class FlakyReplica(FakeReplica):
    """Calls listed in `dies` raise ActorDiedError after `after_chunks` chunks; the others answer normally."""

    def __init__(self, name, dies=(), after_chunks=0):
        super().__init__(name)
        self.dies, self.after_chunks, self.calls = set(dies), after_chunks, 0

    async def generate(self, request, prompt_token_ids=None):
        self.calls += 1
        call = self.calls
        sent = 0
        async for chunk in super().generate(request, prompt_token_ids):
            if call in self.dies and sent >= self.after_chunks:
                raise ActorDiedError()
            sent += 1
            yield chunk


def chat(stream=False, **extra):
    return {"model": MODEL, "messages": [{"role": "user", "content": "one two three"}], "stream": stream, **extra}


async def post(app, body, headers=None):
    async with client(app) as http:
        return await http.post("/v1/chat/completions", json=body, headers=headers or {})


def setup(monkeypatch, replica, **server):
    app, core = ingress_app(monkeypatch, app_config(**server), {"spec": replica, "ar": FakeReplica("ar")})
    core.metrics = Recorder()
    return app, core


def test_work_that_never_started_is_retried_on_another_call(monkeypatch):
    replica = FlakyReplica("spec", dies={1}, after_chunks=0)  # the first call dies before its first chunk
    app, core = setup(monkeypatch, replica)
    response = asyncio.run(post(app, chat()))
    assert response.status_code == 200 and replica.calls == 2
    assert response.json()["choices"][0]["message"]["content"] == "one two three "
    assert core.metrics.finished == ["stop"]


def test_retries_are_bounded_then_502_counted_as_error(monkeypatch):
    replica = FlakyReplica("spec", dies={1, 2, 3, 4}, after_chunks=0)
    app, core = setup(monkeypatch, replica, retry_unstarted_attempts=2)
    response = asyncio.run(post(app, chat()))
    # 1 call + 2 retries = 3 calls, then the answer names the cause
    assert replica.calls == 3 and response.status_code == 502
    assert response.json()["error"]["code"] == "replica_failed"
    assert "ActorDiedError" in response.json()["error"]["message"]
    assert core.metrics.finished == ["error"]


def test_work_that_started_is_never_retried(monkeypatch):
    replica = FlakyReplica("spec", dies={1}, after_chunks=2)  # dies after two chunks were sent
    app, core = setup(monkeypatch, replica)
    response = asyncio.run(post(app, chat(stream=True)))
    events = [line[6:] for line in response.text.split("\n\n") if line]
    assert replica.calls == 1  # no second call: its output would duplicate what was sent
    contents = [json.loads(e)["choices"][0]["delta"]["content"] for e in events[:2]]
    assert contents == ["one ", "two "]
    assert json.loads(events[2]) == {"error": {"message": STOPPED, "type": "server_error", "param": None,
                                               "code": "replica_failed"}}  # fmt: skip
    assert json.loads(events[3])["choices"][0]["finish_reason"] == "error" and events[4] == "[DONE]"
    assert len(events) == 5 and core.metrics.finished == ["error"]


@pytest.mark.parametrize("value", ["0", "-1", "soon", "1.5", ""])
def test_bad_deadline_header_is_400_naming_it(monkeypatch, value):
    app, _core = setup(monkeypatch, FakeReplica("spec"))
    response = asyncio.run(post(app, chat(), {"x-dspine-deadline-ms": value}))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "x-dspine-deadline-ms"
    assert "x-dspine-deadline-ms" in response.json()["error"]["message"]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def busy_admission(config):
    """spec: 10 completions of 0.5 s ending over 5 s (2/s) and 6 requests in flight; 1 x 2 slots."""
    clock = Clock()
    admission = Admission({"spec": 2, "ar": 2}, window_completions=32, min_completions=4, max_queue_wait_s=30.0,
                          fallback_retry_after_s=1, clock=clock)  # fmt: skip
    spec = admission.pool("spec")
    spec.begin(deadline_s=1e18).end(completed=False)
    for index in range(1, 11):
        spec.record_completion(0.5 * index, 0.5)
    for _ in range(6):
        spec.begin(deadline_s=1e18)
    clock.now = 5.0
    return admission


def test_unmeetable_deadline_is_429_with_a_truthful_retry_after(monkeypatch):
    replica = FlakyReplica("spec")
    app, core = setup(monkeypatch, replica, deadline_margin_ms=0)
    core.admission = busy_admission(core.config)
    response = asyncio.run(post(app, chat(), {"x-dspine-deadline-ms": "1000"}))
    # W_q = (6 - 2) / 2 = 2 s, S = 0.5 s: 2.5 s > 1 s; fits after 2 - (1 - 0.5) = 1.5 s -> Retry-After 2
    assert response.status_code == 429 and response.headers["retry-after"] == "2"
    assert response.json()["error"]["code"] == "deadline_unmeetable"
    assert replica.calls == 0 and core.metrics.refused == [429]
    # the same request with 3 s to spare is admitted
    assert asyncio.run(post(app, chat(), {"x-dspine-deadline-ms": "3000"})).status_code == 200


def test_ray_backpressure_is_503_with_retry_after_from_the_estimate(monkeypatch):
    class Full(FakeReplica):
        async def generate(self, request, prompt_token_ids=None):
            raise BackPressureError(num_queued_requests=4, max_queued_requests=4)
            yield  # an async generator, as the handle's stream is

    app, core = setup(monkeypatch, Full("spec"))
    core.admission = busy_admission(core.config)
    response = asyncio.run(post(app, chat()))
    # the same estimate: W_q = 2 s -> Retry-After ceil(2) = 2 (the configured fallback is 1)
    assert response.status_code == 503 and response.headers["retry-after"] == "2"
    assert core.metrics.refused == [503]


def test_an_admitted_request_that_runs_late_is_504_before_the_client_deadline(monkeypatch):
    import time

    class Slow(FakeReplica):
        async def generate(self, request, prompt_token_ids=None):
            await asyncio.sleep(10)
            yield Chunk(text="late", num_tokens=1)

    app, core = setup(monkeypatch, Slow("spec"), deadline_margin_ms=50)
    began = time.monotonic()
    response = asyncio.run(post(app, chat(), {"x-dspine-deadline-ms": "300"}))
    took = time.monotonic() - began
    # answered at 300 - 50 = 250 ms, before the client's 300 ms
    assert response.status_code == 504 and response.json()["error"]["code"] == "timeout"
    assert 0.2 <= took < 0.3, took
    assert core.metrics.finished == ["error"]


def test_admission_learns_from_what_the_ingress_serves(monkeypatch):
    app, core = setup(monkeypatch, FakeReplica("spec"))
    for _ in range(5):
        assert asyncio.run(post(app, chat(stream=True))).status_code == 200
    spec = core.admission.pool("spec")
    # 5 completions, none left in flight
    assert len(spec._completions) == 5 and spec.in_flight() == 0


# -- the router drops a dead replica at once -----------------------------------------------------------


def test_router_drops_a_dead_replica_from_its_candidates_and_its_policy():
    from ray.serve._private.common import DeploymentID, ReplicaID

    from ray_dspine.routing.ray_router import HeadroomRequestRouter

    deployment = DeploymentID(name="pool-spec", app_name="app")
    ids = {name: ReplicaID(name, deployment) for name in ("a", "b")}
    replicas = {
        rid: SimpleNamespace(replica_id=rid, routing_stats=LoadSnapshot(total_kv_tokens=10_000, free_kv_tokens=10_000,
                                                                        num_queued=0 if name == "a" else 3).model_dump())
        for name, rid in ids.items()
    }  # fmt: skip
    router = object.__new__(HeadroomRequestRouter)
    # the base class's replica set, as update_replicas leaves it
    router._replicas, router._replicas_list = dict(replicas), list(replicas.values())
    router._replica_id_set, router._queue_len_gauge_last_update = set(replicas), {}
    router.initialize_state(scorers=[{"type": "queue", "weight": 0.5}])  # queue length alone decides

    def pending(rid):
        request = GenerateRequest(request_id=rid, prompt="x", max_tokens=8, estimated_prompt_tokens=100)
        return SimpleNamespace(args=[request], metadata=SimpleNamespace(session_id="", internal_request_id="i" + rid),
                               routing_context=SimpleNamespace(should_backoff=False))  # fmt: skip

    first = asyncio.run(router.choose_replicas(router._replicas_list, pending("q1")))
    assert first[0][0].replica_id.unique_id == "a"  # the idle one
    assert router._policy.ledger.replica_of("q1") == "a"
    router.on_replica_actor_died(ids["a"])
    # gone from what Ray passes as candidates, and from the policy's ledger and the tentative table
    assert [r.replica_id.unique_id for r in router._replicas_list] == ["b"]
    assert router._policy.ledger.replica_of("q1") is None and router._tentative == {}
    second = asyncio.run(router.choose_replicas(router._replicas_list, pending("q2")))
    assert [[r.replica_id.unique_id for r in group] for group in second] == [["b"]]


def test_the_usage_event_is_untouched_by_error_handling():
    """A stream that finishes normally still ends usage, [DONE] (no error events)."""
    timer = Timer()
    usage = Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2)
    events = asyncio.run(_collect_events([Chunk(finish_reason="stop", usage=usage)], Chunk(text="a", num_tokens=1), timer))
    assert events[-1] == "data: [DONE]\n\n" and not any('"error"' in e for e in events)
    assert timer.finished == "stop"


async def _collect_events(rest, first, timer):
    gen = responses.sse_events(DyingStream(rest, StopAsyncIteration()), first, REQUEST, "m", True, True, False, timer,
                               1e18)  # fmt: skip
    return [e async for e in gen]


def test_a_completion_is_measured_by_its_time_on_the_replica():
    from ray_dspine.serve.admission import PoolAdmission
    from ray_dspine.serve.ingress import TicketedTimer

    clock = Clock()
    admission = PoolAdmission(2, 32, 1, 30.0, fallback_retry_after_s=1, clock=clock)
    finished = []
    metrics_timer = SimpleNamespace(tokens=lambda n: None, finish=lambda reason, usage: finished.append(reason))
    ticket = admission.begin(deadline_s=100.0)  # admitted at t = 0; queued in Ray until the replica took it
    clock.now = 10.0  # the first chunk arrives; the replica says it spent 0.4 s before it
    timer = TicketedTimer(metrics_timer, ticket, first_at=10.0, replica_s=0.4, clock=clock)
    clock.now = 11.0
    timer.finish("stop", None)
    # on the replica: 0.4 s before the first chunk + 1 s after it = 1.4 s (not the 11 s since admission)
    assert list(admission._completions) == [(11.0, pytest.approx(1.4))] and finished == ["stop"]
    assert admission.in_flight() == 0


# -- an outage of the pool: waiting requests are judged again ------------------------------------------


class Held(FakeReplica):
    """Holds every call before its first chunk until `release` is set (a request queued behind others)."""

    def __init__(self, name):
        super().__init__(name)
        self.release = None
        self.cancelled = 0

    async def generate(self, request, prompt_token_ids=None):
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        async for chunk in super().generate(request, prompt_token_ids):
            yield chunk


def _post_during_outage(monkeypatch, deadline_ms):
    replica = Held("spec")
    app, core = setup(monkeypatch, replica, pool_recovery_estimate_s=20.0)

    async def main():
        replica.release = asyncio.Event()
        request = asyncio.create_task(post(app, chat(stream=True), {"x-dspine-deadline-ms": deadline_ms}))
        await asyncio.sleep(0.1)  # admitted, waiting for its first chunk
        core.replicas_running({"spec": 0, "ar": 1})  # the health snapshot: spec lost its only replica
        await asyncio.sleep(0.1)
        replica.release.set()  # what is still waiting goes on (the replacement took it)
        return await request

    return asyncio.run(main()), replica, core


def test_a_waiting_request_that_cannot_outlast_the_outage_gets_503_at_once(monkeypatch):
    response, replica, core = _post_during_outage(monkeypatch, "10000")
    # nothing measured: the pool is back in about the configured 20 s, past the 10 s deadline (less 1 s margin)
    assert response.status_code == 503 and response.headers["retry-after"] == "20"
    assert response.json()["error"]["code"] == "pool_unavailable"
    assert replica.cancelled == 1 and core.metrics.refused == [503]  # its call was withdrawn from the pool


def test_a_waiting_request_with_time_to_spare_keeps_its_place(monkeypatch):
    response, replica, core = _post_during_outage(monkeypatch, "60000")
    # 20 s of recovery fits in 59 s: it waits and is served
    events = [json.loads(line[6:]) for line in response.text.split("\n\n") if line and line != "data: [DONE]"]
    assert response.status_code == 200
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events) == "one two three "
    assert replica.cancelled == 0 and core.metrics.finished == ["stop"]


def test_unstarted_work_is_not_retried_into_a_pool_that_cannot_serve_it_in_time(monkeypatch):
    class LastReplica(FakeReplica):
        """Its actor dies before the first chunk, and the health snapshot shows the pool without a replica."""

        calls = 0

        async def generate(self, request, prompt_token_ids=None):
            type(self).calls += 1
            core.replicas_running({"spec": 0, "ar": 1})
            raise ActorDiedError()
            yield  # an async generator, as the handle's stream is

    app, core = setup(monkeypatch, LastReplica("spec"), pool_recovery_estimate_s=20.0)
    response = asyncio.run(post(app, chat(), {"x-dspine-deadline-ms": "10000"}))
    # the retry is judged first: about 20 s to recovery, past the 9 s left -> 503 at once, no second call
    assert response.status_code == 503 and response.headers["retry-after"] == "20"
    assert response.json()["error"]["code"] == "pool_unavailable" and LastReplica.calls == 1
    # a request with 60 s to spare arriving now is admitted and its call made (Ray holds it until a replica is back)
    assert asyncio.run(post(app, chat(), {"x-dspine-deadline-ms": "60000"})).status_code == 502
    assert LastReplica.calls == 1 + 3  # this replica double dies every time: 1 call + 2 retries, then 502
