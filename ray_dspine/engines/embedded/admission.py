"""Admission against a KV-token budget and a state-slot budget, first come first served.

Rule. A request needs r = prompt_tokens + max_tokens + num_draft_tokens KV tokens (the draft block
is verified before rejected tokens are cropped, so a step can briefly hold k extra) and one state
slot. It is admitted when r <= free_kv_tokens and a slot is free, in arrival order (the head of the
queue blocks those behind it, so a long request is never starved). Reservations are made up front
and released when the request ends, so a running request is never retracted for memory.
A request with r > kv_budget_tokens can never run and is refused; a request arriving when
max_queued_requests are already waiting is refused as overload.
Parameters: kv_budget_tokens >= 64 tokens; num_slots in [1, 256]; max_queued_requests >= 0.
Complexity: O(1) per enqueue/release; admit is O(admitted).
"""

from __future__ import annotations

from collections import OrderedDict


class Overloaded(Exception):
    """The queue is full; the caller should answer 429 with Retry-After."""


class AdmissionController:
    def __init__(self, kv_budget_tokens: int, num_slots: int, max_queued_requests: int):
        self.kv_budget_tokens = kv_budget_tokens
        self.num_slots = num_slots
        self.max_queued_requests = max_queued_requests
        self._queued: OrderedDict[str, int] = OrderedDict()
        self._running: dict[str, int] = {}

    @property
    def free_kv_tokens(self) -> int:
        return self.kv_budget_tokens - sum(self._running.values())

    @property
    def free_slots(self) -> int:
        return self.num_slots - len(self._running)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_queued(self) -> int:
        return len(self._queued)

    @property
    def queued_kv_tokens(self) -> int:
        return sum(self._queued.values())

    def enqueue(self, request_id: str, kv_tokens: int) -> None:
        if kv_tokens > self.kv_budget_tokens:
            raise ValueError(
                f"request needs {kv_tokens} KV tokens but the replica's budget is {self.kv_budget_tokens}"
            )
        if len(self._queued) >= self.max_queued_requests and not self._fits_now(kv_tokens):
            raise Overloaded(f"{len(self._queued)} requests already waiting for memory")
        self._queued[request_id] = kv_tokens

    def _fits_now(self, kv_tokens: int) -> bool:
        return not self._queued and self.free_slots > 0 and kv_tokens <= self.free_kv_tokens

    def admit(self) -> list[str]:
        admitted = []
        while self._queued:
            request_id, kv_tokens = next(iter(self._queued.items()))
            if self.free_slots <= 0 or kv_tokens > self.free_kv_tokens:
                break
            del self._queued[request_id]
            self._running[request_id] = kv_tokens
            admitted.append(request_id)
        return admitted

    def release(self, request_id: str) -> None:
        """End a request, queued or running; unknown ids are ignored (release is idempotent)."""
        self._queued.pop(request_id, None)
        self._running.pop(request_id, None)
