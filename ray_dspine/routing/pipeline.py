"""The headroom routing pipeline: reservations, filters, weighted scorers, picker.

    index    = each reporting replica's prefix-index capacity set to
               min(prefix_index_capacity_blocks, (total_kv_tokens(r) + host_kv_tokens(r)) // prefix_block_tokens)
               (a HiCache host tier keeps what the GPU cache lets go);
               a replica whose report's cache_generation differs from its last one is first
               forgotten there (its engine restarted with an empty cache)
    views    = ledger.apply(replicas)                        (placements not yet in the reports)
    kept     = { r in views : keep(q, r) }                   (filters.py)
    if kept is empty and some replica never reported: rank those by requests in flight, replica_id
    if kept is empty and never_fits(q): rank healthy replicas by requests in flight, replica_id
                                     (waiting cannot help; the engine refuses it with a clear error)
    if kept is empty otherwise:  wait (the request stays queued; it is not placed to be retracted)
    near     = ttft_guard.keep(q, kept) when ttft_tolerance_s is set, else kept     (ttft_guard.py)
    ranking  = picker.rank(near, sum_s w_s * score_s)        (scorers/*, picker.py), then unreported
    if memory_wait_tolerance_s is set and memory_wait.hold(q, ranking[0], kept, views):
                 wait (a replica short of memory would start q far sooner; memory_wait.py)
    pace     = permits.judge(q, long(q, ranking[0]))        (pacing_permit.py: may a replica that paces
               long prompts pace q; the fallbacks above leave it True)

The filters' cached(q, r) is the prompt less uncached_tokens(q, depth(q, r)) of the prefix index (the
TTFT scorer's estimate): a replica that caches most of a long prompt needs KV only for the rest.

`on_placed(q, r)` records r in the ledger (with q's uncached prompt tokens on r, predicted_ttft.py, and
the pacing permit its decision gave it as pacing_permit.py remembers it, True when none did; not yet
received when the caller says so, until `on_received(q)`: reservations.py),
the prefix index (all of q's blocks) and the session table; `on_completed(q)` releases the ledger
entry and, when q was served, inserts q's blocks into the index for r again, most recently used: an
engine pins a running request's blocks and hands them to its LRU only when the request ends, so a
long request's prefix outlives placements made after it (the index would otherwise evict it first,
while the engine still holds it). Not after r's cache generation changed or r was forgotten, and
not for a withdrawn request (`served=False`: it never reached r). Parameters: see `RouterConfig`.
A replica the guard drops is listed in `Decision.rejected` with its predicted TTFT.
Complexity per decision: O(R) filters + O(n * R) prefix walk + O(S * R + R log R) scoring and ranking.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, Sequence

from ray_dspine.routing.config import RouterConfig
from ray_dspine.routing.filters import filter_replicas, never_fits
from ray_dspine.routing.memory_wait import MemoryWait
from ray_dspine.routing.outcomes import STAGE_FILTER, STAGE_TTFT_GUARD
from ray_dspine.routing.pacing_permit import PacingPermits, is_long
from ray_dspine.routing.picker import rank, weighted_totals
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.registry import ScorerContext, build_scorers
from ray_dspine.routing.reservations import ReservationLedger
from ray_dspine.routing.scorers.base import Scorer
from ray_dspine.routing.scorers.predicted_ttft import cached_tokens, uncached_tokens
from ray_dspine.routing.session_table import SessionTable
from ray_dspine.routing.ttft_guard import TtftGuard
from ray_dspine.routing.types import Decision, ReplicaView, RequestView


class RoutingPipeline:
    """`clock()` gives seconds (monotonic) for the ledger; `timer()` seconds for scorer latencies."""

    def __init__(
        self,
        config: RouterConfig,
        clock: Callable[[], float],
        timer: Callable[[], float] = time.perf_counter,
    ):
        self._config = config
        self._clock = clock
        self._timer = timer
        self.prefix_index = PrefixIndex(config.prefix_index_capacity_blocks)
        self.sessions = SessionTable(config.session_table_capacity)
        self.ledger = ReservationLedger(
            clock, horizon_s=config.drop_after_s, receipt_timeout_s=config.receipt_timeout_s
        )
        self._scorers: list[tuple[Scorer, float]] | None = None
        self._guard: TtftGuard | None = None
        self._memory_wait: MemoryWait | None = None
        self._cache_generations: dict[str, int] = {}
        self._in_flight: OrderedDict[str, tuple[str, tuple[str, ...], int]] = OrderedDict()
        self.permits = PacingPermits(
            config.pacing_max_long_share,
            config.pacing_window_requests,
            config.pacing_prior_requests,
            config.pacing_prior_share,
        )

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> Decision:
        cfg = self._config
        self._size_prefix_index(replicas)
        views = self.ledger.apply(replicas)
        cached = self._cached_tokens(request)
        result = filter_replicas(
            request,
            views,
            stale_after_s=cfg.stale_after_s,
            stale_headroom_fraction=cfg.stale_headroom_fraction,
            drop_after_s=cfg.drop_after_s,
            cached_tokens=cached,
        )
        fallback = [v.replica_id for v in sorted(result.unreported, key=lambda v: (v.num_requests, v.replica_id))]
        filtered = dict.fromkeys(result.rejected, STAGE_FILTER)
        if not result.kept:
            if fallback:
                return Decision(tuple(fallback), rejected=result.rejected, reason="only unreported replicas",
                                rejected_by=filtered)
            if never_fits(request, views):
                healthy = sorted((v for v in views if v.load.healthy), key=lambda v: (v.num_requests, v.replica_id))
                return Decision(
                    tuple(v.replica_id for v in healthy),
                    rejected=result.rejected,
                    reason="no replica could ever hold the request; its engine refuses it",
                    rejected_by=filtered,
                )
            return Decision((), wait=True, rejected=result.rejected, reason="no replica can hold the request",
                            rejected_by=filtered, wait_kind="capacity")

        candidates, rejected, rejected_by = result.kept, dict(result.rejected), dict(filtered)
        if cfg.ttft_tolerance_s is not None:
            candidates, dropped = self._ttft_guard().keep(request, candidates)
            rejected.update(dropped)
            rejected_by.update(dict.fromkeys(dropped, STAGE_TTFT_GUARD))

        scores: dict[str, list[float]] = {}
        latency_us: dict[str, float] = {}
        weights: dict[str, float] = {}
        for scorer, weight in self._weighted_scorers():
            start = self._timer()
            scores[scorer.name] = scorer.score(request, candidates)
            latency_us[scorer.name] = (self._timer() - start) * 1e6
            weights[scorer.name] = weight
        totals = weighted_totals(candidates, scores, weights)
        ranked = rank(candidates, totals) + fallback
        if cfg.memory_wait_tolerance_s is not None:
            chosen = next(v for v in candidates if v.replica_id == ranked[0])
            held = self._memory_wait_rule().hold(request, chosen, result.kept, views)
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
            pace=self._pacing_permit(request, next((v for v in views if v.replica_id == ranked[0]), None), cached),
        )

    def _pacing_permit(self, request: RequestView, chosen: ReplicaView | None, cached: dict[str, int]) -> bool:
        """pacing_permit.py: whether the chosen replica may pace the request, if it is long there
        (`cached`: the filters' cached(q, r), so uncached = the prompt less it, as predicted_ttft.py has it)."""
        long = chosen is not None and is_long(chosen.load, request.prompt_tokens - cached.get(chosen.replica_id, 0))
        return self.permits.judge(request.request_id, long)

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
            while len(self._in_flight) > self._config.session_table_capacity:  # requests never completed
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

    def _cached_tokens(self, request: RequestView) -> dict[str, int]:
        """Prompt tokens each replica is believed to cache (the filters' cached(q, r))."""
        if not request.prefix_hashes:
            return {}
        depths = self.prefix_index.depths(request.prefix_hashes)
        return {rid: cached_tokens(request, depth) for rid, depth in depths.items()}

    def _size_prefix_index(self, replicas: Sequence[ReplicaView]) -> None:
        for view in replicas:
            if view.reported:
                seen = self._cache_generations.setdefault(view.replica_id, view.load.cache_generation)
                if seen != view.load.cache_generation:
                    self._cache_generations[view.replica_id] = view.load.cache_generation
                    self.prefix_index.remove_replica(view.replica_id)
            if view.reported and view.load.total_kv_tokens > 0:
                held_tokens = view.load.total_kv_tokens + view.load.host_kv_tokens
                blocks = max(1, held_tokens // self._config.prefix_block_tokens)
                capacity = min(self._config.prefix_index_capacity_blocks, blocks)
                if self.prefix_index.capacity(view.replica_id) != capacity:
                    self.prefix_index.resize(view.replica_id, capacity)

    def _ttft_guard(self) -> TtftGuard:
        if self._guard is None:
            cfg = self._config
            self._guard = TtftGuard(
                self.prefix_index,
                cfg.default_prefill_tokens_per_s,
                cfg.ttft_tolerance_s or 0.0,
                per_cached=cfg.ttft_tolerance_per_cached_s,
                cached_max_s=cfg.ttft_tolerance_cached_max_s,
            )
        return self._guard

    def _memory_wait_rule(self) -> MemoryWait:
        if self._memory_wait is None:
            cfg = self._config
            self._memory_wait = MemoryWait(
                self.prefix_index,
                cfg.default_prefill_tokens_per_s,
                cfg.memory_wait_tolerance_s or 0.0,
                cfg.drop_after_s,
                per_cached=cfg.ttft_tolerance_per_cached_s,
                cached_max_s=cfg.ttft_tolerance_cached_max_s,
                clock=self._clock,
            )
        return self._memory_wait

    def _weighted_scorers(self) -> list[tuple[Scorer, float]]:
        if self._scorers is None:
            context = ScorerContext(
                prefix_index=self.prefix_index,
                sessions=self.sessions,
                default_prefill_tokens_per_s=self._config.default_prefill_tokens_per_s,
                latency_slack_s=self._config.latency_slack_s,
                ttft_indifference_s=self._config.ttft_indifference_s,
                typical_output_tokens=self._config.typical_output_tokens,
                prefix_half_tokens=self._config.prefix_half_tokens,
            )
            self._scorers = build_scorers(self._config.weights, context)
        return self._scorers
