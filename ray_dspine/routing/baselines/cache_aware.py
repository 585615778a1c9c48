"""SGLang Model Gateway `cache_aware` policy, over chained prefix blocks instead of raw characters.

The gateway's rule (sgl-router `policies/cache_aware.rs` header and code; defaults from its docs):

    load(r)      = requests in flight on r (here num_running + num_queued, plus unreported placements)
    imbalanced   = (max_r load - min_r load) > balance_abs_threshold
                   and max_r load > min_r load * balance_rel_threshold      (over all candidate replicas)
    if imbalanced:  pick argmin_{healthy r} load(r)                          (shortest queue)
    else:
        match_rate = max_r depth(q, r) / n(q)          (0 when q has no blocks; depth: leading-run match)
        if match_rate > cache_threshold:  pick the replica with the deepest match
        else:                             pick the replica with the smallest tree (fewest indexed blocks)
    after picking r: insert q's blocks into r's tree (in both modes)
    every eviction_interval_s: trim each replica's tree to max_tree_size (least recently used first)

Ties (ours; the gateway takes the first in its list): fewer requests in flight, then replica_id.
The chosen replica ranks first, the other healthy replicas follow by load (Ray falls through them only
when the first one's queue is full). No capacity filter: this is the baseline; wait only if none is healthy.
Parameters: cache_threshold in [0, 1]; balance_abs_threshold >= 0 requests; balance_rel_threshold >= 1;
eviction_interval_s > 0 s; max_tree_size >= 1 blocks per replica.
Complexity: O(n * R) prefix walk + O(R log R) ranking; a trim is O(evictions).
"""

from __future__ import annotations

from typing import Callable, Sequence

from ray_dspine.routing.config import CacheAwareConfig
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.reservations import ReservationLedger
from ray_dspine.routing.types import Decision, ReplicaView, RequestView


def is_imbalanced(loads: Sequence[int], abs_threshold: int, rel_threshold: float) -> bool:
    if not loads:
        return False
    high, low = max(loads), min(loads)
    return (high - low) > abs_threshold and high > low * rel_threshold


class CacheAwarePolicy:
    def __init__(
        self,
        config: CacheAwareConfig,
        clock: Callable[[], float],
        horizon_s: float = 60.0,
        receipt_timeout_s: float = 5.0,
    ):
        self._config = config
        self._clock = clock
        self.prefix_index = PrefixIndex(capacity_blocks=None)
        self.ledger = ReservationLedger(clock, horizon_s=horizon_s, receipt_timeout_s=receipt_timeout_s)
        self._last_trim_s: float | None = None

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> Decision:
        self._maybe_trim()
        cfg = self._config
        views = self.ledger.apply(replicas)
        healthy = [v for v in views if v.load.healthy]
        if not healthy:
            return Decision((), wait=True, reason="no healthy replica", wait_kind="unhealthy")
        load = {v.replica_id: v.num_requests for v in views}

        def by_load(view: ReplicaView) -> tuple[int, str]:
            return (load[view.replica_id], view.replica_id)

        if is_imbalanced(list(load.values()), cfg.balance_abs_threshold, cfg.balance_rel_threshold):
            chosen = min(healthy, key=by_load).replica_id
            reason = "imbalanced: shortest queue"
            rates: dict[str, float] = {}
        else:
            num_blocks = len(request.prefix_hashes)
            depths = self.prefix_index.depths(request.prefix_hashes) if num_blocks else {}
            rates = {v.replica_id: depths.get(v.replica_id, 0) / num_blocks if num_blocks else 0.0 for v in healthy}
            best = min(healthy, key=lambda v: (-rates[v.replica_id], *by_load(v)))
            if rates[best.replica_id] > cfg.cache_threshold:
                chosen, reason = best.replica_id, "cache hit: highest match"
            else:
                smallest = min(healthy, key=lambda v: (self.prefix_index.num_blocks(v.replica_id), *by_load(v)))
                chosen, reason = smallest.replica_id, "cache miss: smallest tree"
        rest = [v.replica_id for v in sorted(healthy, key=by_load) if v.replica_id != chosen]
        scores = {"load": {k: float(v) for k, v in load.items()}, "match_rate": rates}
        return Decision((chosen, *rest), scores=scores, reason=reason)

    def on_placed(self, request: RequestView, replica_id: str, received: bool = True) -> None:
        self.prefix_index.insert(request.prefix_hashes, replica_id)
        self.ledger.place(request, replica_id, received=received)

    def on_received(self, request_id: str) -> None:
        self.ledger.received(request_id)

    def on_completed(self, request_id: str, served: bool = True) -> None:
        self.ledger.complete(request_id)

    def forget_replica(self, replica_id: str) -> None:
        self.prefix_index.remove_replica(replica_id)
        self.ledger.forget_replica(replica_id)

    def _maybe_trim(self) -> None:
        now = self._clock()
        if self._last_trim_s is None:
            self._last_trim_s = now
        elif now - self._last_trim_s >= self._config.eviction_interval_s:
            self.prefix_index.trim(self._config.max_tree_size)
            self._last_trim_s = now
