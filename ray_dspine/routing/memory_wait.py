"""Memory wait: wait for a replica short of memory when it would start the request far sooner than one that fits.

The capacity filters keep only replicas that can hold the request's KV tokens and state slots now. When
the pool runs out of KV, that is often a single replica that has just freed memory, and it may hold a
long prefill backlog: placing there makes the request wait behind it (the first token after tens of
seconds), while a replica with a short backlog frees memory within a few decode steps. So:

    eligible     = { r : healthy(r), reported, age(r) <= drop_after_s, fits_when_empty(q, r) }
                   (replicas that could hold q once their memory frees; filters.py)
    short        = eligible minus the replicas the filters kept (those short of memory now)
    backlog(r)   = pending_prefill_tokens(r) / rate(r)          seconds of prefill queued ahead
                   (ledger-adjusted loads; backlog(r) of the shared estimate, estimate.py)
    est(q, r)    = ttft(q, r) of the shared estimate: the backlog ahead plus uncached(q, r) / rate(r);
                   q's own prefill counts, so a replica that caches q's prefix saves it
    r*           = the replica of `short` with the lowest est(q, r) (then replica_id)
    allow(q, c)  = max(tolerance_s, min(cached_max_s, per_cached * saved(q, c)))
                   (the TTFT guard's allowance, ttft_guard.py, with this rule's own tolerance_s:
                   a replica whose cache saves a long prefill may hold a longer backlog)
    gain(q, c)   = est(q, c) - est(q, r*) - allow(q, c)
                   (the seconds waiting for r* is predicted to save over placing on c now, beyond
                   the allowance)
    hold(q, c)   = gain(q, c) > 0  and  (backlog(c) > backlog(r*)  or  waited(q) < gain(q, c))
                   for the replica c the pipeline chose among the kept ones (no hold when short is
                   empty: a faster replica that fits now is the TTFT guard's business, not this rule's)
    waited(q)    = now - the time this rule first held q (0 at the first hold); when the rule lets
                   q go it forgets q, so a later hold starts afresh; it remembers at most
                   `max_tracked` requests, dropping the longest held first

The second condition bounds the wait. A replica short of memory may stay full for as long as its
running requests last, which no report shows; so a request waits while the chosen replica still has
more backlog to drain than r*, or while it has waited less than what waiting was predicted to win.
With no new placements on c, backlog(c) falls by one second per second while backlog(r*) stays >= 0,
so a held request waits at most max(backlog(c), gain(q, c)) and is placed earlier if r* frees memory.
Past that, waiting has used up what it could win, and the request goes to c. `tolerance_s` stands
for the seconds a replica short of memory needs to free it (decode steps finishing requests), which
the backlogs do not show.
Why the gain bound (an earlier version let the request go as soon as backlog(c) <= backlog(r*)): with
both backlogs empty, a conversation's turn whose replica was short of memory for a moment went at
once to a replica without its cache and prefilled its whole context again (slice 7, engine seed 0: a
123,195-token turn, its replica 67 tokens short of room; 2.8 points of that replay's prefix-hit rate).
Why est and not the backlogs alone (an earlier version compared backlogs): at 1.25x the bench's load,
a 40,907-token turn whose prefix (40,448 tokens) filled the KV of its conversation's replica, with no
prefill queued there, went to a replica with 2 s of backlog and prefilled all of it again, 4 s of work
its home would have saved within a few decode steps.
Measured (SIMULATED, `bench routing --virtual`, ours against cache_aware: mean of per-replay p99 cuts
and hit differences, engine seeds 0-2):
- no rule / backlogs alone (2 s): slices 0-11 8.2 / 11.3% at -0.32 / -0.15 points, the worst replay
  from 49.7% slower than cache_aware to 2.0%; slices 12-17 (held out) 1.3 / 11.1% at -0.90 / -0.13
  points, worst 56.2% / 1.3% slower.
- backlogs alone / est with the bound (later code): slices 0-11 11.3 / 11.7% at +0.01 / +0.19 points;
  slices 12-17 13.5 / 13.4% at +0.56 / +0.78; slices 0-11 at 1.25x the load (`--sweep-load 1.25`)
  9.2 / 8.5% at +0.34 / +0.51, at 1.5x 6.7 / 7.3% at +1.19 / +1.43; the worst replays alike (-0.7,
  -1.3, -3.4%), and at 1.5x -27.0 / -21.7%.
- est without the bound: +0.17 points on slices 0-11, but the worst replay fell from -0.7% to -7.1%.
- with the gain bound as well (now): slices 0-11 15.2% at +0.16 points against 15.1% at +0.05 without
  it (at the code of paced prefill and stream batching); slices 12-17 (held out) 11.7% at +0.69 against
  11.2% at +0.46; with a HiCache host tier of twice the GPU pool (`--hicache-host-tokens 946020`),
  slices 0-11 9.3% at -0.21 against 9.4% at -0.43. The worst replay's hit difference on slices 0-11
  went from -3.16 to -1.76 points.
The bench slice (slice 0) never has a replica short of memory, so the rule does not fire there.
Parameters: tolerance_s >= 0 (s); per_cached >= 0 (s per s) and cached_max_s >= 0 (s), as the guard's;
drop_after_s > 0 (s); max_tracked >= 1 (requests); clock() in seconds. Its config is `MemoryWaitHold`
(config.py), a hold of the headroom pipeline.
Complexity: O(R) (the estimate has walked the prefix index).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, Sequence

from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.filters import check_fresh, fits_when_empty
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
    name = "memory_wait"

    def __init__(
        self,
        tolerance_s: float,
        drop_after_s: float,
        per_cached: float = 0.0,
        cached_max_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        max_tracked: int = 10_000,
    ):
        if drop_after_s <= 0.0:
            raise ValueError(f"drop_after_s must be > 0, got {drop_after_s}")
        if max_tracked < 1:
            raise ValueError(f"max_tracked must be >= 1, got {max_tracked}")
        # The guard checks tolerance_s, per_cached and cached_max_s.
        self._allowance = TtftGuard(tolerance_s, per_cached, cached_max_s)
        self._drop_after_s = drop_after_s
        self._clock = clock
        self._max_tracked = max_tracked
        self._first_held: OrderedDict[str, float] = OrderedDict()  # request id -> first hold (rule `waited`)

    def hold(
        self, estimate: Estimate, chosen: ReplicaView, kept: Sequence[ReplicaView], replicas: Sequence[ReplicaView]
    ) -> str | None:
        """Why the request should wait instead of going to `chosen` (one of `kept`, the replicas that can
        hold it now), or None to place it there."""
        reason = self._hold(estimate, chosen, kept, replicas)
        if reason is None:
            self._first_held.pop(estimate.request.request_id, None)
        return reason

    def _hold(
        self, estimate: Estimate, chosen: ReplicaView, kept: Sequence[ReplicaView], replicas: Sequence[ReplicaView]
    ) -> str | None:
        request = estimate.request
        kept_ids = {v.replica_id for v in kept}
        short = [v for v in eligible(request, replicas, self._drop_after_s) if v.replica_id not in kept_ids]
        if not short:
            return None
        chosen_est = estimate.ttft_s(chosen)
        best_est, best = min(((estimate.ttft_s(v), v) for v in short), key=lambda pair: (pair[0], pair[1].replica_id))
        allow_s = self._allowance.allowances_s(estimate, [chosen])[0]
        gain_s = chosen_est - best_est - allow_s
        if gain_s <= 0.0:
            return None
        chosen_backlog, best_backlog = estimate.backlog_s(chosen), estimate.backlog_s(best)
        waited_s = self._waited_s(request.request_id)
        if chosen_backlog <= best_backlog and waited_s >= gain_s:
            return None
        return (
            f"waiting for memory on {best.replica_id}: predicted TTFT {best_est:.2f}s there ({best_backlog:.2f}s of "
            f"prefill queued) against {chosen_est:.2f}s on {chosen.replica_id} ({chosen_backlog:.2f}s queued), "
            f"which can hold it now (allowed {allow_s:.2f}s; waited {waited_s:.2f}s)"
        )

    def _waited_s(self, request_id: str) -> float:
        """Rule `waited`: seconds since the first hold of this request (0 now if it is its first)."""
        now = self._clock()
        first = self._first_held.setdefault(request_id, now)
        while len(self._first_held) > self._max_tracked:
            self._first_held.popitem(last=False)
        return now - first
