"""The router's own metrics, from the processes that route (the ingress replicas, whose handles run the
pools' routers), exported through `ray.serve.metrics` with Serve's deployment and replica tags:

    dspine_routing_placements{pool, arm, policy, outcome}  counter: one per request Ray hands to a
                                                            replica; outcome as in outcomes.py
    dspine_routing_holds{pool, arm, policy, kind}          counter: one per request told to wait at
                                                            least once before it was placed
    dspine_routing_decision_s{pool, policy}                histogram: the policy's time per routing call

The same counts are kept in memory (`placements`, `holds`: tag tuple -> count), so a router can be
read without Prometheus. Ray's metric objects are built only where Ray runs (`ray.is_initialized()`),
once per process and shared by its routers (an ingress holds one per pool); elsewhere, as in unit
tests, only the in-memory counts are kept.
"""

from __future__ import annotations

import functools
from collections import Counter

DECISION_BOUNDARIES_S = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1]


class RoutingMetrics:
    def __init__(self, policy: str, export: bool | None = None):
        self.policy = policy
        self.placements: Counter[tuple[str, str, str]] = Counter()  # (pool, arm, outcome)
        self.holds: Counter[tuple[str, str, str]] = Counter()  # (pool, arm, kind)
        if export is None:
            import ray

            export = ray.is_initialized()
        self._exported = _shared_exported() if export else None

    def placed(self, pool: str, arm: str, outcome: str) -> None:
        self.placements[(pool, arm, outcome)] += 1
        if self._exported is not None:
            self._exported.placements.inc(tags={"pool": pool, "arm": arm, "policy": self.policy, "outcome": outcome})

    def held(self, pool: str, arm: str, kind: str) -> None:
        self.holds[(pool, arm, kind)] += 1
        if self._exported is not None:
            self._exported.holds.inc(tags={"pool": pool, "arm": arm, "policy": self.policy, "kind": kind})

    def decided(self, pool: str, seconds: float) -> None:
        if self._exported is not None:
            self._exported.decision.observe(seconds, tags={"pool": pool, "policy": self.policy})


class _Exported:
    def __init__(self):
        from ray.serve import metrics

        self.placements = metrics.Counter(
            "dspine_routing_placements", "Requests placed by the router, by outcome (outcomes.py).",
            ("pool", "arm", "policy", "outcome"),
        )  # fmt: skip
        self.holds = metrics.Counter(
            "dspine_routing_holds", "Requests the router told to wait at least once, by kind.",
            ("pool", "arm", "policy", "kind"),
        )  # fmt: skip
        self.decision = metrics.Histogram(
            "dspine_routing_decision_s", "The routing policy's time per call (s).", DECISION_BOUNDARIES_S,
            ("pool", "policy"),
        )  # fmt: skip


@functools.lru_cache(maxsize=1)
def _shared_exported() -> _Exported:
    """One set of Ray metric objects per process: an ingress routes to every pool, one router each."""
    return _Exported()
