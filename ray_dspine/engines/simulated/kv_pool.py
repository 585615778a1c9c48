"""Memory pools of a simulated replica: KV tokens (private allocations + prefix cache) and state slots.

Rules (K = total_kv_tokens, S = num_state_slots, s = state_slots_per_request; allocation sizes come from
admission.py and the core's decode rule):
  allocation:  a request allocates its uncached fill tokens and s state slots when admitted, and more KV
               tokens before each decode step (SGLang allocates as it goes: prefill, then decode steps);
               nothing is reserved for the future here: admission estimates that (admission.py).
  accounting:  used = sum(private allocations of running requests) + cached_tokens; free = K - used.
  release:     a finished, cancelled or retracted request frees all its private tokens and its s slots.
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
        self.private_kv_tokens = 0
        self.used_state_slots = 0
        self.peak_kv_utilization = 0.0
        self.peak_state_utilization = 0.0

    def free_kv_tokens(self, cached_tokens: int) -> int:
        return self.total_kv_tokens - self.private_kv_tokens - cached_tokens

    @property
    def free_state_slots(self) -> int:
        return self.num_state_slots - self.used_state_slots

    def slots_fit(self) -> bool:
        return self.free_state_slots >= self.state_slots_per_request

    def admit(self, private_tokens: int) -> None:
        """An admitted request's fill tokens and its state slots."""
        self.private_kv_tokens += private_tokens
        self.used_state_slots += self.state_slots_per_request

    def grow(self, num_tokens: int) -> None:
        """More KV tokens for a running request (a decode step's)."""
        self.private_kv_tokens += num_tokens

    def shrink(self, num_tokens: int) -> None:
        """Move tokens out of a private allocation (into the prefix cache)."""
        self.private_kv_tokens -= num_tokens

    def release(self, private_tokens: int) -> None:
        self.private_kv_tokens -= private_tokens
        self.used_state_slots -= self.state_slots_per_request

    def record_peaks(self, cached_tokens: int, evictable_tokens: int) -> None:
        used = self.private_kv_tokens + cached_tokens - evictable_tokens
        self.peak_kv_utilization = max(self.peak_kv_utilization, used / self.total_kv_tokens)
        self.peak_state_utilization = max(self.peak_state_utilization, self.used_state_slots / self.num_state_slots)
