"""Router-side ledger of placements a replica's load report cannot show yet.

Load reports arrive every `request_routing_stats_period_s`; a burst placed between two reports would
all see the same free KV. The ledger subtracts what this router placed since the report was taken:

    seen(p)         = the time the replica received p: p.placed_at when the caller placed it as
                      received (the request reaches the replica at once), the time of `received(p)`
                      when it confirms later, else p.placed_at + receipt_timeout_s (never confirmed:
                      assumed received by then)
    pending(r, now) = { p placed on r : seen(p) >= now - stats_age_s(r), p not completed }
                      (a report taken before the replica received p cannot show it: through Ray a
                       request is still on its way for a while after it is placed, and a 100,000-token
                       prompt placed just before a report and delivered just after it would otherwise
                       vanish from the ledger while the report shows the replica idle; a placement
                       received at the instant the report was taken counts: over-counting for one
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
    long(p, r)      = pacing_min_uncached_tokens(r) > 0
                      and p.prefill_tokens >= pacing_min_uncached_tokens(r)   (pacing_permit.py rule `long`)
    paced(p, r)     = long(p, r) and p was placed with the router's pacing permit (Decision.pace)
    yielding_prefill_tokens'(r), yield_budget_tokens'(r): walk pending(r) in placement order from
                      pacing = yielding_prefill_tokens(r) > 0, yielding = yielding_prefill_tokens(r),
                      budget = max(0, yield_budget_tokens(r) - prefill_tokens_per_s(r) * stats_age_s(r))
                      (drained as the backlog is: a piece waiting behind others' prefill spends the budget
                       at that pace, the prefill_pacing wrapper's rule `left`; a turn of 4,804 uncached tokens
                       sent on a report 0.8 s old that showed 11,550 left arrived to find 4,644 and was held
                       12.9 s for the rest of the paced prompt):
                        paced(p, r) and not pacing:  pacing = True; yielding += p.prefill_tokens;
                                                     budget = floor(pacing_yield_fraction(r) * p.prefill_tokens)
                                                     (the replica starts pacing p)
                        pacing and (long(p, r) or p.prefill_tokens > budget):
                                                     yielding += p.prefill_tokens   (held behind the paced one)
                        otherwise:                   budget = max(0, budget - p.prefill_tokens)
                                                     (let in ahead of the paced prompt's pieces: it spends
                                                      the budget first)
                      as the prefill_pacing wrapper's rules `paced` and `hold` have it (replicas that hold, their
                      default), so that predicted_ttft.py `ahead` sees a prompt this router has just placed to
                      be paced as the replica will treat it. Counting it as plain backlog, as an earlier
                      version did, moved a conversation's next turn away from the replica caching it: through
                      Ray, a turn of 21,401 tokens with 20,992 cached at home, sent just after a 115,124-token
                      prompt was placed there to be paced, was predicted 5.76 s of TTFT at home and re-prefilled
                      elsewhere (0.41 points of the replay's prefix-hit rate), though the replica would have let
                      it in between two pieces.

Placements older than `horizon_s` are forgotten (a report that old is dropped by the filters anyway).
Parameters: stats_age_s >= 0 (seconds; infinity for a replica that never reported), horizon_s > 0,
receipt_timeout_s > 0 (seconds).
Complexity: `place`/`received`/`complete` O(1); `apply` O(R + P) for R replicas and P live placements.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.pacing_permit import is_long
from ray_dspine.routing.types import ReplicaView, RequestView


@dataclass(frozen=True, slots=True)
class _Placement:
    placed_at_s: float
    needed_kv_tokens: int
    num_state_slots: int
    prefill_tokens: int
    received_at_s: float | None  # None: the replica has not confirmed it yet
    pace_permitted: bool  # placed with the router's pacing permit (rule `paced`)


def drained_backlog(pending_tokens: int, tokens_per_s: float, age_s: float) -> int:
    """The reported prefill backlog left after `age_s` seconds of prefill at `tokens_per_s`."""
    if tokens_per_s <= 0.0 or math.isinf(age_s) or age_s <= 0.0:
        return pending_tokens
    return max(0, pending_tokens - int(tokens_per_s * age_s))


def _pacing_after(load: LoadSnapshot, budget: int, pending: Sequence[_Placement]) -> tuple[int, int]:
    """Rules `long`, `paced`, yielding_prefill_tokens' and yield_budget_tokens' from the drained budget:
    (yielding, budget)."""
    yielding = load.yielding_prefill_tokens
    pacing = yielding > 0
    for entry in pending:
        long = is_long(load, entry.prefill_tokens)
        if long and entry.pace_permitted and not pacing:
            pacing = True
            yielding += entry.prefill_tokens
            budget = math.floor(load.pacing_yield_fraction * entry.prefill_tokens)
        elif pacing and (long or entry.prefill_tokens > budget):
            yielding += entry.prefill_tokens
        else:
            budget = max(0, budget - entry.prefill_tokens)
    return yielding, budget


class ReservationLedger:
    """Placements per replica, oldest first; `clock` returns seconds on the same scale as report ages."""

    def __init__(self, clock: Callable[[], float], horizon_s: float, receipt_timeout_s: float = 5.0):
        if receipt_timeout_s <= 0.0:
            raise ValueError(f"receipt_timeout_s must be > 0, got {receipt_timeout_s}")
        self._clock = clock
        self._horizon_s = horizon_s
        self._receipt_timeout_s = receipt_timeout_s
        self._by_replica: dict[str, OrderedDict[str, _Placement]] = {}
        self._replica_of: dict[str, str] = {}

    def place(
        self,
        request: RequestView,
        replica_id: str,
        prefill_tokens: int | None = None,
        received: bool = True,
        pace_permitted: bool = False,
    ) -> None:
        """Record a placement; `received=False` when the request is still on its way (see `received`);
        `pace_permitted` when the router let the replica pace it (rule `paced`)."""
        self.complete(request.request_id)
        prefill = request.prompt_tokens if prefill_tokens is None else prefill_tokens
        now = self._clock()
        entry = _Placement(
            now, request.needed_kv_tokens, request.num_state_slots, prefill, now if received else None, pace_permitted
        )
        self._by_replica.setdefault(replica_id, OrderedDict())[request.request_id] = entry
        self._replica_of[request.request_id] = replica_id

    def received(self, request_id: str) -> None:
        """The replica now holds the request: reports taken from now on show it (rule `seen`)."""
        replica_id = self._replica_of.get(request_id)
        placements = self._by_replica.get(replica_id, {}) if replica_id is not None else {}
        entry = placements.get(request_id)
        if entry is not None and entry.received_at_s is None:
            placements[request_id] = replace(entry, received_at_s=self._clock())

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
            kv = slots = prefill = 0
            since = now - view.stats_age_s
            pending = [
                entry
                for entry in self._by_replica.get(view.replica_id, {}).values()
                if self._seen_at(entry) >= since  # else the report already shows it
            ]
            for entry in pending:
                kv += entry.needed_kv_tokens
                slots += entry.num_state_slots
                prefill += entry.prefill_tokens
            budget = drained_backlog(load.yield_budget_tokens, load.prefill_tokens_per_s, view.stats_age_s)
            if not pending and drained == load.pending_prefill_tokens and budget == load.yield_budget_tokens:
                out.append(view)
                continue
            yielding, budget = _pacing_after(load, budget, pending)
            adjusted = load.model_copy(
                update={
                    "free_kv_tokens": load.free_kv_tokens - kv,
                    "free_state_slots": load.free_state_slots - slots * load.state_slots_per_request,
                    "num_queued": load.num_queued + len(pending),
                    "pending_prefill_tokens": drained + prefill,
                    "yielding_prefill_tokens": yielding,
                    "yield_budget_tokens": budget,
                }
            )
            out.append(replace(view, load=adjusted))
        return out

    def _seen_at(self, entry: _Placement) -> float:
        if entry.received_at_s is not None:
            return entry.received_at_s
        return entry.placed_at_s + self._receipt_timeout_s

    def _prune(self, now: float) -> None:
        cutoff = now - self._horizon_s
        for placements in self._by_replica.values():
            while placements:
                request_id, entry = next(iter(placements.items()))
                if entry.placed_at_s > cutoff:
                    break
                placements.popitem(last=False)
                self._replica_of.pop(request_id, None)
