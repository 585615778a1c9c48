"""Filters: which replicas could take a request right now without it being retracted later.

Rules, for request q and replica r (loads already reduced by the reservation ledger):

    healthy(r)   = r.healthy
    fresh(r)     = r unreported  or  age(r) <= drop_after_s
    trust(r)     = 1                        if age(r) <= stale_after_s
                 = stale_headroom_fraction  otherwise          (stale reports: believe only part)
    holds_kv(r)  = trust(r) * free_kv_tokens(r) - queued_kv_tokens(r) - pinned_hit(q, r)
                       >= needed_kv_tokens(q) - cached(q, r)
                                                  (the replica's queue is admitted first, FCFS)
    cached(q, r) = prompt tokens of q the router believes r has cached (the shared estimate,
                   estimate.py, from its prefix index; 0 if none)
    pinned_hit(q, r) = min(cached(q, r), evictable_kv_tokens(r))   (evictable_kv_tokens(r) taken as
                   trust(r) * free_kv_tokens(r) when r does not report it)
                   An engine reuses the cached blocks instead of allocating them, so q needs only
                   needed - cached new tokens; but cached blocks no running request holds are counted
                   in free_kv_tokens and stop being free once q pins them. In the worst case every hit
                   block is such a block, and with cached = 0, or evictable unreported, the rule is
                   free - queued >= needed.
    holds_state(r) = total_state_slots(r) == 0                 (no Mamba pool on this engine)
                 or trust(r) * free_state_slots(r) >= num_state_slots(q) * state_slots_per_request(r)
    keep(r)      = healthy and fresh and holds_kv and holds_state

    never_fits(q) = no healthy reporting r has total_kv_tokens(r) >= needed_kv_tokens(q) and
                    (total_state_slots(r) == 0 or total_state_slots(r) >= slots needed)

`state_slots_per_request` is what the replica reports one request takes, speculation's extra state
included. A replica that never reported (age = infinity) has no load to check: it is kept aside as a
fallback, used only when no reporting replica passes (a freshly started replica is most likely empty).
`FitsMemory` is this rule as the headroom pipeline's `fits_memory` filter (config `FitsMemoryFilter`;
its parameters are the router's `reports` block); the pipeline sets unreported replicas aside first.
Parameters: 0 < stale_after_s <= drop_after_s (seconds), stale_headroom_fraction in [0, 1].
Complexity: O(R) for R replicas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.outcomes import STAGE_FILTER
from ray_dspine.routing.types import ReplicaView, RequestView


@dataclass(frozen=True, slots=True)
class FilterResult:
    kept: list[ReplicaView]
    unreported: list[ReplicaView]
    rejected: dict[str, str] = field(default_factory=dict)


def trust_fraction(view: ReplicaView, stale_after_s: float, stale_headroom_fraction: float) -> float:
    return 1.0 if view.stats_age_s <= stale_after_s else stale_headroom_fraction


def check_healthy(view: ReplicaView) -> str | None:
    return None if view.load.healthy else "unhealthy"


def check_fresh(view: ReplicaView, drop_after_s: float) -> str | None:
    if view.stats_age_s <= drop_after_s:
        return None
    return f"load report {view.stats_age_s:.1f}s old > drop_after_s {drop_after_s:.1f}s"


def check_capacity(request: RequestView, view: ReplicaView, trust: float, cached_tokens: int = 0) -> str | None:
    load = view.load
    free_kv = trust * load.free_kv_tokens - load.queued_kv_tokens
    cached = max(0, min(cached_tokens, request.needed_kv_tokens))
    evictable = trust * load.free_kv_tokens if load.evictable_kv_tokens is None else load.evictable_kv_tokens
    pinned_hit = min(cached, max(0.0, evictable))
    needed = request.needed_kv_tokens - cached
    if free_kv - pinned_hit < needed:
        queued = f" after {load.queued_kv_tokens} queued" if load.queued_kv_tokens else ""
        hit = f" ({cached} cached)" if cached else ""
        return f"kv: {free_kv - pinned_hit:.0f} free{queued} < {needed} needed{hit}"
    if load.total_state_slots > 0:
        needed_slots = request.num_state_slots * load.state_slots_per_request
        free_slots = trust * load.free_state_slots
        if free_slots < needed_slots:
            return f"state slots: {free_slots:.1f} free < {needed_slots} needed"
    return None


def fits_when_empty(request: RequestView, view: ReplicaView) -> bool:
    load = view.load
    if load.total_kv_tokens < request.needed_kv_tokens:
        return False
    needed_slots = request.num_state_slots * load.state_slots_per_request
    return load.total_state_slots == 0 or load.total_state_slots >= needed_slots


def never_fits(request: RequestView, replicas: Sequence[ReplicaView]) -> bool:
    """True when waiting cannot help: not even an empty healthy replica could hold the request."""
    healthy = [v for v in replicas if v.reported and v.load.healthy]
    return bool(healthy) and not any(fits_when_empty(request, v) for v in healthy)


def filter_replicas(
    request: RequestView,
    replicas: Sequence[ReplicaView],
    *,
    stale_after_s: float,
    stale_headroom_fraction: float,
    drop_after_s: float,
    cached_tokens: Mapping[str, int] | None = None,
) -> FilterResult:
    """`cached_tokens[replica_id]`: cached(q, r) above (missing: 0)."""
    kept: list[ReplicaView] = []
    unreported: list[ReplicaView] = []
    rejected: dict[str, str] = {}
    for view in replicas:
        if not view.reported:
            unreported.append(view)
            continue
        cached = cached_tokens.get(view.replica_id, 0) if cached_tokens else 0
        reason = fits_memory(
            request,
            view,
            stale_after_s=stale_after_s,
            stale_headroom_fraction=stale_headroom_fraction,
            drop_after_s=drop_after_s,
            cached_tokens=cached,
        )
        if reason is None:
            kept.append(view)
        else:
            rejected[view.replica_id] = reason
    return FilterResult(kept=kept, unreported=unreported, rejected=rejected)


def fits_memory(
    request: RequestView,
    view: ReplicaView,
    *,
    stale_after_s: float,
    stale_headroom_fraction: float,
    drop_after_s: float,
    cached_tokens: int = 0,
) -> str | None:
    """Rule `keep` for one reporting replica: None when kept, else why it is not."""
    reason = check_healthy(view) or check_fresh(view, drop_after_s)
    if reason is None:
        trust = trust_fraction(view, stale_after_s, stale_headroom_fraction)
        reason = check_capacity(request, view, trust, cached_tokens)
    return reason


class FitsMemory:
    """Rule `keep` as a pipeline filter over reporting replicas, cached(q, r) from the shared estimate."""

    name = "fits_memory"
    stage = STAGE_FILTER

    def __init__(self, stale_after_s: float, stale_headroom_fraction: float, drop_after_s: float):
        self._stale_after_s = stale_after_s
        self._stale_headroom_fraction = stale_headroom_fraction
        self._drop_after_s = drop_after_s

    def keep(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> tuple[list[ReplicaView], dict[str, str]]:
        """(kept replicas, {removed replica_id: reason})."""
        kept: list[ReplicaView] = []
        rejected: dict[str, str] = {}
        for view in replicas:
            reason = fits_memory(
                estimate.request,
                view,
                stale_after_s=self._stale_after_s,
                stale_headroom_fraction=self._stale_headroom_fraction,
                drop_after_s=self._drop_after_s,
                cached_tokens=estimate.cached_tokens(view.replica_id),
            )
            if reason is None:
                kept.append(view)
            else:
                rejected[view.replica_id] = reason
        return kept, rejected
