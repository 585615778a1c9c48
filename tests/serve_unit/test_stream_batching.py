"""Stream batching (serve/stream_batching.py): one test per rule of its docstring.

The tests drive the stream and the interval by hand: `Feed` is an engine stream the test writes chunks
into, `Ticks` is the batcher's sleep, whose intervals end only when the test calls `tick()`.
"""

import asyncio

import pytest

from ray_dspine.engines.protocol import Chunk, Usage
from ray_dspine.serve.stream_batching import batched, merge_chunks

END = object()


class Feed:
    def __init__(self):
        self.queue: asyncio.Queue = asyncio.Queue()
        self.closed = False
        self.pulled = 0

    async def stream(self):
        try:
            while True:
                item = await self.queue.get()
                if item is END:
                    return
                if isinstance(item, Exception):
                    raise item
                self.pulled += 1
                yield item
        finally:
            self.closed = True

    def put(self, *items):
        for item in items:
            self.queue.put_nowait(item)


class Ticks:
    def __init__(self):
        self.waiting: list[asyncio.Event] = []
        self.asked_s: list[float] = []

    async def sleep(self, seconds: float) -> None:
        event = asyncio.Event()
        self.waiting.append(event)
        self.asked_s.append(seconds)
        await event.wait()

    def tick(self):
        for event in self.waiting:
            event.set()
        self.waiting.clear()


async def settle():
    for _ in range(20):
        await asyncio.sleep(0)


class Consumer:
    """Reads the batcher into `got` in the background; `error` keeps what it raised."""

    def __init__(self, stream):
        self.stream = stream
        self.got: list[Chunk] = []
        self.error: BaseException | None = None
        self.task = asyncio.ensure_future(self._run())

    async def _run(self):
        try:
            async for chunk in self.stream:
                self.got.append(chunk)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            self.error = exc


def text(n: int, label: str) -> Chunk:
    return Chunk(text=label, num_tokens=n)


async def started() -> tuple[Feed, Ticks, Consumer]:
    """A 50 ms batcher whose first chunk ("a", one token) has been passed on."""
    feed, ticks = Feed(), Ticks()
    consumer = Consumer(batched(feed.stream(), 0.05, ticks.sleep))
    feed.put(text(1, "a"))
    await settle()
    return feed, ticks, consumer


def test_rule_first_the_first_chunk_passes_before_any_interval_ends():
    async def main():
        feed, ticks = Feed(), Ticks()
        consumer = Consumer(batched(feed.stream(), 0.05, ticks.sleep))
        first = Chunk(text="a", num_tokens=1, replica="r1", replica_s=2.5, path="speculative")
        feed.put(first)
        await settle()
        got = list(consumer.got)
        feed.put(END)
        await consumer.task
        return got

    got = asyncio.run(main())
    assert [c.text for c in got] == ["a"] and got[0].replica_s == 2.5


def test_rule_merge_one_chunk_per_interval_joined_in_order():
    async def main():
        feed, ticks, consumer = await started()
        feed.put(text(3, "bcd"), Chunk(reasoning="think", num_tokens=2), text(4, "efgh"))
        await settle()
        before_tick = len(consumer.got)
        ticks.tick()
        await settle()
        after_tick = [c.model_copy() for c in consumer.got]
        ticks.tick()  # an interval in which nothing arrived
        await settle()
        after_empty = len(consumer.got)
        feed.put(END)
        await consumer.task
        return before_tick, after_tick, after_empty, ticks.asked_s

    before_tick, after_tick, after_empty, asked = asyncio.run(main())
    assert before_tick == 1
    assert [(c.text, c.reasoning, c.num_tokens) for c in after_tick] == [("a", "", 1), ("bcdefgh", "think", 9)]
    assert after_empty == 2
    assert asked[0] == 0.05


def test_rule_merge_keeps_last_finish_and_usage_and_first_stamps():
    usage = Usage(prompt_tokens=10, completion_tokens=7)
    opening = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    run = [
        Chunk(text="x", num_tokens=2, replica="r1", path="speculative", replica_s=0.5, tool_calls=[opening],
              prompt_tokens=40, cached_prompt_tokens=16),
        Chunk(num_tokens=3, tool_calls=[{"index": 0, "function": {"arguments": "{}"}}]),
        Chunk(text="y", num_tokens=2, finish_reason="stop", matched_stop="END", usage=usage),
    ]
    (merged,) = merge_chunks(run)
    assert merged.text == "xy" and merged.num_tokens == 7
    assert (merged.finish_reason, merged.matched_stop, merged.usage) == ("stop", "END", usage)
    assert (merged.replica, merged.path, merged.replica_s) == ("r1", "speculative", 0.5)
    assert (merged.prompt_tokens, merged.cached_prompt_tokens) == (40, 16)
    assert merged.tool_calls == [{**opening, "function": {"name": "f", "arguments": "{}"}}]  # one call: one delta
    assert opening["function"]["arguments"] == ""  # the chunks' deltas are not changed


def test_rule_error_chunks_are_never_merged():
    error = Chunk(finish_reason="error", error="engine step failed", error_status=500)
    out = merge_chunks([text(1, "a"), text(2, "bc"), error, text(1, "d")])
    assert [(c.text, c.num_tokens, c.error) for c in out] == [
        ("abc", 3, None), ("", 0, "engine step failed"), ("d", 1, None)
    ]
    assert merge_chunks([error]) == [error]
    assert merge_chunks([]) == []


def test_rule_end_flushes_at_once_and_raises_the_streams_exception_after():
    async def main():
        feed, ticks, consumer = await started()
        feed.put(text(2, "bc"), Chunk(finish_reason="length", usage=Usage(completion_tokens=3)), END)
        await asyncio.wait_for(consumer.task, 5.0)  # no tick: the end does not wait out the interval
        ended = consumer
        feed, ticks, consumer = await started()
        feed.put(text(1, "b"), RuntimeError("engine crashed"))
        await asyncio.wait_for(consumer.task, 5.0)
        return ended, consumer

    ended, failed = asyncio.run(main())
    assert [(c.text, c.num_tokens, c.finish_reason) for c in ended.got] == [("a", 1, None), ("bc", 2, "length")]
    assert [c.text for c in failed.got] == ["a", "b"]
    assert isinstance(failed.error, RuntimeError) and str(failed.error) == "engine crashed"


def test_rule_off_passes_every_chunk_without_sleeping():
    async def main():
        feed, ticks = Feed(), Ticks()
        consumer = Consumer(batched(feed.stream(), 0.0, ticks.sleep))
        feed.put(text(1, "a"), text(1, "b"))
        await settle()
        got = [c.text for c in consumer.got]
        feed.put(END)
        await consumer.task
        return got, ticks.asked_s

    got, asked = asyncio.run(main())
    assert got == ["a", "b"] and asked == []


@pytest.mark.parametrize("interval_s", [0.0, 0.05])
def test_rule_close_the_stream_ends_when_the_consumer_goes_away(interval_s):
    async def main():
        feed, ticks = Feed(), Ticks()
        stream = batched(feed.stream(), interval_s, ticks.sleep)
        feed.put(text(1, "a"))
        first = await stream.__anext__()
        await stream.aclose()
        await settle()
        return first, feed.closed, len(asyncio.all_tasks())

    first, closed, tasks_left = asyncio.run(main())
    assert first.text == "a" and closed
    assert tasks_left == 1  # only main(): the reader task is gone


def test_rule_close_the_stream_ends_when_the_consumers_task_is_cancelled_mid_interval():
    # Ray Serve cancels the replica's generator task when the client goes away; the batcher is then
    # waiting out an interval, and the engine stream must still be closed.
    async def main():
        feed, ticks, consumer = await started()
        feed.put(text(1, "b"))
        await settle()
        waiting = len(ticks.waiting)
        consumer.task.cancel()
        await asyncio.gather(consumer.task, return_exceptions=True)
        await settle()
        return [c.text for c in consumer.got], waiting, feed.closed, len(asyncio.all_tasks())

    got, waiting, closed, tasks_left = asyncio.run(main())
    assert got == ["a"] and waiting == 1
    assert closed and tasks_left == 1
