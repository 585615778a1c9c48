"""Admission of queued requests into a simulated replica, as SGLang 0.5.23's PrefillAdder admits them.

Notation: P = prompt tokens, M = max_tokens, g = tokens a request has generated (g > 0 only for a
retracted request back in the queue: its fill is P + g, SGLang's `fill_ids` = prompt + output so far),
B = block tokens, K = total_kv_tokens, S = state slots, s = slots per request, p = page_tokens,
C = clip_max_new_tokens, r = the replica's new-token ratio (rule `ratio`).
Rules, each with the SGLang 0.5.23 code it follows (sglang/srt/...):
  refuse:  P + M > K, or P + min(M, C) + p >= K (rule `fit` could not admit it even on an empty
           replica), or s > S: the request could never run. (SGLang clips max_new_tokens instead,
           managers/scheduler.py `max_new_tokens_for_memory`; the twin refuses, as before.)
  hit:     d = leading device-cached blocks among the prompt's floor(P / B) full blocks, t = the blocks
           the HiCache tiers hold right after them (kv_tiers.py; 0 without tiers);
           h = min(d + t, floor((P - 1) / B)); of those, h_d = min(d, h) are on the device and h - h_d are
           loaded from a tier (not prefilled, but they need device KV like prefilled tokens). Generated
           tokens are never in the cache (a retracted request's KV is freed without being inserted:
           managers/schedule_batch.py `release_req`, "don't insert into the tree").
  offset:  each prefill pass (each step start of the core) starts a budget with
           offset = sum over running requests (prefilling and decoding) of min(M - g, C) * r
           (managers/schedule_policy.py `PrefillAdder.__init__` / `_get_running_request_total_token_offset`),
           remaining = free + evictable - offset (mem_cache/prefill_budget.py `PrefillBudget.remaining_total`;
           free + evictable as the pass began: the pass allocates nothing until it ends, so tokens the
           twin allocates for requests admitted earlier in the pass are added back).
  fit:     the head request (queue order: FCFS, or shortest-prefill-first) needs
           total = E + min(M - g, C) + p with E = P + g - h_d * B (its fill less its device hit), and is
           admitted iff free slots >= s (`rem_mamba_slots` / the Mamba pool's `alloc`) and
           total < remaining with its hit blocks excluded from evictable (`add_one_req`: `_lock_node`,
           `PrefillBudget.check_prefill`); otherwise it waits ("state_slots" first, then "memory") and
           blocks those behind it (the pass stops at NO_TOKEN).
  reserve: an admitted request adds E + p + min(M, C) to the offset (`_update_prefill_budget` ->
           `PrefillBudget.reserve`; SGLang charges the request's whole clipped max_new_tokens here, g
           not subtracted); the pass stops once remaining <= 0 (`budget_state`). The twin allocates the
           E tokens and s slots at admission (SGLang allocates them as the prefill runs; the pass's
           offset covers them either way), pins the h_d device blocks, evicts least-recently-used
           unreferenced blocks only for what is missing, and makes the loaded blocks the tiers' most
           recent.
  ratio:   r starts at init = min(SGLANG_INIT_NEW_TOKEN_RATIO (0.7) * schedule_conservativeness (1), 1),
           min = init * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR (0.14), decay = (init - min) /
           SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS (600); each decode step that retracts nothing lowers it by
           decay down to min; a retraction sets it to min(1, (sum of g + R * n) / (sum of M + 1)) over the
           n requests left in the decode batch, R = SGLANG_RETRACT_DECODE_STEPS (20); an idle replica
           (nothing queued or running) resets it to init (managers/scheduler_components/
           new_token_ratio_tracker.py `NewTokenRatioTracker`; managers/scheduler.py
           `update_running_batch`, and the idle check's `reset`).
Parameters: B, p >= 1 tokens; K >= 1 tokens; S, s >= 1; C >= 1 tokens; 0 < r <= 1.
Complexity: O(full prompt blocks) per admission; O(running) per pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ray_dspine.engines.protocol import EngineError
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from ray_dspine.engines.simulated.kv_pool import MemoryPools
from ray_dspine.engines.simulated.prefix_cache import PrefixCache
from ray_dspine.engines.simulated.request import SimRequest

WaitReason = Literal["state_slots", "memory"]


class NewTokenRatio:
    """Rule `ratio`: SGLang's estimate of the share of max_tokens a running request will still generate."""

    def __init__(self, config: SimulatedEngineConfig):
        self.init = min(config.new_token_ratio_init, 1.0)
        self.min = min(self.init * config.new_token_ratio_min_factor, 1.0)
        self.decay = (self.init - self.min) / config.new_token_ratio_decay_steps
        self.retract_decode_steps = config.retract_decode_steps
        self.current = self.init

    def decay_step(self) -> None:
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        self.current = self.init

    def after_retract(self, left: Iterable[tuple[int, int]]) -> None:
        """left: (generated, max_tokens) of each request still in the decode batch."""
        pairs = list(left)
        generated = sum(g for g, _ in pairs)
        max_tokens = sum(m for _, m in pairs)
        self.current = min(1.0, (generated + self.retract_decode_steps * len(pairs)) / (max_tokens + 1))


@dataclass
class PrefillBudget:
    """Rule `offset`: one prefill pass's budget."""

    offset_tokens: float
    allocated_tokens: int = 0  # allocated by this pass's admissions (added back: rule `offset`)

    def remaining(self, pools: MemoryPools, cache: PrefixCache, exclude: Sequence[str] = ()) -> float:
        evictable = cache.evictable_tokens_excluding(exclude) if exclude else cache.evictable_tokens
        free = pools.free_kv_tokens(cache.cached_tokens)
        return free + evictable + self.allocated_tokens - self.offset_tokens


@dataclass(frozen=True)
class AdmissionPlan:
    hit_hashes: tuple[str, ...]  # the h_d device blocks to pin
    cached_tokens: int  # h * B: prompt tokens not prefilled (device hits and tier loads)
    private_kv_tokens: int  # E: fill tokens allocated now
    offset_tokens: int  # rule `reserve`: what the pass's offset grows by
    loaded_tokens: int = 0  # (h - h_d) * B: of cached_tokens, those loaded from a HiCache tier
    loaded_hashes: tuple[str, ...] = ()  # the h - h_d blocks loaded


def refusal(request: SimRequest, config: SimulatedEngineConfig) -> EngineError | None:
    """Rule `refuse`: why the request can never run here, or None."""
    need = request.prompt_tokens + request.max_tokens
    if need > config.total_kv_tokens:
        return EngineError(
            f"prompt {request.prompt_tokens} + max_tokens {request.max_tokens} = {need} tokens exceeds the "
            f"replica's {config.total_kv_tokens} KV tokens (simulated)",
            status=400,
            param="max_tokens",
            code="context_length_exceeded",
        )
    estimate = request.prompt_tokens + min(request.max_tokens, config.clip_max_new_tokens) + config.page_tokens
    if estimate >= config.total_kv_tokens:
        return EngineError(
            f"prompt {request.prompt_tokens} + max_tokens {request.max_tokens} (clipped to "
            f"{config.clip_max_new_tokens}) + a page {config.page_tokens} = {estimate} tokens: admission needs "
            f"fewer than the replica's {config.total_kv_tokens} KV tokens (simulated)",
            status=400,
            param="max_tokens",
            code="context_length_exceeded",
        )
    if config.state_slots_per_request > config.num_state_slots:
        return EngineError(
            f"a request needs {config.state_slots_per_request} state slots; the replica has "
            f"{config.num_state_slots} (simulated)",
            status=503,
        )
    return None


def hit_split(cache: PrefixCache, prompt_tokens: int, prefix_block_hashes: Sequence[str]) -> tuple[int, int]:
    """Rule `hit`: (h, h_d), the prompt's leading blocks this cache and its tiers would give it now."""
    B = cache.block_tokens
    full = prefix_block_hashes[: prompt_tokens // B]
    on_device = cache.match(full)
    num_hit = min(on_device + cache.tier_run(full, on_device), (prompt_tokens - 1) // B)
    return num_hit, min(on_device, num_hit)


def hit_blocks(cache: PrefixCache, prompt_tokens: int, prefix_block_hashes: Sequence[str]) -> int:
    """Rule `hit`: h, the prompt's leading blocks this cache (with its tiers) would give it now."""
    return hit_split(cache, prompt_tokens, prefix_block_hashes)[0]


def pass_budget(running: Iterable[tuple[int, int]], ratio: float, clip_max_new_tokens: int) -> PrefillBudget:
    """Rule `offset`; running: (generated, max_tokens) of each running request."""
    return PrefillBudget(sum(min(m - g, clip_max_new_tokens) * ratio for g, m in running))


def plan_admission(
    request: SimRequest,
    generated: int,
    cache: PrefixCache,
    pools: MemoryPools,
    budget: PrefillBudget,
    config: SimulatedEngineConfig,
) -> AdmissionPlan | WaitReason:
    """Rule `fit` for the head request (generated > 0: a retracted one)."""
    if not pools.slots_fit():
        return "state_slots"
    B = cache.block_tokens
    num_hit, on_device = hit_split(cache, request.prompt_tokens, request.prefix_block_hashes)
    hit_hashes = request.prefix_block_hashes[:on_device]
    fill = request.prompt_tokens + generated - on_device * B
    clip = config.clip_max_new_tokens
    total = fill + min(request.max_tokens - generated, clip) + config.page_tokens
    if not total < budget.remaining(pools, cache, hit_hashes):
        return "memory"
    return AdmissionPlan(
        hit_hashes=hit_hashes,
        cached_tokens=num_hit * B,
        private_kv_tokens=fill,
        offset_tokens=fill + config.page_tokens + min(request.max_tokens, clip),
        loaded_tokens=(num_hit - on_device) * B,
        loaded_hashes=request.prefix_block_hashes[on_device:num_hit],
    )


def commit_admission(plan: AdmissionPlan, cache: PrefixCache, pools: MemoryPools, budget: PrefillBudget) -> None:
    """Rule `reserve`."""
    cache.pin_hits(plan.hit_hashes)
    if plan.loaded_hashes and cache.tiers is not None:
        cache.tiers.touch(plan.loaded_hashes)
    missing = plan.private_kv_tokens - pools.free_kv_tokens(cache.cached_tokens)
    if missing > 0:
        cache.evict(missing)
    pools.admit(plan.private_kv_tokens)
    budget.offset_tokens += plan.offset_tokens
    budget.allocated_tokens += plan.private_kv_tokens
    if pools.free_kv_tokens(cache.cached_tokens) < 0:
        raise RuntimeError("KV pool over-committed: the admission rule is broken")
    pools.record_peaks(cache.cached_tokens, cache.evictable_tokens)
