"""The asyncio engine: streams, final usage, time scaling, cancellation, protocol conformance."""

import asyncio
import time

import pytest

from ray_dspine.engines.protocol import ChatMessage, Engine, EngineError, GenerateRequest
from ray_dspine.engines.simulated import SimulatedEngine, SimulatedEngineConfig, to_sim_request
from ray_dspine.engines.simulated.profile import (
    CalibrationPoint,
    DecodeModel,
    DrafterProfile,
    PrefillModel,
    SimProfile,
)
from ray_dspine.engines.simulated.text import simulated_text


def round_profile() -> SimProfile:
    return SimProfile(
        name="round", gpu="none", model="none", sources=[], assumptions=[],
        calibration=CalibrationPoint(
            concurrency=1, context_tokens_per_request=0, workload="full", autoregressive_output_tok_s=1.0
        ),
        decode=DecodeModel(base_ms=20.0, per_running_ms=1.0, per_kv_token_ms=0.001),
        verify_per_token_ms=0.5,
        prefill=PrefillModel(per_token_ms=0.1),
        drafters={
            "dspine": DrafterProfile(
                draft_tokens=4, draft_ms=4.0, draft_vram_gb=4.0, accept_length={"full": 4.0},
                per_request_cv=0.0, reference_output_tok_s=1.0,
            )
        },
    )  # fmt: skip


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def request(rid="r1", max_tokens=20, prompt_tokens=400, **kw) -> GenerateRequest:
    return GenerateRequest(
        request_id=rid, prompt="hello", max_tokens=max_tokens, estimated_prompt_tokens=prompt_tokens, **kw
    )


async def collect(engine, req):
    return [chunk async for chunk in engine.generate(req)]


def test_engine_end_to_end_in_real_time_streams_chunks_and_final_usage():
    config = SimulatedEngineConfig(drafter="dspine", time_scale=0.01, seed=1, total_kv_tokens=100_000)

    async def main():
        engine = SimulatedEngine(config)
        assert isinstance(engine, Engine)
        await engine.start()
        started = time.monotonic()
        results = await asyncio.gather(*(collect(engine, request(f"r{i}", max_tokens=60)) for i in range(3)))
        wall_s = time.monotonic() - started
        sim_s = engine.sim_now_s()
        load = engine.load()
        await engine.stop()
        return results, wall_s, sim_s, load

    results, wall_s, sim_s, load = asyncio.run(main())
    for i, chunks in enumerate(results):
        body, final = chunks[:-1], chunks[-1]
        assert all(c.text and c.num_tokens >= 1 and c.usage is None for c in body)
        assert sum(c.num_tokens for c in body) == 60
        assert "".join(c.text for c in body) == simulated_text(f"r{i}", 0, 60)
        # the first chunk names the prompt (no prefix hashes: nothing cached); no later chunk does
        assert [(c.prompt_tokens, c.cached_prompt_tokens) for c in chunks[:2]] == [(400, 0), (None, None)]
        usage = final.usage
        assert final.finish_reason == "length" and final.text == ""
        assert usage.completion_tokens == 60 and usage.prompt_tokens == 400 and usage.path == "speculative"
        assert usage.verify_steps == len(body) == sum(usage.accept_histogram)
        assert usage.accept_length == pytest.approx(60 / usage.verify_steps)
        assert len(usage.accept_histogram) == 16
    # 3 prefills (~66 ms) + ~13 verify steps (~45 ms) of simulated GPU time, at 1/100 of it in wall time
    assert 0.3 < sim_s < 5.0 and wall_s < 2.0
    assert load.healthy and load.num_running == 0 and load.free_kv_tokens == 100_000 and load.drafter_active


def test_rule_wall_time_is_simulated_time_times_time_scale():
    clock = FakeClock()
    config = SimulatedEngineConfig(profile="round", workload="full", drafter="none", time_scale=2.0)

    async def main():
        engine = SimulatedEngine(config, clock=clock, sleep=clock.sleep, profile=round_profile())
        await engine.start()
        chunks = await collect(engine, request(max_tokens=3, prompt_tokens=10))
        await engine.stop()
        return chunks

    chunks = asyncio.run(main())
    # simulated: prefill 21 ms + decode 21.011 + 21.012 ms = 63.023 ms -> wall 2 * 63.023 = 126.046 ms
    assert clock.now - 100.0 == pytest.approx(0.126046)
    assert [c.num_tokens for c in chunks] == [1, 1, 1, 0]
    assert chunks[-1].usage.accept_histogram == [3]


def test_rule_closing_the_stream_cancels_and_frees_memory():
    clock = FakeClock()
    config = SimulatedEngineConfig(profile="round", workload="full", drafter="none", total_kv_tokens=1000)

    async def main():
        engine = SimulatedEngine(config, clock=clock, sleep=clock.sleep, profile=round_profile())
        await engine.start()
        stream = engine.generate(request(max_tokens=500, prompt_tokens=100))
        got = [await stream.__anext__(), await stream.__anext__()]
        during = engine.load()
        await stream.aclose()  # the client went away
        after = engine.load()
        counters = engine.core.counters()
        await engine.stop()
        return got, during, after, counters

    got, during, after, counters = asyncio.run(main())
    assert [c.num_tokens for c in got] == [1, 1]
    # prompt 100 + one KV token per decode step begun (retraction.py rule `need`): load() catches up to the
    # fake clock, which the driver's sleep has moved to the end of the second decode step, so the third has begun
    assert during.free_kv_tokens == 1000 - 100 - 3 and during.num_running == 1
    assert after.free_kv_tokens == 1000 and after.num_running == 0 and counters.num_cancelled == 1


def test_engine_refuses_before_start_and_when_the_request_can_never_fit():
    config = SimulatedEngineConfig(profile="round", workload="full", drafter="none", total_kv_tokens=100)

    async def main():
        engine = SimulatedEngine(config, profile=round_profile())
        assert not engine.load().healthy
        with pytest.raises(EngineError) as not_started:
            await collect(engine, request())
        await engine.start()
        with pytest.raises(EngineError) as too_big:
            await collect(engine, request(max_tokens=90, prompt_tokens=20))
        await engine.stop()
        return not_started.value, too_big.value

    not_started, too_big = asyncio.run(main())
    assert not_started.status == 503 and too_big.status == 400


def test_stop_ends_open_streams_with_abort():
    clock = FakeClock()
    config = SimulatedEngineConfig(profile="round", workload="full", drafter="none")

    async def main():
        engine = SimulatedEngine(config, clock=clock, sleep=clock.sleep, profile=round_profile())
        await engine.start()
        stream = engine.generate(request(max_tokens=500, prompt_tokens=10))
        await stream.__anext__()
        await engine.stop()
        return [c async for c in stream]

    rest = asyncio.run(main())
    assert rest[-1].finish_reason == "abort" and rest[-1].error


def test_set_drafter_enabled_and_describe_say_simulated():
    config = SimulatedEngineConfig(profile="round", workload="full", drafter="dspine")

    async def main():
        engine = SimulatedEngine(config, profile=round_profile())
        engine.set_drafter_enabled(False)
        await engine.start()
        chunks = await collect(engine, request(max_tokens=5, prompt_tokens=10))
        engine.set_drafter_enabled(True)
        active = engine.load().drafter_active
        described = engine.describe()
        await engine.stop()
        return chunks, active, described

    chunks, active, described = asyncio.run(main())
    assert chunks[-1].usage.path == "autoregressive" and chunks[-1].usage.accept_length == 1.0
    assert active
    assert described["simulated"] is True and "simulated" in described["note"]
    assert described["config"]["drafter"] == "dspine" and described["counters"]["num_finished"] == 1


def test_to_sim_request_estimates_prompt_tokens_and_keeps_prefix_hashes():
    with_estimate = GenerateRequest(
        request_id="a", prompt="x" * 40, max_tokens=7, estimated_prompt_tokens=123, prefix_hashes=["p0", "p1"],
        session_id="s",
    )  # fmt: skip
    sim = to_sim_request(with_estimate)
    assert (sim.prompt_tokens, sim.max_tokens, sim.prefix_block_hashes, sim.session_id) == (123, 7, ("p0", "p1"), "s")
    chat = GenerateRequest(
        request_id="b", messages=[ChatMessage(role="user", content="y" * 40), ChatMessage(role="assistant")],
        max_tokens=1,
    )  # fmt: skip
    assert to_sim_request(chat).prompt_tokens == 10  # 40 characters // 4
    assert to_sim_request(GenerateRequest(request_id="c", prompt="", max_tokens=1)).prompt_tokens == 1


def test_rule_simulated_text_depends_only_on_request_and_token_index():
    whole = simulated_text("req", 0, 10)
    assert simulated_text("req", 0, 4) + simulated_text("req", 4, 6) == whole
    assert simulated_text("other", 0, 10) != whole


def test_a_failing_core_ends_streams_with_abort_and_turns_unhealthy():
    clock = FakeClock()
    config = SimulatedEngineConfig(profile="round", workload="full", drafter="none")

    async def main():
        engine = SimulatedEngine(config, clock=clock, sleep=clock.sleep, profile=round_profile())
        await engine.start()
        stream = engine.generate(request(max_tokens=500, prompt_tokens=10))
        await stream.__anext__()

        def broken(now_s):
            raise RuntimeError("boom")

        engine.core.advance_to = broken
        rest = [c async for c in stream]
        load = engine.load()
        await engine.stop()
        return rest, load

    rest, load = asyncio.run(main())
    assert rest[-1].finish_reason == "abort" and "boom" in rest[-1].error and not load.healthy


def test_rule_load_reports_rates_in_wall_time():
    clock = FakeClock()
    config = SimulatedEngineConfig(profile="round", workload="full", drafter="none", time_scale=0.5)

    async def main():
        engine = SimulatedEngine(config, clock=clock, sleep=clock.sleep, profile=round_profile())
        await engine.start()
        load, core_load = engine.load(), engine.core.load()
        await engine.stop()
        return load, core_load

    load, core_load = asyncio.run(main())
    # the core: 1000 / 0.1 ms per token = 10,000 tokens per simulated second; one simulated second
    # lasts 0.5 wall seconds, so 20,000 per wall second; a step of d simulated ms lasts 0.5 * d wall ms
    assert core_load.prefill_tokens_per_s == pytest.approx(10_000.0)
    assert load.prefill_tokens_per_s == pytest.approx(20_000.0)
    assert core_load.decode_step_ms > 0 and load.decode_step_ms == pytest.approx(0.5 * core_load.decode_step_ms)


def test_rule_load_counts_the_progress_of_a_prefill_the_driver_is_sleeping_through():
    clock = FakeClock()
    never = asyncio.Event()

    async def stall(seconds: float) -> None:  # the driver sleeps until the prefill ends; we look before
        await never.wait()

    config = SimulatedEngineConfig(profile="round", workload="full", drafter="none", time_scale=1.0)

    async def main():
        engine = SimulatedEngine(config, clock=clock, sleep=stall, profile=round_profile())
        await engine.start()
        stream = engine.generate(request(prompt_tokens=10_000))
        first = asyncio.ensure_future(stream.__anext__())
        for _ in range(3):
            await asyncio.sleep(0)
        at_start = engine.load().pending_prefill_tokens
        clock.now += 0.51
        halfway = engine.load().pending_prefill_tokens
        first.cancel()
        await engine.stop()
        return at_start, halfway

    at_start, halfway = asyncio.run(main())
    # prefill step: 20 ms + 0.1 ms x 10,000 tokens = 1.02 s; 0.51 s in, half of it is left
    assert at_start == 10_000
    assert halfway == 5_000


def test_rule_load_refuses_a_thread_other_than_the_event_loops():
    clock = FakeClock()
    config = SimulatedEngineConfig(profile="round", workload="full", drafter="none", total_kv_tokens=1000)

    async def main():
        engine = SimulatedEngine(config, clock=clock, sleep=clock.sleep, profile=round_profile())
        await engine.start()
        on_loop = engine.load()
        with pytest.raises(RuntimeError, match="thread other than its event loop"):
            await asyncio.to_thread(engine.load)
        await engine.stop()
        after_stop = await asyncio.to_thread(engine.load)  # no driver: nothing to advance, any thread may read
        return on_loop, after_stop

    on_loop, after_stop = asyncio.run(main())
    assert on_loop.healthy and on_loop.free_kv_tokens == 1000
    assert not after_stop.healthy


def test_a_simulated_pool_counts_no_tokens():
    engine = SimulatedEngine(SimulatedEngineConfig())
    with pytest.raises(EngineError) as refused:
        asyncio.run(engine.count_prompt_tokens(request()))
    assert refused.value.status == 400
