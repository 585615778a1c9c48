"""TTFT guard: locality may choose among replicas only while it costs little first-token time.

    est(q, r)  = (pending_prefill_tokens(r) + uncached(q, r)) / rate(r)     seconds
                 (the predicted_ttft estimate, scorers/predicted_ttft.py: a prefix hit on r already
                 lowers it by the prefill it saves)
    keep(q, r) = est(q, r) <= min_r' est(q, r') + tolerance_s

Scorers then rank only the kept replicas (the best is always kept). Without the guard, a weighted sum
lets session affinity and a cached prefix outvote a multi-second queue behind a long prefill. With
it, the replica that holds a conversation gets its next turn unless waiting there would cost more
than `tolerance_s` over the best replica; then the turn re-prefills elsewhere.
Parameters: tolerance_s >= 0 (s); default_prefill_tokens_per_s > 0 (for replicas that report no rate).
Complexity: O(n * R) (one prefix walk, one estimate per replica).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.scorers.predicted_ttft import predicted_ttft_s
from ray_dspine.routing.types import ReplicaView, RequestView

def within_tolerance(estimates_s: Sequence[float], tolerance_s: float) -> list[bool]:
    """One flag per estimate: is it within `tolerance_s` of the smallest?"""
    if not estimates_s:
        return []
    limit = min(estimates_s) + tolerance_s
    return [est <= limit for est in estimates_s]


class TtftGuard:
    def __init__(self, index: PrefixIndex, default_prefill_tokens_per_s: float, tolerance_s: float):
        if tolerance_s < 0.0:
            raise ValueError(f"tolerance_s must be >= 0, got {tolerance_s}")
        if default_prefill_tokens_per_s <= 0.0:
            raise ValueError(f"default_prefill_tokens_per_s must be > 0, got {default_prefill_tokens_per_s}")
        self._index = index
        self._default_rate = default_prefill_tokens_per_s
        self._tolerance_s = tolerance_s

    def keep(self, request: RequestView, replicas: Sequence[ReplicaView]) -> tuple[list[ReplicaView], dict[str, str]]:
        """(kept replicas, {dropped replica_id: reason})."""
        estimates = predicted_ttft_s(self._index, self._default_rate, request, replicas)
        flags = within_tolerance(estimates, self._tolerance_s)
        best = min(estimates, default=0.0)
        kept = [view for view, ok in zip(replicas, flags) if ok]
        dropped = {
            view.replica_id: f"ttft: {est:.2f}s predicted > best {best:.2f}s + tolerance {self._tolerance_s:g}s"
            for view, est, ok in zip(replicas, estimates, flags)
            if not ok
        }
        return kept, dropped
