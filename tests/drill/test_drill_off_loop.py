"""kill.off_loop: a blocking Ray call is awaited with a bound and never holds the event loop or the process."""

import asyncio
import threading
import time

import pytest

from ray_dspine.drill.kill import off_loop


def test_returns_the_value_and_raises_the_error():
    assert asyncio.run(off_loop(lambda a, b: a + b, 2, 3, timeout_s=5)) == 5

    def boom():
        raise ConnectionError("no GCS")

    with pytest.raises(ConnectionError, match="no GCS"):
        asyncio.run(off_loop(boom, timeout_s=5))


def test_a_call_that_never_returns_times_out_without_blocking():
    release = threading.Event()
    ticks = []

    async def main():
        async def tick():  # the event loop keeps running while the call blocks
            for _ in range(3):
                ticks.append(1)
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        with pytest.raises(TimeoutError, match="no answer within 0.2 s"):
            await off_loop(release.wait, timeout_s=0.2)
        await ticker

    started = time.monotonic()
    asyncio.run(main())  # returns although the thread is still blocked: it is a daemon thread
    assert time.monotonic() - started < 2.0 and ticks == [1, 1, 1]
    release.set()
