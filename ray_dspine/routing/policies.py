"""One entry point from `RouterConfig.policy` to a routing policy object.

Every policy answers `choose(request, replicas) -> Decision` and is told about placements
(`on_placed`; with `received=False` while the request is still on its way, then `on_received` once the
replica holds it), completions (`on_completed`) and replicas that went away (`forget_replica`).
"""

from __future__ import annotations

import time
from typing import Callable, Protocol, Sequence

from ray_dspine.routing.baselines.cache_aware import CacheAwarePolicy
from ray_dspine.routing.baselines.least_load import LeastLoadPolicy
from ray_dspine.routing.config import RouterConfig
from ray_dspine.routing.pipeline import RoutingPipeline
from ray_dspine.routing.types import Decision, ReplicaView, RequestView


class RoutingPolicy(Protocol):
    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> Decision: ...

    def on_placed(self, request: RequestView, replica_id: str, received: bool = True) -> None: ...

    def on_received(self, request_id: str) -> None:
        """The replica now holds the request (its load reports from now on show it)."""
        ...

    def on_completed(self, request_id: str, served: bool = True) -> None:
        """The request ended; `served=False` when it was withdrawn before reaching the replica."""
        ...

    def forget_replica(self, replica_id: str) -> None: ...


def build_policy(config: RouterConfig, clock: Callable[[], float] = time.monotonic) -> RoutingPolicy:
    """The policy object for `config.policy`; "pow2" has none (keep Ray's default router)."""
    if config.policy == "headroom":
        return RoutingPipeline(config, clock)
    if config.policy == "cache_aware":
        return CacheAwarePolicy(
            config.cache_aware,
            clock,
            horizon_s=config.reports.drop_after_s,
            receipt_timeout_s=config.reports.receipt_timeout_s,
        )
    if config.policy == "least_load":
        return LeastLoadPolicy(
            clock, horizon_s=config.reports.drop_after_s, receipt_timeout_s=config.reports.receipt_timeout_s
        )
    raise ValueError(
        "policy 'pow2' means Ray's default PowerOfTwoChoices router: leave request_router_class unset"
    )
