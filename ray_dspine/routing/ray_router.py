"""Ray Serve adapters: run a `ray_dspine.routing` policy as a deployment's request router.

Set on the pool (engine) deployments, never on the ingress (over raw HTTP the arguments are bytes):

    request_router_config:
      request_router_class: ray_dspine.routing.ray_router:HeadroomRequestRouter
      request_router_kwargs: {<RouterConfig fields>}     # validated into RouterConfig
      request_routing_stats_period_s: 1.0                # how often replicas' record_routing_stats runs

How Ray uses it (Ray 2.60): `choose_replicas` returns ranked groups; we return one replica per group,
best first, so Ray sends to the best replica unless its queue is at max_ongoing_requests, then tries the
next. Returning [] makes Ray retry the request after a backoff (initial_backoff_s 0.025 s, doubling, at
most max_backoff_s 0.5 s by default), which is how "wait until a replica can hold it" works. Ray backs off
only when `pending_request.routing_context.should_backoff` is set (LocalityMixin sets it once it has
tried all replicas); we consider all replicas on every call, so we always set it.
No FIFOMixin: Ray then gives the chosen replica to exactly the request it was chosen for.
Replica loads come from `replica.routing_stats` (the dict `record_routing_stats` returned, a
`LoadSnapshot` plus an optional `reported_at_s` wall-clock timestamp); the typed request is
`pending_request.args[0]`; the session id is `pending_request.metadata.session_id`. The decision's
pacing permit (`Decision.pace`, pacing_permit.py) is written into that typed request, which Ray
serializes when it sends it to the replica chosen, after `choose_replicas` returns.
Placements are recorded as soon as `choose_replicas` picks a replica (tentatively: the request is still
on its way to the replica, and requests routed meanwhile must see it, or a burst lands on one replica),
corrected in `on_request_routed` when Ray ended up on another replica (Ray calls it once a replica
accepts, which is the default outside Ray Client) and released in `on_request_completed`; a tentative
placement that is never confirmed ages out of the ledger after `drop_after_s`, or is released at once
when a later call for the same request answers wait. Until `on_request_routed` the placement counts
against every load report of its replica, since a report read while the request was on its way cannot
show it (after `receipt_timeout_s` it is assumed delivered); from then on, reports taken after it do.
Ray runs at most 2 x replicas (cap 50) routing loops per handle and each waiting request holds one, so
a backlog of requests that fit nowhere delays the requests queued behind it (first come, first served).
A replica whose actor died leaves the candidates as soon as Ray sees a call to it fail with ActorDiedError
(`on_replica_actor_died`), before the controller's next replica list; the policy forgets it then too.
With DSPINE_ROUTING_DECISION_LOG=<file> set, every decision is appended there (decision_log.py).
Every placement is also counted by outcome (outcomes.py: stayed on its conversation's replica, moved
off it and why, or a new session), every request told to wait is counted once by kind, and each
policy call is timed (ray_metrics.py). The outcome is judged on the replica Ray confirms, against the
replica of the session's previous confirmed placement (a bounded table of `session_table_capacity`).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, List, Optional

from pydantic import ValidationError
from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from ray_dspine.engines.protocol import GenerateRequest, LoadSnapshot
from ray_dspine.routing.config import PolicyName, RouterConfig
from ray_dspine.routing.decision_log import DecisionLog, decision_record
from ray_dspine.routing.outcomes import placement_outcome
from ray_dspine.routing.policies import RoutingPolicy, build_policy
from ray_dspine.routing.ray_metrics import RoutingMetrics
from ray_dspine.routing.session_table import SessionTable
from ray_dspine.routing.types import UNREPORTED_AGE_S, Decision, ReplicaView, RequestView

logger = logging.getLogger("ray.serve")

REPORTED_AT_KEY = "reported_at_s"
# Requests remembered at most per table of requests not yet confirmed (older ones are forgotten first:
# requests cancelled before Ray routed them).
MAX_PENDING_REQUESTS = 10_000


def replica_view(replica_id: str, stats: dict[str, Any] | None, now_s: float, assumed_age_s: float) -> ReplicaView:
    """A ReplicaView from a routing-stats dict; empty or invalid stats count as not reported."""
    if not stats:
        return ReplicaView(replica_id, LoadSnapshot(), UNREPORTED_AGE_S)
    try:
        load = LoadSnapshot.model_validate({k: v for k, v in stats.items() if k != REPORTED_AT_KEY})
    except ValidationError as exc:
        logger.warning("replica %s reported invalid routing stats: %s", replica_id, exc)
        return ReplicaView(replica_id, LoadSnapshot(), UNREPORTED_AGE_S)
    reported_at = stats.get(REPORTED_AT_KEY)
    if isinstance(reported_at, (int, float)) and math.isfinite(reported_at):
        age = max(0.0, now_s - float(reported_at))
    else:
        age = assumed_age_s
    return ReplicaView(replica_id, load, age)


class DSpineRequestRouter(RequestRouter):
    """Runs the policy named by `RouterConfig.policy` (from request_router_kwargs)."""

    fixed_policy: Optional[PolicyName] = None

    def initialize_state(self, **kwargs: Any) -> None:
        config = RouterConfig.model_validate(kwargs)
        if self.fixed_policy is not None:
            if "policy" in kwargs and config.policy != self.fixed_policy:
                raise ValueError(f"{type(self).__name__} runs policy {self.fixed_policy!r}, not {config.policy!r}")
            config = config.model_copy(update={"policy": self.fixed_policy})
        self._config = config
        self._policy: RoutingPolicy = build_policy(config, time.monotonic)
        self._request_id_of: dict[str, str] = {}
        self._tentative: dict[str, str] = {}  # request_id -> replica chosen, not yet confirmed
        self.last_decision: Decision | None = None
        self._decision_log = DecisionLog.from_env()
        self.metrics = RoutingMetrics(config.policy)
        # session -> replica of its last placement
        self._homes = SessionTable(config.estimator.session_table_capacity)
        # request_id -> (home, candidates, rejected_by) of its latest decision that named a replica
        self._judged: dict[str, tuple[str | None, frozenset[str], dict[str, str]]] = {}
        self._held: dict[str, None] = {}  # requests told to wait, counted once, not yet placed

    async def choose_replicas(
        self,
        candidate_replicas: List[RunningReplica],
        pending_request: Optional[PendingRequest] = None,
    ) -> List[List[RunningReplica]]:
        if pending_request is not None:
            # Every call considers all replicas, so an empty answer (or full queues) must back off;
            # without this flag Ray retries immediately and the router's event loop spins.
            pending_request.routing_context.should_backoff = True
        request = self._request_view(pending_request)
        if request is None:  # not a GenerateRequest call: let Ray pick the shortest queue
            return [list(candidate_replicas)] if candidate_replicas else []
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        now = time.time()
        assumed_age_s = self._config.reports.assumed_stats_age_s
        views = [replica_view(rid, r.routing_stats, now, assumed_age_s) for rid, r in by_id.items()]
        log = self._decision_log
        ledger = getattr(self._policy, "ledger", None) if log is not None else None
        believed = ledger.apply(views) if ledger is not None else None  # what the ledger adds, for the log
        started = time.perf_counter()
        decision = self._policy.choose(request, views)
        generate = pending_request.args[0]
        self.metrics.decided(generate.pool, time.perf_counter() - started)
        self.last_decision = decision
        if log is not None:
            log.write(decision_record(request, views, believed, decision, now))
        ranked = [rid for rid in decision.ranked_replica_ids if rid in by_id]
        if not ranked and self._tentative.pop(request.request_id, None) is not None:
            # Chosen on an earlier call but not routed (that replica's queue was full), and now told to
            # wait: it is on no replica, so its tentative placement must not hold headroom there.
            self._policy.on_completed(request.request_id, served=False)
        if not ranked and decision.wait and request.request_id not in self._held:
            _remember(self._held, request.request_id, None)
            self.metrics.held(generate.pool, generate.arm, decision.wait_kind or "capacity")
        if ranked:
            home = self._homes.last(request.session_id)
            _remember(self._judged, request.request_id, (home, frozenset(by_id), decision.rejected_by))
            # The permit travels in the request itself: Ray sends `pending_request.args` to the replica
            # it routes to after this call returns (pacing_permit.py; a pacing engine wrapper, engines/wrappers.py, reads it).
            generate.pace = decision.pace
        if ranked and self._tentative.get(request.request_id) != ranked[0]:
            _remember(self._tentative, request.request_id, ranked[0])
            self._policy.on_placed(request, ranked[0], received=False)
        return [[by_id[rid]] for rid in ranked]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        request = self._request_view(pending_request)
        if request is None:
            return
        self._request_id_of[pending_request.metadata.internal_request_id] = request.request_id
        if self._tentative.pop(request.request_id, None) != replica_id.unique_id:
            self._policy.on_placed(request, replica_id.unique_id, received=False)
        self._policy.on_received(request.request_id)
        self._held.pop(request.request_id, None)
        judged = self._judged.pop(request.request_id, None)
        if judged is not None:
            generate = pending_request.args[0]
            self.metrics.placed(generate.pool, generate.arm, placement_outcome(replica_id.unique_id, *judged))
        self._homes.record(request.session_id, replica_id.unique_id)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        request_id = self._request_id_of.pop(internal_request_id, None)
        if request_id is not None:
            self._tentative.pop(request_id, None)
            self._policy.on_completed(request_id)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        """Ray saw the replica's actor die (a call to it failed with ActorDiedError): Ray drops it from the
        candidates at once; the policy forgets its placements, cached prefixes and sessions, so no later
        decision counts on it (its later removal by update_replicas no longer lists it as gone)."""
        super().on_replica_actor_died(replica_id)
        self._policy.forget_replica(replica_id.unique_id)
        for request_id in [rid for rid, placed in self._tentative.items() if placed == replica_id.unique_id]:
            del self._tentative[request_id]

    def update_replicas(self, replicas: List[RunningReplica]) -> None:
        before = {rid.unique_id for rid in self._replicas}
        super().update_replicas(replicas)
        after = {r.replica_id.unique_id for r in replicas}
        for gone in before - after:
            self._policy.forget_replica(gone)

    @staticmethod
    def _request_view(pending_request: Optional[PendingRequest]) -> RequestView | None:
        if pending_request is None or not pending_request.args:
            return None
        request = pending_request.args[0]
        if not isinstance(request, GenerateRequest):
            return None
        return RequestView.from_request(request, session_id=pending_request.metadata.session_id or None)


def _remember(table: dict, key: str, value) -> None:
    """Insert into a bounded per-request table, forgetting the oldest entry beyond MAX_PENDING_REQUESTS."""
    if key not in table and len(table) >= MAX_PENDING_REQUESTS:
        del table[next(iter(table))]
    table[key] = value


class HeadroomRequestRouter(DSpineRequestRouter):
    """Filters by KV/state headroom, scores affinity + headroom + queue; waits when nothing fits, or when a
    replica short of memory would start the request far sooner than the one chosen (memory_wait.py)."""

    fixed_policy = "headroom"


class CacheAwareRequestRouter(DSpineRequestRouter):
    """SGLang Model Gateway's cache_aware rule (baseline)."""

    fixed_policy = "cache_aware"


class LeastLoadRequestRouter(DSpineRequestRouter):
    """Fewest running + queued requests (baseline)."""

    fixed_policy = "least_load"
