"""Predicted TTFT: prefer the replica that would start the request's first token soonest.

    mu(r)          = prefill_tokens_per_s(r) when the replica reports it, else default_prefill_tokens_per_s
    uncached(q, r) = prompt_tokens(q) * (1 - depth(q, r) / n(q))      (n(q) = 0 -> prompt_tokens(q))
    ahead(q, r)    = pending_prefill_tokens(r) - yielding_prefill_tokens(r)   if uncached(q, r) <= yield_budget_tokens(r)
                   = pending_prefill_tokens(r)                                 otherwise
                   (a replica pacing a long prompt lets a request within what is left of that prompt's
                   budget go ahead of its unsent part; the "prefill_pacing" engine wrapper)
    est(q, r)      = (ahead(q, r) + uncached(q, r)) / mu(r)      seconds
    score(q, r)    = max(min_r' est(q, r'), s) / max(est(q, r), s)       in (0, 1]; s = indifference_s

`pending_prefill_tokens` is the replica's reported prefill backlog, drained at its rate for the age of
the report, plus this router's placements since then (reservations.py). Prefill runs before decode
(SGLang's default scheduler), so the backlog ahead of a request, not the number of requests, sets its
TTFT: one 100k-token prompt delays the next request by seconds where a hundred short ones do not.
`depth` is the leading-run match in the router-side `PrefixIndex`, so a prefix hit lowers the estimate
by the prompt share it saves. The best replica scores 1; every replica whose estimate is under
`indifference_s` scores as if it were `indifference_s`, so estimates that differ by a fraction of a
second score alike. Without that floor, agents that share a system prompt all started their sessions
on the replicas that cached it: an idle replica lacking the prompt's ~1,500 tokens (0.15 s of prefill)
lost a quarter of this score (with the earlier (min + 0.5 s) / (est + 0.5 s)), more than any queue
difference can win back, and stayed idle (measured in `routing/config.py`'s notes).
Parameters: default_prefill_tokens_per_s > 0 (tokens/s); indifference_s > 0 (s).
Complexity: O(n * R) prefix walk + O(R).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.prefix_index import PrefixIndex, uncached_share
from ray_dspine.routing.types import ReplicaView, RequestView


def uncached_tokens(request: RequestView, depth: int) -> int:
    """Prompt tokens not covered by a `depth`-block prefix match (the share of blocks matched)."""
    return uncached_share(request.prompt_tokens, len(request.prefix_hashes), depth)


def cached_tokens(request: RequestView, depth: int) -> int:
    """Prompt tokens a `depth`-block prefix match covers (the rest of `uncached_tokens`)."""
    return request.prompt_tokens - uncached_tokens(request, depth)


def backlog_ahead_tokens(view: ReplicaView, uncached: int) -> int:
    """Rule `ahead`: the prefill backlog a request with `uncached` tokens to prefill would wait behind."""
    load = view.load
    if load.yielding_prefill_tokens and uncached <= load.yield_budget_tokens:
        return max(0, load.pending_prefill_tokens - load.yielding_prefill_tokens)
    return load.pending_prefill_tokens


def prefill_rate(view: ReplicaView, default_tokens_per_s: float) -> float:
    rate = view.load.prefill_tokens_per_s
    return rate if rate > 0.0 else default_tokens_per_s


def predicted_ttft_s(
    index: PrefixIndex, default_tokens_per_s: float, request: RequestView, replicas: Sequence[ReplicaView]
) -> list[float]:
    """est(q, r) for every replica, in the order given (seconds)."""
    depths = index.depths(request.prefix_hashes) if request.prefix_hashes else {}
    out: list[float] = []
    for view in replicas:
        uncached = uncached_tokens(request, depths.get(view.replica_id, 0))
        work = backlog_ahead_tokens(view, uncached) + uncached
        out.append(work / prefill_rate(view, default_tokens_per_s))
    return out


class PredictedTtftScorer:
    name = "predicted_ttft"

    def __init__(self, index: PrefixIndex, default_prefill_tokens_per_s: float, indifference_s: float):
        if default_prefill_tokens_per_s <= 0.0 or indifference_s <= 0.0:
            raise ValueError("default_prefill_tokens_per_s and indifference_s must be > 0")
        self._index = index
        self._default_rate = default_prefill_tokens_per_s
        self._indifference_s = indifference_s

    def estimates_s(self, request: RequestView, replicas: Sequence[ReplicaView]) -> list[float]:
        return predicted_ttft_s(self._index, self._default_rate, request, replicas)

    def score(self, request: RequestView, replicas: Sequence[ReplicaView]) -> list[float]:
        floored = [max(est, self._indifference_s) for est in self.estimates_s(request, replicas)]
        best = min(floored, default=self._indifference_s)
        return [best / est for est in floored]
