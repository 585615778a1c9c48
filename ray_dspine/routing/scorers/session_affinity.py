"""Session affinity: stay on the replica that last served this conversation.

    score(q, r) = 1  if r == last(session(q)) in the router-side session table
                = 0  otherwise (also when q has no session id or the session was forgotten)

Parameters: none (the table's capacity is set on `SessionTable`). Complexity: O(R).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.session_table import SessionTable
from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.types import ReplicaView


class SessionAffinityScorer:
    name = "session_affinity"

    def __init__(self, sessions: SessionTable):
        self._sessions = sessions

    def score(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> list[float]:
        last = self._sessions.last(estimate.request.session_id)
        return [1.0 if last is not None and view.replica_id == last else 0.0 for view in replicas]
