"""What a scorer is: a named function from (the decision's estimate, candidate replicas) to one score in [0, 1] each.

Scorers see loads already reduced by the reservation ledger and only replicas that passed the filters;
the request is `estimate.request`, and its cached prefix and predicted TTFT on each replica are the
estimate's (estimate.py), the same figures the filters and holds read.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.types import ReplicaView


class Scorer(Protocol):
    name: str

    def score(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> list[float]:
        """One score in [0, 1] per replica, in the order given."""
        ...


def relative(estimates_s: Sequence[float], slack_s: float) -> list[float]:
    """(min + slack) / (est + slack): 1 for the best estimate, falling as an estimate grows past it."""
    if not estimates_s:
        return []
    best = min(estimates_s)
    return [(best + slack_s) / (est + slack_s) for est in estimates_s]


def clip01(value: float) -> float:
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value
