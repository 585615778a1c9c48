"""Memory pools of a simulated replica: KV tokens (private reservations + prefix cache) and state slots.

Rules (K = total_kv_tokens, S = num_state_slots, s = state_slots_per_request, B = block tokens):
  reservation: a request with P prompt tokens, h cached blocks and M output tokens reserves
      R = P - h * B + M private KV tokens and s state slots when it is admitted, all up front, so a
      running request never needs more memory and is never retracted.
  accounting:  used = sum(R over running) + cached_tokens;  free = K - used (never negative).
  admission:   admit iff  free + evictable (excluding the blocks the request will pin) >= R,
               free slots >= s, and running < max_running_requests; evict only what is missing.
  reported headroom: free_kv_tokens = free + evictable (what SGLang counts as available).
  utilization: kv = (K - free - evictable) / K; state = slots used / S; peaks kept since start.
Parameters: K >= 1 tokens; S >= 1; s >= 1.
Complexity: O(1) per call.
"""

from __future__ import annotations


class MemoryPools:
    def __init__(self, total_kv_tokens: int, num_state_slots: int, state_slots_per_request: int):
        self.total_kv_tokens = total_kv_tokens
        self.num_state_slots = num_state_slots
        self.state_slots_per_request = state_slots_per_request
        self.reserved_kv_tokens = 0
        self.used_state_slots = 0
        self.peak_kv_utilization = 0.0
        self.peak_state_utilization = 0.0

    def free_kv_tokens(self, cached_tokens: int) -> int:
        return self.total_kv_tokens - self.reserved_kv_tokens - cached_tokens

    @property
    def free_state_slots(self) -> int:
        return self.num_state_slots - self.used_state_slots

    def kv_fits(self, private_tokens: int, cached_tokens: int, evictable_tokens: int) -> bool:
        return self.free_kv_tokens(cached_tokens) + evictable_tokens >= private_tokens

    def slots_fit(self) -> bool:
        return self.free_state_slots >= self.state_slots_per_request

    def reserve(self, private_tokens: int) -> None:
        self.reserved_kv_tokens += private_tokens
        self.used_state_slots += self.state_slots_per_request

    def shrink(self, num_tokens: int) -> None:
        """Move tokens out of a private reservation (into the prefix cache, or back to free)."""
        self.reserved_kv_tokens -= num_tokens

    def release(self, private_tokens: int) -> None:
        self.reserved_kv_tokens -= private_tokens
        self.used_state_slots -= self.state_slots_per_request

    def record_peaks(self, cached_tokens: int, evictable_tokens: int) -> None:
        used = self.reserved_kv_tokens + cached_tokens - evictable_tokens
        self.peak_kv_utilization = max(self.peak_kv_utilization, used / self.total_kv_tokens)
        self.peak_state_utilization = max(self.peak_state_utilization, self.used_state_slots / self.num_state_slots)
