"""Predicted decode time: prefer the replica that would stream the request's tokens fastest.

    out(q)      = min(max_tokens(q), typical_output_tokens)     (max_tokens 0: typical_output_tokens)
    a           = max(1, max_r accept_length_ema(r))    (acceptance belongs to the pool's drafter and
                  workload, not to one replica; an idle replica still shows its start value)
    est(q, r)   = out(q) / a * decode_step_ms(r) / 1000      seconds (0 when the replica does not report)
    score(q, r) = (min_r' est(q, r') + slack_s) / (est(q, r) + slack_s)     in (0, 1]; the best is 1

`decode_step_ms` is the replica's own estimate of one decode step with one more request in its batch,
stretched by the share of time its prefills pause decoding, so a replica crowded with decoding
sessions, or busy prefilling, costs every token more. Agent sessions that all share one system
prompt would otherwise pile onto the replica that cached it first.
Parameters: typical_output_tokens >= 1 (tokens); slack_s > 0 (s).
Complexity: O(R).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.scorers.base import relative
from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.types import ReplicaView, RequestView


class PredictedDecodeScorer:
    name = "predicted_decode"

    def __init__(self, typical_output_tokens: int, slack_s: float):
        if typical_output_tokens < 1 or slack_s <= 0.0:
            raise ValueError("typical_output_tokens must be >= 1 and slack_s > 0")
        self._typical_output_tokens = typical_output_tokens
        self._slack_s = slack_s

    def estimates_s(self, request: RequestView, replicas: Sequence[ReplicaView]) -> list[float]:
        out = min(request.max_tokens, self._typical_output_tokens) if request.max_tokens > 0 else self._typical_output_tokens
        accept = max(1.0, max((view.load.accept_length_ema for view in replicas), default=1.0))
        return [out / accept * view.load.decode_step_ms / 1000.0 for view in replicas]

    def score(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> list[float]:
        return relative(self.estimates_s(estimate.request, replicas), self._slack_s)
