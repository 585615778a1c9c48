"""The order-preserving bound: the p99 TTFT of one first-come-first-served queue over the whole pool.

Rule (simulated seconds; one replay's requests, each with its arrival at the router `sent` and its floor,
the prefill of its uncached tokens under the ideal cache of routing_workload.py):
    take the requests in order of arrival (ties: in the order given); request i starts at
        g_i = max(sent_i, the earliest moment one of the N replicas is free)
    and holds that replica until g_i + floor_i;  bound_ttft_i = g_i + floor_i - sent_i
    order_bound_p99 = numpy's linear p99 of bound_ttft over the requests.

What it bounds. Call a schedule order-preserving when no request's prefill starts before that of a
request that arrived earlier (one FIFO queue in front of the pool is one; so is a router that always
places on the replica that frees first, with exact knowledge of every backlog). For the same arrivals
and N identical replicas, no order-preserving schedule starts any request before g_i, whatever cache it
keeps: no cache saves more prefill than the ideal one, so each prefill takes at least its floor. (By
induction on i: sorted by time, the replicas' free moments under this rule, each raised to the latest
start so far, stay at or before those of any order-preserving schedule.) Decode steps between prefills,
admission limits and transport are left out, so the bound is optimistic. A router can only go below it
by letting requests overtake: a later request's prefill starting before an earlier one's, on another
replica. The floor (no queueing at all) sits below the bound; the difference between them is the
queueing the pool's capacity imposes on an order-preserving router, and the difference between the
bound and a router's p99 is what that router's placement and cache added.

The bound is computed on each replay's own arrivals: in a closed-loop replay a turn arrives when its
conversation's previous turn ended, so arrival times depend on the router.
Parameters: num_replicas >= 1; floors >= 0 s. Complexity: O(n log n) for n requests (a heap of N free moments).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np


def order_bound_ttfts(requests: Sequence[tuple[float, float]], num_replicas: int) -> list[float]:
    """bound_ttft for each (sent_s, floor_s), in the order given (seconds)."""
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
    for sent_s, floor_s in requests:
        if floor_s < 0.0:
            raise ValueError(f"a floor must be >= 0 s, got {floor_s} (request sent at {sent_s} s)")
    free = [0.0] * num_replicas
    out = [0.0] * len(requests)
    for i in sorted(range(len(requests)), key=lambda k: (requests[k][0], k)):
        sent_s, floor_s = requests[i]
        start_s = max(sent_s, heapq.heappop(free))
        heapq.heappush(free, start_s + floor_s)
        out[i] = start_s + floor_s - sent_s
    return out


def order_bound_p99(requests: Sequence[tuple[float, float]], num_replicas: int) -> float | None:
    """order_bound_p99 (seconds); None for no request."""
    if not requests:
        return None
    return float(np.percentile(order_bound_ttfts(requests, num_replicas), 99))
