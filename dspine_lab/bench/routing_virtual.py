"""`bench routing --virtual`: the same slice and routers, replayed in virtual time without Ray.

Method. N simulated replica cores (the replicas' own `SimReplicaCore`, sized by the same capacity plan)
run in simulated seconds; the routers are the same policy objects the Ray adapters run. Nothing waits
on a wall clock, so a replay takes seconds and two replays with the same seeds give the same figures:
the comparison Ray Serve's replay makes, without the host's scheduling noise (the Ray replay's TTFT
tail moves by +-10% from run to run on 2 cores).

Rules (simulated seconds throughout):
  replicas   N cores from the bench's engine config; with settings.hicache_store_tokens one HiCache store
             (kv_tiers.py) is shared by the N cores of a replay, a fresh one per replay.
  arrivals   a session's first turn arrives at its slice arrival; turn k at max(arrival_k, end of
             turn k-1) (the open-loop rule of the Ray replay).
  reports    replica k's load snapshot is taken every P = routing_stats_period_s / engine_time_scale,
             at k * P / N + i * P for i = -1, 0, 1, ... (staggered; the i = -1 report, of the idle
             replica, is there before the first arrival, as the Ray replay waits for every replica to
             report before it sends traffic); a router sees the latest with its age.
  backlog    settings.backlog_source: 'engine' reports the core's whole snapshot. 'replica' reports what
             an SGLang replica can: no queued_kv_tokens and no decode_step_ms (SGLang reports neither),
             and pending_prefill_tokens and the prefill rate from a PrefillBacklog per replica, fed by each
             placement and first token, assuming the router's default prefill rate until it has measured
             one (the SGLang engine's default). 'none' is 'replica' with 0 backlog and no rate.
  placement  pow2: two distinct replicas drawn uniformly (random.Random(seed)), the one with fewer
             requests in flight (ties: the first drawn) - Ray's PowerOfTwoChoices on queue length;
             other policies: policy.choose on the reports (the router's on_placed / on_completed
             as the Ray adapter calls them). A request the policy makes wait is offered again every
             RETRY_S until placed.
  pacing     with settings.prefill_pacing (off by default), the replicas of every router alike
             pace long uncached prompts as a replica would (engines/prefill_pacing.py): one PrefillPacer per
             core; a paced request's pieces are sent to its core one after another (each a prefix of its
             prompt, max_tokens 1, sent when the last one finished), then the request itself. The router
             places the request once and is told of its completion once; the pieces are the replica's
             business, and so are its holds (a request held while another is paced is sent when that
             one is sent whole) and what it lets in (prefill_pacing.py rule `hold`). A request the
             router gave no permit (Decision.pace False, routing/pacing_permit.py) is never paced. Each
             report adds the pacer's yielding tokens to the core's backlog (the core sees only the piece
             out) and carries yield_budget_tokens, pacing_min_uncached_tokens and pacing_yield_fraction,
             as the replica's PacedEngine reports them. Its TTFT counts from its arrival to the first
             token of the request itself.
  router     RouterConfig(policy, reports: stale_after_s and assumed_stats_age_s in simulated seconds);
             the stages' GPU-second defaults (the ttft_guard filter's tolerance_s and cached_max_s, the
             memory_wait hold's, the predicted_ttft scorer's indifference_s) apply as they are, since
             the cores report simulated-second rates and the clock is simulated.
  figures    TTFT p50/p99 and end-to-end p99 over all requests (percentiles as numpy's linear rule),
             TTFT excess p99 over each request's floor, the order-preserving bound on p99 TTFT over the
             replay's own arrivals and the floors (routing_order_bound.py), prefix-hit rate =
             hit / (hit + prefilled) tokens over the cores' counters, less the hits of a paced request and
             its pieces beyond the request's own hit (prefill_pacing.py rule `hit`: what neither its
             pieces nor it prefilled), requests per replica, retractions; given the ideal cache's hit tokens, what the hits lost to it by kind of
             request (routing_hit_loss.py), with held_i = the most prompt tokens any core's cache
             would give request i at the moment it is placed; with tail = N > 0, the N slowest requests
             and what held each up (routing_tail.py). Cached tokens per request: as its engine reported
             them when it finished.
Complexity: O(events * R) for R replicas, plus the policy's cost per decision.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ray_dspine.engines.prefill_backlog import PrefillBacklog
from dspine_lab.engines.prefill_pacing import PacedPrefill, PrefillPacer
from ray_dspine.engines.prefill_pacing_config import PIECE_MARK
from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.engines.simulated.core import SimReplicaCore
from ray_dspine.engines.simulated.kv_tiers import KvTier
from ray_dspine.engines.simulated.profile import load_profile
from ray_dspine.engines.simulated.request import SimRequest
from ray_dspine.pools import apply_plan, plan_pool
from ray_dspine.routing.config import EstimatorConfig, ReportsConfig, RouterConfig
from ray_dspine.routing.policies import RoutingPolicy, build_policy
from ray_dspine.routing.types import ReplicaView, RequestView
from ray_dspine.bench.client import ClientSettings
from dspine_lab.bench.routing_hit_loss import HitLoss, PlacedRequest, hit_loss
from dspine_lab.bench.routing_order_bound import order_bound_p99
from dspine_lab.bench.routing_tail import ServedRequest, SlowRequest, slowest_requests
from dspine_lab.bench.routing_workload import (
    BENCH_MODEL,
    RoutingBenchSettings,
    bench_app_config,
    bench_pacing,
    bench_prefill_seconds,
    ingress_view,
)
from ray_dspine.bench.traces.model import TraceRequest

# Simulated seconds between offers of a request the router made wait (Ray backs off 25 ms to 0.5 s).
RETRY_S = 0.05


class VirtualFigures(BaseModel):
    """One router's virtual replay, in simulated seconds."""

    model_config = ConfigDict(extra="forbid")

    router: str
    engine_seed: int
    slice_seed: int = Field(default=0, description="The settings' session-sampling seed (which slice).")
    num_requests: int
    ttft_p50_sim_s: float
    ttft_p99_sim_s: float
    ttft_excess_p99_sim_s: float | None
    ttft_order_bound_p99_sim_s: float | None = Field(
        default=None,
        description="p99 TTFT of one first-come-first-served queue over the pool with the ideal cache, on this "
        "replay's arrivals: no router that starts requests in their order of arrival does better "
        "(routing_order_bound.py).",
    )
    e2e_p99_sim_s: float
    prefix_hit_rate: float | None
    prefix_hit_loss: HitLoss | None = Field(
        default=None,
        description="Points of hit rate lost to the ideal cache by kind of request (routing_hit_loss.py).",
    )
    num_retractions: int
    requests_per_replica: list[int] = Field(description="Requests placed on each replica.")
    num_paced: int = Field(default=0, description="Requests whose replica paced their prefill (rule `pacing`).")
    slowest: list[SlowRequest] = Field(
        default_factory=list, description="The slowest requests and what held them up (`--tail`), slowest first."
    )


@dataclass(frozen=True)
class _Turn:
    index: int
    request_id: str
    session_id: str
    arrival_s: float
    prompt_tokens: int
    max_tokens: int
    prefix_hashes: tuple[str, ...]


def _turns(requests: list[TraceRequest], settings: RoutingBenchSettings) -> list[_Turn]:
    client = ClientSettings(endpoint="http://unused", model=BENCH_MODEL, max_tokens_cap=settings.max_tokens_cap)
    out = []
    for index, request in enumerate(requests):
        view = ingress_view(request, client)
        out.append(_Turn(index, request.request_id, request.session_id, request.arrival_s, view.prompt_tokens,
                         view.max_tokens, view.prefix_hashes))  # fmt: skip
    return out


def virtual_router_config(settings: RoutingBenchSettings, policy: str) -> RouterConfig:
    """The router config rule: the bench's staleness settings in simulated seconds."""
    scale = settings.engine_time_scale
    reports = ReportsConfig(
        stale_after_s=settings.stale_after_s / scale,
        assumed_stats_age_s=settings.routing_stats_period_s / scale,
    )
    return RouterConfig(policy=policy, reports=reports)


class _Replay:
    def __init__(
        self,
        settings: RoutingBenchSettings,
        policy: str,
        engine_seed: int,
        config: RouterConfig | None,
        record_held: bool = False,
    ):
        pool = bench_app_config(settings, "headroom").pools[0]
        engine = apply_plan(pool, plan_pool(pool)).engine
        profile = load_profile(engine.profile)
        self.prefill_s = bench_prefill_seconds(settings)
        self.n = settings.num_replicas
        store_blocks = settings.hicache_store_tokens // engine.prefix_block_tokens
        store = KvTier(store_blocks) if store_blocks else None  # one store for every replica of the replay
        self.cores = [
            SimReplicaCore(engine, profile, random.Random(engine_seed * 1000 + k), token_events=False, store=store)
            for k in range(self.n)
        ]
        self.ids = [f"replica-{k}" for k in range(self.n)]
        self.now = 0.0
        self.period = settings.routing_stats_period_s / settings.engine_time_scale
        self.next_report = [k * self.period / self.n for k in range(self.n)]
        self.in_flight = [0] * self.n
        self.placed_on: dict[int, int] = {}
        self.record_held = record_held  # only the hit loss reads it, and it reads every core's cache
        self.held: dict[int, int] = {}  # turn index -> most prompt tokens any core held for it when placed
        self.rng = random.Random(engine_seed)
        self.backlog_source = settings.backlog_source
        assumed_rate = EstimatorConfig().default_prefill_tokens_per_s
        self.backlogs = [PrefillBacklog(lambda: self.now, default_tokens_per_s=assumed_rate) for _ in range(self.n)]
        pacing = bench_pacing(settings)
        self.pacers = [PrefillPacer(pacing) for _ in range(self.n)] if pacing is not None else None
        self.paced: dict[int, PacedPrefill] = {}  # turn index -> its pacing (rule `pacing`)
        self.unpermitted: set[int] = set()  # requests the router gave no pacing permit (Decision.pace)
        self.held_turns: dict[int, _Turn] = {}  # long prompts waiting for their replica's paced one
        self.self_hit_tokens = 0  # hits paced requests owe to their own pieces (rule `figures`)
        self.policy: RoutingPolicy | None = None
        if policy != "pow2":
            self.policy = build_policy(config or virtual_router_config(settings, policy), clock=lambda: self.now)
        # Rule `reports`: each replica reported once, a period before its first report in the replay.
        self.reports: list[tuple[LoadSnapshot, float]] = [
            (self.report(k), t - self.period) for k, t in enumerate(self.next_report)
        ]

    def report(self, k: int) -> LoadSnapshot:
        """Replica k's load as the router is told it (rule `backlog`)."""
        load = self.cores[k].load()
        if self.pacers is not None:
            # The core sees only the piece out; the rest of the paced prompt and the held requests are
            # the replica's (rule `yielding` of engines/prefill_pacing.py).
            yielding = self.pacers[k].yielding_tokens()
            load.yielding_prefill_tokens = yielding
            load.yield_budget_tokens = self.pacers[k].left_tokens(self.now)
            load.pacing_min_uncached_tokens = self.pacers[k].config.min_uncached_tokens
            load.pacing_yield_fraction = self.pacers[k].config.yield_fraction
            if self.backlog_source == "engine":
                load.pending_prefill_tokens += yielding
        if self.backlog_source == "engine":
            return load
        backlog = self.backlogs[k]
        backlog.resize(load.total_kv_tokens, load.host_kv_tokens)
        known = self.backlog_source == "replica"
        return load.model_copy(
            update={
                "queued_kv_tokens": 0,
                "decode_step_ms": 0.0,
                "pending_prefill_tokens": backlog.pending_tokens() if known else 0,
                "prefill_tokens_per_s": backlog.tokens_per_s() if known else 0.0,
            }
        )

    def views(self) -> list[ReplicaView]:
        return [ReplicaView(rid, load, self.now - taken_s) for rid, (load, taken_s) in zip(self.ids, self.reports)]

    def place(self, turn: _Turn) -> bool:
        request = RequestView(
            request_id=str(turn.index), session_id=turn.session_id, prefix_hashes=turn.prefix_hashes,
            prompt_tokens=turn.prompt_tokens, max_tokens=turn.max_tokens,
            needed_kv_tokens=turn.prompt_tokens + turn.max_tokens,
        )  # fmt: skip
        if self.policy is None:
            a, b = self.rng.sample(range(self.n), 2)
            k = a if self.in_flight[a] <= self.in_flight[b] else b
        else:
            decision = self.policy.choose(request, self.views())
            if decision.chosen is None:
                return False
            k = self.ids.index(decision.chosen)
            self.policy.on_placed(request, decision.chosen)
            if not decision.pace:
                self.unpermitted.add(turn.index)
        self.placed_on[turn.index] = k
        if self.record_held:
            held = (core.cached_prompt_tokens(turn.prompt_tokens, turn.prefix_hashes) for core in self.cores)
            self.held[turn.index] = max(held)
        self.in_flight[k] += 1
        self.backlogs[k].submit(str(turn.index), turn.prompt_tokens, turn.prefix_hashes)
        self.arrive(turn, k)
        return True

    def arrive(self, turn: _Turn, k: int) -> None:
        """A placed (or released) request reaches replica k: held, paced, or sent whole (rule `pacing`)."""
        pacer = self.pacers[k] if self.pacers is not None else None
        if pacer is None:
            self.send_whole(turn, k)
            return
        cached = self.cores[k].cached_prompt_tokens(turn.prompt_tokens, turn.prefix_hashes)
        arrival = pacer.arrive(
            str(turn.index), turn.prompt_tokens, cached, turn.index not in self.unpermitted, now_s=self.now
        )
        if arrival == "held":
            self.held_turns[turn.index] = turn
        elif arrival == "paced":
            self.paced[turn.index] = pacer.active
            self.send_next(turn, k)
        else:
            self.send_whole(turn, k)

    def send_whole(self, turn: _Turn, k: int) -> None:
        sim_request = SimRequest(str(turn.index), turn.prompt_tokens, turn.max_tokens, turn.prefix_hashes, turn.session_id)
        self.cores[k].submit(sim_request, self.now)

    def send_next(self, turn: _Turn, k: int) -> None:
        """A paced request's next piece, or the request itself once its pacing is over (rule `pacing`)."""
        length = self.paced[turn.index].next_piece(self.now)
        if length is None:
            released = self.pacers[k].finish(str(turn.index))
            self.send_whole(turn, k)
            for request_id in released:
                self.arrive(self.held_turns.pop(int(request_id)), k)
            return
        blocks = length // self.pacers[k].config.prefix_block_tokens
        piece = SimRequest(f"{turn.index}{PIECE_MARK}{length}", length, 1, turn.prefix_hashes[:blocks], turn.session_id)
        self.cores[k].submit(piece, self.now)

    def next_time(self, arrivals: list, waiting: list) -> float:
        times = [min(self.next_report)]
        if arrivals:
            times.append(arrivals[0][0])
        times.extend(t for t in (core.next_event_s() for core in self.cores) if t is not None)
        if waiting:
            times.append(self.now + RETRY_S)
        return max(self.now, min(times))


def replay_virtual(
    requests: list[TraceRequest],
    settings: RoutingBenchSettings,
    policy: str,
    engine_seed: int,
    floors_sim_s: dict[str, float],
    config: RouterConfig | None = None,
    on_progress: Callable[[int], None] | None = None,
    tail: int = 0,
    ideal_hit_tokens: Mapping[str, int] | None = None,
) -> VirtualFigures:
    """Replay the slice once through one router (rules above); `config` overrides the router config;
    `tail` > 0 also lists that many of the slowest requests; with `ideal_hit_tokens` (the ideal cache's
    hit tokens per trace request id, routing_workload.ideal_hit_tokens) the hit loss by kind."""
    turns = _turns(requests, settings)
    replay = _Replay(settings, policy, engine_seed, config, record_held=ideal_hit_tokens is not None)
    sessions: dict[str, list[_Turn]] = {}
    for turn in turns:
        sessions.setdefault(turn.session_id, []).append(turn)
    next_turn = {a.index: b for ts in sessions.values() for a, b in zip(ts, ts[1:])}
    arrivals = [(ts[0].arrival_s, ts[0].index) for ts in sessions.values()]
    heapq.heapify(arrivals)
    sent: dict[int, float] = {}
    first: dict[int, float] = {}
    end: dict[int, float] = {}
    cached: dict[int, int] = {}
    waiting: list[_Turn] = []
    while len(end) < len(turns):
        replay.now = replay.next_time(arrivals, waiting)
        for k, core in enumerate(replay.cores):
            for event in core.advance_to(replay.now):
                if PIECE_MARK in event.request_id:
                    if event.kind == "finished":
                        index = int(event.request_id.split(PIECE_MARK)[0])
                        if event.usage is not None:
                            replay.paced[index].record(event.usage.prompt_tokens, event.usage.cached_prompt_tokens)
                        replay.paced[index].piece_done(event.time_s)
                        replay.send_next(turns[index], k)
                    continue
                index = int(event.request_id)
                if event.kind == "first_token":
                    first[index] = event.time_s
                    replay.backlogs[k].first(event.request_id)
                elif event.kind == "finished":
                    end[index] = event.time_s
                    cached[index] = event.usage.cached_prompt_tokens if event.usage is not None else 0
                    if index in replay.paced:
                        paced = replay.paced[index]
                        paced.record(turns[index].prompt_tokens, cached[index])
                        replay.self_hit_tokens += paced.self_hit_tokens()
                        cached[index] = paced.hit_tokens()
                    replay.in_flight[k] -= 1
                    if replay.policy is not None:
                        replay.policy.on_completed(event.request_id)
                    if index in next_turn:
                        following = next_turn[index]
                        heapq.heappush(arrivals, (max(following.arrival_s, event.time_s), following.index))
                    if on_progress is not None:
                        on_progress(len(end))
        for k in range(replay.n):
            if replay.next_report[k] <= replay.now:
                replay.reports[k] = (replay.report(k), replay.now)
                replay.next_report[k] += replay.period
        waiting = [turn for turn in waiting if not replay.place(turn)]
        while arrivals and arrivals[0][0] <= replay.now:
            _, index = heapq.heappop(arrivals)
            sent[index] = replay.now
            if not replay.place(turns[index]):
                waiting.append(turns[index])
    figures = _figures(policy, (settings.seed, engine_seed), turns, replay, sent, first, end, floors_sim_s)
    if ideal_hit_tokens is not None:
        placed = [
            PlacedRequest(t.request_id, t.session_id, replay.placed_on[t.index], sent[t.index], t.prompt_tokens,
                          cached[t.index], replay.held[t.index])  # fmt: skip
            for t in turns
        ]
        figures.prefix_hit_loss = hit_loss(placed, ideal_hit_tokens)
    if tail > 0:
        served = [
            ServedRequest(t.request_id, replay.placed_on[t.index], sent[t.index], first[t.index], t.prompt_tokens,
                          cached[t.index], floors_sim_s.get(t.request_id))  # fmt: skip
            for t in turns
        ]
        figures.slowest = slowest_requests(served, replay.prefill_s, tail)
    return figures


def _figures(
    policy: str,
    seeds: tuple[int, int],
    turns: list[_Turn],
    replay: _Replay,
    sent: dict[int, float],
    first: dict[int, float],
    end: dict[int, float],
    floors_sim_s: dict[str, float],
) -> VirtualFigures:
    ttft = [first[t.index] - sent[t.index] for t in turns]
    excess = [first[t.index] - sent[t.index] - floors_sim_s[t.request_id] for t in turns if t.request_id in floors_sim_s]
    e2e = [end[t.index] - sent[t.index] for t in turns]
    bound = order_bound_p99(
        [(sent[t.index], floors_sim_s[t.request_id]) for t in turns if t.request_id in floors_sim_s], replay.n
    )
    counters = [core.counters() for core in replay.cores]
    hit = sum(c.num_prefix_hit_tokens for c in counters) - replay.self_hit_tokens
    total = hit + sum(c.num_prefill_tokens for c in counters)
    return VirtualFigures(
        router=policy,
        slice_seed=seeds[0],
        engine_seed=seeds[1],
        num_requests=len(turns),
        ttft_p50_sim_s=float(np.percentile(ttft, 50)),
        ttft_p99_sim_s=float(np.percentile(ttft, 99)),
        ttft_excess_p99_sim_s=float(np.percentile(excess, 99)) if excess else None,
        ttft_order_bound_p99_sim_s=bound,
        e2e_p99_sim_s=float(np.percentile(e2e, 99)),
        prefix_hit_rate=hit / total if total > 0 else None,
        num_retractions=sum(c.num_retractions for c in counters),
        requests_per_replica=[sum(1 for k in replay.placed_on.values() if k == r) for r in range(replay.n)],
        num_paced=len(replay.paced),
    )


def mean_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None and math.isfinite(v)]
    return sum(known) / len(known) if known else None
