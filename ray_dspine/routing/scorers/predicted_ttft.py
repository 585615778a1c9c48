"""Predicted TTFT: prefer the replica that would start the request's first token soonest.

    est(q, r)   = ttft(q, r) of the shared estimate (estimate.py): the prefill backlog ahead of q on r
                  plus q's uncached prompt, over r's prefill rate (seconds)
    score(q, r) = max(min_r' est(q, r'), s) / max(est(q, r), s)       in (0, 1]; s = indifference_s

A prefix hit on r lowers est by the prompt share it saves. The best replica scores 1; every replica
whose estimate is under `indifference_s` scores as if it were `indifference_s`, so estimates that
differ by a fraction of a second score alike. Without that floor, agents that share a system prompt
all started their sessions on the replicas that cached it: an idle replica lacking the prompt's
~1,500 tokens (0.15 s of prefill) lost a quarter of this score (with the earlier
(min + 0.5 s) / (est + 0.5 s)), more than any queue difference can win back, and stayed idle
(measured in `routing/config.py`'s notes on this scorer).
Parameters: indifference_s > 0 (s). Complexity: O(R).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.types import ReplicaView


class PredictedTtftScorer:
    name = "predicted_ttft"

    def __init__(self, indifference_s: float):
        if indifference_s <= 0.0:
            raise ValueError(f"indifference_s must be > 0, got {indifference_s}")
        self._indifference_s = indifference_s

    def score(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> list[float]:
        floored = [max(estimate.ttft_s(view), self._indifference_s) for view in replicas]
        best = min(floored, default=self._indifference_s)
        return [best / est for est in floored]
