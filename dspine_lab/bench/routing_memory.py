"""`ray-dspine bench routing-memory`: the routers under memory pressure, in pure simulation (SIMULATED).

Question: with reasoning traffic whose outputs run to thousands of tokens on replicas whose Mamba slots
and KV pool (the drafter's KV and per-draft state snapshots included) both bind, do the routers differ
in retractions, recomputed tokens, p99 TTFT, p99 ITL and requests completed?

Replicas: `num_replicas` identical simulated cores (engines/simulated/core.py: SGLang 0.5.23's admission
by the new-token ratio and its decode retraction), sized by the capacity planner from `capacity`
(default: H200, mem_fraction_static 0.85, snapshot_per_draft, DSpine's 2.03B drafter with 16 draft
tokens and draft KV for every token: 465,065 KV tokens, 210 state units at 19 per request, 11 running).
Workload rule (seed w; times in simulated seconds):
  arrivals  Poisson at `arrival_rate_per_s` over [0, window_s) (random.Random(w)).
  request   agent a uniform over `num_agents`; prompt P log-uniform in [prompt_tokens_min, prompt_tokens_max];
            output M log-uniform in [output_tokens_min, output_tokens_max] (the twin generates all M:
            reasoning at high effort runs to its budget); P + M <= the planner's context.
  prefix    the first min(agent_prefix_tokens, P) tokens are agent a's shared opening (its blocks hashed
            by agent), the rest the request's own.
Replay rules (as routing_virtual.py's): each replica reports its core's load snapshot every report_period_s,
staggered by k * period / N; pow2 picks the replica with fewer requests in flight of two drawn at random,
the other routers RouterConfig(policy, reports: stale_after_s, assumed_stats_age_s = report_period_s) with their
GPU-second defaults; a request the router makes wait is offered again every RETRY_S.
Figures per router and seed: retractions and recomputed (wasted) tokens from the cores' counters;
TTFT = first token - arrival; ITL = the gaps between one request's consecutive token events (a step's
tokens come together; a retracted request's wait shows as one long gap), pooled over requests; p99 by
numpy's linear rule; completed = requests finished by window_s. Every request is run to its end.
Paired comparison (paired.py): per seed the difference headroom - baseline of each figure, its mean and
95% interval over seeds (Student's t). The one goal that exists for these figures is routing_results.py's
"retractions == 0" for headroom: met when every seed has 0 (interval [0, 0]), missed when the interval's
low end is above 0, else undecided.
Data: the arrival rate was chosen on tuning seeds TUNING_SEEDS (so that the replicas bind); the
figures are reported on REPORT_SEEDS, which no choice has seen.
Complexity: O(events * N) per replay, events ~ requests * decode steps.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dspine_lab.bench.paired import interval95
from ray_dspine.capacity.config import CapacityConfig, DraftConfig
from ray_dspine.config import PoolConfig
from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from ray_dspine.engines.simulated.core import SimReplicaCore
from ray_dspine.engines.simulated.profile import SimProfile, load_profile
from ray_dspine.engines.simulated.request import SimRequest
from ray_dspine.pools import apply_plan, plan_pool
from ray_dspine.routing.config import ReportsConfig, RouterConfig
from ray_dspine.routing.policies import RoutingPolicy, build_policy
from ray_dspine.routing.types import ReplicaView, RequestView

RETRY_S = 0.05  # simulated seconds between offers of a request the router made wait (routing_virtual.py)
ROUTERS = ("pow2", "cache_aware", "headroom")
OURS = "headroom"
TUNING_SEEDS = (100, 101)
REPORT_SEEDS = (0, 1, 2, 3, 4, 5)
FIGURES = ("num_retractions", "num_recomputed_tokens", "ttft_p99_sim_s", "itl_p99_sim_s", "num_completed")
RECEIPT = Path("docs/receipts/routing/memory-pressure.json")


def default_capacity() -> CapacityConfig:
    return CapacityConfig(
        gpu="H200",
        mem_fraction_static=0.85,
        target_profile="qwen3.8-27b",
        mamba_strategy="snapshot_per_draft",
        context_length_tokens=131072,
        draft=DraftConfig(name="DSpine", draft_params_b=2.03, draft_num_layers=5, speculative_num_draft_tokens=16),
    )


class MemorySettings(BaseModel):
    """The memory-pressure workload and its replicas (simulated seconds, tokens)."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int = Field(default=4, ge=2, description="Identical simulated replicas.")
    profile: str = Field(default="h200-qwen3.8-27b", description="Simulated profile of each replica.")
    drafter: str = Field(default="dspine", description="The replicas' drafter (its draft tokens set the lookahead).")
    workload: str = Field(default="swe-bench-pro-xhigh", description="The profile's acceptance figure.")
    capacity: CapacityConfig = Field(default_factory=default_capacity, description="What the planner sizes.")
    chunked_prefill_tokens: int = Field(default=8192, ge=1, description="SGLang's --chunked-prefill-size on an H200.")
    window_s: float = Field(default=1200.0, gt=0.0, description="Arrivals fall in [0, window_s), simulated s.")
    arrival_rate_per_s: float = Field(default=0.35, gt=0.0, description="Poisson arrivals per simulated s.")
    prompt_tokens_min: int = Field(default=16384, ge=1)
    prompt_tokens_max: int = Field(default=65536, ge=1)
    output_tokens_min: int = Field(default=4096, ge=1)
    output_tokens_max: int = Field(default=16384, ge=1)
    num_agents: int = Field(default=8, ge=1, description="Agents whose requests share an opening.")
    agent_prefix_tokens: int = Field(default=8192, ge=0, description="Tokens of each agent's shared opening.")
    report_period_s: float = Field(default=1.0, gt=0.0, description="Load reports per replica, simulated s.")
    stale_after_s: float = Field(default=4.0, gt=0.0, description="headroom: reports older than this are discounted.")


@dataclass(frozen=True)
class MemoryRequest:
    index: int
    arrival_s: float
    prompt_tokens: int
    max_tokens: int
    prefix_hashes: tuple[str, ...]
    session_id: str


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def make_requests(settings: MemorySettings, seed: int, block_tokens: int) -> list[MemoryRequest]:
    """The workload rule's requests for one seed, in arrival order."""
    rng = random.Random(seed)
    out: list[MemoryRequest] = []
    t = rng.expovariate(settings.arrival_rate_per_s)
    while t < settings.window_s:
        i = len(out)
        agent = rng.randrange(settings.num_agents)
        prompt = _log_uniform(rng, settings.prompt_tokens_min, settings.prompt_tokens_max)
        output = _log_uniform(rng, settings.output_tokens_min, settings.output_tokens_max)
        shared = min(settings.agent_prefix_tokens, prompt) // block_tokens
        hashes = tuple(f"agent{agent}:{b}" for b in range(shared)) + tuple(
            f"s{seed}r{i}:{b}" for b in range(shared, prompt // block_tokens)
        )
        out.append(MemoryRequest(i, t, prompt, output, hashes, f"agent{agent}"))
        t += rng.expovariate(settings.arrival_rate_per_s)
    return out


def planned_engine(settings: MemorySettings) -> SimulatedEngineConfig:
    engine = SimulatedEngineConfig(
        profile=settings.profile, workload=settings.workload, drafter=settings.drafter, capacity=settings.capacity,
        chunked_prefill_tokens=settings.chunked_prefill_tokens,
    )  # fmt: skip
    pool = PoolConfig(name="memory", engine=engine)
    return apply_plan(pool, plan_pool(pool)).engine


class MemoryFigures(BaseModel):
    """One router's replay on one seed; every figure SIMULATED."""

    model_config = ConfigDict(extra="forbid")

    router: str
    seed: int
    num_requests: int
    num_completed: int = Field(description="Requests finished by window_s.")
    ttft_p99_sim_s: float
    itl_p99_sim_s: float
    num_retractions: int
    num_recomputed_tokens: int = Field(description="Tokens prefilled again when retracted requests came back.")
    num_retracted_output_tokens: int
    num_waited_for_memory: int
    num_waited_for_state_slots: int
    peak_kv_utilization: float = Field(description="Highest over the replicas.")
    requests_per_replica: list[int]


@dataclass
class _Track:
    sent_s: float
    first_s: float | None = None
    last_s: float | None = None
    end_s: float | None = None
    gaps: list[float] = field(default_factory=list)


def replay(
    settings: MemorySettings,
    policy: str,
    seed: int,
    engine: SimulatedEngineConfig | None = None,
    profile: SimProfile | None = None,
    requests: list[MemoryRequest] | None = None,
) -> MemoryFigures:
    """One router, one seed, by the replay rules above (engine, profile and requests default to the
    settings' planned replica, its shipped profile and the workload rule's requests)."""
    engine = engine or planned_engine(settings)
    profile = profile or load_profile(engine.profile)
    if requests is None:
        requests = make_requests(settings, seed, engine.prefix_block_tokens)
    n = settings.num_replicas
    cores = [SimReplicaCore(engine, profile, random.Random(seed * 1000 + k)) for k in range(n)]
    ids = [f"replica-{k}" for k in range(n)]
    now = 0.0
    period = settings.report_period_s
    next_report = [k * period / n for k in range(n)]
    reports: list[tuple[LoadSnapshot, float]] = [(core.load(), t - period) for core, t in zip(cores, next_report)]
    in_flight = [0] * n
    placed_on: dict[int, int] = {}
    rng = random.Random(seed)
    router: RoutingPolicy | None = None
    if policy != "pow2":
        trust = ReportsConfig(stale_after_s=settings.stale_after_s, assumed_stats_age_s=period)
        config = RouterConfig(policy=policy, reports=trust)
        router = build_policy(config, clock=lambda: now)
    tracks: dict[int, _Track] = {}

    def place(r: MemoryRequest) -> bool:
        view = RequestView(
            request_id=str(r.index), session_id=r.session_id, prefix_hashes=r.prefix_hashes,
            prompt_tokens=r.prompt_tokens, max_tokens=r.max_tokens, needed_kv_tokens=r.prompt_tokens + r.max_tokens,
        )  # fmt: skip
        if router is None:
            a, b = rng.sample(range(n), 2)
            k = a if in_flight[a] <= in_flight[b] else b
        else:
            views = [ReplicaView(rid, load, now - taken) for rid, (load, taken) in zip(ids, reports)]
            decision = router.choose(view, views)
            if decision.chosen is None:
                return False
            k = ids.index(decision.chosen)
            router.on_placed(view, decision.chosen)
        placed_on[r.index] = k
        in_flight[k] += 1
        cores[k].submit(SimRequest(str(r.index), r.prompt_tokens, r.max_tokens, r.prefix_hashes, r.session_id), now)
        return True

    arrivals = [(r.arrival_s, r.index) for r in requests]
    heapq.heapify(arrivals)
    waiting: list[MemoryRequest] = []
    done = 0
    while done < len(requests):
        times = [min(next_report)]
        if arrivals:
            times.append(arrivals[0][0])
        times.extend(t for t in (core.next_event_s() for core in cores) if t is not None)
        if waiting:
            times.append(now + RETRY_S)
        now = max(now, min(times))
        for k, core in enumerate(cores):
            for event in core.advance_to(now):
                index = int(event.request_id)
                track = tracks[index]
                if event.kind == "finished":
                    track.end_s = event.time_s
                    in_flight[k] -= 1
                    done += 1
                    if router is not None:
                        router.on_completed(event.request_id)
                    continue
                if event.kind == "first_token":
                    track.first_s = event.time_s
                elif track.last_s is not None:
                    track.gaps.append(event.time_s - track.last_s)
                track.last_s = event.time_s
        for k in range(n):
            if next_report[k] <= now:
                reports[k] = (cores[k].load(), now)
                next_report[k] += period
        waiting = [r for r in waiting if not place(r)]
        while arrivals and arrivals[0][0] <= now:
            _, index = heapq.heappop(arrivals)
            r = requests[index]
            tracks[index] = _Track(sent_s=now)
            if not place(r):
                waiting.append(r)
    counters = [core.counters() for core in cores]
    ttft = [t.first_s - t.sent_s for t in tracks.values() if t.first_s is not None]
    gaps = [g for t in tracks.values() for g in t.gaps]
    return MemoryFigures(
        router=policy,
        seed=seed,
        num_requests=len(requests),
        num_completed=sum(1 for t in tracks.values() if t.end_s is not None and t.end_s <= settings.window_s),
        ttft_p99_sim_s=float(np.percentile(ttft, 99)),
        itl_p99_sim_s=float(np.percentile(gaps, 99)) if gaps else 0.0,
        num_retractions=sum(c.num_retractions for c in counters),
        num_recomputed_tokens=sum(c.num_recomputed_tokens for c in counters),
        num_retracted_output_tokens=sum(c.num_retracted_output_tokens for c in counters),
        num_waited_for_memory=sum(c.num_waited_for_memory for c in counters),
        num_waited_for_state_slots=sum(c.num_waited_for_state_slots for c in counters),
        peak_kv_utilization=max(c.peak_kv_utilization for c in counters),
        requests_per_replica=[sum(1 for k in placed_on.values() if k == j) for j in range(n)],
    )


class PairedFigure(BaseModel):
    """headroom - baseline of one figure, seed by seed."""

    model_config = ConfigDict(extra="forbid")

    figure: str
    baseline: str
    mean: float
    ci95_low: float | None
    ci95_high: float | None
    per_seed: list[float]


def paired(runs: list[MemoryFigures], baseline: str) -> list[PairedFigure]:
    ours = {r.seed: r for r in runs if r.router == OURS}
    base = {r.seed: r for r in runs if r.router == baseline}
    seeds = sorted(set(ours) & set(base))
    out = []
    for name in FIGURES:
        diffs = [float(getattr(ours[s], name)) - float(getattr(base[s], name)) for s in seeds]
        if not diffs:
            continue
        m, low, high = interval95(diffs)
        out.append(PairedFigure(figure=name, baseline=baseline, mean=m, ci95_low=low, ci95_high=high, per_seed=diffs))
    return out


def retraction_goal(runs: list[MemoryFigures]) -> tuple[str, float, float | None, float | None]:
    """routing_results.py's goal "retractions == 0" for headroom, on its per-seed counts (rule above)."""
    counts = [float(r.num_retractions) for r in runs if r.router == OURS]
    m, low, high = interval95(counts)
    if all(c == 0 for c in counts):
        return "met", m, 0.0, 0.0
    if low is not None and low > 0:
        return "missed", m, low, high
    return "undecided", m, low, high


def format_run(f: MemoryFigures) -> str:
    return (
        f"SIMULATED {f.router:<11} seed {f.seed}: retractions {f.num_retractions}, recomputed tokens "
        f"{f.num_recomputed_tokens}, p99 TTFT {f.ttft_p99_sim_s:.1f} s, p99 ITL {f.itl_p99_sim_s * 1000:.0f} ms, "
        f"completed {f.num_completed}/{f.num_requests}, waited for slots {f.num_waited_for_state_slots}, "
        f"for memory {f.num_waited_for_memory}, peak KV {f.peak_kv_utilization:.2f}, "
        f"per replica {f.requests_per_replica}"
    )


def _fmt_interval(p: PairedFigure) -> str:
    scale, unit = (1000.0, " ms") if p.figure == "itl_p99_sim_s" else (1.0, " s" if p.figure.endswith("_s") else "")
    if p.ci95_low is None or p.ci95_high is None:
        return f"{scale * p.mean:+.1f}{unit} (one seed: no interval)"
    return f"{scale * p.mean:+.1f}{unit} (95% CI {scale * p.ci95_low:+.1f} to {scale * p.ci95_high:+.1f})"


def format_paired(pairs: list[PairedFigure]) -> list[str]:
    return [
        f"SIMULATED paired {OURS} - {p.baseline} {p.figure}: {_fmt_interval(p)} over {len(p.per_seed)} seeds"
        for p in pairs
    ]


def run(settings: MemorySettings, seeds: tuple[int, ...], routers: tuple[str, ...], out=sys.stdout) -> dict:
    engine = planned_engine(settings)
    print(
        f"SIMULATED replicas: {settings.num_replicas} x {engine.total_kv_tokens} KV tokens, {engine.num_state_slots} "
        f"state units at {engine.state_slots_per_request} per request, {engine.max_running_requests} running",
        file=out,
    )
    runs = []
    for seed in seeds:
        for router in routers:
            figures = replay(settings, router, seed, engine)
            runs.append(figures)
            print(format_run(figures), file=out, flush=True)
    pairs = [p for base in routers if base != OURS for p in paired(runs, base)] if OURS in routers else []
    for line in format_paired(pairs):
        print(line, file=out)
    goal = retraction_goal(runs) if OURS in routers else None
    if goal is not None:
        verdict, m, low, high = goal
        span = "no interval" if low is None else f"95% CI {low:.1f} to {high:.1f}"
        print(f"SIMULATED goal {OURS} retractions == 0: mean {m:.1f} per seed ({span}): {verdict}", file=out)
    return {
        "simulated": True,
        "settings": settings.model_dump(mode="json"),
        "engine": {
            "total_kv_tokens": engine.total_kv_tokens,
            "num_state_slots": engine.num_state_slots,
            "state_slots_per_request": engine.state_slots_per_request,
            "max_running_requests": engine.max_running_requests,
        },
        "seeds": list(seeds),
        "runs": [r.model_dump() for r in runs],
        "paired": [p.model_dump() for p in pairs],
        "goal_retractions_zero": None if goal is None else {"verdict": goal[0], "mean": goal[1], "ci95_low": goal[2],
                                                            "ci95_high": goal[3]},  # fmt: skip
    }


HELP = "routers under memory pressure (long reasoning outputs, binding KV and Mamba slots), pure simulation"


def register(subparsers) -> None:
    parser = subparsers.add_parser("routing-memory", help=HELP, description=HELP + ". Every figure is SIMULATED.")
    parser.add_argument("--seeds", default=None, help="comma list of workload seeds (default: the report seeds)")
    parser.add_argument("--tuning", action="store_true", help="run the tuning seeds instead of the report seeds")
    parser.add_argument("--routers", default=",".join(ROUTERS), help="comma list (default pow2,cache_aware,headroom)")
    parser.add_argument("--rate", type=float, default=None, help="arrivals per simulated second (default 0.35)")
    parser.add_argument("--window-s", type=float, default=None, help="arrival window, simulated seconds (default 1200)")
    parser.add_argument("--out", default=None, help=f"receipt JSON path (e.g. {RECEIPT}); none: not written")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    update = {}
    if args.rate is not None:
        update["arrival_rate_per_s"] = args.rate
    if args.window_s is not None:
        update["window_s"] = args.window_s
    settings = MemorySettings(**update)
    if args.seeds:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    else:
        seeds = TUNING_SEEDS if args.tuning else REPORT_SEEDS
    routers = tuple(r.strip() for r in args.routers.split(",") if r.strip())
    receipt = run(settings, seeds, routers)
    if args.out:
        receipt["command_line"] = ["ray-dspine", "bench", "routing-memory", *sys.argv[3:]] if len(sys.argv) > 3 else [
            "ray-dspine", "bench", "routing-memory"]  # fmt: skip
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(receipt, indent=2) + "\n", encoding="utf-8")
        print(f"SIMULATED receipt written to {path}")
    return 0
