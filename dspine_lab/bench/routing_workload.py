"""What `ray-dspine bench routing` replays and against what: its settings, the trace slice, the app.

Slice rule (trace seconds a, session s, settings below):
    keep(q)    = window_start_s <= a(q) < window_start_s + window_s
                 and crc32(f"{seed}:{s(q)}") / 2**32 < session_fraction     (whole sessions kept or dropped)
    arrival(q) = (a(q) - window_start_s) * arrival_scale                      (simulated seconds)
    wall(q)    = arrival(q) * engine_time_scale                               (wall seconds after the start)
A session's turn is still sent only after its previous turn ended (the replay's open-loop rule).
Sampling whole sessions keeps the prefix sharing inside each conversation while thinning the rate;
`arrival_scale` then sets the offered load in simulated seconds (< 1 compresses the think time between
turns by the same factor). Traces without timestamps (tau-bench) start sessions at
`session_rate_per_s` per trace second and are windowed the same way.

TTFT floor (what no router can beat): with no queueing and an ideal prefix cache holding every block
any earlier request of the slice sent, request i (P_i prompt tokens as the ingress estimates them,
B = 512-token blocks, h_i = leading blocks of its prompt seen before, capped at floor((P_i - 1) / B))
needs its own prefill alone: floor_i = t_alone(P_i - h_i * B, C, h_i * B) (step_model.py: one base step per
chunk of C = chunked_prefill_tokens tokens, one step when unchunked; its new tokens attend the cached ones).
Prefix-hit ceiling (what no router can beat either): the same ideal cache's hit rate,
    hit_ceiling = sum_i h_i * B / sum_i P_i,
and the part of it a conversation's own earlier turns give: the same with h_i counted over the blocks
of earlier requests of i's session only (the rest is reuse across conversations, e.g. a shared document).

App rule: one pool `bench` of `num_replicas` simulated replicas sized by the capacity plan of
`capacity` (the DSpine pool of clusters/sim.yaml), every reasoning level routed to it,
max_ongoing_requests = the plan's running-request limit, chunks merged over `stream_batch_interval_ms`
(serve/stream_batching.py), and `RouterConfig(policy=p)` for the router
p under test, its stages' GPU-second fields (`GPU_SECOND_FIELDS`: the ttft_guard filter's and the
memory_wait hold's tolerance_s and cached_max_s, predicted_ttft's indifference_s, predicted_decode's
slack_s, when listed) times engine_time_scale. Identical
replicas: every replica-side setting (engine, schedule, cache, HiCache, paced prefill) is one setting
applied to the replicas of every router alike; only `router.policy` differs between routers. Paced
prefill (`prefill_pacing`, engines/prefill_pacing.py, timed by the profile's prefill rate and attention
cost) is off by default, as SGLang replicas run today; turned on, every router's replicas pace.

Data splits (`split`; slice = (window_start_s, session-sampling seed), each replayed once per engine seed):
    bench      the slice every Ray receipt uses: window 0-1200 s, session seed 0; engine seeds 0-11.
               The TTFT-guard tolerance and the pacing settings were chosen on it (and on slices 0-17).
    held-out   fresh data no setting was chosen on: windows 1200-2400 s (session seeds 20, 21, 22) and
               2300-3500 s (session seeds 23, 24, 25) of the Mooncake trace, engine seeds 20, 21, 22.
               Before this split the receipts had used window start 0 only, session seeds 0-17 and
               engine seeds 0-11 (USED_SLICES, USED_ENGINE_SEEDS); the held-out slices share none of them.
               It is for reporting only: no setting may be chosen on it from now on.
Complexity: O(n log n) for n trace requests; the floor and the hit ceiling O(total prompt characters).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ray_dspine.capacity.config import CapacityConfig, DraftConfig
from ray_dspine.config import AppConfig, DeploymentOptions, PoolConfig, ServerConfig
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from ray_dspine.engines.simulated.kv_tiers import WritePolicy
from ray_dspine.engines.simulated.prefix_cache import EvictionPolicy
from ray_dspine.engines.simulated.profile import load_profile
from ray_dspine.engines.protocol import SchedulePolicy
from ray_dspine.engines.simulated.step_model import prefill_alone_ms
from ray_dspine.pools import plan_pool
from ray_dspine.engines.prefill_pacing_config import PrefillPacingConfig
from ray_dspine.routing.config import PolicyName, ReportsConfig, RouterConfig, TrafficConfig, TrafficRule
from ray_dspine.routing.fingerprint import conversation_text, prefix_hashes
from ray_dspine.bench.client import ClientSettings, build_body
from ray_dspine.bench.traces.loader import load_trace
from ray_dspine.bench.traces.model import Trace, TraceRequest

BENCH_POOL = "bench"
BENCH_MODEL = "qwen3.8-27b"
PREFIX_BLOCK_CHARS = 2048  # the ingress's block: 512 tokens at 4 characters per token
CHARS_PER_TOKEN = 4
# The ingress holds one slot per streaming request for its whole life: room for a whole replay in flight.
INGRESS_MAX_ONGOING_REQUESTS = 4096
DEFAULT_ROUTERS: tuple[PolicyName, ...] = ("pow2", "cache_aware", "headroom")
ROUTER_LABELS: dict[str, str] = {
    "pow2": "Ray default (PowerOfTwoChoices)",
    "cache_aware": "SGLang gateway cache_aware",
    "headroom": "ray-dspine headroom (ours)",
    "least_load": "least load",
}


def dspine_h200_capacity() -> CapacityConfig:
    """The capacity section of the `dspine` pool in clusters/sim.yaml (H200, DSpine, ReplaySSM)."""
    return CapacityConfig(
        gpu="H200",
        mem_fraction_static=0.85,
        target_profile="qwen3.8-27b",
        mamba_strategy="replay_ssm",
        context_length_tokens=131_072,
        draft=DraftConfig(
            name="DSpine",
            draft_params_b=2.03,
            draft_num_layers=5,
            speculative_num_draft_tokens=16,
            draft_window_tokens=8192,
        ),
    )


class RoutingBenchSettings(BaseModel):
    """Everything one `bench routing` run depends on (echoed in its JSON as `settings`)."""

    model_config = ConfigDict(extra="forbid")

    trace: str = Field(default="mooncake", description="'mooncake', 'tau-bench' or a trace file.")
    traces_dir: Path | None = Field(default=None, description="Folder of named traces.")
    routers: list[PolicyName] = Field(default_factory=lambda: list(DEFAULT_ROUTERS), min_length=1)
    num_replicas: int = Field(default=4, ge=1, le=16, description="Simulated replicas of the one pool.")
    window_start_s: float = Field(default=0.0, ge=0.0, description="Start of the slice, trace seconds.")
    window_s: float = Field(default=1200.0, gt=0.0, description="Length of the slice, trace seconds.")
    session_fraction: float = Field(default=0.1, gt=0.0, le=1.0, description="Share of sessions kept.")
    arrival_scale: float = Field(
        default=0.1, gt=0.0, le=100.0, description="Simulated seconds per trace second (< 1: more load)."
    )
    session_rate_per_s: float | None = Field(
        default=None, gt=0.0, description="Session starts per trace second for traces without timestamps."
    )
    engine_time_scale: float = Field(
        default=0.5, gt=0.0, le=10.0, description="Wall seconds per simulated GPU second (the engines' time_scale)."
    )
    max_tokens_cap: int | None = Field(
        default=128, ge=1, description="Upper bound on each request's max_tokens (None keeps the trace's)."
    )
    max_prompt_tokens: int | None = Field(default=None, ge=1, description="Clamp on prompt length, tokens.")
    routing_stats_period_s: float = Field(default=0.5, gt=0.0, description="Replica load reports, wall seconds.")
    stale_after_s: float = Field(default=2.0, gt=0.0, description="headroom: reports older than this are discounted.")
    replica_num_cpus: float = Field(default=0.1, ge=0.0, description="CPUs reserved per replica.")
    stream_batch_interval_ms: float = Field(
        default=50.0,
        ge=0.0,
        le=1000.0,
        description="The replicas' stream batching interval, wall milliseconds (serve/stream_batching.py; "
        "Ray Serve LLM's 50 ms; 0: every chunk as the engine makes it).",
    )
    capacity: CapacityConfig = Field(default_factory=dspine_h200_capacity, description="The GPU each replica models.")
    profile: str = Field(
        default="h200-qwen3.8-27b-attention",
        description="Simulated timing profile: the H200's, with long prompts' attention as measured on an H200 "
        "(docs/results/prefill-floor-h200.md); h200-qwen3.8-27b prices every prompt token alike.",
    )
    workload: str = Field(default="swe-bench-pro-xhigh", description="Acceptance figures to draw from.")
    drafter: Literal["dspine", "dflash2", "none"] = "dspine"
    schedule_policy: SchedulePolicy = Field(
        default="fcfs", description="The replicas' prefill order (SGLang's --schedule-policy)."
    )
    chunked_prefill_tokens: int | None = Field(
        default=None,
        ge=1,
        validate_default=True,
        description="The replicas' --chunked-prefill-size, tokens (None: unchunked).",
    )
    radix_eviction_policy: EvictionPolicy = Field(
        default="lru", description="The replicas' --radix-eviction-policy: lru (SGLang's default), slru or lfu."
    )
    hicache_host_tokens: int = Field(
        default=0,
        ge=0,
        description="Each replica's HiCache host tier, KV tokens (SGLang's --enable-hierarchical-cache; 0: off).",
    )
    hicache_store_tokens: int = Field(
        default=0,
        ge=0,
        description="A HiCache store shared by the replicas (--hicache-storage-backend), KV tokens (virtual "
        "replay only; 0: none).",
    )
    hicache_write_policy: WritePolicy = Field(
        default="write_back", description="The replicas' --hicache-write-policy, for the host tier and the store."
    )
    prefill_pacing: PrefillPacingConfig | None = Field(
        default=None,
        description="Paced prefill of long uncached prompts on the replicas of every router alike "
        "(engines/prefill_pacing.py); None (default): off, as SGLang replicas run today.",
    )
    seed: int = Field(default=0, ge=0, description="Session sampling, arrival spreading and engine draws.")
    repeats: int = Field(
        default=1, ge=1, le=20, description="Replays of the slice per router, interleaved; figures pool them all."
    )
    backlog_source: Literal["engine", "replica", "none"] = Field(
        default="engine",
        description="Where the replicas' reported prefill backlog comes from (virtual replay only): the "
        "simulated engine's own queue ('engine'); the replica's count from what it sent and first tokens, "
        "with the rest of the report limited to what SGLang reports ('replica', prefill_backlog.py); or "
        "nowhere ('none', an SGLang report without that count).",
    )
    request_timeout_s: float = Field(default=300.0, gt=0.0, description="Per-request deadline, wall seconds.")
    ray_num_cpus: int = Field(default=2, ge=1, description="CPUs the local Ray cluster declares.")

    @field_validator("chunked_prefill_tokens")
    @classmethod
    def _chunked_for_spf(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None and info.data.get("schedule_policy") == "shortest-prefill-first":
            raise ValueError("shortest-prefill-first works on chunked prefill: give the pass size (8192 on an H200)")
        return value


# Per-trace defaults the CLI starts from (explicit options override them).
TRACE_PRESETS: dict[str, dict] = {
    "mooncake": {},
    # tau-bench airline: ~12 back-to-back turns per session over a shared ~1,500-token policy prompt;
    # 50 sessions start within 50 simulated seconds; outputs (~65 tokens) are the trace's own.
    "tau-bench": {
        "session_rate_per_s": 2.0,
        "window_s": 100.0,
        "session_fraction": 0.25,
        "arrival_scale": 0.5,
        "engine_time_scale": 1.0,
        "max_tokens_cap": None,
    },
}


class SliceKey(BaseModel):
    """One slice of the trace: where its window starts and which session-sampling seed thins it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_start_s: float = Field(ge=0.0, description="Start of the slice's window, trace seconds.")
    seed: int = Field(ge=0, description="Session-sampling seed.")


SplitName = Literal["bench", "held-out"]


class DataSplit(BaseModel):
    """A named set of slices and engine seeds (Data splits rule)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: SplitName
    slices: tuple[SliceKey, ...] = Field(min_length=1)
    engine_seeds: tuple[int, ...] = Field(min_length=1)
    note: str


SPLITS: dict[str, DataSplit] = {
    "bench": DataSplit(
        name="bench",
        slices=(SliceKey(window_start_s=0.0, seed=0),),
        engine_seeds=tuple(range(12)),
        note="the slice every Ray receipt uses; the TTFT-guard tolerance and pacing settings were chosen on it",
    ),
    "held-out": DataSplit(
        name="held-out",
        slices=tuple(SliceKey(window_start_s=1200.0, seed=s) for s in (20, 21, 22))
        + tuple(SliceKey(window_start_s=2300.0, seed=s) for s in (23, 24, 25)),
        engine_seeds=(20, 21, 22),
        note="fresh Mooncake slices (windows 1200-2400 s and 2300-3500 s, session seeds 20-25, engine seeds "
        "20-22) that no setting was chosen on; for reporting only, no setting may be chosen on them",
    ),
}
# The slices and engine seeds of the receipts written before the splits (docs/receipts/routing/): window
# start 0 s, session seeds 0-17 (0-11 for the twelve-slice runs, 12-17 the earlier held-out set), engine
# seeds 0-11; the tolerance and the pacing permit were chosen on these.
USED_SLICES: frozenset[SliceKey] = frozenset(SliceKey(window_start_s=0.0, seed=s) for s in range(18))
USED_ENGINE_SEEDS: frozenset[int] = frozenset(range(12))


def split_settings(settings: RoutingBenchSettings, split: DataSplit) -> list[RoutingBenchSettings]:
    """One settings per slice of the split: `settings` with that slice's window start and seed."""
    return [
        settings.model_copy(update={"window_start_s": key.window_start_s, "seed": key.seed}) for key in split.slices
    ]


def pool_size(settings: RoutingBenchSettings | None = None) -> tuple[int, int]:
    """(KV tokens, running-request limit) of one bench replica, as the capacity planner gives them."""
    settings = settings or RoutingBenchSettings()
    engine = SimulatedEngineConfig(profile=settings.profile, workload=settings.workload, capacity=settings.capacity)
    plan = plan_pool(PoolConfig(name=BENCH_POOL, engine=engine))
    if plan is None:
        raise ValueError("the capacity planner gave no plan for the bench replica")
    return plan.free_kv_tokens, plan.max_running_requests


def session_kept(session_id: str, seed: int, fraction: float) -> bool:
    return zlib.crc32(f"{seed}:{session_id}".encode()) / 2**32 < fraction


def slice_requests(trace: Trace, settings: RoutingBenchSettings) -> list[TraceRequest]:
    """Apply the slice rule; arrivals become simulated seconds from 0."""
    start, end = settings.window_start_s, settings.window_start_s + settings.window_s
    kept = [
        r.model_copy(update={"arrival_s": (r.arrival_s - start) * settings.arrival_scale})
        for r in trace.requests
        if start <= r.arrival_s < end and session_kept(r.session_id, settings.seed, settings.session_fraction)
    ]
    kept.sort(key=lambda r: (r.arrival_s, r.session_id, r.turn_index))
    return kept


def load_slice(settings: RoutingBenchSettings) -> tuple[Trace, list[TraceRequest]]:
    trace = load_trace(
        settings.trace,
        traces_dir=settings.traces_dir,
        seed=settings.seed,
        max_prompt_tokens=settings.max_prompt_tokens,
        session_rate_per_s=settings.session_rate_per_s,
    )
    return trace, slice_requests(trace, settings)


def ttft_floor_sim_s(requests: list[TraceRequest], settings: RoutingBenchSettings) -> list[float]:
    """The floor rule, per request in arrival order (simulated seconds)."""
    return list(ttft_floors_by_request(requests, settings).values())


@dataclass(frozen=True)
class IngressView:
    """A trace request as the ingress hands it to the router: block hashes and token estimates."""

    prefix_hashes: tuple[str, ...]
    prompt_tokens: int
    max_tokens: int


def ingress_view(request: TraceRequest, client: ClientSettings) -> IngressView:
    """The body the bench client sends, hashed and counted as the ingress does (4 characters a token)."""
    body = build_body(request, client)
    text = conversation_text(body["messages"]) if "messages" in body else str(body["prompt"])
    return IngressView(
        prefix_hashes=tuple(prefix_hashes(text, PREFIX_BLOCK_CHARS)),
        prompt_tokens=len(text) // CHARS_PER_TOKEN + 1,
        max_tokens=int(body["max_tokens"]),
    )


def bench_prefill_seconds(settings: RoutingBenchSettings) -> Callable[[int, int], float]:
    """t_alone: a prompt's prefill on an idle replica, simulated seconds for (uncached tokens, cached tokens),
    on the bench's engine profile and chunk size."""
    profile = load_profile(settings.profile)
    chunk = settings.chunked_prefill_tokens

    def prefill_s(uncached_tokens: int, cached_tokens: int = 0) -> float:
        return prefill_alone_ms(profile, uncached_tokens, chunk, cached_tokens) / 1000.0

    return prefill_s


@dataclass(frozen=True)
class IdealCache:
    """One request under the ideal prefix cache: its prompt and the tokens each cache rule covers."""

    prompt_tokens: int
    hit_tokens: int  # h_i * B: leading blocks any earlier request of the slice sent
    session_hit_tokens: int  # the same over earlier requests of its own session


def ideal_cache_by_request(requests: list[TraceRequest]) -> dict[str, IdealCache]:
    """The ideal cache of the floor and hit-ceiling rules: trace request id -> IdealCache, in arrival order."""
    client = ClientSettings(endpoint="http://unused", model=BENCH_MODEL)
    block_tokens = PREFIX_BLOCK_CHARS // CHARS_PER_TOKEN
    seen: set[str] = set()
    seen_by_session: dict[str, set[str]] = {}
    out: dict[str, IdealCache] = {}
    for request in sorted(requests, key=lambda r: r.arrival_s):
        view = ingress_view(request, client)
        own = seen_by_session.setdefault(request.session_id, set())
        cap = (view.prompt_tokens - 1) // block_tokens
        out[request.request_id] = IdealCache(
            prompt_tokens=view.prompt_tokens,
            hit_tokens=min(_leading_run(view.prefix_hashes, seen), cap) * block_tokens,
            session_hit_tokens=min(_leading_run(view.prefix_hashes, own), cap) * block_tokens,
        )
        seen.update(view.prefix_hashes)
        own.update(view.prefix_hashes)
    return out


def ideal_hit_tokens(requests: list[TraceRequest], ideal: dict[str, IdealCache] | None = None) -> dict[str, int]:
    """Trace request id -> the tokens the ideal cache covers (IdealCache.hit_tokens); `ideal`: the slice's
    ideal_cache_by_request when the caller has it (one walk per slice)."""
    ideal = ideal_cache_by_request(requests) if ideal is None else ideal
    return {request_id: entry.hit_tokens for request_id, entry in ideal.items()}


def _leading_run(hashes: tuple[str, ...], seen: set[str]) -> int:
    count = 0
    for block_hash in hashes:
        if block_hash not in seen:
            break
        count += 1
    return count


def ttft_floors_by_request(
    requests: list[TraceRequest], settings: RoutingBenchSettings, ideal: dict[str, IdealCache] | None = None
) -> dict[str, float]:
    """The floor rule: trace request id -> floor (simulated seconds), in arrival order; `ideal` as in
    ideal_hit_tokens."""
    return _floors(ideal_cache_by_request(requests) if ideal is None else ideal, settings)


def _floors(ideal: dict[str, IdealCache], settings: RoutingBenchSettings) -> dict[str, float]:
    prefill_s = bench_prefill_seconds(settings)
    return {rid: prefill_s(i.prompt_tokens - i.hit_tokens, i.hit_tokens) for rid, i in ideal.items()}


def prefix_hit_ceilings(requests: list[TraceRequest]) -> dict[str, float | None]:
    """The hit-ceiling rule: the ideal cache's hit rate, and the part within conversations."""
    return _ceilings(list(ideal_cache_by_request(requests).values()))


def _ceilings(ideal: list[IdealCache]) -> dict[str, float | None]:
    prompt = sum(i.prompt_tokens for i in ideal)
    if prompt == 0:
        return {"prefix_hit_ceiling": None, "prefix_hit_ceiling_within_sessions": None}
    return {
        "prefix_hit_ceiling": sum(i.hit_tokens for i in ideal) / prompt,
        "prefix_hit_ceiling_within_sessions": sum(i.session_hit_tokens for i in ideal) / prompt,
    }


def describe_slice(
    requests: list[TraceRequest], settings: RoutingBenchSettings, ideal: dict[str, IdealCache] | None = None
) -> dict:
    """Size of the slice, its TTFT floor and its prefix-hit ceiling, for the JSON (one walk of the ideal cache,
    none when `ideal` is given)."""
    ideal = ideal_cache_by_request(requests) if ideal is None else ideal
    floors = np.asarray(list(_floors(ideal, settings).values()) or [0.0])
    span = max((r.arrival_s for r in requests), default=0.0)
    return {
        "num_requests": len(requests),
        "num_sessions": len({r.session_id for r in requests}),
        "arrival_span_sim_s": span,
        "offered_rate_per_sim_s": len(requests) / span if span > 0 else None,
        "mean_prompt_tokens": float(np.mean([r.prompt_tokens for r in requests])) if requests else 0.0,
        "ttft_floor_p50_sim_s": float(np.percentile(floors, 50)),
        "ttft_floor_p99_sim_s": float(np.percentile(floors, 99)),
        **_ceilings(list(ideal.values())),
    }


def format_hit_ceiling(infos: list[dict]) -> str | None:
    """One line on the slices' prefix-hit ceiling (mean over `infos`, each from describe_slice)."""
    known = [i for i in infos if i.get("prefix_hit_ceiling") is not None]
    if not known:
        return None
    ceiling = sum(i["prefix_hit_ceiling"] for i in known) / len(known)
    own = sum(i["prefix_hit_ceiling_within_sessions"] for i in known) / len(known)
    return (
        f"prefix-hit ceiling: {ceiling:.3f} (every earlier block of the slice cached; "
        f"{own:.3f} of it from each conversation's own earlier turns)"
    )


# The stage fields that are GPU seconds (per stage type); per_cached_s is seconds per second, so unscaled.
GPU_SECOND_FIELDS: dict[str, tuple[str, ...]] = {
    "ttft_guard": ("tolerance_s", "cached_max_s"),
    "memory_wait": ("tolerance_s", "cached_max_s"),
    "predicted_ttft": ("indifference_s",),
    "predicted_decode": ("slack_s",),
}


def gpu_seconds_in_wall_time(router: RouterConfig, engine_time_scale: float) -> RouterConfig:
    """`router` with its listed stages' GPU-second fields as wall seconds of engines at this time scale.

    The replicas report wall-clock rates (a simulated engine divides its rate by time_scale), so a
    router's tolerance of 5 GPU seconds is 5 * time_scale wall seconds here.
    """
    for type_name, fields in GPU_SECOND_FIELDS.items():
        spec = router.stage(type_name)
        if spec is not None:
            update = {name: getattr(spec, name) * engine_time_scale for name in fields}
            router = router.with_stage(spec.model_copy(update=update))
    return router


def bench_pacing(settings: RoutingBenchSettings) -> PrefillPacingConfig | None:
    """Paced prefill of the replicas, the same for every router (App rule): None when off; its prefill
    rate and attention cost are the bench profile's."""
    if settings.prefill_pacing is None:
        return None
    prefill = load_profile(settings.profile).prefill
    update = {"attention_ms_per_pair": prefill.per_token_context_ms}
    if prefill.per_token_ms > 0:
        update["prefill_tokens_per_s"] = 1000.0 / prefill.per_token_ms
    return settings.prefill_pacing.model_copy(update=update)


def bench_app_config(settings: RoutingBenchSettings, policy: PolicyName) -> AppConfig:
    """The app for one router: identical for every policy except `router.policy` (App rule)."""
    engine = SimulatedEngineConfig(
        profile=settings.profile,
        workload=settings.workload,
        drafter=settings.drafter,
        capacity=settings.capacity,
        time_scale=settings.engine_time_scale,
        seed=settings.seed,
        schedule_policy=settings.schedule_policy,
        chunked_prefill_tokens=settings.chunked_prefill_tokens,
        radix_eviction_policy=settings.radix_eviction_policy,
        hicache_host_tokens=settings.hicache_host_tokens,
        hicache_write_policy=settings.hicache_write_policy,
        prefill_pacing=bench_pacing(settings),
    )
    reports = ReportsConfig(stale_after_s=settings.stale_after_s, assumed_stats_age_s=settings.routing_stats_period_s)
    router = gpu_seconds_in_wall_time(RouterConfig(policy=policy, reports=reports), settings.engine_time_scale)
    probe = PoolConfig(name=BENCH_POOL, engine=engine)
    plan = plan_pool(probe)
    max_ongoing = plan.max_running_requests if plan is not None else 64
    deployment = DeploymentOptions(
        num_replicas=settings.num_replicas,
        max_ongoing_requests=max_ongoing,
        max_queued_requests=-1,
        num_cpus=settings.replica_num_cpus,
        routing_stats_period_s=settings.routing_stats_period_s,
        stream_batch_interval_ms=settings.stream_batch_interval_ms,
        router=router,
    )
    pool = PoolConfig(name=BENCH_POOL, description="simulated replicas under test", engine=engine, deployment=deployment)
    traffic = TrafficConfig(
        default_reasoning_level="medium",
        rules=[TrafficRule(reasoning_levels=["none", "low", "medium", "high", "xhigh"], pool=BENCH_POOL)],
    )
    server = ServerConfig(
        served_model_name=BENCH_MODEL,
        api_key_env=None,
        request_timeout_s=settings.request_timeout_s,
        max_ongoing_requests=INGRESS_MAX_ONGOING_REQUESTS,
    )
    return AppConfig(server=server, pools=[pool], traffic=traffic)
