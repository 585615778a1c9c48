"""The embedded engine: one worker thread decodes admitted requests in rounds, verify steps batched.

Round rule. The worker repeats rounds over the running requests (admission order). In a round every
running request advances once: a request still prefilling by one prefill chunk (config `prefill_chunk_tokens`),
a decoding one by one verify step. `round_groups` splits the round into forwards of at most
`max_batch_requests` requests: each forward takes the first prefill chunk not yet taken (if any) and
then decoding requests in order until it is full, so a forward never carries two chunks; with
`mixed_chunk` off, chunks never share a forward (each runs alone, before the decoding groups). A group
of one runs alone; a larger group runs one packed forward (batch.py: the chunk and the verify blocks
[last, d1..dk] in one row, no padding, a mask that keeps every request to its own KV and its own
earlier new tokens, position ids continuing each request's own length). A step alone, and every step
when `max_batch_requests` is 1, is exactly what the request running by itself does, so greedy output
at `max_batch_requests = 1` is byte-identical to decoding each request alone.
Why chunks ride with verify blocks (`mixed_chunk`, SGLang's `--enable-mixed-chunk`): a chunk's forward is
bound by arithmetic, and the verify blocks riding along add a few rows to it instead of a forward of
their own that reads every weight again; the decoding requests do not wait a chunk's time for their
next token. The cost: a chunk's KV (hence its prefix-cache blocks) may differ in the last bits from a
chunk run alone, as batched verify steps' KV already does.
Under `row_exact` (batch.py rule `row exact`) chunks never share a forward and a group's drafts are cut
so it holds at most ROW_EXACT_MAX_ROWS rows (`fit_rows`): greedy output is then that of each request
alone, whatever shares its forwards.
Within a group each request accepts its own longest matching draft prefix (speculative.py) from its
own logits rows, and its KV grows by its last token and its accepted drafts only. A failed batched
forward ends every request of its group with an error (their KV is not cached); a request that
finishes or is cancelled leaves the others' state untouched (each KV is its own; a cancelled one is
dropped before the next round). Admission is `AdmissionController`'s rule.

Threads: the worker thread keeps the rounds, the admission and the streams; every torch call it makes
(the model load, prefill chunks, verify steps, prefix-block copies) runs on the process's one compute
thread (compute.py), where the engine's intra-op thread count is set too.

Why batch: on CPU a forward over a few tokens is bound by reading the weights, so n requests' verify
blocks in one forward cost far less than n forwards; speculation already spends that spare compute
for one request, batching spends it across requests.

Prefix reuse (block_cache.py, kv_blocks.py): an admitted request whose prompt starts with cached
blocks starts from a copy of their KV and prefills only the rest; when its prefill completes its
prompt's full blocks are inserted, and when it ends (finished or cancelled) every full block of the
tokens its KV holds (prompt and output), then its path is unpinned into the LRU. A failed step's
KV is not cached. `usage.cached_prompt_tokens` is the hit.
Under `row_exact` a prompt's KV is cached only for its whole prefill chunks (positions [0, floor(P / C) * C),
C = config `prefill_chunk_tokens`), never its last partial chunk nor its output, and a hit is cut down to whole
chunks (admission rule, U = C / B blocks): the rest of the prompt then runs the chunks a cold prefill runs, on the
same bits, so a warm cache gives a cold cache's greedy output. The price: a turn re-prefills up to a chunk
of its conversation plus the last answer.

Constrained decoding (grammar.py): a request with response_format, regex, ebnf or a forced tool call gets its
grammar when its sequence is made; every row of logits a step chooses from is masked to it.

Tool calls (tool_parser.py): a request with active tools has its chunks read by a ToolCallReader as they
leave the engine, which turns the calls in the text into tool-call deltas (a streamed request gets each call
as it is written); decoding does not change.

Adaptive drafting (draft_policy.py): each decode step is timed with the injected clock; those times
give the step cost per draft length, one table per batch size n (a step alone: c(k) over its k draft
tokens; a batched step of n verifying requests: c_n(k_tot) over the step's total draft tokens, rule
`batch`; a forward carrying a prefill chunk is timed into no table, and its m decoding requests choose
from c_m, or c for m = 1: a chunk riding along only makes drafts cheaper), and each request's
acceptance, kept per match length of its proposals and started from the engine's pooled counts for
that length (rules `match`, `prior`), gives its k*.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import AsyncIterator, Callable

from ..protocol import Chunk, EngineError, GenerateRequest, LoadSnapshot
from . import compute
from .admission import AdmissionController, Overloaded
from .block_cache import BlockCache
from .config import ROW_EXACT_MAX_ROWS, EmbeddedEngineConfig
from .batch import fit_rows, forward_packed
from .draft_policy import MatchedAcceptance, StepCosts
from .kv_blocks import block_payload, cache_from_blocks
from .logprobs import TokenTexts
from .model import LoadedModel, load_model, resolve_num_threads, set_threads
from .prompt import render_prompt
from .sequence import (
    Sequence,
    StepOutput,
    after_prefill,
    choose_draft,
    drop_rejected,
    emit_verified,
    ensure_cache,
    finish_verify,
    next_chunk,
    propose,
    run_step,
)
from .sequence_setup import make_sequence
from .grammar import Grammars, RequestGrammar, constraint
from .tool_parser import ToolCallReader, new_call_id

log = logging.getLogger(__name__)


def round_groups(requests: list, prefilling: list[bool], size: int, mixed: bool) -> list[list]:
    """A round's forwards, in order (round rule): `requests` in running order, `prefilling[i]` whether
    request i still prefills; at most `size` requests and one prefill chunk per forward."""
    if size <= 1:
        return [[request] for request in requests]
    chunks = [r for r, p in zip(requests, prefilling) if p]
    blocks = [r for r, p in zip(requests, prefilling) if not p]
    groups = []
    if not mixed:
        groups.extend([chunk] for chunk in chunks)
        chunks = []
    while chunks or blocks:
        group = [chunks.pop(0)] if chunks else []
        while blocks and len(group) < size:
            group.append(blocks.pop(0))
        groups.append(group)
    return groups


class EmbeddedEngine:
    def __init__(
        self,
        config: EmbeddedEngineConfig,
        *,
        loader: Callable[[EmbeddedEngineConfig], LoadedModel] = load_model,
        clock: Callable[[], float] = time.monotonic,
        new_call_id: Callable[[], str] = new_call_id,
    ):
        self.config = config
        self._loader = loader
        self._clock = clock
        self._new_call_id = new_call_id  # tool-call ids (tool_parser.py rule `ids`)
        self._loaded: LoadedModel | None = None
        self._grammars: Grammars | None = None  # constrained decoding (grammar.py), once loaded
        self._token_texts: TokenTexts | None = None
        self._block_cache = BlockCache(config.prefix_block_tokens, config.kv_budget_tokens)
        self._admission = self._admission_for(config)
        self._cache_generation = 0
        self._prefill_tokens_per_s = 0.0
        self._step_costs = StepCosts(
            config.accept_ema_alpha,
            config.draft_cost_ratio_prior,
            config.num_draft_tokens,
            config.draft_explore_interval_s,
        )
        self._batch_costs: dict[int, StepCosts] = {}  # batch size n >= 2 -> c_n(total draft tokens)
        self._pooled_acceptance = MatchedAcceptance(  # fed by every adaptive request (rule `prior`)
            config.draft_history_decay, config.num_draft_tokens, config.draft_acceptance_by_match
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

    def _admission_for(self, config: EmbeddedEngineConfig) -> AdmissionController:
        # row exact: a hit covers whole prefill chunks only (prefix reuse rule above)
        hit_unit = max(1, config.prefill_chunk_tokens // config.prefix_block_tokens) if config.row_exact else 1
        return AdmissionController(
            self._block_cache,
            config.max_running_requests,
            config.max_queued_requests,
            reuse=config.prefix_reuse,
            hit_unit_blocks=hit_unit,
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        # Threads and the load on the compute thread, where every step of this engine will run (compute.py).
        await compute.call(set_threads, resolve_num_threads(self.config.num_threads, self.config.pools_per_machine))
        with self._lock:
            self._block_cache.clear()
            self._cache_generation += 1
        self._loaded = await compute.call(self._loader, self.config)
        self._grammars = Grammars(
            self._loaded.tokenizer, self._loaded.model.config.vocab_size, self._loaded.eos_token_ids
        )
        if self.config.dtype == "auto" and self._loaded.dtype is not None:  # run as loaded (model.py rule `dtype auto`)
            with self._lock:
                self.config = self.config.model_copy(
                    update={"dtype": self._loaded.dtype, "row_exact": self._loaded.row_exact}
                )
                self._admission = self._admission_for(self.config)
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

    async def count_prompt_tokens(self, request: GenerateRequest, anthropic_body: dict | None = None) -> int:
        """The prompt as generate() renders and tokenizes it."""
        if self._loaded is None:
            raise EngineError("engine is not started", status=503)
        return len(self._tokenize(request))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        if self._loaded is None:
            raise EngineError("engine is not started", status=503)
        calls = ToolCallReader.for_request(request, self._new_call_id)
        if calls is not None:  # as SGLang: a call's markers may be special tokens
            request = request.model_copy(update={"skip_special_tokens": False})
        grammar = None
        if constraint(request) is not None:  # compiled off the event loop (grammar.py rule `compile`)
            grammar = await asyncio.to_thread(self._grammars.for_request, request)
        sequence = self._make_sequence(request, grammar)
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
                yield chunk if calls is None else calls.read(chunk)
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

    def _texts(self) -> TokenTexts:
        """Each token's text and bytes for log-probabilities (logprobs.py rule `text`), made at first need."""
        if self._token_texts is None or self._token_texts.tokenizer is not self._loaded.tokenizer:
            self._token_texts = TokenTexts(self._loaded.tokenizer)
        return self._token_texts

    def _make_sequence(self, request: GenerateRequest, grammar: RequestGrammar | None = None) -> Sequence:
        return make_sequence(
            self.config, self._loaded, request, self._tokenize(request), self._drafter_enabled, self._pooled_acceptance,
            grammar,
        )  # fmt: skip

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
                payloads = [block.payload for block in holding.path]
                sequence.cache = compute.run(cache_from_blocks, payloads, sequence.kv_capacity())
                sequence.prefilled = sequence.cached_tokens = holding.hit_tokens
            self._running.append(request_id)

    def _cache_kv(self, request_id: str, tokens: list[int]) -> None:
        """Insert the full blocks of `tokens` (held in the request's KV) into the cache (lock held)."""
        sequence = self._sequences.get(request_id)
        if not self.config.prefix_reuse or sequence is None or sequence.cache is None:
            return
        if self._admission.holding(request_id) is None:
            return
        if self.config.row_exact:  # only whole prefill chunks of the prompt (prefix reuse rule above)
            chunk = self.config.prefill_chunk_tokens
            tokens = tokens[: len(sequence.prompt_ids) // chunk * chunk]
        B = self.config.prefix_block_tokens
        # one hop for every block it copies (the admission's state is ours while the lock is held)
        compute.run(self._admission.cache_tokens, request_id, tokens, lambda i: block_payload(sequence.cache, i, B))

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
            prefilling = [seq.prefilling for _rid, seq in batch]
            mixed = self.config.mixed_chunk and not self.config.row_exact  # row exact: chunks alone
            for group in round_groups(batch, prefilling, self.config.max_batch_requests, mixed):
                group = [(rid, seq) for rid, seq in group if rid not in self._cancelled]
                if len(group) == 1:
                    self._step(*group[0])
                elif group:
                    self._step_group(group)

    def _step(self, request_id: str, sequence: Sequence) -> None:
        if request_id in self._cancelled:
            return
        drafter_on = self._drafter_enabled
        try:
            prefilling, before, started = sequence.prefilling, sequence.prefilled, self._clock()
            out = compute.run(
                run_step, sequence, self._loaded.model, self.config.prefill_chunk_tokens, drafter_on, self._step_costs,
                started,
            )
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
        with self._wake:
            self._send(request_id, _chunk(out, sequence, self._texts))
            if out.finish_reason is not None:
                self._finish(request_id)

    def _costs_for(self, batch_size: int) -> StepCosts:
        """The step-cost table of batched steps of `batch_size` requests, indexed by total draft tokens."""
        costs = self._batch_costs.get(batch_size)
        if costs is None:
            c = self.config
            max_draft = batch_size * c.num_draft_tokens
            costs = StepCosts(c.accept_ema_alpha, c.draft_cost_ratio_prior, max_draft, c.draft_explore_interval_s)
            self._batch_costs[batch_size] = costs
        return costs

    def _choose_drafts(self, sequences: list[Sequence], proposals: list[list[int]], costs: StepCosts, now: float):
        """Each request's draft in a batched step (draft_policy.py rule `batch`)."""
        choosing = [
            i for i, seq in enumerate(sequences)
            if seq.acceptance is not None and seq.fixed_cost_ratio is None and proposals[i]
        ]
        target = costs.explore(sum(len(proposals[i]) for i in choosing), now) if choosing else None
        drafts, taken, rest_tokens, rest_draft = [], 0, 0.0, 0
        for i, seq in enumerate(sequences):
            if target is not None and i in choosing:
                draft = proposals[i][: max(0, target - taken)]
                taken += len(draft)
            else:
                later = len(sequences) - 1 - i  # counted as not drafting: one token each
                draft = choose_draft(seq, proposals[i], costs, now, rest_tokens + later, rest_draft, may_explore=False)
            drafts.append(draft)
            rest_draft += len(draft)
            if seq.acceptance is not None:
                rest_tokens += seq.tracker().values(len(draft))[-1]  # E_i(k_i)
            else:
                rest_tokens += len(draft) + 1
        return drafts

    def _step_group(self, group: list[tuple[str, Sequence]]) -> None:
        """One packed forward (batch.py) of every request in `group`: at most one prefill chunk (its last
        row's logits kept) and the verify blocks of the decoding ones (round rule)."""
        import torch

        drafter_on = self._drafter_enabled
        sequences = [seq for _rid, seq in group]
        chunks = [next_chunk(seq, self.config.prefill_chunk_tokens) for seq in sequences]
        decoding = [seq for seq, chunk in zip(sequences, chunks) if chunk is None]
        # the drafts' costs: the table of the decoding requests' batch size; a chunk riding along makes drafts
        # cheaper, so this can only understate them, and a mixed forward's seconds go in no table
        costs = self._costs_for(len(decoding)) if len(decoding) >= 2 else self._step_costs
        started = self._clock()

        def forward() -> list:
            with torch.inference_mode():
                proposals = [propose(seq, drafter_on) for seq in decoding]
                drafts = self._choose_drafts(decoding, proposals, costs, started)
                if self.config.row_exact:
                    drafts = fit_rows(drafts, ROW_EXACT_MAX_ROWS)
                verifies = iter(zip(proposals, drafts))
                feeds, rows, plan = [], [], []
                for seq, chunk in zip(sequences, chunks):
                    ensure_cache(seq)
                    step = None if chunk is not None else next(verifies)  # (proposal, draft)
                    feeds.append(chunk if step is None else [seq.last_token] + step[1])
                    rows.append(1 if step is None else len(step[1]) + 1)
                    plan.append(step)
                logits = forward_packed(
                    self._loaded.model, [seq.cache for seq in sequences], feeds, rows, self.config.row_exact
                )
                outs = []
                for seq, chunk, step, seq_logits in zip(sequences, chunks, plan, logits):
                    if step is None:
                        outs.append(after_prefill(seq, chunk, seq_logits))
                        continue
                    proposal, draft = step
                    emitted = finish_verify(seq, seq_logits, proposal, draft)
                    drop_rejected(seq, draft, emitted)  # the cache keeps last + accepted drafts
                    outs.append(emit_verified(seq, emitted, draft))
            return outs

        try:
            outs = compute.run(forward)
        except Exception as exc:  # a failed step ends the group's requests, never the worker
            log.exception("batched step failed for %d requests", len(group))
            with self._wake:
                for request_id, _seq in group:
                    self._send(
                        request_id, Chunk(finish_reason="error", error=f"engine step failed: {exc}", error_status=500)
                    )
                    self._finish(request_id, cache_kv=False)
            return
        ended = self._clock()
        if len(decoding) == len(group):
            costs.record(sum(max(out.num_drafted, 0) for out in outs), ended - started, ended)
        alpha = self.config.accept_ema_alpha
        with self._wake:
            for (request_id, seq), chunk, out in zip(group, chunks, outs):
                if chunk is not None:  # the rate counts the whole forward's seconds: what the chunk cost here
                    self._record_prefill(request_id, seq, len(chunk), ended - started)
                elif out.num_tokens and drafter_on and seq.drafter is not None:
                    self._accept_ema = (1 - alpha) * self._accept_ema + alpha * out.num_tokens
                if out.num_tokens == 0 and out.finish_reason is None:
                    continue
                self._send(request_id, _chunk(out, seq, self._texts))
                if out.finish_reason is not None:
                    self._finish(request_id)

    def _record_prefill(self, request_id: str, sequence: Sequence, num_tokens: int, seconds: float) -> None:
        """After a prefill chunk (lock held): cache the prompt's blocks once it is whole; measure the rate
        as an EMA of chunk tokens / chunk seconds (weight accept_ema_alpha)."""
        if not sequence.prefilling:
            self._cache_kv(request_id, sequence.prompt_ids)
        if seconds > 0 and num_tokens > 0:
            rate, alpha = num_tokens / seconds, self.config.accept_ema_alpha
            previous = self._prefill_tokens_per_s
            self._prefill_tokens_per_s = rate if previous == 0 else (1 - alpha) * previous + alpha * rate


def _chunk(out: StepOutput, sequence: Sequence, texts) -> Chunk:
    """What a step sends its request: its text and tokens (their log-probabilities when asked, spelled by
    `texts()`, a logprobs.TokenTexts), the prompt's counts on the first, with the usage once it finishes; or its
    error."""
    if out.error is not None:
        error = out.error
        return Chunk(finish_reason="error", error=str(error), error_status=error.status, error_param=error.param)
    chunk = Chunk(text=out.text, num_tokens=out.num_tokens, finish_reason=out.finish_reason)
    if not sequence.sent_first:
        chunk.prompt_tokens, chunk.cached_prompt_tokens = len(sequence.prompt_ids), sequence.cached_tokens
        sequence.sent_first = True
    if out.logprobs is not None:
        chunk.logprobs = texts().wire(out.logprobs)
    if out.finish_reason is not None:
        chunk.usage = sequence.usage()
        chunk.matched_stop = sequence.matched_stop
    return chunk
