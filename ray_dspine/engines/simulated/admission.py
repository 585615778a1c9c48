"""Admission of one request into a simulated replica: refuse, wait, or reserve (never over-commit).

Rules (P = prompt tokens, M = max_tokens, B = block tokens, K = total_kv_tokens, S = state slots,
s = slots per request; memory accounting in kv_pool.py, cache rules in prefix_cache.py):
  refuse:  P + M > K, or s > S: the request could never run, even alone on an empty replica.
  hit:     d = leading device-cached blocks among the prompt's floor(P / B) full blocks, t = the blocks
           the HiCache tiers hold right after them (kv_tiers.py; 0 without tiers);
           h = min(d + t, floor((P - 1) / B)) (at least one prompt token is always prefilled, to
           produce the first token); of those, h_d = min(d, h) are on the device and h - h_d are loaded
           from a tier (not prefilled, but they need device KV like prefilled tokens).
  wait:    if free slots < s ("state_slots"), else if free + evictable-not-hit < P - h_d * B + M ("memory").
  reserve: pin the h_d device blocks, evict least-recently-used unreferenced blocks only for what is
           missing, then reserve R = P - h_d * B + M tokens and s slots; the loaded blocks become the
           tiers' most recent. Afterwards free >= 0 always.
Parameters: B >= 1 tokens; K >= 1 tokens; S, s >= 1.
Complexity: O(full prompt blocks) per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ray_dspine.engines.protocol import EngineError
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from ray_dspine.engines.simulated.kv_pool import MemoryPools
from ray_dspine.engines.simulated.prefix_cache import PrefixCache
from ray_dspine.engines.simulated.request import SimRequest

WaitReason = Literal["state_slots", "memory"]


@dataclass(frozen=True)
class AdmissionPlan:
    hit_hashes: tuple[str, ...]  # the h_d device blocks to pin
    cached_tokens: int  # h * B: prompt tokens not prefilled (device hits and tier loads)
    private_kv_tokens: int
    loaded_tokens: int = 0  # (h - h_d) * B: of cached_tokens, those loaded from a HiCache tier
    loaded_hashes: tuple[str, ...] = ()  # the h - h_d blocks loaded


def refusal(request: SimRequest, config: SimulatedEngineConfig) -> EngineError | None:
    """Why the request can never run here, or None."""
    need = request.prompt_tokens + request.max_tokens
    if need > config.total_kv_tokens:
        return EngineError(
            f"prompt {request.prompt_tokens} + max_tokens {request.max_tokens} = {need} tokens exceeds the "
            f"replica's {config.total_kv_tokens} KV tokens (simulated)",
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


def plan_admission(
    request: SimRequest, cache: PrefixCache, pools: MemoryPools
) -> AdmissionPlan | WaitReason:
    if not pools.slots_fit():
        return "state_slots"
    B = cache.block_tokens
    num_hit, on_device = hit_split(cache, request.prompt_tokens, request.prefix_block_hashes)
    hit_hashes = request.prefix_block_hashes[:on_device]
    private = request.prompt_tokens - on_device * B + request.max_tokens
    if not pools.kv_fits(private, cache.cached_tokens, cache.evictable_tokens_excluding(hit_hashes)):
        return "memory"
    return AdmissionPlan(
        hit_hashes=hit_hashes,
        cached_tokens=num_hit * B,
        private_kv_tokens=private,
        loaded_tokens=(num_hit - on_device) * B,
        loaded_hashes=request.prefix_block_hashes[on_device:num_hit],
    )


def commit_admission(plan: AdmissionPlan, cache: PrefixCache, pools: MemoryPools) -> None:
    cache.pin_hits(plan.hit_hashes)
    if plan.loaded_hashes and cache.tiers is not None:
        cache.tiers.touch(plan.loaded_hashes)
    missing = plan.private_kv_tokens - pools.free_kv_tokens(cache.cached_tokens)
    if missing > 0:
        cache.evict(missing)
    pools.reserve(plan.private_kv_tokens)
    if pools.free_kv_tokens(cache.cached_tokens) < 0:
        raise RuntimeError("KV pool over-committed: the admission rule is broken")
    pools.record_peaks(cache.cached_tokens, cache.evictable_tokens)
