"""The headroom routing pipeline: stages listed in `RouterConfig`, run over one shared estimate.

    index    = each reporting replica's prefix-index capacity set to
               min(prefix_index_capacity_blocks, (total_kv_tokens(r) + host_kv_tokens(r)) // prefix_block_tokens)
               (a HiCache host tier keeps what the GPU cache lets go);
               a replica whose report's cache_generation differs from its last one is first
               forgotten there (its engine restarted with an empty cache)
    views    = ledger.apply(replicas)                        (placements not yet in the reports)
    E        = Estimate.of(q, index)                         (estimate.py: cached(q, r), uncached(q, r),
               ttft(q, r) for every replica; every stage below reads it)
    C        = the reporting views; then for each filter f of `filters`, in order:
               C = f.keep(E, C)                              (filters.py, ttft_guard.py)
               fitting = C after the `fits_memory` filter    (the replicas that can hold q now)
               if C is empty and some replica never reported: rank those by requests in flight, replica_id
               if C is empty and never_fits(q): rank healthy replicas by requests in flight, replica_id
                                      (waiting cannot help; the engine refuses it with a clear error)
               if C is empty otherwise: wait (the request stays queued; it is not placed to be retracted)
    ranking  = picker.pick(C, {s: score_s(E, C)}, {s: w_s}) (scorers/*, picker.py), then unreported
    for each hold h of `holds`, in order:
               if h.hold(E, ranking[0], fitting, views): wait (memory_wait.py: a replica short of memory
               would start q far sooner)
    pace     = permits.judge(q, long(q, ranking[0]))        (pacing_permit.py, with uncached(q, r) of E:
               may a replica that paces long prompts pace q; the fallbacks above leave it True)

The stage lists are built once, from config, by the registry (registry.py); a scorer not listed is off.
`Decision.rejected_by` names the stage that removed each replica (outcomes.py), and a replica the guard
drops is listed in `Decision.rejected` with its predicted TTFT.

`on_placed(q, r)` records r in the ledger (with q's uncached prompt tokens on r, estimate.py, and
the pacing permit its decision gave it as pacing_permit.py remembers it, True when none did; not yet
received when the caller says so, until `on_received(q)`: reservations.py),
the prefix index (all of q's blocks) and the session table; `on_completed(q)` releases the ledger
entry and, when q was served, inserts q's blocks into the index for r again, most recently used: an
engine pins a running request's blocks and hands them to its LRU only when the request ends, so a
long request's prefix outlives placements made after it (the index would otherwise evict it first,
while the engine still holds it). Not after r's cache generation changed or r was forgotten, and
not for a withdrawn request (`served=False`: it never reached r). Parameters: see `RouterConfig`.
Complexity per decision: O(n * R) prefix walk + O(F * R) filters + O(S * R + R log R) scoring and ranking.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, Sequence

from ray_dspine.routing.config import RouterConfig
from ray_dspine.routing.estimate import Estimate, uncached_tokens
from ray_dspine.routing.filters import never_fits
from ray_dspine.routing.pacing_permit import PacingPermits, is_long
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.registry import StageContext, build_filters, build_holds, build_picker, build_scorers
from ray_dspine.routing.reservations import ReservationLedger
from ray_dspine.routing.session_table import SessionTable
from ray_dspine.routing.types import Decision, ReplicaView, RequestView

FITTING_FILTER = "fits_memory"  # the filter whose survivors the holds are told can hold q now


class RoutingPipeline:
    """`clock()` gives seconds (monotonic) for the ledger and holds; `timer()` seconds for scorer latencies."""

    def __init__(
        self,
        config: RouterConfig,
        clock: Callable[[], float],
        timer: Callable[[], float] = time.perf_counter,
    ):
        self._config = config
        self._clock = clock
        self._timer = timer
        estimator = config.estimator
        self.prefix_index = PrefixIndex(estimator.prefix_index_capacity_blocks)
        self.sessions = SessionTable(estimator.session_table_capacity)
        self.ledger = ReservationLedger(
            clock, horizon_s=config.reports.drop_after_s, receipt_timeout_s=config.reports.receipt_timeout_s
        )
        context = StageContext(sessions=self.sessions, reports=config.reports, clock=clock)
        self.filters = build_filters(config.filters, context)
        self.scorers = build_scorers(config.scorers, context)
        self.picker = build_picker(config.picker, context)
        self.holds = build_holds(config.holds, context)
        self._cache_generations: dict[str, int] = {}
        self._in_flight: OrderedDict[str, tuple[str, tuple[str, ...], int]] = OrderedDict()
        pacing = config.pacing
        self.permits = PacingPermits(
            pacing.max_long_share, pacing.window_requests, pacing.prior_requests, pacing.prior_share
        )

    def estimate(self, request: RequestView) -> Estimate:
        """The shared estimate of `request` from the prefix index as it is now."""
        return Estimate.of(request, self.prefix_index, self._config.estimator.default_prefill_tokens_per_s)

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> Decision:
        self._size_prefix_index(replicas)
        views = self.ledger.apply(replicas)
        estimate = self.estimate(request)
        unreported = sorted((v for v in views if not v.reported), key=lambda v: (v.num_requests, v.replica_id))
        fallback = [v.replica_id for v in unreported]
        candidates = [v for v in views if v.reported]
        fitting = candidates
        rejected: dict[str, str] = {}
        rejected_by: dict[str, str] = {}
        for stage in self.filters:
            candidates, removed = stage.keep(estimate, candidates)
            rejected.update(removed)
            rejected_by.update(dict.fromkeys(removed, stage.stage))
            if stage.name == FITTING_FILTER:
                fitting = candidates
            if not candidates:
                return self._nowhere(request, views, fallback, rejected, rejected_by)

        scores: dict[str, list[float]] = {}
        latency_us: dict[str, float] = {}
        weights: dict[str, float] = {}
        for scorer, weight in self.scorers:
            start = self._timer()
            scores[scorer.name] = scorer.score(estimate, candidates)
            latency_us[scorer.name] = (self._timer() - start) * 1e6
            weights[scorer.name] = weight
        totals, ranked = self.picker.pick(candidates, scores, weights)
        ranked = ranked + fallback
        chosen = next(v for v in candidates if v.replica_id == ranked[0])
        for rule in self.holds:
            held = rule.hold(estimate, chosen, fitting, views)
            if held is not None:
                return Decision((), wait=True, rejected=rejected, reason=held, rejected_by=rejected_by,
                                wait_kind="memory")
        per_replica = {
            name: {view.replica_id: value for view, value in zip(candidates, values)}
            for name, values in scores.items()
        }
        return Decision(
            tuple(ranked),
            scores=per_replica,
            total_scores=totals,
            scorer_latency_us=latency_us,
            rejected=rejected,
            reason="scored",
            rejected_by=rejected_by,
            pace=self.permits.judge(
                request.request_id, is_long(chosen.load, estimate.uncached_tokens(chosen.replica_id))
            ),
        )

    def _nowhere(
        self,
        request: RequestView,
        views: Sequence[ReplicaView],
        fallback: list[str],
        rejected: dict[str, str],
        rejected_by: dict[str, str],
    ) -> Decision:
        """The fallbacks when a filter leaves no replica: unreported ones, never-fits, or wait."""
        if fallback:
            return Decision(tuple(fallback), rejected=rejected, reason="only unreported replicas",
                            rejected_by=rejected_by)  # fmt: skip
        if never_fits(request, views):
            healthy = sorted((v for v in views if v.load.healthy), key=lambda v: (v.num_requests, v.replica_id))
            return Decision(
                tuple(v.replica_id for v in healthy),
                rejected=rejected,
                reason="no replica could ever hold the request; its engine refuses it",
                rejected_by=rejected_by,
            )
        return Decision((), wait=True, rejected=rejected, reason="no replica can hold the request",
                        rejected_by=rejected_by, wait_kind="capacity")  # fmt: skip

    def on_placed(self, request: RequestView, replica_id: str, received: bool = True) -> None:
        depth = self.prefix_index.depths(request.prefix_hashes).get(replica_id, 0) if request.prefix_hashes else 0
        self.ledger.place(
            request,
            replica_id,
            prefill_tokens=uncached_tokens(request, depth),
            received=received,
            pace_permitted=self.permits.answer(request.request_id) is not False,
        )
        self.prefix_index.insert(request.prefix_hashes, replica_id)
        self.sessions.record(request.session_id, replica_id)
        self._in_flight.pop(request.request_id, None)
        if request.prefix_hashes:
            generation = self._cache_generations.get(replica_id, 0)
            self._in_flight[request.request_id] = (replica_id, request.prefix_hashes, generation)
            while len(self._in_flight) > self._config.estimator.session_table_capacity:  # requests never completed
                self._in_flight.popitem(last=False)

    def on_received(self, request_id: str) -> None:
        self.ledger.received(request_id)

    def on_completed(self, request_id: str, served: bool = True) -> None:
        self.ledger.complete(request_id)
        placed = self._in_flight.pop(request_id, None)
        if served and placed is not None:
            replica_id, hashes, generation = placed
            if self._cache_generations.get(replica_id, 0) == generation:
                self.prefix_index.insert(hashes, replica_id)

    def forget_replica(self, replica_id: str) -> None:
        for request_id in [rid for rid, placed in self._in_flight.items() if placed[0] == replica_id]:
            del self._in_flight[request_id]
        self.prefix_index.remove_replica(replica_id)
        self.sessions.remove_replica(replica_id)
        self.ledger.forget_replica(replica_id)

    def _size_prefix_index(self, replicas: Sequence[ReplicaView]) -> None:
        for view in replicas:
            if view.reported:
                seen = self._cache_generations.setdefault(view.replica_id, view.load.cache_generation)
                if seen != view.load.cache_generation:
                    self._cache_generations[view.replica_id] = view.load.cache_generation
                    self.prefix_index.remove_replica(view.replica_id)
            if view.reported and view.load.total_kv_tokens > 0:
                held_tokens = view.load.total_kv_tokens + view.load.host_kv_tokens
                blocks = max(1, held_tokens // self._config.estimator.prefix_block_tokens)
                capacity = min(self._config.estimator.prefix_index_capacity_blocks, blocks)
                if self.prefix_index.capacity(view.replica_id) != capacity:
                    self.prefix_index.resize(view.replica_id, capacity)
