"""Admission against a KV-token budget and a state-slot budget, first come first served.

Rule. A request with P prompt tokens needs r = P - h * B + M + k private KV tokens and one state slot,
where M = max_tokens, k = the draft block (a verify step briefly holds k extra before rejected tokens
are cropped; 0 without speculation), B = prefix_block_tokens and h = the prompt's cached blocks at the
moment it is admitted (`block_cache.match(prompt, floor((P - 1) / B))`, cut down to a multiple of U
blocks, U = hit_unit_blocks, 1 unless the engine reuses whole prefill chunks only; h = 0 with reuse off).
The h blocks are pinned and counted once, in the cache: admission needs
r <= available tokens once they are pinned (free + evictable blocks other than the hit), and a free
slot; then evicts least-recently-used blocks only for what free lacks, and reserves r.
Requests are admitted in arrival order (the head of the queue blocks those behind it, so a long
request is never starved). Reservations are made up front and released when the request ends, so a
running request is never retracted for memory. A request's new blocks move from its reservation
into the cache as they are inserted (block_cache rule `insert`).
A request with P + M + k > kv_budget_tokens can never run and is refused; a request arriving when
max_queued_requests are already waiting is refused as overload.
Parameters: kv_budget_tokens >= 64 tokens; num_slots in [1, 256]; max_queued_requests >= 0.
Complexity: O(1) per enqueue/release plus O(prompt blocks) per match; admit is O(admitted * blocks).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .block_cache import Block, BlockCache


class Overloaded(Exception):
    """The queue is full; the caller should answer 429 with Retry-After."""


@dataclass
class Holding:
    """A running request's memory: its private reservation and its pinned path of cached blocks."""

    reserved_tokens: int
    path: list[Block] = field(default_factory=list)
    hit_tokens: int = 0  # prompt tokens the cache covered at admission


class AdmissionController:
    def __init__(
        self,
        cache: BlockCache,
        num_slots: int,
        max_queued_requests: int,
        reuse: bool = True,
        hit_unit_blocks: int = 1,
    ):
        if hit_unit_blocks < 1:
            raise ValueError(f"hit_unit_blocks must be at least 1, got {hit_unit_blocks}")
        self.cache = cache
        self.num_slots = num_slots
        self.max_queued_requests = max_queued_requests
        self.reuse = reuse
        self.hit_unit_blocks = hit_unit_blocks
        self._queued: OrderedDict[str, tuple[Sequence[int], int]] = OrderedDict()
        self._running: dict[str, Holding] = {}

    @property
    def kv_budget_tokens(self) -> int:
        return self.cache.budget_tokens

    @property
    def free_kv_tokens(self) -> int:
        """What SGLang reports as available: free plus evictable cached blocks."""
        return self.cache.available_tokens

    @property
    def free_slots(self) -> int:
        return self.num_slots - len(self._running)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_queued(self) -> int:
        return len(self._queued)

    def hit_blocks(self, prompt: Sequence[int]) -> list[Block]:
        if not self.reuse:
            return []
        hit = self.cache.match(prompt, (len(prompt) - 1) // self.cache.block_tokens)
        return hit[: len(hit) // self.hit_unit_blocks * self.hit_unit_blocks]

    def _needs(self, prompt: Sequence[int], extra_tokens: int, hit: Sequence[Block]) -> int:
        return len(prompt) - len(hit) * self.cache.block_tokens + extra_tokens

    @property
    def queued_kv_tokens(self) -> int:
        """KV the queued requests will reserve on admission, their hits as the cache stands now."""
        return sum(self._needs(p, extra, self.hit_blocks(p)) for p, extra in self._queued.values())

    @property
    def queued_uncached_prompt_tokens(self) -> int:
        B = self.cache.block_tokens
        return sum(len(p) - len(self.hit_blocks(p)) * B for p, _extra in self._queued.values())

    def enqueue(self, request_id: str, prompt: Sequence[int], extra_tokens: int) -> None:
        """extra_tokens = M + k: output tokens and the draft block."""
        kv_tokens = len(prompt) + extra_tokens
        if kv_tokens > self.kv_budget_tokens:
            raise ValueError(
                f"request needs {kv_tokens} KV tokens but the replica's budget is {self.kv_budget_tokens}"
            )
        if len(self._queued) >= self.max_queued_requests and not self._fits_now(prompt, extra_tokens):
            raise Overloaded(f"{len(self._queued)} requests already waiting for memory")
        self._queued[request_id] = (prompt, extra_tokens)

    def _fits_now(self, prompt: Sequence[int], extra_tokens: int) -> bool:
        if self._queued or self.free_slots <= 0:
            return False
        hit = self.hit_blocks(prompt)
        return self._needs(prompt, extra_tokens, hit) <= self.cache.available_if_pinned(hit)

    def admit(self) -> list[str]:
        admitted = []
        while self._queued and self.free_slots > 0:
            request_id, (prompt, extra_tokens) = next(iter(self._queued.items()))
            hit = self.hit_blocks(prompt)
            needs = self._needs(prompt, extra_tokens, hit)
            if needs > self.cache.available_if_pinned(hit):
                break
            del self._queued[request_id]
            self.cache.pin(hit)
            reserved = self.cache.reserve(needs)
            assert reserved, "available_if_pinned covered the reservation"
            self._running[request_id] = Holding(needs, hit, len(hit) * self.cache.block_tokens)
            admitted.append(request_id)
        return admitted

    def holding(self, request_id: str) -> Holding | None:
        return self._running.get(request_id)

    def cache_tokens(self, request_id: str, tokens: Sequence[int], make_payload: Callable[[int], object]) -> int:
        """Insert the full blocks of a running request's `tokens` (block_cache rule `insert`); returns
        how many blocks its path now has."""
        holding = self._running[request_id]
        holding.path, holding.reserved_tokens = self.cache.extend(
            holding.path, tokens, make_payload, holding.reserved_tokens
        )
        return len(holding.path)

    def release(self, request_id: str) -> None:
        """End a request, queued or running; unknown ids are ignored (release is idempotent)."""
        self._queued.pop(request_id, None)
        holding = self._running.pop(request_id, None)
        if holding is not None:
            self.cache.release(holding.reserved_tokens)
            self.cache.unpin(holding.path)
