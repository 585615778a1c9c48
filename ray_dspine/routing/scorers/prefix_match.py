"""Prefix match: how much prefill the replica's cached prefix would save, saturating.

    saved(q, r) = matched(q, r) = prompt_tokens(q) * depth(q, r) / n(q)     tokens (the shared estimate,
                                                                          estimate.py; n(q) = 0 -> 0)
    score(q, r) = saved(q, r) / (saved(q, r) + half_tokens)      in [0, 1); half_tokens saved -> 0.5

where depth is the leading-run match in the router-side `PrefixIndex` (chained block hashes).
The score grows with the work a hit saves, not with the share of the prompt it covers: 1,500 cached
tokens of a shared 2,000-token system prompt (0.15 GPU-seconds to recompute anywhere) must not pull
every new agent session onto the replica that happened to cache it first, while 60,000 cached tokens
of one conversation should keep it where it is.
Parameters: half_tokens > 0 (tokens). Complexity: O(R) (the estimate has walked the index).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.types import ReplicaView


class PrefixMatchScorer:
    name = "prefix_match"

    def __init__(self, half_tokens: float):
        if half_tokens <= 0.0:
            raise ValueError(f"half_tokens must be > 0, got {half_tokens}")
        self._half_tokens = half_tokens

    def score(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> list[float]:
        out: list[float] = []
        for view in replicas:
            saved = estimate.matched_tokens(view.replica_id)
            out.append(saved / (saved + self._half_tokens))
        return out
