"""An engine with paced prefill in front of it: the replica-side glue of engines/prefill_pacing.py.

The pacing decisions are PrefillPacer's; this wrapper sends what they say to an engine that can tell
how much of a prompt it has cached and can be sent a prefix of a prompt (`PieceEngine`: the simulated
engine; an SGLang server would need the prompt in token ids, `/generate` with `input_ids`, to cut it
into prefixes, which its engine does not do yet).

Rules, for a request q reaching this replica (times in the engine's own seconds, `engine_now_s`, so
that the budget is in GPU seconds, as the pacer's rate is):
  arrive(q)     c = engine.cached_prompt_tokens(q);
                pacer.arrive(q, c, permitted = q.pace, now = engine_now_s): "held" -> q waits here until
                the paced prompt is sent whole, then arrives again; "paced" -> q is paced; "whole" -> q
                is sent as it is. A request without the router's permit (`pace` False,
                routing/pacing_permit.py) is never paced: sent whole, or held if long.
  paced(q)      each piece b the pacer gives: engine.piece_request(q, b) (max_tokens 1) streamed to its
                end and discarded, then piece_done. A piece that fails (an error chunk, an EngineError)
                ends the pacing early: q is sent whole. When the pacer says so, pacer.finish(q) releases
                the held requests and q is sent whole; its answer reports cached_prompt_tokens =
                hit(q) (prefill_pacing.py): what neither its pieces nor q prefilled.
  withdrawn     a stream closed early (client gone) leaves the pacer as if it had ended: a held q is
                released from the hold; a paced q finishes (releasing the held) and its piece out is
                cancelled with its stream.
  load()        the engine's snapshot with the pacer's backlog added (rule `yielding`): the engine sees
                only the piece out, so pending_prefill_tokens += yielding_prefill_tokens,
                yield_budget_tokens = what is left of the paced prompt's budget now (rule `left`), and
                pacing_min_uncached_tokens and pacing_yield_fraction = the pacer's threshold and
                share (for the router's permits and its ledger's view of a prompt placed to be paced).
  counters      describe()'s counters less the pieces: num_prefix_hit_tokens less self_hit_tokens (the
                engine's hits for paced requests and their pieces beyond each request's hit(q): the
                tokens its pieces prefilled, counted again as hits by the next piece and by q),
                num_finished less the pieces, and num_paced; the pacing's own counts under "pacing".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

from dspine_lab.engines.prefill_pacing import PacedPrefill, PrefillPacer
from ray_dspine.engines.prefill_pacing_config import PrefillPacingConfig
from ray_dspine.engines.protocol import Chunk, Engine, EngineError, GenerateRequest, LoadSnapshot


class PieceEngine(Engine, Protocol):
    """What pacing needs of an engine beyond the common protocol."""

    def engine_now_s(self) -> float: ...

    def prompt_tokens(self, request: GenerateRequest) -> int: ...

    def cached_prompt_tokens(self, request: GenerateRequest) -> int: ...

    def piece_request(self, request: GenerateRequest, prefix_tokens: int) -> GenerateRequest: ...


class PacedEngine:
    def __init__(self, engine: PieceEngine, config: PrefillPacingConfig):
        self.engine = engine
        self.pacer = PrefillPacer(config)
        self._released: dict[str, asyncio.Event] = {}
        self.num_paced = 0
        self.num_held = 0
        self.num_pieces = 0
        self.num_unpermitted = 0
        self.self_hit_tokens = 0

    async def start(self) -> None:
        await self.engine.start()

    async def stop(self) -> None:
        await self.engine.stop()

    def set_drafter_enabled(self, enabled: bool) -> None:
        self.engine.set_drafter_enabled(enabled)

    def load(self) -> LoadSnapshot:
        snapshot = self.engine.load()
        yielding = self.pacer.yielding_tokens()
        snapshot.pending_prefill_tokens += yielding
        snapshot.yielding_prefill_tokens = yielding
        snapshot.yield_budget_tokens = self.pacer.left_tokens(self.engine.engine_now_s())
        snapshot.pacing_min_uncached_tokens = self.pacer.config.min_uncached_tokens
        snapshot.pacing_yield_fraction = self.pacer.config.yield_fraction
        return snapshot

    def describe(self) -> dict:
        described = dict(self.engine.describe())
        counters = described.get("counters")
        if counters:
            counters = dict(counters)
            counters["num_prefix_hit_tokens"] = counters.get("num_prefix_hit_tokens", 0) - self.self_hit_tokens
            counters["num_finished"] = counters.get("num_finished", 0) - self.num_pieces
            counters["num_paced"] = self.num_paced
            described["counters"] = counters
        described["pacing"] = {
            "config": self.pacer.config.model_dump(),
            "num_paced": self.num_paced,
            "num_held": self.num_held,
            "num_pieces": self.num_pieces,
            "num_unpermitted": self.num_unpermitted,
            "self_hit_tokens": self.self_hit_tokens,
        }
        return described

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        rid = request.request_id
        prompt = self.engine.prompt_tokens(request)
        while True:  # rule `arrive`; a released request arrives again
            cached = self.engine.cached_prompt_tokens(request)
            now_s = self.engine.engine_now_s()
            arrival = self.pacer.arrive(rid, prompt, cached, permitted=request.pace, now_s=now_s)
            if arrival != "held":
                break
            self.num_held += 1
            released = self._released[rid] = asyncio.Event()
            try:
                await released.wait()
            finally:
                self._released.pop(rid, None)
                self.pacer.release(rid)
        if arrival == "whole":
            if not request.pace and self.pacer.is_long(prompt, cached):
                self.num_unpermitted += 1
            async for chunk in self._whole(request):
                yield chunk
            return
        paced = self.pacer.active
        self.num_paced += 1
        try:
            while (prefix := paced.next_piece(self.engine.engine_now_s())) is not None:
                if not await self._send_piece(request, prefix, paced):
                    break
                paced.piece_done(self.engine.engine_now_s())
        finally:
            self._wake(self.pacer.finish(rid))
        async for chunk in self._whole(request):
            if chunk.usage is not None:
                paced.record(chunk.usage.prompt_tokens, chunk.usage.cached_prompt_tokens)
                self.self_hit_tokens += paced.self_hit_tokens()
                chunk.usage.cached_prompt_tokens = paced.hit_tokens()
            yield chunk

    async def _whole(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        stream = self.engine.generate(request)
        try:
            async for chunk in stream:
                yield chunk
        finally:
            await stream.aclose()

    async def _send_piece(self, request: GenerateRequest, prefix_tokens: int, paced: PacedPrefill) -> bool:
        """Rule `paced`: one piece to its end; False when it failed (pace no further)."""
        stream = self.engine.generate(self.engine.piece_request(request, prefix_tokens))
        try:
            async for chunk in stream:
                if chunk.finish_reason is not None:
                    if chunk.error is not None or chunk.finish_reason == "abort":
                        return False
                    self.num_pieces += 1  # finished: the engine's counters count it
                    if chunk.usage is not None:
                        paced.record(chunk.usage.prompt_tokens, chunk.usage.cached_prompt_tokens)
                    return True
        except EngineError:
            return False
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()
        return False

    def _wake(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            event = self._released.get(request_id)
            if event is not None:
                event.set()
