"""Queue: prefer replicas with fewer requests in flight.

    score(q, r) = 1 / (1 + num_running(r) + num_queued(r))

(num_queued includes this router's placements the replica has not reported yet.)
Parameters: none. Complexity: O(R).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.types import ReplicaView


class QueueScorer:
    name = "queue"

    def score(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> list[float]:
        return [1.0 / (1.0 + max(0, view.num_requests)) for view in replicas]
