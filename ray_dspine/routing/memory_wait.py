"""Memory wait: do not queue a request behind a long backlog where it fits when a replica short of memory has a short one.

The capacity filters keep only replicas that can hold the request's KV tokens and state slots now. When
the pool runs out of KV, that is often a single replica that has just freed memory, and it may hold a
long prefill backlog: placing there makes the request wait behind it (the first token after tens of
seconds), while a replica with a short backlog frees memory within a few decode steps. So:

    eligible     = { r : healthy(r), reported, age(r) <= drop_after_s, fits_when_empty(q, r) }
                   (replicas that could hold q once their memory frees; filters.py)
    short        = eligible minus the replicas the filters kept (those short of memory now)
    backlog(r)   = pending_prefill_tokens(r) / rate(r)          seconds of prefill queued ahead
                   (ledger-adjusted loads; rate as in scorers/predicted_ttft.py)
    allow(q, c)  = max(tolerance_s, min(cached_max_s, per_cached * saved(q, c)))
                   (the TTFT guard's allowance, ttft_guard.py, with this rule's own tolerance_s:
                   a replica whose cache saves a long prefill may hold a longer backlog)
    hold(q, c)   = backlog(c) > min_{r in short} backlog(r) + allow(q, c)
                   for the replica c the pipeline chose among the kept ones (no hold when short is
                   empty: a faster replica that fits now is the TTFT guard's business, not this rule's)

The rule compares backlogs, not whole TTFT estimates: a replica short of memory that caches the
request's prefix would also start it sooner, but waiting for it could last as long as its memory
stays full. Backlogs drain: with no new placements on c, backlog(c) falls by one second per second
while the shortest stays >= 0, so a held request waits at most backlog(c) - allow(q, c) and is placed
earlier if the faster replica frees memory. `tolerance_s` stands for the seconds a replica short of
memory needs to free it (decode steps finishing requests), which the backlogs do not show.
Measured (SIMULATED, `bench routing --virtual`, ours against cache_aware, mean of per-replay p99 cuts
and hit differences, engine seeds 0-2): over Mooncake slices 0-11 the rule off / on (2 s) cut p99 by
8.2 / 11.3% at -0.32 / -0.15 points of hit rate, and the worst replay went from 49.7% slower than
cache_aware to 2.0%; on slices 12-17 (a held-out check), 1.3 / 11.1% at -0.90 / -0.13 points, worst
56.2% / 1.3% slower. The bench slice (slice 0) never has a replica short of memory, so the rule does
not fire there.
Parameters: tolerance_s >= 0 (s); per_cached >= 0 (s per s) and cached_max_s >= 0 (s), as the guard's;
drop_after_s > 0 (s); default_prefill_tokens_per_s > 0 (tokens/s).
Complexity: O(R) plus one prefix walk for the chosen replica's allowance.
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.filters import check_fresh, fits_when_empty
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.scorers.predicted_ttft import prefill_rate
from ray_dspine.routing.ttft_guard import TtftGuard
from ray_dspine.routing.types import ReplicaView, RequestView


def eligible(request: RequestView, replicas: Sequence[ReplicaView], drop_after_s: float) -> list[ReplicaView]:
    """Replicas that could hold the request once their memory frees (the rule's `eligible`)."""
    return [
        view
        for view in replicas
        if view.reported
        and view.load.healthy
        and check_fresh(view, drop_after_s) is None
        and fits_when_empty(request, view)
    ]


class MemoryWait:
    def __init__(
        self,
        index: PrefixIndex,
        default_prefill_tokens_per_s: float,
        tolerance_s: float,
        drop_after_s: float,
        per_cached: float = 0.0,
        cached_max_s: float = 0.0,
    ):
        if drop_after_s <= 0.0:
            raise ValueError(f"drop_after_s must be > 0, got {drop_after_s}")
        # The guard checks tolerance_s, per_cached, cached_max_s and the default rate.
        self._allowance = TtftGuard(index, default_prefill_tokens_per_s, tolerance_s, per_cached, cached_max_s)
        self._default_rate = default_prefill_tokens_per_s
        self._drop_after_s = drop_after_s

    def hold(
        self, request: RequestView, chosen: ReplicaView, kept: Sequence[ReplicaView], replicas: Sequence[ReplicaView]
    ) -> str | None:
        """Why the request should wait instead of going to `chosen` (one of `kept`), or None to place it there."""
        kept_ids = {v.replica_id for v in kept}
        short = [v for v in eligible(request, replicas, self._drop_after_s) if v.replica_id not in kept_ids]
        if not short:
            return None
        chosen_s = self._backlog_s(chosen)
        best_s, best_id = min((self._backlog_s(v), v.replica_id) for v in short)
        allow_s = self._allowance.allowances_s(request, [chosen])[0]
        if chosen_s <= best_s + allow_s:
            return None
        return (
            f"waiting for memory on {best_id}: {best_s:.2f}s of prefill queued there against "
            f"{chosen_s:.2f}s on {chosen.replica_id}, which can hold it now (allowed {allow_s:.2f}s)"
        )

    def _backlog_s(self, view: ReplicaView) -> float:
        return view.load.pending_prefill_tokens / prefill_rate(view, self._default_rate)
