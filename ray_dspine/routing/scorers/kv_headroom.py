"""KV headroom: share of the replica's KV cache still free once the request is placed.

    score(q, r) = clip01((free_kv_tokens(r) - needed_kv_tokens(q)) / total_kv_tokens(r))
                = 0 when total_kv_tokens(r) == 0

Parameters: none (tokens in, fraction out). Complexity: O(R).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.scorers.base import clip01
from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.types import ReplicaView


class KvHeadroomScorer:
    name = "kv_headroom"

    def score(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> list[float]:
        out: list[float] = []
        for view in replicas:
            total = view.load.total_kv_tokens
            left = view.load.free_kv_tokens - estimate.request.needed_kv_tokens
            out.append(clip01(left / total) if total > 0 else 0.0)
        return out
