"""Prefix match: share of the request's prompt blocks the replica is believed to cache.

    score(q, r) = depth(q, r) / n(q)     n(q) = number of prefix hashes of q (0 -> score 0)

where depth is the leading-run match in the router-side `PrefixIndex` (chained block hashes).
Parameters: none. Complexity: O(n * R) worst case (one index walk for all replicas).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.types import ReplicaView, RequestView


class PrefixMatchScorer:
    name = "prefix_match"

    def __init__(self, index: PrefixIndex):
        self._index = index

    def score(self, request: RequestView, replicas: Sequence[ReplicaView]) -> list[float]:
        num_blocks = len(request.prefix_hashes)
        if num_blocks == 0:
            return [0.0] * len(replicas)
        depths = self._index.depths(request.prefix_hashes)
        return [depths.get(view.replica_id, 0) / num_blocks for view in replicas]
