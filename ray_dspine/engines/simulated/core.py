"""The clock-free core of a simulated replica: admission, prefix cache, batched steps, events.

Rules (times in simulated seconds; the caller advances time explicitly, the core never reads a clock):
  steps:     one step runs at a time and cannot be interrupted; the next starts the moment the last
             ends (or at submit, when idle). At each step start the core first admits, then runs
               - a prefill round if an admitted request is still to prefill (prefill first, as
                 SGLang's scheduler): which requests and how many tokens of each by
                 prefill_rounds.py (config.schedule_policy, chunked_prefill_tokens; unchunked: the
                 oldest request alone, whole); a request whose last token is prefilled produces its
                 first token at the round's end, else
               - one decode step over every decoding request (continuous batching): a verify step
                 (k in 1..D tokens each, see acceptance.py) while the drafter is active, otherwise an
                 autoregressive step (1 token each); durations from step_model.py, a prefill
                 round's attended pairs counted per request from the KV it has so far (its hit and
                 its earlier rounds).
             Requests arriving mid-step join at the next step boundary.
  admission: as SGLang 0.5.23's PrefillAdder, once per step start (a prefill pass): first come first
             served (shortest-prefill-first: in that policy's order, by uncached tokens as the cache
             stands now, then arrival); the head blocks those behind it; refusal, hits, the new-token
             ratio's estimate of the running requests' future tokens, waiting and allocation in
             admission.py (memory in kv_pool.py, cache in prefix_cache.py); a request that can never
             run is refused at submit.
  retraction: before each decode step the batch's KV for the step is allocated; when it does not fit,
             decoding requests are retracted to the queue's tail and recompute their fill when
             readmitted (retraction.py, which also moves the new-token ratio); an idle replica resets
             the ratio.
  hicache:   with a host tier (config.hicache_host_tokens) or a store shared with other cores, the
             prompt blocks found there after the device hit are loaded, not prefilled (kv_tiers.py);
             a prefill round lasts hicache_load_ms_per_token longer per token loaded for the requests
             in their first round; loaded blocks join the device cache with the prefilled ones.
  counting:  verify_steps counts every target forward that produced tokens for the request,
             the prefill's first token included, so acceptance length = completion / verify_steps
             is exactly 1.0 autoregressive; accept_histogram[k] counts steps that produced k + 1.
             A step's tokens are capped by the request's remaining max_tokens.
  backlog:   load() reports pending_prefill_tokens = uncached prompt tokens of queued requests (their
             prefix hit as the cache stands now) + those admitted requests have still to prefill, the
             running round's tokens counted for its unfinished share; prefill_tokens_per_s = 1000 / per_token_ms;
             queued_kv_tokens = sum over queued requests of (uncached fill + max_tokens - generated),
             the KV they will need if they run to max_tokens; evictable_kv_tokens = cached blocks no running request
             pins (part of free_kv_tokens); decode_step_ms = the step model's duration of a decode
             step (verify step while the drafter is active) over the running and queued requests plus
             one more, with their current context, stretched by 1 / (1 - s): prefills pause decoding,
             s = time share of prefill steps, both sums decayed with time constant
             PREFILL_SHARE_DECAY_S (idle time counts as not prefill), capped at MAX_PREFILL_SHARE.
  EMA:       after each decode step, ema = (1 - w) * ema + w * (tokens in step / requests in step).
  path:      'autoregressive' if any of the request's steps ran without the drafter, else 'speculative'.
  events:    first_token, tokens (one per step per request) and finished; with token_events=False
             the per-step tokens events are left out (a virtual-time driver that needs only first
             tokens and finishes saves most of the core's allocations).
  time:      submit/cancel/advance_to take now_s >= the last time seen; steps ending at or before
             now_s complete first, so call order cannot break causality. Events of steps completed
             inside submit are returned by the next advance_to.
Parameters: see SimulatedEngineConfig and SimProfile.
Complexity: O(n) per step over n running requests (O(n log n) when it retracts); O(blocks) per admission;
O(1) next_event_s.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from ray_dspine.engines.attention_cost import attended_pairs
from ray_dspine.engines.protocol import EngineError, LoadSnapshot
from ray_dspine.engines.simulated.acceptance import AcceptanceModel
from ray_dspine.engines.simulated.admission import (
    AdmissionPlan,
    NewTokenRatio,
    WaitReason,
    commit_admission,
    hit_blocks,
    pass_budget,
    plan_admission,
    refusal,
)
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from ray_dspine.engines.simulated.kv_pool import MemoryPools
from ray_dspine.engines.simulated.kv_tiers import KvTier, KvTiers
from ray_dspine.engines.simulated.prefill_rounds import PrefillWork, plan_round, spf_order
from ray_dspine.engines.simulated.prefix_cache import PrefixCache
from ray_dspine.engines.simulated.profile import SimProfile
from ray_dspine.engines.simulated.request import RunningRequest, SimCounters, SimEvent, SimEventKind, SimRequest
from ray_dspine.engines.simulated.retraction import decode_need, keep_order, lookahead_tokens
from ray_dspine.engines.simulated.step_model import decode_step_ms, prefill_step_ms, verify_step_ms


# Time constant (simulated seconds) of the prefill share behind decode_step_ms, and its cap.
PREFILL_SHARE_DECAY_S = 5.0
MAX_PREFILL_SHARE = 0.9


class _Tally:
    """SimCounters' fields as plain attributes: the hot path bumps them millions of times a day."""

    def __init__(self) -> None:
        for name, field_info in SimCounters.model_fields.items():
            setattr(self, name, field_info.default)


@dataclass
class _Step:
    kind: str  # "prefill" | "decode" | "verify"
    start_s: float
    end_s: float
    request_ids: list[str]
    tokens: tuple[int, ...] = ()  # prefill rounds: tokens of each request prefilled in the step


class SimReplicaCore:
    def __init__(
        self,
        config: SimulatedEngineConfig,
        profile: SimProfile,
        rng: random.Random,
        token_events: bool = True,
        store: KvTier | None = None,
    ):
        self.config = config
        self._token_events = token_events
        self.profile = profile
        self._rng = rng
        self._drafter = profile.drafter_profile(config.drafter)
        self._acceptance = (
            None
            if self._drafter is None
            else AcceptanceModel(
                profile.accept_length_mean(config.drafter, config.workload),
                self._drafter.per_request_cv,
                self._drafter.draft_tokens,
            )
        )
        self._histogram_len = 1 if self._drafter is None else self._drafter.draft_tokens
        self._pools = MemoryPools(config.total_kv_tokens, config.num_state_slots, config.state_slots_per_request)
        self._cache = PrefixCache(
            config.prefix_block_tokens, self._tiers(config, store), config.radix_eviction_policy
        )
        self._queue: OrderedDict[str, SimRequest] = OrderedDict()
        self._arrival: dict[str, int] = {}
        self._num_arrivals = 0
        self._waited: set[str] = set()
        self._retracted: dict[str, RunningRequest] = {}  # queued requests retracted while decoding
        self._ratio = NewTokenRatio(config)
        self._prefilling: OrderedDict[str, RunningRequest] = OrderedDict()
        self._decoding: dict[str, RunningRequest] = {}
        self._step: _Step | None = None
        self._now_s = 0.0
        self._pending: list[SimEvent] = []
        self._drafter_enabled = True
        self._base_seed: int | None = None
        self._accept_ema = 1.0
        self._prefill_s = 0.0  # time-decayed seconds spent in prefill steps (PREFILL_SHARE_DECAY_S)
        self._elapsed_s = 0.0  # time-decayed seconds elapsed, idle included
        self._share_at_s = 0.0
        self._counters = _Tally()

    @staticmethod
    def _tiers(config: SimulatedEngineConfig, store: KvTier | None) -> KvTiers | None:
        host_blocks = config.hicache_host_tokens // config.prefix_block_tokens
        if host_blocks == 0 and store is None:
            return None
        return KvTiers(KvTier(host_blocks) if host_blocks else None, store, config.hicache_write_policy)

    # ---- time -------------------------------------------------------------------------------
    @property
    def now_s(self) -> float:
        return self._now_s

    def next_event_s(self) -> float | None:
        """When the running step ends (its events become due); None when idle."""
        return None if self._step is None else self._step.end_s

    def advance_to(self, now_s: float) -> list[SimEvent]:
        """Complete every step ending at or before now_s; return the events, oldest first."""
        self._run_until(now_s)
        events, self._pending = self._pending, []
        return events

    def _run_until(self, now_s: float) -> None:
        if now_s < self._now_s:
            raise ValueError(f"time went backwards: {now_s} < {self._now_s}")
        while self._step is not None and self._step.end_s <= now_s:
            step, self._step = self._step, None
            self._now_s = step.end_s
            self._complete(step)
            self._start_next_step(step.end_s)
        self._now_s = now_s

    # ---- requests -----------------------------------------------------------------------------
    def submit(self, request: SimRequest, now_s: float) -> None:
        self._run_until(now_s)
        rid = request.request_id
        if rid in self._queue or rid in self._prefilling or rid in self._decoding:
            raise EngineError(f"request id {rid!r} is already on this replica", status=409, code="duplicate_id")
        refused = refusal(request, self.config)
        if refused is not None:
            raise refused
        if self._base_seed is None:
            self._base_seed = self._rng.getrandbits(63)
        self._queue[rid] = request
        self._arrival[rid] = self._num_arrivals
        self._num_arrivals += 1
        self._counters.num_submitted += 1
        if self._step is None:
            self._start_next_step(now_s)

    def cancel(self, request_id: str) -> bool:
        """Drop a request wherever it is and free its memory; False if unknown or already done."""
        run = self._prefilling.pop(request_id, None) or self._decoding.pop(request_id, None)
        if run is not None:
            self._release(run)
        elif self._queue.pop(request_id, None) is None:
            return False
        else:
            self._arrival.pop(request_id, None)
            self._retracted.pop(request_id, None)
        self._waited.discard(request_id)
        self._counters.num_cancelled += 1
        return True

    # ---- drafter ------------------------------------------------------------------------------
    @property
    def drafter_active(self) -> bool:
        return self._drafter is not None and self._drafter_enabled

    def set_drafter_enabled(self, enabled: bool) -> None:
        """Takes effect from the next step; without a configured drafter it stays inactive."""
        self._drafter_enabled = enabled

    # ---- scheduling ---------------------------------------------------------------------------
    @property
    def new_token_ratio(self) -> float:
        """Admission's current new-token ratio (admission.py rule `ratio`)."""
        return self._ratio.current

    def _admit(self) -> None:
        """One prefill pass (admission.py rules `offset`, `fit`, `reserve`)."""
        if not self._queue:
            return
        cfg = self.config
        running = [*self._prefilling.values(), *self._decoding.values()]
        ratio, clip = self._ratio.current, cfg.clip_max_new_tokens
        budget = pass_budget(((run.num_generated, run.request.max_tokens) for run in running), ratio, clip)
        while self._queue and len(self._prefilling) + len(self._decoding) < cfg.max_running_requests:
            rid, req = self._next_to_admit()
            old = self._retracted.get(rid)
            generated = 0 if old is None else old.num_generated
            plan = plan_admission(req, generated, self._cache, self._pools, budget, cfg)
            if not isinstance(plan, AdmissionPlan):
                self._note_wait(rid, plan)
                return
            del self._queue[rid]
            self._waited.discard(rid)
            commit_admission(plan, self._cache, self._pools, budget)
            c = self._counters
            if old is None:
                acceptance = (
                    None if self._acceptance is None else self._acceptance.for_request(self._base_seed or 0, rid)
                )
                self._prefilling[rid] = RunningRequest(
                    request=req,
                    arrival=self._arrival.pop(rid),
                    cached_tokens=plan.cached_tokens,
                    private_kv_tokens=plan.private_kv_tokens,
                    pinned_hashes=list(plan.hit_hashes),
                    acceptance=acceptance,
                    histogram=[0] * self._histogram_len,
                    loaded_tokens=plan.loaded_tokens,
                )
                c.num_admitted += 1
                c.num_prefix_hit_tokens += plan.cached_tokens
                c.num_tier_hit_tokens += plan.loaded_tokens
                c.num_prefill_tokens += req.prompt_tokens - plan.cached_tokens
            else:  # retraction.py rule `readmit`
                del self._retracted[rid]
                old.arrival = self._arrival.pop(rid)
                old.cached_tokens = plan.cached_tokens
                old.private_kv_tokens = plan.private_kv_tokens
                old.pinned_hashes = list(plan.hit_hashes)
                old.loaded_tokens = plan.loaded_tokens
                old.prefilled_tokens = 0
                old.refill_tokens = generated
                old.decode_kv_tokens = generated
                self._prefilling[rid] = old
                c.num_recomputed_tokens += req.prompt_tokens + generated - plan.cached_tokens
            if budget.remaining(self._pools, self._cache) <= 0:  # rule `reserve`: budget_state
                return

    def _next_to_admit(self) -> tuple[str, SimRequest]:
        if self.config.schedule_policy != "shortest-prefill-first":
            return next(iter(self._queue.items()))
        works = [PrefillWork(rid, self._uncached_now(req), self._arrival[rid]) for rid, req in self._queue.items()]
        rid = spf_order(works)[0].request_id
        return rid, self._queue[rid]

    def _note_wait(self, rid: str, reason: WaitReason) -> None:
        if rid in self._waited:
            return
        self._waited.add(rid)
        if reason == "memory":
            self._counters.num_waited_for_memory += 1
        else:
            self._counters.num_waited_for_state_slots += 1

    def _start_next_step(self, t: float) -> None:
        self._admit()
        tokens: tuple[int, ...] = ()
        if self._prefilling:
            plan = self._plan_prefill_round()
            tokens = tuple(n for _, n in plan)
            pairs = sum(self._attended_pairs(rid, n) for rid, n in plan)
            ms = prefill_step_ms(self.profile, sum(tokens), pairs) + self._load_ms(rid for rid, _ in plan)
            kind, ids = "prefill", [rid for rid, _ in plan]
        elif self._decoding:
            self._make_decode_room()
            n = len(self._decoding)
            context = sum(run.context_tokens for run in self._decoding.values())
            if self.drafter_active:
                assert self._drafter is not None
                kind, ms = "verify", verify_step_ms(self.profile, self._drafter, n, context)
            else:
                kind, ms = "decode", decode_step_ms(self.profile, n, context)
            ids = list(self._decoding)
        else:
            if not self._queue:
                self._ratio.reset()  # admission.py rule `ratio`: an idle replica
            return
        self._step = _Step(kind=kind, start_s=t, end_s=t + ms / 1000.0, request_ids=ids, tokens=tokens)

    def _make_decode_room(self) -> None:
        """retraction.py rules `need`, `check`, `order`, `retract`, `ratio`; then allocate the step's KV."""
        L = lookahead_tokens(self._drafter.draft_tokens if self.drafter_active and self._drafter else None)
        need = {
            rid: decode_need(run.num_generated, run.request.max_tokens, run.decode_kv_tokens, L)
            for rid, run in self._decoding.items()
        }
        cache = self._cache

        def fits(rids: list[str]) -> bool:
            available = self._pools.free_kv_tokens(cache.cached_tokens) + cache.evictable_tokens
            return sum(need[rid] for rid in rids) <= available

        keep = list(self._decoding)
        if fits(keep):
            self._ratio.decay_step()
        else:
            keep = keep_order(
                [(rid, run.num_generated, run.request.prompt_tokens) for rid, run in self._decoding.items()]
            )
            first = True
            while first or not fits(keep):
                if len(keep) == 1:
                    break
                first = False
                self._retract(keep.pop())
            self._ratio.after_retract((run.num_generated, run.request.max_tokens) for run in self._decoding.values())
        for rid, run in self._decoding.items():
            n = need[rid]
            if n == 0:
                continue
            missing = n - self._pools.free_kv_tokens(cache.cached_tokens)
            if missing > 0:
                cache.evict(missing)
            self._pools.grow(n)
            run.private_kv_tokens += n
            run.decode_kv_tokens += n
        if self._pools.free_kv_tokens(cache.cached_tokens) < 0:
            raise RuntimeError("KV pool over-committed at a decode step: the retraction rule is broken")
        self._pools.record_peaks(cache.cached_tokens, cache.evictable_tokens)

    def _retract(self, rid: str) -> None:
        """retraction.py rule `retract`: free the request's KV and slots, back to the queue's tail."""
        run = self._decoding.pop(rid)
        self._release(run)
        run.private_kv_tokens = 0
        run.pinned_hashes = []
        run.decode_kv_tokens = 0
        run.num_retractions += 1
        self._retracted[rid] = run
        self._queue[rid] = run.request
        self._arrival[rid] = self._num_arrivals
        self._num_arrivals += 1
        self._counters.num_retractions += 1
        self._counters.num_retracted_output_tokens += run.num_generated

    def _attended_pairs(self, rid: str, num_tokens: int) -> int:
        """What a round's num_tokens of this request attend (rule `pairs`, engines/attention_cost.py): its
        KV so far is its hit (device and tiers) and what earlier rounds prefilled."""
        run = self._prefilling[rid]
        return attended_pairs(run.cached_tokens + run.prefilled_tokens, num_tokens)

    def _load_ms(self, request_ids) -> float:
        """Loading from the HiCache tiers, paid in a request's first prefill round."""
        loaded = sum(
            self._prefilling[rid].loaded_tokens for rid in request_ids if self._prefilling[rid].prefilled_tokens == 0
        )
        return loaded * self.config.hicache_load_ms_per_token

    def _plan_prefill_round(self) -> list[tuple[str, int]]:
        chunked: PrefillWork | None = None
        waiting: list[PrefillWork] = []
        for rid, run in self._prefilling.items():
            work = PrefillWork(rid, run.prefill_left_tokens, run.arrival)
            if run.prefilled_tokens > 0:
                chunked = work  # at most one request is ever cut
            else:
                waiting.append(work)
        cfg = self.config
        return plan_round(chunked, waiting, cfg.chunked_prefill_tokens, cfg.schedule_policy, cfg.page_tokens)

    def _complete(self, step: _Step) -> None:
        c = self._counters
        c.busy_s += step.end_s - step.start_s
        self._note_time(step.end_s, step.end_s - step.start_s if step.kind == "prefill" else 0.0)
        t = step.end_s
        if step.kind == "prefill":
            c.num_prefill_steps += 1
            for rid, num_tokens in zip(step.request_ids, step.tokens):
                run = self._prefilling.get(rid)
                if run is None:  # cancelled mid-step
                    continue
                run.prefilled_tokens += num_tokens
                if run.prefill_left_tokens <= 0:
                    del self._prefilling[rid]
                    self._complete_prefill(run, t)
            return
        speculative = step.kind == "verify"
        c.num_verify_steps += speculative
        c.num_decode_steps += not speculative
        num_tokens = num_requests = 0
        for rid in step.request_ids:
            run = self._decoding.get(rid)
            if run is None:  # cancelled mid-step
                continue
            drawn = run.acceptance.draw() if speculative and run.acceptance is not None else 1
            k = min(drawn, run.num_remaining)
            run.used_autoregressive |= not speculative
            run.record_step(k)
            num_tokens += k
            num_requests += 1
            self._emit_tokens(run, "tokens", k, t)
        if num_requests:
            w = self.config.accept_ema_weight
            self._accept_ema = (1.0 - w) * self._accept_ema + w * (num_tokens / num_requests)

    def _complete_prefill(self, run: RunningRequest, t: float) -> None:
        req = run.request
        B = self.config.prefix_block_tokens
        new_hashes = req.prefix_block_hashes[(run.cached_tokens - run.loaded_tokens) // B : req.prompt_tokens // B]
        for block_hash in new_hashes:  # this prefill's (and load's) full blocks move from the request to the cache
            self._cache.insert(block_hash)
            self._pools.shrink(B)
            run.private_kv_tokens -= B
            run.pinned_hashes.append(block_hash)
        readmitted = run.refill_tokens > 0
        run.used_autoregressive = run.used_autoregressive or not self.drafter_active
        run.refill_tokens = 0
        run.record_step(1)
        self._decoding[req.request_id] = run
        self._emit_tokens(run, "tokens" if readmitted else "first_token", 1, t)

    def _emit_tokens(self, run: RunningRequest, kind: SimEventKind, k: int, t: float) -> None:
        rid = run.request.request_id
        self._counters.num_output_tokens += k
        if self._token_events or kind == "first_token":
            usage = run.usage() if kind == "first_token" else None  # the prompt's counts, for the first chunk
            self._pending.append(SimEvent(kind=kind, request_id=rid, time_s=t, num_tokens=k, usage=usage))
        if run.num_remaining == 0:
            del self._decoding[rid]
            self._release(run)
            self._counters.num_finished += 1
            self._pending.append(
                SimEvent(kind="finished", request_id=rid, time_s=t, usage=run.usage(), finish_reason="length")
            )

    def _release(self, run: RunningRequest) -> None:
        self._pools.release(run.private_kv_tokens)
        self._cache.unpin(run.pinned_hashes)

    # ---- observation --------------------------------------------------------------------------
    def load(self) -> LoadSnapshot:
        cached = self._cache.cached_tokens
        queued_prefill, queued_kv = self._queued_tokens()
        return LoadSnapshot(
            healthy=True,
            total_kv_tokens=self.config.total_kv_tokens,
            host_kv_tokens=self.config.hicache_host_tokens,
            free_kv_tokens=self._pools.free_kv_tokens(cached) + self._cache.evictable_tokens,
            evictable_kv_tokens=self._cache.evictable_tokens,
            total_state_slots=self.config.num_state_slots,
            free_state_slots=self._pools.free_state_slots,
            state_slots_per_request=self.config.state_slots_per_request,
            num_running=len(self._prefilling) + len(self._decoding),
            num_queued=len(self._queue),
            queued_kv_tokens=queued_kv,
            pending_prefill_tokens=queued_prefill + self._unprefilled_tokens(),
            prefill_tokens_per_s=self._prefill_tokens_per_s(),
            decode_step_ms=self._next_decode_step_ms(),
            accept_length_ema=self._accept_ema,
            drafter_active=self.drafter_active,
            draft_vram_gb=0.0 if self._drafter is None else self._drafter.draft_vram_gb,
            engine="simulated",
        )

    def _note_time(self, t: float, prefill_s: float) -> None:
        """Decay both sums over the time since the last note, then add this step's prefill time."""
        gap = max(0.0, t - self._share_at_s)
        keep = math.exp(-gap / PREFILL_SHARE_DECAY_S)
        self._prefill_s = self._prefill_s * keep + prefill_s
        self._elapsed_s = self._elapsed_s * keep + gap
        self._share_at_s = t

    def _prefill_share(self) -> float:
        """The decayed share as of now: time since the last step counts as not prefill."""
        gap = max(0.0, self._now_s - self._share_at_s)
        keep = math.exp(-gap / PREFILL_SHARE_DECAY_S)
        elapsed = self._elapsed_s * keep + gap
        return min(MAX_PREFILL_SHARE, self._prefill_s * keep / elapsed) if elapsed > 0 else 0.0

    def _next_decode_step_ms(self) -> float:
        runs = [*self._prefilling.values(), *self._decoding.values()]
        n = len(runs) + len(self._queue) + 1
        context = sum(run.context_tokens for run in runs) + sum(req.prompt_tokens for req in self._queue.values())
        if self.drafter_active:
            assert self._drafter is not None
            step_ms = verify_step_ms(self.profile, self._drafter, n, context)
        else:
            step_ms = decode_step_ms(self.profile, n, context)
        return step_ms / (1.0 - self._prefill_share())

    def _prefill_tokens_per_s(self) -> float:
        per_token_ms = self.profile.prefill.per_token_ms
        return 1000.0 / per_token_ms if per_token_ms > 0 else 0.0

    def _queued_tokens(self) -> tuple[int, int]:
        """(uncached prompt tokens, KV tokens to reserve) of the queued requests."""
        prefill = kv = 0
        for req in self._queue.values():
            uncached = self._uncached_now(req)
            prefill += uncached
            old = self._retracted.get(req.request_id)
            kv += uncached + req.max_tokens - (0 if old is None else old.num_generated)
        return prefill, kv

    def _uncached_now(self, req: SimRequest) -> int:
        """Fill tokens a queued request would still prefill if it were admitted now (rule `hit`); a retracted
        request's fill includes what it had generated."""
        old = self._retracted.get(req.request_id)
        fill = req.prompt_tokens + (0 if old is None else old.num_generated)
        return fill - self.cached_prompt_tokens(req.prompt_tokens, req.prefix_block_hashes)

    def _unprefilled_tokens(self) -> int:
        """Tokens admitted requests have still to prefill, the running round's counted for its share run."""
        total = sum(run.prefill_left_tokens for run in self._prefilling.values())
        step = self._step
        if step is None or step.kind != "prefill" or step.end_s <= step.start_s:
            return total
        done_share = min(1.0, max(0.0, (self._now_s - step.start_s) / (step.end_s - step.start_s)))
        in_round = sum(n for rid, n in zip(step.request_ids, step.tokens) if rid in self._prefilling)
        return max(0, round(total - in_round * done_share))

    def counters(self) -> SimCounters:
        snapshot = SimCounters(**vars(self._counters))
        snapshot.num_evicted_blocks = self._cache.num_evicted_blocks
        snapshot.peak_kv_utilization = self._pools.peak_kv_utilization
        snapshot.peak_state_utilization = self._pools.peak_state_utilization
        return snapshot

    @property
    def prefix_cache(self) -> PrefixCache:
        return self._cache

    def cached_prompt_tokens(self, prompt_tokens: int, prefix_block_hashes: Sequence[str]) -> int:
        """Prompt tokens this replica's cache would give such a request if it were admitted now."""
        return hit_blocks(self._cache, prompt_tokens, prefix_block_hashes) * self._cache.block_tokens
