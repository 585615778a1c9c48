"""The shared estimate: one request's cached prefix, uncached prompt and predicted TTFT on each replica.

Built once per routing decision from the prefix index, and read by every headroom stage (the
capacity filter, the TTFT guard, the memory wait, the prefix and TTFT scorers, the pacing permit),
so that they all see the same figures. For request q and replica r (loads already reduced by the
reservation ledger):

    depth(q, r)    = leading-run match of q's prefix hashes in the router-side `PrefixIndex`
    uncached(q, r) = round(prompt_tokens(q) * (1 - min(depth, n) / n))     (n(q) = 0 -> prompt_tokens(q))
    cached(q, r)   = prompt_tokens(q) - uncached(q, r)                      tokens the hit saves
    matched(q, r)  = prompt_tokens(q) * depth(q, r) / n(q)                  the same, unrounded (n = 0 -> 0)
    mu(r)          = prefill_tokens_per_s(r) when the replica reports it, else default_prefill_tokens_per_s
    ahead(q, r)    = pending_prefill_tokens(r) - yielding_prefill_tokens(r)   if uncached(q, r) <= yield_budget_tokens(r)
                   = pending_prefill_tokens(r)                                 otherwise
                   (a replica pacing a long prompt lets a request within what is left of that prompt's
                   budget go ahead of its unsent part; the "prefill_pacing" engine wrapper)
    ttft(q, r)     = (ahead(q, r) + uncached(q, r)) / mu(r)     seconds
    saved(q, r)    = cached(q, r) / mu(r)                        seconds of prefill the hit saves
    backlog(r)     = pending_prefill_tokens(r) / mu(r)           seconds of prefill queued ahead

`pending_prefill_tokens` is the replica's reported prefill backlog, drained at its rate for the age
of the report, plus this router's placements since then (reservations.py). Prefill runs before decode
(SGLang's default scheduler), so the backlog ahead of a request, not the number of requests, sets its
TTFT: one 100k-token prompt delays the next request by seconds where a hundred short ones do not.
Parameters: default_prefill_tokens_per_s > 0 (tokens/s).
Complexity: one O(n * R) prefix walk when built, then O(1) per figure (memoised per replica).
"""

from __future__ import annotations

from typing import Mapping

from ray_dspine.routing.prefix_index import PrefixIndex, uncached_share
from ray_dspine.routing.types import ReplicaView, RequestView


def uncached_tokens(request: RequestView, depth: int) -> int:
    """Rule `uncached`: prompt tokens not covered by a `depth`-block prefix match."""
    return uncached_share(request.prompt_tokens, len(request.prefix_hashes), depth)


def cached_tokens(request: RequestView, depth: int) -> int:
    """Rule `cached`: prompt tokens a `depth`-block prefix match covers (the rest of `uncached_tokens`)."""
    return request.prompt_tokens - uncached_tokens(request, depth)


def backlog_ahead_tokens(view: ReplicaView, uncached: int) -> int:
    """Rule `ahead`: the prefill backlog a request with `uncached` tokens to prefill would wait behind."""
    load = view.load
    if load.yielding_prefill_tokens and uncached <= load.yield_budget_tokens:
        return max(0, load.pending_prefill_tokens - load.yielding_prefill_tokens)
    return load.pending_prefill_tokens


def prefill_rate(view: ReplicaView, default_tokens_per_s: float) -> float:
    """Rule `mu` (tokens/s)."""
    rate = view.load.prefill_tokens_per_s
    return rate if rate > 0.0 else default_tokens_per_s


class Estimate:
    """The figures above for one request, over the replicas of one decision."""

    __slots__ = ("request", "default_prefill_tokens_per_s", "_depths", "_uncached")

    def __init__(self, request: RequestView, depths: Mapping[str, int], default_prefill_tokens_per_s: float):
        if default_prefill_tokens_per_s <= 0.0:
            raise ValueError(f"default_prefill_tokens_per_s must be > 0, got {default_prefill_tokens_per_s}")
        self.request = request
        self.default_prefill_tokens_per_s = default_prefill_tokens_per_s
        self._depths = depths
        self._uncached: dict[str, int] = {}

    @classmethod
    def of(cls, request: RequestView, index: PrefixIndex, default_prefill_tokens_per_s: float) -> Estimate:
        """The estimate from one walk of `index` (no prefix hashes: nothing cached anywhere)."""
        depths = index.depths(request.prefix_hashes) if request.prefix_hashes else {}
        return cls(request, depths, default_prefill_tokens_per_s)

    def depth(self, replica_id: str) -> int:
        return self._depths.get(replica_id, 0)

    def uncached_tokens(self, replica_id: str) -> int:
        out = self._uncached.get(replica_id)
        if out is None:
            out = self._uncached[replica_id] = uncached_tokens(self.request, self.depth(replica_id))
        return out

    def cached_tokens(self, replica_id: str) -> int:
        return self.request.prompt_tokens - self.uncached_tokens(replica_id)

    def matched_tokens(self, replica_id: str) -> float:
        """Rule `matched` (unrounded; 0 when the request has no prefix hashes)."""
        num_blocks = len(self.request.prefix_hashes)
        if num_blocks == 0:
            return 0.0
        return self.request.prompt_tokens * self.depth(replica_id) / num_blocks

    def rate(self, view: ReplicaView) -> float:
        return prefill_rate(view, self.default_prefill_tokens_per_s)

    def ttft_s(self, view: ReplicaView) -> float:
        uncached = self.uncached_tokens(view.replica_id)
        return (backlog_ahead_tokens(view, uncached) + uncached) / self.rate(view)

    def saved_s(self, view: ReplicaView) -> float:
        return self.cached_tokens(view.replica_id) / self.rate(view)

    def backlog_s(self, view: ReplicaView) -> float:
        return view.load.pending_prefill_tokens / self.rate(view)
