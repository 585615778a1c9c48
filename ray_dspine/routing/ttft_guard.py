"""TTFT guard: locality may choose among replicas only while it costs little first-token time.

    est(q, r)    = ttft(q, r) of the shared estimate (estimate.py): the prefill backlog ahead of q
                   plus q's uncached prompt, over r's rate, seconds (a prefix hit on r already
                   lowers it by the prefill it saves)
    saved(q, r)  = saved(q, r) of the estimate: cached(q, r) / rate(r), seconds of prefill r's
                   cached prefix saves
    allow(q, r)  = max(tolerance_s, min(cached_max_s, per_cached * saved(q, r)))
    keep(q, r)   = est(q, r) <= min_r' est(q, r') + allow(q, r)

Scorers then rank only the kept replicas (the best is always kept). Without the guard, a weighted sum
lets session affinity and a cached prefix outvote a multi-second queue behind a long prefill. With
it, the replica that holds a conversation gets its next turn unless waiting there would cost more
than `tolerance_s` over the best replica; then the turn re-prefills elsewhere. A replica whose cache
saves a long prefill may cost more: `per_cached` seconds of waiting per second of prefill saved, up
to `cached_max_s`. A turn with 25,000 cached tokens (2.5 s of prefill at 10,000 tokens/s) may then
wait 10 s over the best at per_cached 4, and keeps its hit; a short turn, whose hit saves little,
still moves once the wait passes `tolerance_s`.
Parameters: tolerance_s >= 0 (s); per_cached >= 0 (s of waiting per s saved; 0: no extension);
cached_max_s >= 0 (s). Its config is `TtftGuardFilter` (config.py), a filter of the headroom pipeline.
Complexity: O(R) (the estimate has walked the prefix index).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.outcomes import STAGE_TTFT_GUARD
from ray_dspine.routing.types import ReplicaView


def within_tolerance(estimates_s: Sequence[float], tolerance_s: float) -> list[bool]:
    """One flag per estimate: is it within `tolerance_s` of the smallest?"""
    return within_allowances(estimates_s, [tolerance_s] * len(estimates_s))


def within_allowances(estimates_s: Sequence[float], allowances_s: Sequence[float]) -> list[bool]:
    """One flag per estimate: is it within its own allowance of the smallest?"""
    if not estimates_s:
        return []
    best = min(estimates_s)
    return [est <= best + allow for est, allow in zip(estimates_s, allowances_s)]


class TtftGuard:
    name = "ttft_guard"
    stage = STAGE_TTFT_GUARD

    def __init__(self, tolerance_s: float, per_cached: float = 0.0, cached_max_s: float = 0.0):
        for name, value in (("tolerance_s", tolerance_s), ("per_cached", per_cached), ("cached_max_s", cached_max_s)):
            if value < 0.0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        self._tolerance_s = tolerance_s
        self._per_cached = per_cached
        self._cached_max_s = cached_max_s

    def allowances_s(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> list[float]:
        """allow(q, r) for every replica, in the order given (seconds)."""
        if self._per_cached == 0.0:
            return [self._tolerance_s] * len(replicas)
        return [
            max(self._tolerance_s, min(self._cached_max_s, self._per_cached * estimate.saved_s(view)))
            for view in replicas
        ]

    def keep(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> tuple[list[ReplicaView], dict[str, str]]:
        """(kept replicas, {dropped replica_id: reason})."""
        estimates = [estimate.ttft_s(view) for view in replicas]
        allowances = self.allowances_s(estimate, replicas)
        flags = within_allowances(estimates, allowances)
        best = min(estimates, default=0.0)
        kept = [view for view, ok in zip(replicas, flags) if ok]
        dropped = {
            view.replica_id: f"ttft: {est:.2f}s predicted > best {best:.2f}s + {self._describe(allow)}"
            for view, est, allow, ok in zip(replicas, estimates, allowances, flags)
            if not ok
        }
        return kept, dropped

    def _describe(self, allow_s: float) -> str:
        if allow_s == self._tolerance_s:
            return f"tolerance {self._tolerance_s:g}s"
        return f"{allow_s:.2f}s allowed for its cached prefix (tolerance {self._tolerance_s:g}s)"
