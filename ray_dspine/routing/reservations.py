"""Router-side ledger of placements a replica's load report cannot show yet.

Load reports arrive every `request_routing_stats_period_s`; a burst placed between two reports would
all see the same free KV. The ledger subtracts what this router placed since the report was taken:

    pending(r, now) = { p placed on r : p.placed_at >= now - stats_age_s(r), p not completed }
                      (a placement made at the instant the report was taken counts: the report
                       cannot show what was placed after it was read, and over-counting for one
                       report period is safe where under-counting piles a burst onto one replica)
    free_kv'(r)     = free_kv(r)    - sum_{p in pending} p.needed_kv_tokens
    free_slots'(r)  = free_slots(r) - sum_{p in pending} p.num_state_slots * state_slots_per_request(r)
    num_queued'(r)  = num_queued(r) + |pending|
    pending_prefill_tokens'(r) = max(0, pending_prefill_tokens(r) - prefill_tokens_per_s(r) * stats_age_s(r))
                                 + sum_{p in pending} p.prefill_tokens
                      (the reported backlog drains at the replica's reported prefill rate while the
                       report ages; no drain when the rate is 0 (unknown) or the age is infinite;
                       p.prefill_tokens: the uncached prompt tokens estimated when p was placed,
                       the whole prompt when the caller gave no estimate)

Placements older than `horizon_s` are forgotten (a report that old is dropped by the filters anyway).
Parameters: stats_age_s >= 0 (seconds; infinity for a replica that never reported), horizon_s > 0.
Complexity: `place`/`complete` O(1); `apply` O(R + P) for R replicas and P live placements.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ray_dspine.routing.types import ReplicaView, RequestView


@dataclass(frozen=True, slots=True)
class _Placement:
    placed_at_s: float
    needed_kv_tokens: int
    num_state_slots: int
    prefill_tokens: int


def drained_backlog(pending_tokens: int, tokens_per_s: float, age_s: float) -> int:
    """The reported prefill backlog left after `age_s` seconds of prefill at `tokens_per_s`."""
    if tokens_per_s <= 0.0 or math.isinf(age_s) or age_s <= 0.0:
        return pending_tokens
    return max(0, pending_tokens - int(tokens_per_s * age_s))


class ReservationLedger:
    """Placements per replica, oldest first; `clock` returns seconds on the same scale as report ages."""

    def __init__(self, clock: Callable[[], float], horizon_s: float):
        self._clock = clock
        self._horizon_s = horizon_s
        self._by_replica: dict[str, OrderedDict[str, _Placement]] = {}
        self._replica_of: dict[str, str] = {}

    def place(self, request: RequestView, replica_id: str, prefill_tokens: int | None = None) -> None:
        self.complete(request.request_id)
        prefill = request.prompt_tokens if prefill_tokens is None else prefill_tokens
        entry = _Placement(self._clock(), request.needed_kv_tokens, request.num_state_slots, prefill)
        self._by_replica.setdefault(replica_id, OrderedDict())[request.request_id] = entry
        self._replica_of[request.request_id] = replica_id

    def complete(self, request_id: str) -> None:
        replica_id = self._replica_of.pop(request_id, None)
        if replica_id is not None:
            self._by_replica.get(replica_id, OrderedDict()).pop(request_id, None)

    def forget_replica(self, replica_id: str) -> None:
        for request_id in self._by_replica.pop(replica_id, OrderedDict()):
            self._replica_of.pop(request_id, None)

    def replica_of(self, request_id: str) -> str | None:
        return self._replica_of.get(request_id)

    def num_live(self) -> int:
        return len(self._replica_of)

    def apply(self, replicas: Sequence[ReplicaView]) -> list[ReplicaView]:
        """Replicas as they stand now: reported backlog drained, unreported placements added."""
        now = self._clock()
        self._prune(now)
        out: list[ReplicaView] = []
        for view in replicas:
            load = view.load
            drained = drained_backlog(load.pending_prefill_tokens, load.prefill_tokens_per_s, view.stats_age_s)
            kv = slots = count = prefill = 0
            since = now - view.stats_age_s
            for entry in reversed(self._by_replica.get(view.replica_id, {}).values()):
                if entry.placed_at_s < since:
                    break  # older entries are already in the report
                kv += entry.needed_kv_tokens
                slots += entry.num_state_slots
                prefill += entry.prefill_tokens
                count += 1
            if count == 0 and drained == load.pending_prefill_tokens:
                out.append(view)
                continue
            adjusted = load.model_copy(
                update={
                    "free_kv_tokens": load.free_kv_tokens - kv,
                    "free_state_slots": load.free_state_slots - slots * load.state_slots_per_request,
                    "num_queued": load.num_queued + count,
                    "pending_prefill_tokens": drained + prefill,
                }
            )
            out.append(replace(view, load=adjusted))
        return out

    def _prune(self, now: float) -> None:
        cutoff = now - self._horizon_s
        for placements in self._by_replica.values():
            while placements:
                request_id, entry = next(iter(placements.items()))
                if entry.placed_at_s > cutoff:
                    break
                placements.popitem(last=False)
                self._replica_of.pop(request_id, None)
