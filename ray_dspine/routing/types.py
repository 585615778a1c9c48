"""The values the routing core works on: what a replica reported, what a request needs, what was decided.

These are plain frozen dataclasses (built per request on the routing hot path); the load itself is
the engines' `LoadSnapshot`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ray_dspine.engines.protocol import GenerateRequest, LoadSnapshot

# Age given to a replica that has not reported any load yet.
UNREPORTED_AGE_S = math.inf


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One candidate replica as the router sees it.

    `stats_age_s` is how old `load` is (seconds); `UNREPORTED_AGE_S` (infinity) means the replica has
    not reported yet and `load` is a default snapshot.
    """

    replica_id: str
    load: LoadSnapshot
    stats_age_s: float = 0.0

    @property
    def reported(self) -> bool:
        return not math.isinf(self.stats_age_s)

    @property
    def num_requests(self) -> int:
        """Running plus queued requests."""
        return self.load.num_running + self.load.num_queued


@dataclass(frozen=True, slots=True)
class RequestView:
    """What placing one request needs.

    `prompt_tokens` = the ingress's prompt estimate (tokens); `max_tokens` = the most it may generate;
    `needed_kv_tokens` = prompt estimate + max_tokens (the most KV it can grow to);
    `num_state_slots` counts sequences needing a Mamba state (1 per request here); the replica's
    `state_slots_per_request` (speculation's extra state included) multiplies it.
    """

    request_id: str
    session_id: str | None = None
    prefix_hashes: tuple[str, ...] = ()
    prompt_tokens: int = 0
    max_tokens: int = 0
    needed_kv_tokens: int = 0
    num_state_slots: int = 1

    @classmethod
    def from_request(cls, request: GenerateRequest, session_id: str | None = None) -> RequestView:
        """Build from a GenerateRequest; `session_id` (e.g. Ray's handle metadata) wins when given."""
        return cls(
            request_id=request.request_id,
            session_id=session_id or request.session_id or None,
            prefix_hashes=tuple(request.prefix_hashes),
            prompt_tokens=request.estimated_prompt_tokens,
            max_tokens=request.max_tokens,
            needed_kv_tokens=request.estimated_prompt_tokens + request.max_tokens,
            num_state_slots=1,
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one routing call.

    `ranked_replica_ids` is best first; empty with `wait=True` when no replica can hold the request
    (the caller must retry later rather than place it). `scores[scorer][replica_id]` is each scorer's
    value in [0, 1]; `total_scores` the weighted sums; `scorer_latency_us` each scorer's wall time;
    `rejected[replica_id]` says which filter removed a replica, and `rejected_by[replica_id]` which
    stage (outcomes.py: "filter" or "ttft_guard"); `wait_kind` says why a request must wait
    (outcomes.py's hold kinds: "memory", "capacity", "unhealthy"); `pace` is the request's pacing permit
    (pacing_permit.py), which the caller hands the replica with the request.
    """

    ranked_replica_ids: tuple[str, ...]
    wait: bool = False
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    total_scores: dict[str, float] = field(default_factory=dict)
    scorer_latency_us: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    rejected_by: dict[str, str] = field(default_factory=dict)
    wait_kind: str | None = None
    pace: bool = True

    @property
    def chosen(self) -> str | None:
        return self.ranked_replica_ids[0] if self.ranked_replica_ids else None
