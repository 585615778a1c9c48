"""The embedded engine: one worker thread decodes admitted requests, interleaved step by step.

Requests are interleaved, not batched: the worker takes the running requests round-robin and runs
one prefill chunk or one verify step of each in turn. At batch size one a CPU forward is bound by
reading the weights, so a verify block of k+1 tokens costs about what one token costs; speculation
already spends that spare compute, and interleaving keeps every request's arithmetic identical to
running it alone, which batching ragged sequences with padding would not (greedy output must be
byte-identical with and without speculation). Admission is `AdmissionController`'s rule.

Prefix reuse (block_cache.py, kv_blocks.py): an admitted request whose prompt starts with cached
blocks starts from a copy of their KV and prefills only the rest; when its prefill completes its
prompt's full blocks are inserted, and when it ends (finished or cancelled) every full block of the
tokens its KV holds (prompt and output), then its path is unpinned into the LRU. A failed step's
KV is not cached. `usage.cached_prompt_tokens` is the hit.

Adaptive drafting (draft_policy.py): each decode step is timed with the injected clock; those times
give the engine-wide step cost c(k) per draft length, and each request's acceptance gives its k*.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import AsyncIterator, Callable

from ..protocol import Chunk, EngineError, GenerateRequest, LoadSnapshot
from .admission import AdmissionController, Overloaded
from .block_cache import BlockCache
from .config import EmbeddedEngineConfig
from .draft_policy import StepCosts
from .kv_blocks import block_payload, cache_from_blocks
from .model import LoadedModel, load_model, resolve_num_threads, set_threads
from .prompt import render_prompt
from .sequence import Sequence, run_step
from .sequence_setup import make_sequence

log = logging.getLogger(__name__)

PREFILL_CHUNK_TOKENS = 512


class EmbeddedEngine:
    def __init__(
        self,
        config: EmbeddedEngineConfig,
        *,
        loader: Callable[[EmbeddedEngineConfig], LoadedModel] = load_model,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config = config
        self._loader = loader
        self._clock = clock
        self._loaded: LoadedModel | None = None
        self._block_cache = BlockCache(config.prefix_block_tokens, config.kv_budget_tokens)
        self._admission = AdmissionController(
            self._block_cache, config.max_running_requests, config.max_queued_requests, reuse=config.prefix_reuse
        )
        self._cache_generation = 0
        self._prefill_tokens_per_s = 0.0
        self._step_costs = StepCosts(
            config.accept_ema_alpha,
            config.draft_cost_ratio_prior,
            config.num_draft_tokens,
            config.draft_explore_interval_s,
        )
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._sequences: dict[str, Sequence] = {}
        self._outputs: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._cancelled: set[str] = set()
        self._running: list[str] = []
        self._drafter_enabled = config.speculative
        self._accept_ema = 1.0
        self._stopping = False
        self._worker: threading.Thread | None = None
        self.healthy = False

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        set_threads(resolve_num_threads(self.config.num_threads, self.config.pools_per_machine))
        with self._lock:
            self._block_cache.clear()
            self._cache_generation += 1
        self._loaded = await asyncio.to_thread(self._loader, self.config)
        self._worker = threading.Thread(target=self._work, name="embedded-engine", daemon=True)
        self._worker.start()
        self.healthy = True

    async def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._worker is not None:
            await asyncio.to_thread(self._worker.join, 10.0)
        self.healthy = False

    # -- protocol --------------------------------------------------------------------------
    def describe(self) -> dict:
        loaded = self._loaded
        return {
            "engine": "embedded",
            "model_file": loaded.path.name if loaded else None,
            "model_sha256": loaded.sha256 if loaded else None,
            "draft": "ngram-prompt-lookup" if self.config.speculative else None,
            "args": self.config.model_dump(),
        }

    def set_drafter_enabled(self, enabled: bool) -> None:
        self._drafter_enabled = enabled and self.config.speculative

    def load(self) -> LoadSnapshot:
        with self._lock:
            return LoadSnapshot(
                healthy=self.healthy,
                total_kv_tokens=self.config.kv_budget_tokens,
                free_kv_tokens=self._admission.free_kv_tokens,
                evictable_kv_tokens=self._block_cache.evictable_tokens,
                cache_generation=self._cache_generation,
                pending_prefill_tokens=self._admission.queued_uncached_prompt_tokens
                + sum(len(s.prompt_ids) - s.prefilled for rid, s in self._sequences.items() if rid in self._running),
                prefill_tokens_per_s=round(self._prefill_tokens_per_s, 1),
                total_state_slots=self.config.max_running_requests,
                free_state_slots=self._admission.free_slots,
                state_slots_per_request=1,
                num_running=self._admission.num_running,
                num_queued=self._admission.num_queued,
                queued_kv_tokens=self._admission.queued_kv_tokens,
                accept_length_ema=round(self._accept_ema, 4),
                drafter_active=self._drafter_enabled,
                engine="embedded",
            )

    def count_prompt_tokens(self, request: GenerateRequest) -> int:
        return len(self._tokenize(request))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        if self._loaded is None:
            raise EngineError("engine is not started", status=503)
        sequence = self._make_sequence(request)
        queue: asyncio.Queue = asyncio.Queue()
        with self._wake:
            try:
                self._admission.enqueue(sequence.request_id, sequence.prompt_ids, self._extra_kv_tokens(sequence))
            except Overloaded as exc:
                raise EngineError(f"replica overloaded: {exc}", status=429, code="overloaded") from exc
            except ValueError as exc:
                raise EngineError(str(exc), status=400, param="max_tokens", code="context_length_exceeded") from exc
            self._sequences[sequence.request_id] = sequence
            self._outputs[sequence.request_id] = (asyncio.get_running_loop(), queue)
            self._wake.notify_all()
        try:
            while True:
                chunk: Chunk = await queue.get()
                yield chunk
                if chunk.finish_reason is not None:
                    return
        finally:
            self._cancel(sequence.request_id)

    # -- internals -------------------------------------------------------------------------
    def _tokenize(self, request: GenerateRequest) -> list[int]:
        return render_prompt(self._loaded.tokenizer, request)

    def _extra_kv_tokens(self, sequence: Sequence) -> int:
        """Reservation beyond the prompt: output, plus the draft block a verify step holds before cropping."""
        slack = self.config.num_draft_tokens if self.config.speculative else 0
        return sequence.max_tokens + slack

    def _make_sequence(self, request: GenerateRequest) -> Sequence:
        return make_sequence(self.config, self._loaded, request, self._tokenize(request), self._drafter_enabled)

    def _cancel(self, request_id: str) -> None:
        with self._wake:
            if request_id in self._sequences:
                self._cancelled.add(request_id)
                self._wake.notify_all()

    def _start_running(self, request_ids: list[str]) -> None:
        """Admitted requests start from their prefix hit (called with the lock held)."""
        for request_id in request_ids:
            holding, sequence = self._admission.holding(request_id), self._sequences[request_id]
            if holding.path:
                sequence.cache = cache_from_blocks([block.payload for block in holding.path])
                sequence.prefilled = sequence.cached_tokens = holding.hit_tokens
            self._running.append(request_id)

    def _cache_kv(self, request_id: str, tokens: list[int]) -> None:
        """Insert the full blocks of `tokens` (held in the request's KV) into the cache (lock held)."""
        sequence = self._sequences.get(request_id)
        if not self.config.prefix_reuse or sequence is None or sequence.cache is None:
            return
        if self._admission.holding(request_id) is None:
            return
        B = self.config.prefix_block_tokens
        self._admission.cache_tokens(request_id, tokens, lambda i: block_payload(sequence.cache, i, B))

    def _finish(self, request_id: str, cache_kv: bool = True) -> None:
        """Drop a request's state and free its budget (called with the lock held)."""
        sequence = self._sequences.get(request_id)
        if cache_kv and sequence is not None and sequence.cache is not None:
            self._cache_kv(request_id, sequence.kv_tokens())
        self._admission.release(request_id)
        self._sequences.pop(request_id, None)
        self._outputs.pop(request_id, None)
        self._cancelled.discard(request_id)
        if request_id in self._running:
            self._running.remove(request_id)

    def _send(self, request_id: str, chunk: Chunk) -> None:
        target = self._outputs.get(request_id)
        if target is not None:
            loop, queue = target
            loop.call_soon_threadsafe(queue.put_nowait, chunk)

    def _work(self) -> None:
        while True:
            with self._wake:
                for request_id in list(self._cancelled):
                    self._finish(request_id)
                self._start_running(self._admission.admit())
                while not self._running and not self._stopping:
                    self._wake.wait()
                    for request_id in list(self._cancelled):
                        self._finish(request_id)
                    self._start_running(self._admission.admit())
                if self._stopping:
                    return
                batch = [(rid, self._sequences[rid]) for rid in self._running]
            for request_id, sequence in batch:
                self._step(request_id, sequence)

    def _step(self, request_id: str, sequence: Sequence) -> None:
        if request_id in self._cancelled:
            return
        drafter_on = self._drafter_enabled
        try:
            prefilling, before, started = sequence.prefilled < len(sequence.prompt_ids), sequence.prefilled, self._clock()
            out = run_step(sequence, self._loaded.model, PREFILL_CHUNK_TOKENS, drafter_on, self._step_costs, started)
        except Exception as exc:  # a failed step ends this request, never the worker
            log.exception("step failed for request %s", request_id)
            with self._wake:
                self._send(request_id, Chunk(finish_reason="error", error=f"engine step failed: {exc}", error_status=500))
                self._finish(request_id, cache_kv=False)
            return
        if out.num_drafted >= 0:
            ended = self._clock()
            self._step_costs.record(out.num_drafted, ended - started, ended)
        if prefilling:
            with self._wake:
                self._record_prefill(request_id, sequence, sequence.prefilled - before, self._clock() - started)
        if out.num_tokens and drafter_on and sequence.drafter is not None:
            alpha = self.config.accept_ema_alpha
            self._accept_ema = (1 - alpha) * self._accept_ema + alpha * out.num_tokens
        if out.num_tokens == 0 and out.finish_reason is None:
            return
        chunk = Chunk(text=out.text, num_tokens=out.num_tokens, finish_reason=out.finish_reason)
        if out.finish_reason is not None:
            chunk.usage = sequence.usage()
        with self._wake:
            self._send(request_id, chunk)
            if out.finish_reason is not None:
                self._finish(request_id)

    def _record_prefill(self, request_id: str, sequence: Sequence, num_tokens: int, seconds: float) -> None:
        """After a prefill chunk (lock held): cache the prompt's blocks once it is whole; measure the rate
        as an EMA of chunk tokens / chunk seconds (weight accept_ema_alpha)."""
        if sequence.prefilled >= len(sequence.prompt_ids):
            self._cache_kv(request_id, sequence.prompt_ids)
        if seconds > 0 and num_tokens > 0:
            rate, alpha = num_tokens / seconds, self.config.accept_ema_alpha
            previous = self._prefill_tokens_per_s
            self._prefill_tokens_per_s = rate if previous == 0 else (1 - alpha) * previous + alpha * rate
