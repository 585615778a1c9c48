"""The embedded engine: one worker thread decodes admitted requests, interleaved step by step.

Requests are interleaved, not batched: the worker takes the running requests round-robin and runs
one prefill chunk or one verify step of each in turn. At batch size one a CPU forward is bound by
reading the weights, so a verify block of k+1 tokens costs about what one token costs; speculation
already spends that spare compute, and interleaving keeps every request's arithmetic identical to
running it alone, which batching ragged sequences with padding would not (greedy output must be
byte-identical with and without speculation). Admission is `AdmissionController`'s rule.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import AsyncIterator, Callable

from ..protocol import Chunk, EngineError, GenerateRequest, LoadSnapshot
from .admission import AdmissionController, Overloaded
from .config import EmbeddedEngineConfig
from .detokenizer import IncrementalDetokenizer
from .drafter import NgramDrafter
from .model import LoadedModel, load_model, set_threads
from .prompt import render_prompt
from .sequence import Sequence, run_step

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
        self._admission = AdmissionController(
            config.kv_budget_tokens, config.max_running_requests, config.max_queued_requests
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
        set_threads(self.config.num_threads)
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
                self._admission.enqueue(sequence.request_id, self._kv_tokens(sequence))
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

    def _kv_tokens(self, sequence: Sequence) -> int:
        """Reservation: prompt + output, plus the draft block a verify step holds before cropping."""
        slack = self.config.num_draft_tokens if self.config.speculative else 0
        return len(sequence.prompt_ids) + sequence.max_tokens + slack

    def _make_sequence(self, request: GenerateRequest) -> Sequence:
        loaded = self._loaded
        prompt_ids = self._tokenize(request)
        context = min(self.config.context_length_tokens, loaded.context_length_tokens)
        if len(prompt_ids) >= context:
            raise EngineError(
                f"the prompt is {len(prompt_ids)} tokens, but this model's context window is {context} tokens; "
                "shorten the messages",
                status=400,
                param="messages" if request.messages is not None else "prompt",
                code="context_length_exceeded",
            )
        max_tokens = request.max_tokens
        if len(prompt_ids) + max_tokens > context:
            if not request.clamp_max_tokens:
                raise EngineError(
                    f"max_tokens is {max_tokens}, but the prompt is {len(prompt_ids)} tokens and this model's "
                    f"context window is {context} tokens; set max_tokens to at most {context - len(prompt_ids)}",
                    status=400,
                    param="max_tokens",
                    code="context_length_exceeded",
                )
            max_tokens = context - len(prompt_ids)
        generator = None
        if request.temperature > 0:
            import torch

            generator = torch.Generator()
            generator.manual_seed(request.seed if request.seed is not None else uuid.uuid4().int & (2**63 - 1))
        drafter = None
        if self.config.speculative:
            drafter = NgramDrafter(self.config.num_draft_tokens, self.config.ngram_min, self.config.ngram_max)
            drafter.extend(prompt_ids)
        return Sequence(
            request_id=request.request_id or uuid.uuid4().hex,
            prompt_ids=prompt_ids,
            max_tokens=max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            eos_token_ids=loaded.eos_token_ids,
            detokenizer=IncrementalDetokenizer(loaded.tokenizer, request.stop),
            drafter=drafter,
            generator=generator,
            histogram_size=self.config.num_draft_tokens + 1,
            path="speculative" if self._drafter_enabled else "autoregressive",
        )

    def _cancel(self, request_id: str) -> None:
        with self._wake:
            if request_id in self._sequences:
                self._cancelled.add(request_id)
                self._wake.notify_all()

    def _finish(self, request_id: str) -> None:
        """Drop a request's state and free its budget (called with the lock held)."""
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
                self._running.extend(self._admission.admit())
                while not self._running and not self._stopping:
                    self._wake.wait()
                    for request_id in list(self._cancelled):
                        self._finish(request_id)
                    self._running.extend(self._admission.admit())
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
            out = run_step(sequence, self._loaded.model, PREFILL_CHUNK_TOKENS, drafter_on)
        except Exception as exc:  # a failed step ends this request, never the worker
            log.exception("step failed for request %s", request_id)
            with self._wake:
                self._send(request_id, Chunk(finish_reason="error", error=f"engine step failed: {exc}", error_status=500))
                self._finish(request_id)
            return
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
