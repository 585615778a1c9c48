"""Decode-step memory and retraction of a simulated replica, as SGLang 0.5.23 retracts decode requests.

Notation: a decoding request has P prompt tokens, M = max_tokens, g tokens generated (the prefill's
first token included), a = KV tokens it holds beyond its prompt; D = the drafter's draft tokens.
Rules, each with the SGLang 0.5.23 code it follows (sglang/srt/...):
  need:     before each decode step every request in the batch needs n = max(0, min(g - 1 + L, M) - a)
            more KV tokens, L = 1 autoregressive (one page per step at page size 1) and L = 2 * D with the
            drafter (spec v2 reserves twice max(steps * topk, D) past the committed length:
            mem_cache/allocation_sizing.py `get_alloc_reserve_per_decode`, managers/schedule_batch.py
            `new_tokens_required_next_decode`); g - 1 + L caps at M so that a request alone on a replica
            it fits never runs out (SGLang would abort it).
  check:    the step fits iff the sum of n <= free + evictable (the allocator evicts unreferenced cached
            blocks for it: mem_cache/allocator/base.py `check_decode_capacity`); Mamba slots are held from
            admission and a decode step takes none, so only KV decides (as in SGLang's separate Mamba
            pool; the planner's per-draft snapshots are part of each request's s slots).
  order:    the batch sorted by (g, -P) descending, victims taken from the end: fewest generated tokens
            first, among equals the longest prompt, then the later in the batch
            (managers/schedule_batch.py `_get_decode_retraction_order`, retraction_policy default).
  retract:  at least one victim; then more while the rest does not fit; at least one request stays
            (`ScheduleBatch.retract_decode`). A victim frees all its private KV tokens and its state
            slots; its prompt blocks stay in the prefix cache (now unpinned, evictable); its generated
            tokens are not cached (`release_req`: `release_kv_cache(..., checkpoint=False)`); it keeps
            its generated tokens (already streamed) and goes to the tail of the queue
            (managers/scheduler.py `_add_request_to_queue(req, is_retracted=True)`).
  readmit:  a retracted request is admitted by admission.py with its fill P + g; its prefill recomputes
            the fill less its device hit (those tokens are counted as recomputed, not as prefill) and
            ends with one more token (a tokens event, not a first token).
  ratio:    a step that retracts sets the new-token ratio from the requests left, one that does not
            decays it (admission.py rule `ratio`; managers/scheduler.py `update_running_batch`).
Not modelled: SGLang's eager eviction of R * (requests left) tokens after each release
(`release_req` -> `evict_from_tree_cache`); the twin evicts only what an allocation is missing.
Parameters: L >= 1 tokens.
Complexity: O(n log n) per retraction over n decoding requests; O(n) per check.
"""

from __future__ import annotations

from collections.abc import Sequence


def decode_need(generated: int, max_tokens: int, held_tokens: int, lookahead_tokens: int) -> int:
    """Rule `need`: KV tokens one request needs before the next decode step."""
    return max(0, min(generated - 1 + lookahead_tokens, max_tokens) - held_tokens)


def lookahead_tokens(draft_tokens: int | None) -> int:
    """Rule `need`'s L: 1 autoregressive, 2 * D with a drafter of D draft tokens."""
    return 1 if draft_tokens is None else 2 * draft_tokens


def keep_order(keys: Sequence[tuple[str, int, int]]) -> list[str]:
    """Rule `order`: keys = (request id, generated, prompt tokens) in batch order; returns the ids most
    worth keeping first (victims are taken from the end)."""
    ranked = sorted(keys, key=lambda k: (k[1], -k[2]), reverse=True)
    return [rid for rid, _, _ in ranked]
