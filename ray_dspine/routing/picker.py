"""Picker: rank replicas by weighted score, deterministically.

    total(r) = sum_s w_s * score_s(r)                  (w_s >= 0, score_s in [0, 1])
    order    = descending total(r), then ascending num_running(r) + num_queued(r),
               then ascending replica_id                (a total order: equal inputs, equal ranking)

Totals are rounded to 9 decimals before comparing so that float summation noise never breaks a tie
differently. Parameters: the weights. Complexity: O(S * R + R log R) for S scorers and R replicas.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ray_dspine.routing.types import ReplicaView

_TOTAL_DECIMALS = 9


def weighted_totals(
    replicas: Sequence[ReplicaView], scores: Mapping[str, Sequence[float]], weights: Mapping[str, float]
) -> dict[str, float]:
    totals = {view.replica_id: 0.0 for view in replicas}
    for name, values in scores.items():
        weight = weights[name]
        for view, value in zip(replicas, values):
            totals[view.replica_id] += weight * value
    return totals


def rank(replicas: Sequence[ReplicaView], totals: Mapping[str, float]) -> list[str]:
    ordered = sorted(
        replicas,
        key=lambda view: (-round(totals[view.replica_id], _TOTAL_DECIMALS), view.num_requests, view.replica_id),
    )
    return [view.replica_id for view in ordered]


class MaxScorePicker:
    """The `max_score` picker: weighted totals, then the order above (best first)."""

    name = "max_score"

    def pick(
        self, replicas: Sequence[ReplicaView], scores: Mapping[str, Sequence[float]], weights: Mapping[str, float]
    ) -> tuple[dict[str, float], list[str]]:
        """(total(r) per replica, replica ids ranked)."""
        totals = weighted_totals(replicas, scores, weights)
        return totals, rank(replicas, totals)
