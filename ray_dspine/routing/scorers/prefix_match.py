"""Prefix match: how much prefill the replica's cached prefix would save, saturating.

    saved(q, r) = prompt_tokens(q) * depth(q, r) / n(q)          tokens (n(q) = number of prefix
                                                                  hashes of q; n(q) = 0 -> saved 0)
    score(q, r) = saved(q, r) / (saved(q, r) + half_tokens)      in [0, 1); half_tokens saved -> 0.5

where depth is the leading-run match in the router-side `PrefixIndex` (chained block hashes).
The score grows with the work a hit saves, not with the share of the prompt it covers: 1,500 cached
tokens of a shared 2,000-token system prompt (0.15 GPU-seconds to recompute anywhere) must not pull
every new agent session onto the replica that happened to cache it first, while 60,000 cached tokens
of one conversation should keep it where it is.
Parameters: half_tokens > 0 (tokens). Complexity: O(n * R) worst case (one index walk for all replicas).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.types import ReplicaView, RequestView


class PrefixMatchScorer:
    name = "prefix_match"

    def __init__(self, index: PrefixIndex, half_tokens: float):
        if half_tokens <= 0.0:
            raise ValueError(f"half_tokens must be > 0, got {half_tokens}")
        self._index = index
        self._half_tokens = half_tokens

    def score(self, request: RequestView, replicas: Sequence[ReplicaView]) -> list[float]:
        num_blocks = len(request.prefix_hashes)
        if num_blocks == 0:
            return [0.0] * len(replicas)
        depths = self._index.depths(request.prefix_hashes)
        out: list[float] = []
        for view in replicas:
            saved = request.prompt_tokens * depths.get(view.replica_id, 0) / num_blocks
            out.append(saved / (saved + self._half_tokens))
        return out
