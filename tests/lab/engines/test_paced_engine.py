"""PacedEngine (engines/paced_engine.py) around the simulated engine: a test per rule of its docstring.

The profile prefills 10,000 tokens per simulated second (0.1 ms a token) and the clock moves only when
the test says so, in 5 ms steps, so every arrival falls where the test puts it.
"""

import asyncio

import pytest

from dspine_lab.engines.paced_engine import PacedEngine
from ray_dspine.engines.prefill_pacing_config import PrefillPacingConfig
from ray_dspine.engines.protocol import GenerateRequest
from ray_dspine.engines.simulated import SimulatedEngine, SimulatedEngineConfig
from ray_dspine.engines.simulated.profile import CalibrationPoint, DecodeModel, PrefillModel, SimProfile

BLOCK = 512


def profile() -> SimProfile:
    return SimProfile(
        name="flat", gpu="none", model="none", sources=[], assumptions=[],
        calibration=CalibrationPoint(
            concurrency=1, context_tokens_per_request=0, workload="full", autoregressive_output_tok_s=1.0
        ),
        decode=DecodeModel(base_ms=10.0, per_running_ms=0.0, per_kv_token_ms=0.0),
        verify_per_token_ms=0.0,
        prefill=PrefillModel(per_token_ms=0.1),
        drafters={},
    )  # fmt: skip


class StepClock:
    """Time moves only in `run_for`; the engine's sleeps wait for it."""

    def __init__(self):
        self.now = 0.0
        self._sleepers: list[tuple[float, asyncio.Future]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, future))
        await future

    async def run_for(self, seconds: float, step: float = 0.005) -> None:
        end = self.now + seconds
        while self.now < end - 1e-12:
            self.now = min(end, self.now + step)
            due = [item for item in self._sleepers if item[0] <= self.now + 1e-12]
            self._sleepers = [item for item in self._sleepers if item not in due]
            for _, future in due:
                if not future.done():
                    future.set_result(None)
            for _ in range(10):
                await asyncio.sleep(0)


def paced_engine(clock: StepClock, **pacing) -> PacedEngine:
    config = SimulatedEngineConfig(
        drafter="none", total_kv_tokens=200_000, num_state_slots=16, prefix_block_tokens=BLOCK, time_scale=1.0
    )
    engine = SimulatedEngine(config, clock=clock, sleep=clock.sleep, profile=profile())
    settings = dict(min_uncached_tokens=4_096, piece_tokens=2_048, yield_fraction=0.5, prefill_tokens_per_s=10_000.0)
    return PacedEngine(engine, PrefillPacingConfig(**{**settings, **pacing}))


def request(rid: str, tokens: int, max_tokens: int = 2) -> GenerateRequest:
    hashes = [f"{rid}-{i}" for i in range(tokens // BLOCK)]
    return GenerateRequest(
        request_id=rid, prompt="x", max_tokens=max_tokens, estimated_prompt_tokens=tokens, prefix_hashes=hashes
    )


async def first_paced_then(clock: StepClock, *later: str) -> tuple[PacedEngine, "Client", list["Client"]]:
    """A started engine pacing "first" (8,192 tokens) since t = 0, and 8,192-token requests `later` sent at 0.1 s."""
    engine = paced_engine(clock)
    await engine.start()
    first = Client(engine, clock, request("first", 8_192))
    await clock.run_for(0.1)
    clients = [Client(engine, clock, request(rid, 8_192)) for rid in later]
    await clock.run_for(0.001)
    return engine, first, clients


class Client:
    """One request's stream, read in a task: when its first token came, and its final usage."""

    def __init__(self, engine: PacedEngine, clock: StepClock, req: GenerateRequest):
        self.first_s: float | None = None
        self.usage = None
        self.task = asyncio.ensure_future(self._read(engine, clock, req))

    async def _read(self, engine, clock, req):
        async for chunk in engine.generate(req):
            if self.first_s is None and chunk.num_tokens:
                self.first_s = clock.now
            if chunk.usage is not None:
                self.usage = chunk.usage


def test_rule_paced_pieces_then_the_request_reporting_what_neither_prefilled():
    async def main():
        clock = StepClock()
        engine = paced_engine(clock)
        await engine.start()
        long = Client(engine, clock, request("long", 8_192))
        await clock.run_for(2.0)
        await long.task
        # pieces end at 2,048 / 4,096 / 6,144 tokens (8,192 - b >= 1,024), then the request itself
        assert long.usage.prompt_tokens == 8_192 and long.usage.cached_prompt_tokens == 0
        pacing = engine.describe()["pacing"]
        assert (pacing["num_paced"], pacing["num_pieces"]) == (1, 3)
        # the engine saw hits of 2,048 + 4,096 (pieces 2 and 3) + 6,144 (the request): all owed to the pieces
        assert pacing["self_hit_tokens"] == 12_288
        counters = engine.describe()["counters"]
        assert counters["num_prefix_hit_tokens"] == 0 and counters["num_finished"] == 1
        await engine.stop()

    asyncio.run(main())


def test_rule_counters_leave_out_the_hits_the_pieces_give_each_other_and_the_request():
    async def main():
        clock = StepClock()
        engine = paced_engine(clock)
        await engine.start()
        # an earlier request leaves the long prompt's first two blocks (1,024 tokens) cached
        warm = Client(engine, clock, request("long", 1_024).model_copy(update={"request_id": "warm"}))
        await clock.run_for(0.5)
        await warm.task
        long = Client(engine, clock, request("long", 8_192))
        await clock.run_for(2.0)
        await long.task
        assert long.usage.cached_prompt_tokens == 1_024
        # pieces end at 3,072 / 5,120 / 7,168 tokens; the engine saw hits of 1,024 / 3,072 / 5,120 for them
        # and 7,168 for the request: all but 1,024 of them (the request's own, counted once) are the pieces'
        assert engine.describe()["pacing"]["self_hit_tokens"] == 1_024 + 3_072 + 5_120 + (7_168 - 1_024)
        counters = engine.describe()["counters"]
        assert counters["num_prefix_hit_tokens"] == 1_024  # the warm request hit nothing
        # prefilled once each: the warm request's 1,024, the pieces' 3 x 2,048, the request's last 1,024
        assert counters["num_prefill_tokens"] == 1_024 + 6_144 + 1_024
        await engine.stop()

    asyncio.run(main())


def test_rule_paced_hits_what_another_request_prefilled_while_the_pieces_waited():
    async def main():
        clock = StepClock()
        engine = paced_engine(clock)
        await engine.start()
        # x (8,192 tokens, no permit: sent whole) prefills 0-0.82 s; y shares x's 16 blocks and has 8 more
        x = Client(engine, clock, request("shared", 8_192).model_copy(update={"pace": False}))
        await clock.run_for(0.1)
        hashes = [f"shared-{i}" for i in range(16)] + [f"y-{i}" for i in range(16, 24)]
        y_request = GenerateRequest(
            request_id="y", prompt="x", max_tokens=2, estimated_prompt_tokens=12_288, prefix_hashes=hashes
        )
        y = Client(engine, clock, y_request)
        await clock.run_for(3.0)
        await asyncio.gather(x.task, y.task)
        # y is paced from 0 cached tokens: pieces 2,048 ... 10,240, each queued behind x. After x, the
        # pieces inside x's prefix prefill only their last block (an engine always prefills a prompt's
        # last token; the twin, its last block): 4 x 512; the piece to 10,240 prefills 2,048 past x's
        # 8,192, and y itself its last 2,048: 6,144 prefilled of 12,288, so 6,144 hit
        assert y.usage.cached_prompt_tokens == 6_144
        counters = engine.describe()["counters"]
        assert counters["num_prefix_hit_tokens"] == 6_144  # x hit nothing
        assert counters["num_prefill_tokens"] == 8_192 + 6_144
        assert engine.describe()["pacing"]["num_unpermitted"] == 1
        await engine.stop()

    asyncio.run(main())


def test_rule_arrive_a_short_request_goes_ahead_of_the_next_piece_and_load_shows_the_rest():
    async def main():
        clock = StepClock()
        engine = paced_engine(clock)
        await engine.start()
        long = Client(engine, clock, request("long", 8_192))
        await clock.run_for(0.1)  # the first piece (0.2048 s of prefill) is out
        load = engine.load()
        # unsent: 8,192 - 2,048; budget 0.5 x 0.8192 s x 10,000 tokens/s = 4,096 tokens of others' prefill
        assert (load.yielding_prefill_tokens, load.yield_budget_tokens) == (6_144, 4_096)
        assert load.pending_prefill_tokens >= 6_144
        short = Client(engine, clock, request("short", 1_024))
        await clock.run_for(0.001)
        assert engine.load().yield_budget_tokens == 3_072  # the short one was let in
        await clock.run_for(2.0)
        await asyncio.gather(long.task, short.task)
        # the short one starts when the first piece ends (0.2048 s) and prefills 0.1024 s: before the
        # 0.8192 s the whole prompt would have kept it waiting
        assert short.first_s == pytest.approx(0.31, abs=0.03)
        assert long.first_s > short.first_s
        await engine.stop()

    asyncio.run(main())


def test_rule_arrive_holds_a_long_prompt_until_the_paced_one_is_sent_then_paces_it():
    async def main():
        clock = StepClock()
        engine, first, (second,) = await first_paced_then(clock, "second")
        assert engine.pacer.held == ("second",)
        assert engine.load().yielding_prefill_tokens == 6_144 + 8_192
        await clock.run_for(4.0)
        await asyncio.gather(first.task, second.task)
        pacing = engine.describe()["pacing"]
        assert (pacing["num_paced"], pacing["num_held"], pacing["num_pieces"]) == (2, 1, 6)
        assert second.first_s > first.first_s
        assert engine.load().yielding_prefill_tokens == 0
        await engine.stop()

    asyncio.run(main())


def test_rule_withdrawn_a_held_request_leaves_the_hold_and_a_paced_one_releases_the_held():
    async def main():
        clock = StepClock()
        engine, first, (second, third) = await first_paced_then(clock, "second", "third")
        assert engine.pacer.held == ("second", "third")
        third.task.cancel()
        await clock.run_for(0.001)
        assert engine.pacer.held == ("second",)
        first.task.cancel()  # the paced one goes: the held one is paced now
        await clock.run_for(0.001)
        assert engine.pacer.active is not None and engine.pacer.active.request_id == "second"
        await clock.run_for(3.0)
        await second.task
        assert second.usage.cached_prompt_tokens == 0  # its own blocks: nothing cached before its pieces
        await engine.stop()

    asyncio.run(main())


def test_rule_arrive_a_long_prompt_without_the_routers_permit_is_sent_whole():
    async def main():
        clock = StepClock()
        engine = paced_engine(clock)
        await engine.start()
        load = engine.load()
        # what the router judges "long" by, and the budget its ledger expects a newly paced prompt to give
        assert (load.pacing_min_uncached_tokens, load.pacing_yield_fraction) == (4_096, 0.5)
        whole = Client(engine, clock, request("long", 8_192).model_copy(update={"pace": False}))
        await clock.run_for(2.0)
        await whole.task
        pacing = engine.describe()["pacing"]
        assert (pacing["num_paced"], pacing["num_pieces"], pacing["num_unpermitted"]) == (0, 0, 1)
        # prefilled in one pass: its first token at 0.8192 s of prefill, plus one decode step (10 ms)
        assert whole.first_s == pytest.approx(0.83, abs=0.01)
        await engine.stop()

    asyncio.run(main())


def test_rule_paced_a_failing_piece_ends_the_pacing_and_the_request_is_sent_whole():
    class RefusedPieces(SimulatedEngine):
        def piece_request(self, request, prefix_tokens):
            # a prefix the engine refuses at once (more tokens than its KV pool holds)
            return super().piece_request(request, prefix_tokens).model_copy(update={"estimated_prompt_tokens": 10**9})

    async def main():
        clock = StepClock()
        config = SimulatedEngineConfig(
            drafter="none", total_kv_tokens=200_000, num_state_slots=16, prefix_block_tokens=BLOCK, time_scale=1.0
        )
        inner = RefusedPieces(config, clock=clock, sleep=clock.sleep, profile=profile())
        engine = PacedEngine(inner, PrefillPacingConfig(min_uncached_tokens=4_096, piece_tokens=2_048))
        await engine.start()
        long = Client(engine, clock, request("long", 8_192))
        await clock.run_for(2.0)
        await long.task
        assert long.usage is not None and long.usage.prompt_tokens == 8_192 and long.usage.cached_prompt_tokens == 0
        pacing = engine.describe()["pacing"]
        assert (pacing["num_paced"], pacing["num_pieces"]) == (1, 0) and engine.pacer.active is None
        # prefilled whole from 0 s: 0.8192 s, then one decode step
        assert long.first_s == pytest.approx(0.83, abs=0.01)
        await engine.stop()

    asyncio.run(main())
