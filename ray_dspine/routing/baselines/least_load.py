"""Least-load baseline: the healthy replica with the fewest requests in flight.

    load(r)  = num_running(r) + num_queued(r)     (num_queued includes this router's unreported placements)
    ranking  = healthy replicas by ascending load(r), then replica_id;  wait if none is healthy

No capacity check: this is the headroom-blind comparison point. Parameters: none.
Complexity: O(R log R).
"""

from __future__ import annotations

from typing import Callable, Sequence

from ray_dspine.routing.reservations import ReservationLedger
from ray_dspine.routing.types import Decision, ReplicaView, RequestView


class LeastLoadPolicy:
    def __init__(self, clock: Callable[[], float], horizon_s: float = 60.0, receipt_timeout_s: float = 5.0):
        self.ledger = ReservationLedger(clock, horizon_s=horizon_s, receipt_timeout_s=receipt_timeout_s)

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> Decision:
        views = [v for v in self.ledger.apply(replicas) if v.load.healthy]
        if not views:
            return Decision((), wait=True, reason="no healthy replica", wait_kind="unhealthy")
        ordered = sorted(views, key=lambda v: (v.num_requests, v.replica_id))
        loads = {v.replica_id: float(v.num_requests) for v in views}
        return Decision(tuple(v.replica_id for v in ordered), scores={"load": loads}, reason="least load")

    def on_placed(self, request: RequestView, replica_id: str, received: bool = True) -> None:
        self.ledger.place(request, replica_id, received=received)

    def on_received(self, request_id: str) -> None:
        self.ledger.received(request_id)

    def on_completed(self, request_id: str, served: bool = True) -> None:
        self.ledger.complete(request_id)

    def forget_replica(self, replica_id: str) -> None:
        self.ledger.forget_replica(replica_id)
