"""An opt-in log of routing decisions, one JSON object per line: why a request went where it went.

Turned on by the environment variable DSPINE_ROUTING_DECISION_LOG=<file> in the processes that route
(the ingress replicas, whose handles run the pools' routers; under Ray set it in the app's
`runtime_env.env_vars`); each router appends to that file. Nothing of the prompt is written: the record
holds token counts, prefix-block counts, replica ids and the router's own figures.

Record rule (one routing call):
  t_unix_s, request_id, session (true when the request carries a session id, never the id itself),
  prompt_tokens, max_tokens, prefix_blocks (the ingress's estimates, as the router saw them),
  ranked (replica ids, best first), wait, reason, and per replica:
    reported   the load report as it arrived: age_s, pending_prefill_tokens, free_kv_tokens,
               num_running, num_queued
    believed   the same after the router's ledger (reservations.py): pending_prefill_tokens,
               free_kv_tokens, num_queued, or null for a policy without a ledger
    total      the weighted score (null when the replica was not scored), rejected (the filter's or
               guard's reason, or null)
Complexity: O(R) per decision for R replicas.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from ray_dspine.routing.types import Decision, ReplicaView, RequestView

ENV_VAR = "DSPINE_ROUTING_DECISION_LOG"


def _load_fields(view: ReplicaView) -> dict:
    load = view.load
    return {
        "pending_prefill_tokens": load.pending_prefill_tokens,
        "free_kv_tokens": load.free_kv_tokens,
        "num_queued": load.num_queued,
    }


def decision_record(
    request: RequestView,
    reported: Sequence[ReplicaView],
    believed: Sequence[ReplicaView] | None,
    decision: Decision,
    now_unix_s: float,
) -> dict:
    """The record rule; `believed` is `reported` after the ledger, in the same order (None: no ledger)."""
    believed_by_id = {v.replica_id: v for v in believed} if believed is not None else {}
    replicas = {}
    for view in reported:
        age = None if math.isinf(view.stats_age_s) else round(view.stats_age_s, 4)
        after = believed_by_id.get(view.replica_id)
        replicas[view.replica_id] = {
            "reported": {"age_s": age, "num_running": view.load.num_running, **_load_fields(view)},
            "believed": None if after is None else _load_fields(after),
            "total": decision.total_scores.get(view.replica_id),
            "rejected": decision.rejected.get(view.replica_id),
        }
    return {
        "t_unix_s": now_unix_s,
        "request_id": request.request_id,
        "session": request.session_id is not None,
        "prompt_tokens": request.prompt_tokens,
        "max_tokens": request.max_tokens,
        "prefix_blocks": len(request.prefix_hashes),
        "ranked": list(decision.ranked_replica_ids),
        "wait": decision.wait,
        "reason": decision.reason,
        "replicas": replicas,
    }


class DecisionLog:
    """Appends records to one file, a whole line at a time (routers in several processes may share it)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> DecisionLog | None:
        value = os.environ.get(ENV_VAR, "").strip()
        return cls(Path(value)) if value else None

    def write(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
