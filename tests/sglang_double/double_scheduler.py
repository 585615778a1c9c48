"""SchedulerDouble: stands in for SGLang's scheduler, model runner and detokenizer (there is no GPU and no model).

It takes what SGLang's TokenizerManager dispatches (`TokenizedGenerateReqInput`, `AbortReq`) and answers with
what SGLang's detokenizer sends back: one `BatchStrOutput` per verify step, handed to the tokenizer manager's own
`_handle_batch_output` (which builds `meta_info`, speculative metrics included, exactly as in a server). Its pools
and counters feed SGLang's `SchedulerStats` (for SGLang's `SchedulerMetricsCollector`, i.e. /metrics) and
`LoadSnapshot` (for SGLang's /v1/loads route).

Rules:
  steps      a request's text comes from the model double (double_model.py). Without a drafter each verify
             step yields 1 token; with one (--speculative-algorithm given) SGLANG_DOUBLE_ACCEPT tokens
             (default 3), the last step fewer. A step with k tokens accepted k - 1 drafts:
             spec_num_correct_drafts += k - 1 and spec_correct_drafts_histogram[k - 1] += 1, the list grown to
             fit as Req.update_spec_correct_drafts_histogram grows it. spec_verify_ct counts steps (sent on
             every output, as the scheduler does).
  reasoning  for a request that requires reasoning (the OpenAI layer's thinking mode), reasoning_tokens counts
             the tokens up to and including `</think>`, as Req.update_reasoning_tokens does.
  timing     SGLANG_DOUBLE_PREFILL_S before a request's first step (its prefill), SGLANG_DOUBLE_STEP_S after
             each step. `on_step` is called after every change to the pools (a server with
             --decode-log-interval 1 logs its stats as often).
  kv         a running request holds prompt + generated tokens; total = SGLANG_DOUBLE_KV_TOKENS (100000),
             evictable = SGLANG_DOUBLE_KV_EVICTABLE (0), available = total - used - evictable.
  mamba      one state slot per running request; total = --max-mamba-cache-size (else 64), evictable =
             SGLANG_DOUBLE_MAMBA_EVICTABLE (0), available = total - used - evictable, usage = used / total.
  cache      cached_tokens = the longest common prefix of the prompt with an earlier prompt (page size 1), at
             most prompt - 1 (the last prompt token is always computed); the store is not counted in `kv`.
  health     a /health(_generate) request that arrives while other requests run is not run: it is answered at
             once, as the scheduler answers it with a HealthCheckOutput when it is not idle.
  dispatch   each request dispatched records an event with what SGLang's OpenAI layer and tokenizer manager made
             of it: the last 200 characters of its prompt (special tokens kept) and its normalized
             SamplingParams' stop controls (stop_strs, stop_regex_strs, no_stop_trim, skip_special_tokens).
             Only stop_strs act on the double's answer (double_model.py rule `stop`).
  logprobs   for a request with return_logprob, output token i (from 0, over the whole answer) has log-probability
             -(i + 1) / 8; with top_logprobs_num n, its position's top list is that token at that value, then the
             eos token at one less and the pad token at two less, cut to n (at most 3). They go in each output's
             output_token_logprobs_* and output_top_logprobs_* lists, one value per token the output carries,
             for SGLang's tokenizer manager to detokenize and its OpenAI layer to serve.
  abort      an AbortReq whose rid prefixes a running request's rid ends it at its next step with
             FINISH_ABORT (no status code: a client abort, so the OpenAI layer finishes with "abort").
  loads      LoadSnapshot: num_running_reqs, num_waiting_reqs 0, num_used_tokens = num_total_tokens =
             num_active_tokens = KV used, max_total_num_tokens = KV total, max_running_requests =
             --max-running-requests (else 0), token_usage = used / total; memory section (weights 50.1 GB,
             KV 60.0 GB, graphs 2.5 GB, token capacity = KV total); speculative section (accept length =
             accepted tokens / verify steps over all finished requests, accept rate = correct / proposed
             drafts) once a speculative request has run, as the scheduler's load inquirer builds it.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from sglang.srt.constants import HEALTH_CHECK_RID_PREFIX
from sglang.srt.managers.io_struct import AbortReq, BatchStrOutput
from sglang.srt.managers.load_snapshot import LoadSnapshot, MemoryMetrics, SpeculativeMetrics
from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH, FINISH_MATCHED_STR, FINISH_MATCHED_TOKEN
from sglang.srt.observability.metrics_collector import QueueCount, SchedulerStats

from double_model import plan, stop_in
from double_runtime import env_float, env_int, event
from double_tokenizer import THINK_END


@dataclass
class Running:
    rid: str
    prompt_ids: list[int]
    held: int
    aborted: bool = False
    reasoning: bool = False
    reasoning_tokens: int = 0
    steps: int = 0
    correct_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    return_logprob: bool = False  # rule `logprobs`
    top_logprobs: int = 0
    scored: int = 0  # output tokens given a log-probability so far


class SchedulerDouble:
    def __init__(self, server_args, tokenizer, tokenizer_manager) -> None:
        self.tokenizer = tokenizer
        self.tokenizer_manager = tokenizer_manager
        self.drafter = server_args.speculative_algorithm is not None
        self.accept = env_int("SGLANG_DOUBLE_ACCEPT", 3) if self.drafter else 1
        self.num_draft_tokens = server_args.speculative_num_draft_tokens or 0
        self.kv_total = env_int("SGLANG_DOUBLE_KV_TOKENS", 100_000)
        self.mamba_total = server_args.max_mamba_cache_size or 64
        self.max_running = server_args.max_running_requests or 0
        self.running: dict[str, Running] = {}
        self.prompts: list[list[int]] = []
        self.tasks: set[asyncio.Task] = set()
        self.spec_accept_tokens = 0
        self.spec_forward_ct = 0
        self.spec_correct_drafts = 0
        self.on_step = None  # called after every change to the pools (double_app.py logs the stats)

    # --- what the tokenizer manager dispatches -------------------------------------------------------------

    def receive(self, obj: Any) -> None:
        if isinstance(obj, AbortReq):
            if not (obj.rid or "").startswith(HEALTH_CHECK_RID_PREFIX):
                event(event="abort", rid=obj.rid)
            for req in self.running.values():
                if obj.abort_all or req.rid.startswith(obj.rid or "\0"):
                    req.aborted = True
            return
        if (obj.rid or "").startswith(HEALTH_CHECK_RID_PREFIX) and self.running:
            self.tokenizer_manager.last_receive_tstamp = time.time()  # the scheduler's HealthCheckOutput
            return
        task = asyncio.get_running_loop().create_task(self._serve(obj))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # --- one request ---------------------------------------------------------------------------------------

    def _cached(self, prompt: list[int]) -> int:
        best = 0
        for earlier in self.prompts:
            n = 0
            for a, b in zip(earlier, prompt):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return min(best, max(0, len(prompt) - 1))

    async def _serve(self, obj) -> None:
        prompt_ids = list(obj.input_ids)
        cached = self._cached(prompt_ids)
        self.prompts = (self.prompts + [prompt_ids])[-64:]
        req = Running(rid=obj.rid, prompt_ids=prompt_ids, held=len(prompt_ids), reasoning=bool(obj.require_reasoning),
                      return_logprob=bool(obj.return_logprob), top_logprobs=int(obj.top_logprobs_num or 0))
        self.running[req.rid] = req
        self._changed()
        params = obj.sampling_params
        prompt = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        event(event="dispatch", rid=obj.rid, prompt_tail=prompt[-200:], stop_strs=list(params.stop_strs or []),
              stop_regex_strs=list(params.stop_regex_strs or []), no_stop_trim=params.no_stop_trim,
              skip_special_tokens=params.skip_special_tokens)  # fmt: skip
        limit = params.max_new_tokens if params.max_new_tokens is not None else 128
        pieces = plan(prompt, limit)
        stops = list(params.stop_strs or [])
        text, sent = "", 0
        try:
            await asyncio.sleep(env_float("SGLANG_DOUBLE_PREFILL_S", 0.0))
            while True:
                if req.aborted:
                    await self._emit(req, "", [], FINISH_ABORT().to_json(), sent, cached)
                    return
                step, delta, finish = self._next_step(pieces, sent, text, stops, limit)
                ids = [self.tokenizer.eos_token_id if piece.eos else self.tokenizer.convert_tokens_to_ids(piece.text)
                       for piece in step]  # fmt: skip
                self._count_reasoning(req, step)
                text, sent = text + delta, sent + len(step)
                req.held = len(prompt_ids) + sent
                if self.drafter and step:
                    req.steps += 1
                    req.correct_drafts += len(step) - 1
                    while len(req.histogram) < len(step):
                        req.histogram.append(0)
                    req.histogram[len(step) - 1] += 1
                await self._emit(req, delta, ids, finish, sent, cached)
                if finish is not None:
                    if self.drafter and req.steps:
                        self.spec_accept_tokens += sent
                        self.spec_forward_ct += req.steps
                        self.spec_correct_drafts += req.correct_drafts
                    return
                await asyncio.sleep(env_float("SGLANG_DOUBLE_STEP_S", 0.0))
        finally:
            self.running.pop(req.rid, None)
            self._changed()

    def _next_step(self, pieces, sent: int, text: str, stops: list[str], limit: int):
        """The pieces of the next verify step, the text they add, and the finish reason (None: more to come)."""
        step, delta = [], ""
        for piece in pieces[sent:sent + self.accept]:
            step.append(piece)
            hit = stop_in(text + delta + piece.text, stops)
            if hit is not None:
                position, matched = hit
                return step, (text + delta + piece.text)[len(text):max(position, len(text))], (
                    FINISH_MATCHED_STR(matched).to_json())
            delta += piece.text
            if piece.eos:
                return step, delta, FINISH_MATCHED_TOKEN(self.tokenizer.eos_token_id).to_json()
        done = sent + len(step) >= len(pieces)
        return step, delta, FINISH_LENGTH(limit).to_json() if done else None

    def _changed(self) -> None:
        if self.on_step is not None:
            self.on_step()

    @staticmethod
    def _count_reasoning(req: Running, step: list) -> None:
        for piece in step:
            if not req.reasoning:
                return
            req.reasoning_tokens += 1
            req.reasoning = piece.text != THINK_END

    async def _emit(self, req: Running, delta: str, ids: list[int], finish, completion: int, cached: int) -> None:
        spec = {}
        if self.drafter:
            spec = dict(spec_verify_ct=[req.steps], spec_num_correct_drafts=[req.correct_drafts],
                        spec_correct_drafts_histogram=[list(req.histogram)])
        values, tops = self._logprobs(req, ids)
        batch = BatchStrOutput(
            rids=[req.rid], finished_reasons=[finish], output_strs=[delta], output_ids=[array("q", ids)],
            prompt_tokens=[len(req.prompt_ids)], completion_tokens=[completion],
            reasoning_tokens=[req.reasoning_tokens],
            cached_tokens=[cached], retraction_counts=[0],
            input_token_logprobs_val=[], input_token_logprobs_idx=[],
            output_token_logprobs_val=[values], output_token_logprobs_idx=[list(ids)],
            input_top_logprobs_val=[], input_top_logprobs_idx=[],
            output_top_logprobs_val=[[[v for v, _ in top] for top in tops]],
            output_top_logprobs_idx=[[[i for _, i in top] for top in tops]],
            input_token_ids_logprobs_val=[],
            input_token_ids_logprobs_idx=[], output_token_ids_logprobs_val=[], output_token_ids_logprobs_idx=[],
            output_token_entropy_val=None, output_token_sampling_mask=None, output_hidden_states=None,
            routed_experts=None, indexer_topk=None, placeholder_tokens_idx=None, placeholder_tokens_val=None,
            **spec,
        )  # fmt: skip
        await self.tokenizer_manager._handle_batch_output(batch)
        self.tokenizer_manager.last_receive_tstamp = time.time()
        self._changed()

    def _logprobs(self, req: Running, ids: list[int]) -> tuple[list[float], list[list[tuple[float, int]]]]:
        """Rule `logprobs` for the tokens `ids` of one output: their values and, with top_logprobs, top lists."""
        values = [-(req.scored + i + 1) / 8 for i in range(len(ids))] if req.return_logprob else []
        req.scored += len(values)
        if not req.top_logprobs:
            return values, []
        others = [self.tokenizer.eos_token_id, self.tokenizer.pad_token_id]
        tops = [[(v, token), *((v - 1 - j, other) for j, other in enumerate(others))][: req.top_logprobs]
                for v, token in zip(values, ids)]  # fmt: skip
        return values, tops

    # --- pools, stats and loads ----------------------------------------------------------------------------

    def stats(self) -> SchedulerStats:
        kv_evictable = env_int("SGLANG_DOUBLE_KV_EVICTABLE", 0)
        mamba_evictable = env_int("SGLANG_DOUBLE_MAMBA_EVICTABLE", 0)
        running = len(self.running)
        used = sum(req.held for req in self.running.values())
        proposed = self.spec_forward_ct * max(0, self.num_draft_tokens - 1)
        return SchedulerStats(
            num_running_reqs=QueueCount(total=running), num_queue_reqs=QueueCount(total=0),
            token_usage=round(used / self.kv_total, 4), full_token_usage=round(used / self.kv_total, 4),
            mamba_usage=round(running / self.mamba_total, 4),
            num_used_tokens=used, kv_available_tokens=self.kv_total - used - kv_evictable,
            kv_evictable_tokens=kv_evictable, kv_used_tokens=used,
            mamba_available_tokens=self.mamba_total - running - mamba_evictable,
            mamba_evictable_tokens=mamba_evictable, mamba_used_tokens=running,
            spec_accept_length=self.spec_accept_tokens / self.spec_forward_ct if self.spec_forward_ct else 0.0,
            spec_accept_rate=self.spec_correct_drafts / proposed if proposed else 0.0,
        )  # fmt: skip

    def load_snapshot(self) -> LoadSnapshot:
        stats = self.stats()
        speculative = None
        if self.drafter and self.spec_forward_ct > 0:
            speculative = SpeculativeMetrics(accept_length=stats.spec_accept_length, accept_rate=stats.spec_accept_rate)
        used = stats.num_used_tokens
        return LoadSnapshot(
            timestamp=time.time(), dp_rank=0, num_running_reqs=stats.num_running_reqs.total, num_waiting_reqs=0,
            num_used_tokens=used, num_total_tokens=used, num_active_tokens=used,
            max_total_num_tokens=self.kv_total, max_running_requests=self.max_running,
            token_usage=stats.token_usage,
            memory=MemoryMetrics(weight_gb=50.1, kv_cache_gb=60.0, graph_gb=2.5, token_capacity=self.kv_total),
            speculative=speculative,
        )  # fmt: skip


class LoadSnapshotReaderDouble:
    """What the tokenizer manager's `load_snapshot_reader` is in a server (SHM reader of scheduler snapshots)."""

    def __init__(self, scheduler: SchedulerDouble) -> None:
        self.scheduler = scheduler

    def read(self, dp_rank: int) -> LoadSnapshot | None:
        return self.scheduler.load_snapshot() if dp_rank == 0 else None

    def read_all(self) -> list[LoadSnapshot]:
        return [self.scheduler.load_snapshot()]
