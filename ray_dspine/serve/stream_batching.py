"""Stream batching: a replica's chunks merged over a short interval before they cross Ray.

Every chunk a replica yields costs a Ray streaming message to the ingress, an SSE event there, an ASGI
message to the proxy and an HTTP write to the client, however many tokens it carries. At one chunk per
decode step, that per-chunk work is what the serving path spends its CPU on, and on a busy host it
delays every other request's first chunk. Ray Serve LLM merges its engine's outputs the same way
(`RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS`, 50 ms by default, its first flush at once).

Rules, for an interval T > 0 seconds over one request's stream of chunks:
  first    the first flush happens as soon as the first chunk arrives (TTFT is untouched); it passes on
           what has arrived by then, normally that one chunk.
  merge    after it, the chunks that arrive within each interval T pass on as one at the interval's end:
           text, reasoning, tool-call deltas and log-probabilities joined in order (null when no chunk has any;
           one call's consecutive deltas as one, tool_calls.py rule `join`),
           tokens summed, the finish reason, matched stop and usage of the last, and the stamps (replica,
           decode path, replica seconds) and prompt counts of the first. An interval in which nothing arrives
           passes nothing on.
  error    a chunk with an error is never merged: the chunks before it pass on first, then it alone.
  end      when the stream ends, what is pending passes on at once, without waiting out the interval;
           an exception the stream raised is raised after that.
  off      T = 0 passes every chunk on as it arrives.
  close    the stream is closed (so its engine request ends) whenever the batcher stops, the consumer
           going away included.
Complexity: O(chunks) per request; one reader task per request while T > 0.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from ..engines.protocol import Chunk
from .tool_calls import join_deltas

Sleep = Callable[[float], Awaitable[None]]


def merge_chunks(chunks: Sequence[Chunk]) -> list[Chunk]:
    """What one flush passes on for the chunks that arrived since the last (rules merge and error)."""
    out: list[Chunk] = []
    run: list[Chunk] = []
    for chunk in chunks:
        if chunk.error is None:
            run.append(chunk)
            continue
        if run:
            out.append(_merged(run))
            run = []
        out.append(chunk)
    if run:
        out.append(_merged(run))
    return out


def _merged(run: list[Chunk]) -> Chunk:
    if len(run) == 1:
        return run[0]
    head, last = run[0], run[-1]
    calls = join_deltas(delta for chunk in run for delta in (chunk.tool_calls or []))
    scored = [chunk.logprobs for chunk in run if chunk.logprobs is not None]
    return Chunk(
        text="".join(chunk.text for chunk in run),
        reasoning="".join(chunk.reasoning for chunk in run),
        tool_calls=calls or None,
        logprobs=[entry for entries in scored for entry in entries] if scored else None,
        num_tokens=sum(chunk.num_tokens for chunk in run),
        finish_reason=last.finish_reason,
        matched_stop=last.matched_stop,
        usage=last.usage,
        prompt_tokens=head.prompt_tokens,
        cached_prompt_tokens=head.cached_prompt_tokens,
        replica=head.replica,
        path=head.path,
        replica_s=head.replica_s,
    )


async def batched(
    stream: AsyncIterator[Chunk], interval_s: float, sleep: Sleep = asyncio.sleep
) -> AsyncIterator[Chunk]:
    """The stream's chunks, merged over `interval_s` (the rules above); `sleep` waits out one interval."""
    flushes = _flushes(stream, interval_s, sleep) if interval_s > 0 else None
    try:
        async for chunk in stream if flushes is None else flushes:
            yield chunk
    finally:
        if flushes is not None:
            await flushes.aclose()  # its reader stops before the stream is closed
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


async def _flushes(stream: AsyncIterator[Chunk], interval_s: float, sleep: Sleep) -> AsyncIterator[Chunk]:
    pending: list[Chunk] = []
    arrived = asyncio.Event()

    async def read() -> None:
        try:
            async for chunk in stream:
                pending.append(chunk)
                arrived.set()
        finally:
            arrived.set()  # an empty or failed stream wakes the first flush too

    reader = asyncio.create_task(read())
    try:
        await arrived.wait()
        while True:
            batch = pending[:]
            pending.clear()
            for chunk in merge_chunks(batch):
                yield chunk
            if reader.done():
                if pending:
                    continue
                reader.result()  # rule end: the stream's exception, after what it sent
                return
            await _interval_or_end(reader, interval_s, sleep)
    finally:
        if not reader.done():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # the consumer is gone: nobody to tell
                await reader


async def _interval_or_end(reader: asyncio.Task, interval_s: float, sleep: Sleep) -> None:
    """Wait out one interval, or less if the stream ends first."""
    timer = asyncio.ensure_future(sleep(interval_s))
    try:
        await asyncio.wait({reader, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
