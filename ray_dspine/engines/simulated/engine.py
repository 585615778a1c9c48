"""The simulated engine in real time: a thin asyncio driver around SimReplicaCore.

Rule: simulated time s and wall time w are tied by s = (clock() - clock_at_start) / time_scale.
One background task loops: complete every step due by s, hand its events to the requests' queues,
then sleep (next_event_s - s) * time_scale wall seconds, or wait for a submit when idle. A submit
never makes a running step end sooner (steps are not preempted), so sleeping is never too long.
A request's stream ends with one chunk carrying finish_reason and usage; closing the stream early
(client disconnect) cancels the request in the core, which frees its memory at once.
If the loop falls behind (a busy CPU), simulated time still runs on: events come late, in order,
with the simulated timeline unchanged.
load() first brings the core up to the present (completing due steps, dispatching their events), so a
report made while the driver sleeps through a long prefill counts that prefill's progress so far, as a
chunked-prefill engine's report would; without it the core's clock stops at the step's start and the
report repeats the whole prefill until the step ends.
Thread rule: the core, the driver and the streams' asyncio queues belong to the event loop that ran
start(); load() advances the core and wakes streams, so it runs only on that loop's thread and refuses
(RuntimeError) a call from any other thread while the driver runs: a queue woken from another thread
can lose the wake-up and leave its stream waiting forever (Ray Serve runs a replica's plain `def`
methods in worker threads; the replica's methods that call load() are `async def` for this).
load() reports in wall time, as a real engine would, because routers age reports and drain backlogs
by the wall clock: prefill_tokens_per_s = the core's rate / time_scale and decode_step_ms = the
core's step * time_scale (token and request counts are not scaled).
Parameters: time_scale in (0, 1000] wall s per simulated s.
Complexity: O(events) per wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from ray_dspine.engines.prefill_pacing_config import PIECE_MARK
from ray_dspine.engines.protocol import Chunk, EngineError, GenerateRequest, LoadSnapshot
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from ray_dspine.engines.simulated.core import SimReplicaCore
from ray_dspine.engines.simulated.profile import SimProfile, load_profile
from ray_dspine.engines.simulated.request import SimEvent, SimRequest
from ray_dspine.engines.simulated.text import simulated_text

SIMULATED_NOTE = "simulated engine: no model runs; timings and acceptance are a calibrated model, not measurements"


def to_sim_request(request: GenerateRequest) -> SimRequest:
    """Prompt tokens: the ingress estimate, else len(text) // 4; output length: max_tokens."""
    prompt_tokens = request.estimated_prompt_tokens
    if prompt_tokens <= 0:
        text = request.prompt or "".join(m.content or "" for m in request.messages or [])
        prompt_tokens = len(text) // 4
    return SimRequest(
        request_id=request.request_id,
        prompt_tokens=max(1, prompt_tokens),
        max_tokens=request.max_tokens,
        prefix_block_hashes=tuple(request.prefix_hashes),
        session_id=request.session_id,
    )


class SimulatedEngine:
    def __init__(
        self,
        config: SimulatedEngineConfig,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        profile: SimProfile | None = None,
        rng: random.Random | None = None,
    ):
        self.config = config
        self._clock = clock
        self._sleep = sleep
        self._profile = profile
        self._rng = rng
        self._core: SimReplicaCore | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._queues: dict[str, asyncio.Queue[SimEvent | None]] = {}
        self._clock_at_start = 0.0
        self._drafter_enabled = True
        self._failure: str | None = None
        self._loop_thread: int | None = None

    @property
    def core(self) -> SimReplicaCore | None:
        return self._core

    def sim_now_s(self) -> float:
        return (self._clock() - self._clock_at_start) / self.config.time_scale

    async def start(self) -> None:
        if self._task is not None:
            return
        if self._profile is None:
            self._profile = load_profile(self.config.profile)
        self._core = SimReplicaCore(self.config, self._profile, self._rng or random.Random(self.config.seed))
        self._core.set_drafter_enabled(self._drafter_enabled)
        self._clock_at_start = self._clock()
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._drive(), name="simulated-engine-driver")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for queue in self._queues.values():
            queue.put_nowait(None)

    async def _drive(self) -> None:
        assert self._core is not None and self._wake is not None
        try:
            while True:
                self._catch_up()
                next_s = self._core.next_event_s()
                if next_s is None:
                    self._wake.clear()
                    await self._wake.wait()
                else:
                    await self._sleep(max(0.0, (next_s - self.sim_now_s()) * self.config.time_scale))
        except Exception as exc:  # a broken core must not leave streams hanging; load() turns unhealthy
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        self._failure = f"{type(exc).__name__}: {exc}"
        for queue in self._queues.values():
            queue.put_nowait(None)

    def _catch_up(self) -> float:
        """Complete the core's steps due by now and hand their events to the streams; returns now (sim s)."""
        assert self._core is not None
        now_s = self.sim_now_s()
        self._dispatch(self._core.advance_to(now_s))
        return now_s

    def _dispatch(self, events: list[SimEvent]) -> None:
        for event in events:
            queue = self._queues.get(event.request_id)
            if queue is not None:
                queue.put_nowait(event)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        core, wake = self._core, self._wake
        if core is None or wake is None or self._task is None or self._failure is not None:
            raise EngineError(f"simulated engine is not running ({self._failure or 'not started'})", status=503)
        rid = request.request_id
        if rid in self._queues:
            raise EngineError(f"request id {rid!r} is already streaming", status=409, code="duplicate_id")
        sim_request = to_sim_request(request)
        now_s = self._catch_up()
        queue: asyncio.Queue[SimEvent | None] = asyncio.Queue()
        core.submit(sim_request, now_s)  # raises EngineError when it can never fit
        self._queues[rid] = queue
        wake.set()
        finished, index = False, 0
        try:
            while True:
                event = await queue.get()
                if event is None:
                    finished = True
                    yield Chunk(finish_reason="abort", error=f"simulated engine stopped ({self._failure or 'stop'})")
                    return
                if event.kind == "finished":
                    finished = True
                    yield Chunk(finish_reason=event.finish_reason, usage=event.usage)
                    return
                chunk = Chunk(text=simulated_text(rid, index, event.num_tokens), num_tokens=event.num_tokens)
                if event.kind == "first_token" and event.usage is not None:
                    chunk.prompt_tokens = event.usage.prompt_tokens
                    chunk.cached_prompt_tokens = event.usage.cached_prompt_tokens
                yield chunk
                index += event.num_tokens
        finally:
            self._queues.pop(rid, None)
            if not finished:
                core.cancel(rid)

    # What paced prefill needs (the "prefill_pacing" engine wrapper's `PieceEngine`, engines/wrappers.py).

    def engine_now_s(self) -> float:
        """Simulated GPU seconds since start."""
        return self.sim_now_s()

    def prompt_tokens(self, request: GenerateRequest) -> int:
        return to_sim_request(request).prompt_tokens

    def cached_prompt_tokens(self, request: GenerateRequest) -> int:
        """Prompt tokens the prefix cache would give the request now (0 before start)."""
        if self._core is None:
            return 0
        return self._core.cached_prompt_tokens(self.prompt_tokens(request), request.prefix_hashes)

    def piece_request(self, request: GenerateRequest, prefix_tokens: int) -> GenerateRequest:
        """The request's first `prefix_tokens` prompt tokens (whole blocks), one output token."""
        blocks = prefix_tokens // self.config.prefix_block_tokens
        return request.model_copy(
            update={
                "request_id": f"{request.request_id}{PIECE_MARK}{prefix_tokens}",
                "estimated_prompt_tokens": prefix_tokens,
                "prefix_hashes": list(request.prefix_hashes[:blocks]),
                "max_tokens": 1,
            }
        )

    def load(self) -> LoadSnapshot:
        if self._core is None:
            return LoadSnapshot(healthy=False, engine="simulated")
        if self._failure is None and self._task is not None:
            if threading.get_ident() != self._loop_thread:
                raise RuntimeError(
                    "SimulatedEngine.load() was called from a thread other than its event loop's; call it "
                    "on the loop (from an `async def` method of the replica), or the streams can stall"
                )
            try:
                self._catch_up()
            except Exception as exc:
                self._fail(exc)
        snapshot = self._core.load()
        snapshot.healthy = self._failure is None and self._task is not None
        snapshot.prefill_tokens_per_s /= self.config.time_scale
        snapshot.decode_step_ms *= self.config.time_scale
        return snapshot

    def describe(self) -> dict:
        return {
            "engine": "simulated",
            "simulated": True,
            "note": SIMULATED_NOTE,
            "config": self.config.model_dump(),
            "profile": None if self._profile is None else self._profile.model_dump(),
            "counters": None if self._core is None else self._core.counters().model_dump(),
        }

    def set_drafter_enabled(self, enabled: bool) -> None:
        self._drafter_enabled = enabled
        if self._core is not None:
            self._core.set_drafter_enabled(enabled)

    async def count_prompt_tokens(self, request: GenerateRequest, anthropic_body: dict | None = None) -> int:
        raise EngineError("simulated pools have no tokenizer, so they count no tokens", status=400,
                          code="unsupported_parameter")
