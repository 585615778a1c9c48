"""Replay a trace against an endpoint, closed-loop or on the trace's own clock.

Rules:
- Closed loop (`concurrency` = N): sessions are queued in order of their first arrival; N workers each
  take the next whole session and send its turns one after another (turn k after turn k-1 ended), so
  at most N conversations, hence N requests, are in flight. Recorded arrival times are ignored.
- Open loop (`time_scale` = s): session c starts at `t_c = a_(c,0) * s` seconds after the replay
  started; its turn k is sent at `max(a_(c,k) * s, end of turn k-1)` (a conversation still waits for
  its previous answer). s < 1 replays faster than recorded (s = 0.1: ten times faster).
  `max_in_flight` (optional) caps concurrent requests; later sends wait for a free slot.
- Warm-up: before measuring, the first W trace requests are sent one at a time with their prompts
  swapped for filler text of the same length (namespace "warmup-<request id>"), so the engine is warm but the
  replay's own prefixes are not pre-cached. Their records are kept apart and never summarised.
- Repetitions: the whole (limited) trace is replayed R times in a row; repetition r > 0 sends session
  ids suffixed `-r<r>`; each repetition's wall time is measured on its own and
  `wall_s = sum of repetition wall times` (warm-up excluded).
- Each pool (`pools` = P_1..P_m, m >= 2): the trace is replayed once per pool, all copies at the same
  time, copy j forced to P_j (x-dspine-pool) with its own closed loop of `concurrency` conversations
  (or its own open-loop schedule) and its own session ids (`<session>@<P_j>`), so every pool serves the
  same conversations under the same offered load, and each turn's answers pair up by trace request id
  (summary.py `paired_ratios`). Warm-up requests go to every pool.
- A failed request is recorded with its error and the replay goes on. Cancellation (Ctrl-C) marks the
  sink interrupted, records in-flight requests as "cancelled", and keeps everything measured so far.
Complexity: O(n) scheduling work for n requests; memory O(n) records.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from .records import RecordWriter, RequestRecord
from .traces.model import SyntheticPrompt, TraceRequest
from .traces.synthetic import BLOCK_TOKENS


class ReplayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["closed", "open"] = Field(default="closed", description="Closed loop or trace arrivals.")
    concurrency: int = Field(
        default=8, ge=1, le=100_000, description="Conversations in flight (closed loop, per pool)."
    )
    time_scale: float = Field(default=1.0, gt=0.0, description="Multiplier on recorded arrival times (open loop).")
    max_in_flight: int | None = Field(default=None, ge=1, description="Cap on concurrent requests (open loop).")
    warmup_requests: int = Field(default=0, ge=0, description="Unmeasured warm-up requests sent first.")
    repetitions: int = Field(default=1, ge=1, le=1000, description="Times the whole trace is replayed.")
    pools: list[str] = Field(
        default_factory=list, description="Replay the whole trace once on each of these pools, at the same time."
    )


class Sender(Protocol):
    async def send(
        self,
        request: TraceRequest,
        *,
        repetition: int = 0,
        run_start_s: float = 0.0,
        deliver: Callable[[RequestRecord], None] | None = None,
        pool: str | None = None,
    ) -> RequestRecord: ...


class ReplaySink:
    """Collects what a replay measured, as it is measured (so an interrupted run keeps it)."""

    def __init__(self, writer: RecordWriter | None = None, progress_total: int | None = None, progress: bool = False):
        self.records: list[RequestRecord] = []
        self.warmup_records: list[RequestRecord] = []
        self.repetition_wall_s: list[float] = []
        self.interrupted = False
        self.started_unix_s: float | None = None
        self.ended_unix_s: float | None = None
        self._writer = writer
        self._repetition_start: float | None = None
        self._progress_total = progress_total if progress else None
        self._bar = None

    def _progress(self):  # noqa: ANN202 - tqdm is imported only when a bar is drawn
        if self._bar is None and self._progress_total:
            from tqdm import tqdm

            self._bar = tqdm(total=self._progress_total, file=sys.stderr, unit="req", desc="replay", dynamic_ncols=True)
        return self._bar

    def add(self, record: RequestRecord) -> None:
        self.records.append(record)
        if self._writer is not None:
            self._writer.write(record)
        bar = self._progress()
        if bar is not None:
            bar.update(1)
            if not record.ok:
                bar.set_postfix(errors=sum(1 for r in self.records if not r.ok))

    def add_warmup(self, record: RequestRecord) -> None:
        self.warmup_records.append(record)

    def begin_repetition(self, now: float) -> None:
        self._progress()
        self._repetition_start = now

    def end_repetition(self, now: float) -> None:
        if self._repetition_start is not None:
            self.repetition_wall_s.append(now - self._repetition_start)
            self._repetition_start = None

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    @property
    def wall_s(self) -> float:
        return sum(self.repetition_wall_s)


def warmup_request(request: TraceRequest) -> TraceRequest:
    """The warm-up rule: same lengths, filler text of its own namespace, session id "warmup-<session>"."""
    num_tokens = max(1, request.prompt_tokens)
    num_blocks = -(-num_tokens // BLOCK_TOKENS)
    prompt = SyntheticPrompt(
        namespace=f"warmup-{request.request_id}", block_ids=list(range(num_blocks)), num_tokens=num_tokens
    )
    return request.model_copy(
        update={
            "messages": None,
            "prompt": None,
            "synthetic_prompt": prompt,
            "session_id": f"warmup-{request.session_id}",
        }
    )


def group_sessions(requests: list[TraceRequest]) -> list[list[TraceRequest]]:
    """Sessions in order of first arrival, each with its turns in order."""
    sessions: dict[str, list[TraceRequest]] = {}
    for request in sorted(requests, key=lambda r: r.arrival_s):
        sessions.setdefault(request.session_id, []).append(request)
    for turns in sessions.values():
        turns.sort(key=lambda r: (r.turn_index, r.arrival_s))
    return list(sessions.values())


async def _closed_loop(
    sessions: list[list[TraceRequest]], concurrency: int, send: Callable[[TraceRequest], Awaitable[None]]
) -> None:
    queue = list(reversed(sessions))

    async def worker() -> None:
        while queue:
            for request in queue.pop():
                await send(request)

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, len(sessions))):
            group.create_task(worker())


async def _open_loop(
    sessions: list[list[TraceRequest]],
    config: ReplayConfig,
    send: Callable[[TraceRequest], Awaitable[None]],
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    start = clock()
    slots = asyncio.Semaphore(config.max_in_flight) if config.max_in_flight else None

    async def wait_until(offset_s: float) -> None:
        delay = start + offset_s - clock()
        if delay > 0:
            await sleep(delay)

    async def conversation(turns: list[TraceRequest]) -> None:
        for request in turns:
            await wait_until(request.arrival_s * config.time_scale)
            if slots is None:
                await send(request)
            else:
                async with slots:
                    await send(request)

    async with asyncio.TaskGroup() as group:
        for turns in sorted(sessions, key=lambda s: s[0].arrival_s):
            await wait_until(turns[0].arrival_s * config.time_scale)
            group.create_task(conversation(turns))


async def replay(
    requests: list[TraceRequest],
    config: ReplayConfig,
    client: Sender,
    sink: ReplaySink,
    *,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> ReplaySink:
    """Run warm-up then R repetitions; every record lands in `sink` as it completes."""
    sink.started_unix_s = wall_clock()
    try:
        pools: list[str | None] = list(config.pools) or [None]
        for request in requests[: config.warmup_requests]:
            for pool in pools:
                forced = {"pool": pool} if pool is not None else {}
                await client.send(warmup_request(request), run_start_s=clock(), deliver=sink.add_warmup, **forced)
        sessions = group_sessions(requests)
        for repetition in range(config.repetitions):
            run_start = clock()
            sink.begin_repetition(run_start)

            async def copy(pool: str | None, repetition: int = repetition, run_start: float = run_start) -> None:
                forced = {"pool": pool} if pool is not None else {}

                async def send(request: TraceRequest) -> None:
                    await client.send(request, repetition=repetition, run_start_s=run_start, deliver=sink.add, **forced)

                if config.mode == "closed":
                    await _closed_loop(sessions, config.concurrency, send)
                else:
                    await _open_loop(sessions, config, send, clock, sleep)

            async with asyncio.TaskGroup() as group:
                for pool in pools:
                    group.create_task(copy(pool))
            sink.end_repetition(clock())
    except asyncio.CancelledError:
        sink.interrupted = True
        sink.end_repetition(clock())
        raise
    finally:
        sink.ended_unix_s = wall_clock()
    return sink
