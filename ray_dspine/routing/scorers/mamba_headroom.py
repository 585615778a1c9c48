"""Mamba headroom: share of the replica's recurrent-state slots still free once the request is placed.

    needed(q, r) = num_state_slots(q) * state_slots_per_request(r)   (speculation's extra state included)
    score(q, r)  = clip01((free_state_slots(r) - needed(q, r)) / total_state_slots(r))
                 = 1 when total_state_slots(r) == 0 (an engine without a state pool never runs short)

Parameters: none (slots in, fraction out). Complexity: O(R).
"""

from __future__ import annotations

from typing import Sequence

from ray_dspine.routing.scorers.base import clip01
from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.types import ReplicaView


class MambaHeadroomScorer:
    name = "mamba_headroom"

    def score(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> list[float]:
        out: list[float] = []
        for view in replicas:
            load = view.load
            if load.total_state_slots <= 0:
                out.append(1.0)
                continue
            left = load.free_state_slots - estimate.request.num_state_slots * load.state_slots_per_request
            out.append(clip01(left / load.total_state_slots))
        return out
