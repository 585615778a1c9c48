"""compute.py: one thread runs the process's torch work; the engine hands it every load and step."""

import asyncio
import threading

import pytest
import torch

from ray_dspine.engines.embedded import compute
from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
from ray_dspine.engines.embedded.engine import EmbeddedEngine
from ray_dspine.engines.protocol import ChatMessage, GenerateRequest


def current_thread():
    return threading.current_thread()


def test_rule_every_call_runs_on_the_one_compute_thread():
    from_here = compute.run(current_thread)
    seen = []
    callers = [threading.Thread(target=lambda: seen.append(compute.run(current_thread))) for _ in range(3)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(10)
    assert from_here.name == compute.THREAD_NAME and from_here is not threading.current_thread()
    assert seen == [from_here] * 3  # three caller threads, one compute thread


def test_rule_result_and_exception_come_back_to_the_caller():
    assert compute.run(lambda a, b=0: a + b, 2, b=3) == 5

    def fail():
        raise ValueError("bad shape")

    with pytest.raises(ValueError, match="bad shape"):
        compute.run(fail)
    assert compute.run(lambda: 7) == 7  # the thread survives a failed call


def test_rule_a_call_from_the_compute_thread_runs_inline():
    def outer():
        return compute.run(current_thread) is current_thread(), compute.on_compute_thread()

    # a queued nested call would wait for `outer` forever; inline it returns at once
    assert compute.submit(outer).result(timeout=10) == (True, True)
    assert not compute.on_compute_thread()


def test_rule_call_awaits_without_blocking_the_loop():
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(10)
        return "done"

    async def main():
        pending = asyncio.ensure_future(compute.call(slow))
        await asyncio.to_thread(started.wait, 10)
        ticks = 0
        for _ in range(3):  # the loop keeps running while the compute thread works
            await asyncio.sleep(0)
            ticks += 1
        release.set()
        return ticks, await pending

    assert asyncio.run(main()) == (3, "done")


def test_engine_loads_sets_threads_and_steps_on_the_compute_thread(tiny):
    """Loader, prefill, single and batched verify steps: all on the compute thread, at the engine's
    thread count."""
    threads = []
    hook = tiny.model.register_forward_pre_hook(
        lambda _m, _args, kwargs: threads.append((current_thread().name, "dspine_packed_step" in kwargs)),
        with_kwargs=True,
    )
    loaded_on = []

    def loader(_config):
        loaded_on.append(current_thread().name)
        return tiny

    previous = compute.run(torch.get_num_threads)
    config = EmbeddedEngineConfig(
        model_sha256=None, dtype="fp32", num_threads=1, max_batch_requests=2, context_length_tokens=256,
        kv_budget_tokens=4096,
    )

    async def main():
        engine = EmbeddedEngine(config, loader=loader)
        await engine.start()
        count = await compute.call(torch.get_num_threads)

        async def one(i):
            request = GenerateRequest(
                request_id=f"r{i}", messages=[ChatMessage(role="user", content=f"abc abc abc {i}")], max_tokens=6,
                temperature=0.0,
            )
            return [chunk async for chunk in engine.generate(request)][-1]

        finals = await asyncio.gather(one(0), one(1))
        await engine.stop()
        return count, finals

    try:
        count, finals = asyncio.run(main())
    finally:
        hook.remove()
        compute.run(torch.set_num_threads, previous)
    assert count == 1
    assert loaded_on == [compute.THREAD_NAME]
    assert all(f.finish_reason == "length" and f.usage.completion_tokens == 6 for f in finals)
    assert {name for name, _packed in threads} == {compute.THREAD_NAME}
    assert {packed for _name, packed in threads} == {True, False}  # steps alone and packed steps both ran
