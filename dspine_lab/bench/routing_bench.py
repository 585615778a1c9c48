"""`ray-dspine bench routing`: the routers compared through real Ray Serve on simulated H200 replicas.

Method. One trace slice (routing_workload.py) is replayed open-loop over real HTTP, through Serve's
proxy and our OpenAI ingress, against N simulated replicas of one DSpine pool, once per router, in one
run: Ray's default PowerOfTwoChoices (policy pow2), SGLang Model Gateway's cache_aware rule with its
documented defaults, and ours (headroom). Every router sees the same requests at the same offered
load, in the same order, on a freshly deployed app (empty replicas and prefix caches); only
`router.policy` differs: every replica setting, paced prefill included (off by default,
`--prefill-pacing-tokens` turns it on for all), is the same for every router. Per router: TTFT p50/p99 and end-to-end p99 as the client measured them,
output tokens/s, the replicas' prefix-hit rate, requests that waited for memory, retractions, and
peak KV / state utilization per replica (engine counters read from each replica actor). Every figure
comes from the simulated engine: timings are the calibrated twin's, in wall seconds at
`engine_time_scale` wall seconds per simulated GPU second.
`--repeats R` replays the slice R times per router, interleaved (pow2, cache_aware, ours, pow2, ...)
so that a slow spell of the host hits every router alike, and pools the requests of all replays into
each router's figures (routing_results.py); repeat i of ours pairs with repeat i of each baseline, and
the paired goals (paired.py) give each goal's 95% interval over those pairs and whether the replays
clear it, miss it or cannot tell. `--virtual` skips Ray and the wall clock altogether
(routing_virtual.py), `--slices` adds further session samples of the trace to pair over, and `--split`
names a data split instead (bench, or held-out: fresh slices no setting was chosen on; routing_workload.py); with
`--sweep-tolerance` it replays ours once per TTFT-guard tolerance (routing_frontier.py) and `--plot`
draws the trade; with `--sweep-load` it replays every router at several multiples of the offered load
(routing_load_sweep.py) and `--plot` draws p99 TTFT and hits against load; otherwise `--plot` draws
the paired goals (paired_plot.py). `--tail N`, through Ray or in virtual time, lists each replay's N
slowest requests with what held each up (routing_tail.py, routing_ray_tail.py), so a p99 can be read
request by request. Every replay also gets its order-preserving bound (routing_order_bound.py): the p99
of one first-come-first-served queue over the pool with an ideal cache, on that replay's arrivals; and
what its prefix hits lost to that ideal cache, split into first turns, turns that stayed on their
conversation's replica and turns moved off it (routing_hit_loss.py).
Goals get a verdict (met, missed, undecided) only from their paired 95% intervals; the unpaired goals
are point estimates. Every line the bench prints starts with SIMULATED (`simulated_lines`); --json
prints the JSON document alone, which says `"simulated": true`.
Bad flags and an empty or missing slice are reported as `error: argument --flag: ...`, exit status 2,
before Ray starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path

import httpx
from pydantic import ValidationError

from ray_dspine.cli_errors import CliError, cli_errors, flag_error
from ray_dspine.engines.simulated.profile import available_profiles

from ray_dspine.bench.client import ClientSettings, StreamingClient
from ray_dspine.bench.records import RequestRecord
from ray_dspine.bench.replay import ReplayConfig, ReplaySink, replay
from dspine_lab.bench.paired import PairedGoal, all_met, format_paired, paired_goals
from dspine_lab.bench.routing_hit_loss import format_hit_losses, mean_hit_loss
from dspine_lab.bench.routing_ray_tail import format_ray_slowest, slowest_by_router
from dspine_lab.bench.routing_results import (
    OURS,
    Goal,
    RouterFigures,
    format_order_bound,
    format_table,
    goals,
    order_bound_reductions,
    reduction_ceilings,
    router_figures,
)
from dspine_lab.bench.routing_serving_cpu import ServingCpu, format_total, spent
from dspine_lab.bench.routing_workload import (
    BENCH_MODEL,
    BENCH_POOL,
    ROUTER_LABELS,
    SPLITS,
    TRACE_PRESETS,
    RoutingBenchSettings,
    bench_app_config,
    bench_prefill_seconds,
    describe_slice,
    format_hit_ceiling,
    ideal_cache_by_request,
    ideal_hit_tokens,
    load_slice,
    pool_size,
    split_settings,
    ttft_floors_by_request,
)
from ray_dspine.bench.traces.loader import TraceNotFoundError
from ray_dspine.bench.traces.model import TraceRequest

def rationale() -> str:
    """Why the bench slice is what it is; the replicas' pool sizes read from the capacity planner."""
    kv_tokens, running = pool_size()
    return (
        "Load where placement matters: the Mooncake conversation trace's first 1,200 s, a 10% sample of its "
        "sessions (whole conversations), arrivals compressed 10x (arrival_scale 0.1) -> ~3.5 requests per "
        f"simulated second on 4 SIMULATED H200 replicas (DSpine, ReplaySSM: {kv_tokens:,} KV tokens and {running} "
        "running requests each, as `ray-dspine plan clusters/sim.yaml` gives them), which is about their prefill "
        "capacity (mean prompt ~12k tokens at 0.1 ms per uncached "
        "token): replicas run near full, so queueing behind long prefills and prefix-cache hits decide TTFT. "
        "Every router runs on identical replicas (paced prefill off by default, as SGLang replicas run today). "
        "Outputs are capped at 128 tokens, and replicas merge their chunks over 50 ms as Ray Serve LLM does, so "
        "that Ray's per-chunk streaming cost (through replica, ingress and proxy) stays within 2 CPU cores; "
        "prompts, and so prefill, prefix sharing and KV use, are the trace's own. engine_time_scale 0.5: the "
        "twin runs at twice a GPU's speed in wall time. p99 TTFT cannot go below `slice.ttft_floor_p99_sim_s` "
        "(no queueing, ideal cache), nor the prefix-hit rate above `slice.prefix_hit_ceiling` (the same ideal "
        "cache). Every figure is SIMULATED."
    )


HELP = (
    "SIMULATED: compare routers (Ray pow2, cache_aware, ours) through real Ray Serve, or in virtual time, on "
    "identical simulated replicas; starts its own local Ray cluster with RAY_AUTH_MODE=disabled"
)
FLAG_OF_FIELD = {
    "trace": "--trace", "traces_dir": "--traces-dir", "num_replicas": "--replicas", "routers": "--routers",
    "window_start_s": "--window-start-s", "window_s": "--window-s", "session_fraction": "--session-fraction",
    "arrival_scale": "--arrival-scale", "session_rate_per_s": "--session-rate",
    "engine_time_scale": "--engine-time-scale", "max_tokens_cap": "--max-tokens-cap", "seed": "--seed",
    "repeats": "--repeats", "backlog_source": "--backlog", "schedule_policy": "--schedule-policy",
    "chunked_prefill_tokens": "--chunked-prefill-size", "hicache_host_tokens": "--hicache-host-tokens",
    "hicache_store_tokens": "--hicache-store-tokens", "hicache_write_policy": "--hicache-write-policy",
    "min_uncached_tokens": "--prefill-pacing-tokens", "piece_tokens": "--prefill-pacing-piece-tokens",
    "prefill_pacing": "--prefill-pacing-piece-tokens", "yield_fraction": "--prefill-pacing-yield",
    "stream_batch_interval_ms": "--stream-batch-ms",
    "radix_eviction_policy": "--radix-eviction-policy", "profile": "--engine-profile",
}  # fmt: skip
CHECK_COUNTERS = ("num_submitted", "num_admitted", "num_finished", "num_prefix_hit_tokens", "num_prefill_tokens",
                  "num_output_tokens", "num_waited_for_memory", "num_waited_for_state_slots")  # fmt: skip


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "routing",
        help=HELP,
        description=HELP + ". " + rationale(),
    )
    parser.add_argument("--trace", default="mooncake", help="mooncake (default), tau-bench, or a trace file")
    parser.add_argument("--traces-dir", default=None, help="folder of named traces")
    parser.add_argument("--replicas", type=int, default=None, help="simulated replicas of the pool (default 4)")
    parser.add_argument("--routers", default=None, help="comma list of pow2,cache_aware,headroom,least_load")
    parser.add_argument("--window-start-s", type=float, default=None, help="slice start, trace seconds")
    parser.add_argument("--window-s", type=float, default=None, help="slice length, trace seconds (default 1200)")
    parser.add_argument("--session-fraction", type=float, default=None, help="share of sessions kept (default 0.1)")
    parser.add_argument("--arrival-scale", type=float, default=None, help="simulated s per trace s (default 0.1)")
    parser.add_argument("--session-rate", type=float, default=None, help="session starts per trace s (untimed traces)")
    parser.add_argument("--engine-time-scale", type=float, default=None, help="wall s per simulated s (default 0.5)")
    parser.add_argument("--max-tokens-cap", type=int, default=None, help="cap on max_tokens (default 128; 0: none)")
    parser.add_argument("--seed", type=int, default=None, help="session sampling and engine draws (default 0)")
    parser.add_argument(
        "--repeats", type=int, default=None,
        help="replays per router, interleaved pow2, cache_aware, ours, pow2, ...; figures pool them (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--virtual", action="store_true",
        help="replay in virtual time without Ray (seconds, deterministic; the same cores and routers)",
    )  # fmt: skip
    parser.add_argument(
        "--engine-seeds", default=None, help="--virtual: comma list of engine seeds, one replay each (default 0,1,2)"
    )
    parser.add_argument(
        "--split", default=None, choices=sorted(SPLITS),
        help="--virtual: replay a named data split: bench (window 0-1200 s, session seed 0, engine seeds 0-11: the "
        "slice the settings were chosen on) or held-out (fresh Mooncake slices no setting was chosen on: windows "
        "1200-2400 s and 2300-3500 s, session seeds 20-25, engine seeds 20-22); replaces --seed, --window-start-s, "
        "--window-s, --slices and --engine-seeds",
    )  # fmt: skip
    parser.add_argument(
        "--slices", default=None, metavar="LIST",
        help="--virtual: comma list of session-sampling seeds, one slice each (default: --seed); every slice is "
        "replayed once per engine seed and the paired goals pool all of them",
    )  # fmt: skip
    parser.add_argument(
        "--backlog", default=None, choices=["engine", "replica", "none"],
        help="--virtual: where the replicas' prefill backlog comes from: the simulated engine's queue (default), "
        "the replica's own count as SGLang replicas keep it, or nowhere (request counts only)",
    )  # fmt: skip
    parser.add_argument(
        "--schedule-policy", default=None, choices=["fcfs", "shortest-prefill-first"],
        help="the replicas' prefill order, as SGLang's --schedule-policy (default fcfs); shortest-prefill-first "
        "needs --chunked-prefill-size",
    )  # fmt: skip
    parser.add_argument(
        "--chunked-prefill-size", type=int, default=None, metavar="TOKENS",
        help="the replicas' prompt tokens per prefill pass, as SGLang's --chunked-prefill-size (8192 on an H200; "
        "default and 0: each prompt prefills in one pass)",
    )  # fmt: skip
    parser.add_argument(
        "--engine-profile", default=None, choices=available_profiles(), metavar="NAME",
        help="the replicas' simulated timing profile (engines/simulated/profiles: "
        + ", ".join(available_profiles())
        + "; default h200-qwen3.8-27b-attention, whose prompts pay for their attention as measured on an H200; "
        "h200-qwen3.8-27b prices every prompt token alike, as the receipts recorded before it did)",
    )  # fmt: skip
    parser.add_argument(
        "--radix-eviction-policy", default=None, choices=["lru", "slru", "lfu"],
        help="which cached prefix the replicas evict first when their KV pool is full, as SGLang's "
        "--radix-eviction-policy: lru (default), slru (prefixes hit fewer than twice go first) or lfu "
        "(fewest hits first)",
    )  # fmt: skip
    parser.add_argument(
        "--hicache-host-tokens", type=int, default=None, metavar="TOKENS",
        help="each replica's HiCache host-memory tier, KV tokens, as SGLang's --enable-hierarchical-cache "
        f"(its default --hicache-ratio 2 gives {2 * pool_size()[0]} on these replicas; default 0: none); a prompt's blocks "
        "found there are loaded, not prefilled",
    )  # fmt: skip
    parser.add_argument(
        "--hicache-store-tokens", type=int, default=None, metavar="TOKENS",
        help="--virtual: a HiCache store every replica reads and writes, KV tokens, as SGLang's "
        "--hicache-storage-backend mooncake (default 0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--hicache-write-policy", default=None, choices=["write_back", "write_through"],
        help="when blocks reach the HiCache tiers, as SGLang's --hicache-write-policy: on eviction from the GPU "
        "(write_back, default) or when first cached (write_through; SGLang 0.5.23 skips it for prompts whose "
        "prefill is chunked, sglang#33714)",
    )  # fmt: skip
    parser.add_argument(
        "--prefill-pacing-tokens", type=int, default=None, metavar="TOKENS",
        help="turn paced prefill on for the replicas of every router alike: a replica sends a prompt with at "
        "least this many uncached tokens as a chain of its own prefixes, so that requests arriving meanwhile start "
        "between the pieces (engines/prefill_pacing.py; 80000 is about 8 s of prefill on an H200; default and 0: "
        "off, as SGLang replicas run today)",
    )  # fmt: skip
    parser.add_argument(
        "--prefill-pacing-piece-tokens", type=int, default=None, metavar="TOKENS",
        help="with --prefill-pacing-tokens: prompt tokens per piece of a paced prompt (default 16384)",
    )  # fmt: skip
    parser.add_argument(
        "--prefill-pacing-yield", type=float, default=None, metavar="SHARE",
        help="with --prefill-pacing-tokens: delay a paced prompt accepts from requests let ahead of it, as a share "
        "of its own prefill (default 0.5)",
    )  # fmt: skip
    parser.add_argument(
        "--sweep-tolerance", default=None, metavar="LIST",
        help="--virtual: replay ours once per TTFT-guard tolerance (simulated s, or none), e.g. 0,2,4,6,8,none, "
        "against the baselines; prints the p99 TTFT / prefix-hit trade",
    )  # fmt: skip
    parser.add_argument(
        "--sweep-load", default=None, metavar="LIST",
        help="--virtual: replay every router at each of these multiples of the offered load (arrivals m times as "
        "dense), e.g. 0.8,1,1.25; prints p99 TTFT, prefix hits and the paired goals by load",
    )  # fmt: skip
    parser.add_argument(
        "--tail", type=int, default=None, metavar="N",
        help="also list each replay's N slowest requests (ranks that set the p99 included) with their floor, own "
        "prefill, wait and what they queued behind",
    )  # fmt: skip
    parser.add_argument(
        "--plot", default=None,
        help="also draw a PNG: with --sweep-tolerance the p99 TTFT / prefix-hit trade, with --sweep-load p99 TTFT "
        "and prefix hits against offered load, otherwise the paired goals (each pair's p99 cut and hit "
        "difference, their mean and 95%% interval, the target)",
    )  # fmt: skip
    parser.add_argument(
        "--stream-batch-ms",
        type=float,
        default=None,
        help="milliseconds over which each replica merges its chunks before they cross Ray (default 50, as Ray "
        "Serve LLM; 0: one chunk per verify step); the first chunk always passes at once",
    )
    parser.add_argument("--out", default=None, help="also write the JSON to this file")
    parser.add_argument("--json", action="store_true", help="print JSON only (progress still goes to stderr)")
    parser.set_defaults(func=routing_main)


def settings_from_args(args) -> RoutingBenchSettings:
    values = dict(TRACE_PRESETS.get(args.trace, {}))
    options = {
        "traces_dir": args.traces_dir,
        "num_replicas": args.replicas,
        "window_start_s": args.window_start_s,
        "window_s": args.window_s,
        "session_fraction": args.session_fraction,
        "arrival_scale": args.arrival_scale,
        "session_rate_per_s": args.session_rate,
        "engine_time_scale": args.engine_time_scale,
        "seed": args.seed,
        "repeats": args.repeats,
        "backlog_source": args.backlog,
        "schedule_policy": args.schedule_policy,
        "radix_eviction_policy": args.radix_eviction_policy,
        "profile": args.engine_profile,
        "hicache_host_tokens": args.hicache_host_tokens,
        "hicache_store_tokens": args.hicache_store_tokens,
        "hicache_write_policy": args.hicache_write_policy,
        "stream_batch_interval_ms": args.stream_batch_ms,
    }
    values.update({k: v for k, v in options.items() if v is not None})
    if args.chunked_prefill_size is not None:
        values["chunked_prefill_tokens"] = args.chunked_prefill_size or None
    if args.max_tokens_cap is not None:
        values["max_tokens_cap"] = args.max_tokens_cap or None
    pacing = {
        "min_uncached_tokens": args.prefill_pacing_tokens,
        "piece_tokens": args.prefill_pacing_piece_tokens,
        "yield_fraction": args.prefill_pacing_yield,
    }
    if not args.prefill_pacing_tokens:
        if any(v is not None for k, v in pacing.items() if k != "min_uncached_tokens"):
            raise CliError(
                "argument --prefill-pacing-tokens: paced prefill is off; give its threshold to turn it on for "
                "every router's replicas, or leave out the other --prefill-pacing options"
            )
        values["prefill_pacing"] = None
    else:
        values["prefill_pacing"] = {k: v for k, v in pacing.items() if v is not None}
    if args.routers:
        values["routers"] = [name.strip() for name in args.routers.split(",") if name.strip()]
    try:
        return RoutingBenchSettings(trace=args.trace, **values)
    except ValidationError as exc:
        raise flag_error(exc, FLAG_OF_FIELD) from exc


def simulated_lines(text: str) -> str:
    """Every line marked SIMULATED (every figure of this bench is the simulated engine's)."""
    return "\n".join(line if line.startswith("SIMULATED") else f"SIMULATED {line}" for line in text.splitlines())


def progress(message: str) -> None:
    print(simulated_lines(message), file=sys.stderr, flush=True)


async def _replay(endpoint: str, requests, settings: RoutingBenchSettings) -> ReplaySink:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=30.0), limits=limits) as http:
        client_settings = ClientSettings(
            endpoint=endpoint,
            model=BENCH_MODEL,
            max_tokens_cap=settings.max_tokens_cap,
            timeout_s=settings.request_timeout_s,
        )
        sink = ReplaySink()
        config = ReplayConfig(mode="open", time_scale=settings.engine_time_scale)
        await replay(requests, config, StreamingClient(http, client_settings), sink)
        return sink


def probe(endpoint: str, timeout_s: float = 60.0) -> None:
    """One tiny request, so a router that cannot place anything fails here rather than hanging the replay."""
    body = {"model": BENCH_MODEL, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    try:
        answer = httpx.post(f"{endpoint}/v1/chat/completions", json=body, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise RuntimeError(f"probe request failed ({type(exc).__name__}): the router placed nothing") from exc
    if answer.status_code != 200:
        raise RuntimeError(f"probe request answered {answer.status_code}: {answer.text[:300]}")


def subtract(after: list[dict], before: list[dict]) -> list[dict]:
    """Counters of the replay alone: the probe's counts taken off (peaks are kept as they are)."""
    base = {entry["replica"]: entry["counters"] for entry in before}
    out = []
    for entry in after:
        counters = dict(entry["counters"])
        for key in CHECK_COUNTERS:
            counters[key] = counters.get(key, 0) - base.get(entry["replica"], {}).get(key, 0)
        out.append({"replica": entry["replica"], "counters": counters})
    return out


def replay_router(
    policy: str, endpoint: str, requests, settings: RoutingBenchSettings, replay_index: int
) -> tuple[list[RequestRecord], list[dict], ServingCpu]:
    """Deploy the app with this router and replay the slice once: (records tagged with the replay, counters,
    the serving path's CPU seconds)."""
    from dspine_lab.bench import routing_cluster as cluster

    cluster.deploy(bench_app_config(settings, policy), endpoint)
    try:
        probe(endpoint)
        before = cluster.read_replica_counters(BENCH_POOL)
        cpu_before = cluster.read_serving_cpu(BENCH_POOL)
        sink = asyncio.run(_replay(endpoint, requests, settings))
        cpu_after = cluster.read_serving_cpu(BENCH_POOL)
        after = cluster.read_replica_counters(BENCH_POOL)
    finally:
        cluster.undeploy()
    records = [r.model_copy(update={"repetition": replay_index}) for r in sink.records]
    return records, subtract(after, before), spent(cpu_before, cpu_after, len(records))


def load_bench_slice(settings: RoutingBenchSettings) -> list[TraceRequest]:
    """The slice's requests; a missing trace or an empty slice is the flag's error."""
    try:
        _trace, requests = load_slice(settings)
    except TraceNotFoundError as exc:
        raise CliError(f"argument --trace: {exc}") from exc
    if not requests:
        raise CliError("argument --window-s: the slice holds no request: widen --window-s or raise --session-fraction")
    return requests


def run_bench(settings: RoutingBenchSettings, tail: int = 0) -> tuple[dict, dict[str, RouterFigures], list[Goal]]:
    """Replay the slice once per router; returns (the JSON document, figures by router, goal checks);
    `tail` > 0 also lists each replay's that many slowest requests under `slowest`."""
    from dspine_lab.bench import routing_cluster as cluster

    started = time.monotonic()
    requests = load_bench_slice(settings)
    ideal = ideal_cache_by_request(requests)
    slice_info = describe_slice(requests, settings, ideal)
    floors = ttft_floors_by_request(requests, settings, ideal)
    ideal_hits = ideal_hit_tokens(requests, ideal)
    progress(
        f"bench routing: {slice_info['num_requests']} requests in {slice_info['num_sessions']} sessions, "
        f"{len(settings.routers)} routers x {settings.num_replicas} simulated replicas; starting Ray"
    )
    endpoint = cluster.start_cluster(settings.ray_num_cpus)
    records: dict[str, list[RequestRecord]] = {policy: [] for policy in settings.routers}
    counters: dict[str, list[dict]] = {policy: [] for policy in settings.routers}
    cpu: dict[str, list[ServingCpu]] = {policy: [] for policy in settings.routers}
    runs = [(rep, policy) for rep in range(settings.repeats) for policy in settings.routers]
    try:
        for index, (rep, policy) in enumerate(runs, start=1):
            begun = time.monotonic()
            these_records, these_counters, this_cpu = replay_router(policy, endpoint, requests, settings, rep)
            records[policy].extend(these_records)
            counters[policy].extend(these_counters)
            cpu[policy].append(this_cpu)
            f = router_figures(
                policy, policy, these_records, these_counters, settings.engine_time_scale, floors, settings.num_replicas
            )
            hit = "-" if f.prefix_hit_rate is None else f"{f.prefix_hit_rate:.3f}"
            p99 = "-" if f.ttft_p99_s is None else f"{f.ttft_p99_s:.2f}"
            excess = "-" if f.ttft_excess_p99_sim_s is None else f"{f.ttft_excess_p99_sim_s:.2f}"
            outside = f.outside_replica_by_replay[0].p99_s if f.outside_replica_by_replay else None
            outside_ms = "-" if outside is None else f"{outside * 1000.0:.0f}"
            progress(
                f"[{index}/{len(runs)}] {policy}: {f.num_ok}/{f.num_requests} ok, TTFT p99 {p99} s "
                f"(over the floor: {excess} simulated s; outside the replica: p99 {outside_ms} ms), "
                f"prefix hit {hit}, waited for memory {f.num_waited_for_memory}, retractions {f.num_retractions}, "
                f"paced {f.num_paced}, serving-path CPU {format_total(this_cpu)} ({time.monotonic() - begun:.0f} s)"
            )
    finally:
        cluster.stop_cluster()
    figures = {
        policy: router_figures(policy, ROUTER_LABELS.get(policy, policy), records[policy], counters[policy],
                               settings.engine_time_scale, floors, settings.num_replicas, ideal_hits
                               ).model_copy(update={"serving_cpu_by_replay": cpu[policy]})  # fmt: skip
        for policy in settings.routers
    }
    checks = goals(figures)
    paired = paired_goals(
        {name: f.ttft_p99_s_by_replay for name, f in figures.items()},
        {name: f.prefix_hit_rate_by_replay for name, f in figures.items()},
        OURS,
    )
    document = {
        "simulated": True,
        "command_line": list(sys.argv),
        "note": "every latency and throughput comes from the simulated engine (a calibrated twin, no GPU)",
        "settings": {**settings.model_dump(mode="json"), "rationale": rationale()},
        "slice": slice_info,
        "routers": {name: f.model_dump(mode="json") for name, f in figures.items()},
        "goals": [g.model_dump(mode="json") for g in checks],
        "paired_goals": [g.model_dump(mode="json") for g in paired],
        "ttft_p99_reduction_ceiling": reduction_ceilings(figures, slice_info["ttft_floor_p99_sim_s"]),
        "ttft_p99_reduction_order_bound_by_replay": order_bound_reductions(figures, settings.engine_time_scale),
        "all_goals_met": all_met(paired),
    }
    if tail > 0:
        document["slowest"] = slowest_by_router(
            records, floors, settings.engine_time_scale, bench_prefill_seconds(settings), tail
        )
    document["wall_s"] = time.monotonic() - started
    return document, figures, checks


@cli_errors
def routing_main(args) -> int:
    settings = settings_from_args(args)
    if args.sweep_tolerance is not None and not args.virtual:
        raise CliError("argument --sweep-tolerance: sweeps run in virtual time; add --virtual")
    if args.backlog is not None and not args.virtual:
        raise CliError("argument --backlog: the backlog's source is chosen in virtual time; add --virtual")
    if args.split is not None:
        if not args.virtual:
            raise CliError("argument --split: a split's slices are replayed in virtual time; add --virtual")
        if args.trace != "mooncake":
            raise CliError("argument --split: the splits are slices of the Mooncake trace; drop --trace")
        given = [flag for flag, value in (("--slices", args.slices), ("--engine-seeds", args.engine_seeds),
                 ("--seed", args.seed), ("--window-start-s", args.window_start_s),
                 ("--window-s", args.window_s)) if value is not None]  # fmt: skip
        if given:
            raise CliError(f"argument --split: the split names its slices and engine seeds; drop {given[0]}")
        if args.sweep_tolerance is not None:
            raise CliError("argument --split: settings are not chosen on a named split's replays; drop --sweep-tolerance")
    if args.engine_seeds is not None and not args.virtual:
        raise CliError("argument --engine-seeds: engine seeds are replayed in virtual time; add --virtual")
    if args.slices is not None and not args.virtual:
        raise CliError("argument --slices: several slices are replayed in virtual time; add --virtual")
    if args.hicache_store_tokens and not args.virtual:
        raise CliError(
            "argument --hicache-store-tokens: a store shared by the replicas is modelled in virtual time; "
            "add --virtual (the host tier, --hicache-host-tokens, runs through Ray too)"
        )
    if args.slices is not None and args.sweep_tolerance is not None:
        raise CliError("argument --slices: a tolerance sweep replays one slice; choose it with --seed")
    if args.sweep_load is not None and not args.virtual:
        raise CliError("argument --sweep-load: sweeps run in virtual time; add --virtual")
    if args.sweep_load is not None and args.sweep_tolerance is not None:
        raise CliError("argument --sweep-load: sweep one thing at a time; drop --sweep-tolerance")
    if args.tail is not None:
        if args.sweep_tolerance is not None or args.sweep_load is not None:
            raise CliError("argument --tail: lists the replays of one bench, not of a sweep; drop the sweep")
        if args.tail < 1:
            raise CliError(f"argument --tail: the number of slowest requests to list, at least 1 (got {args.tail})")
    paired_baselines = {"pow2", "cache_aware"} & set(settings.routers)
    sweeping = args.sweep_tolerance is not None or args.sweep_load is not None
    if args.plot is not None and not sweeping and (OURS not in settings.routers or not paired_baselines):
        raise CliError(
            "argument --plot: without a sweep it draws the paired goals, which need headroom and "
            "pow2 or cache_aware in --routers"
        )
    for flag, path in (("--out", args.out), ("--plot", args.plot)):
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise CliError(f"argument {flag}: folder {str(Path(path).parent)!r} does not exist; create it first")
    if args.virtual:
        return virtual_main(args, settings)
    # Ray prints its own notices (e.g. "(raylet) ...") on stdout; keep stdout for the result alone.
    with contextlib.redirect_stdout(sys.stderr):
        result, figures, checks = run_bench(settings, tail=args.tail or 0)
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if args.plot:
        from dspine_lab.bench.paired_plot import plot_paired

        plot_paired(result, Path(args.plot))
        progress(f"wrote {args.plot}")
    if args.json:
        print(text)
        return 0
    lines = [format_table(figures, checks)]
    lines.extend(format_paired([PairedGoal.model_validate(g) for g in result["paired_goals"]]))
    floor = result["slice"]["ttft_floor_p99_sim_s"]
    for name, ceiling in result["ttft_p99_reduction_ceiling"].items():
        if ceiling is not None:
            lines.append(f"ceiling vs {name}: at most {ceiling:.3f} (p99 at the slice's floor, {floor:.2f} simulated s)")
    hit_ceiling = format_hit_ceiling([result["slice"]])
    if hit_ceiling is not None:
        lines.append(hit_ceiling)
    lines.extend(format_order_bound(figures, result["ttft_p99_reduction_order_bound_by_replay"]))
    losses = {name: mean_hit_loss(f.prefix_hit_loss_by_replay) for name, f in figures.items()}
    lines.extend(format_hit_losses(losses, settings.repeats))
    lines.extend(format_ray_slowest(result.get("slowest", {})))
    lines.append(f"total wall time {result['wall_s']:.0f} s")
    print(simulated_lines("\n".join(lines)))
    return 0


def parse_seeds(text: str, flag: str = "--engine-seeds") -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0:
        raise CliError(f"argument {flag}: comma-separated seeds >= 0, e.g. 0,1,2 (got {text!r})")
    if len(set(seeds)) != len(seeds):
        raise CliError(f"argument {flag}: a seed is listed twice (got {text!r})")
    return seeds


def virtual_main(args, settings: RoutingBenchSettings) -> int:
    from dspine_lab.bench.routing_frontier import format_sweep_table, parse_tolerances, run_tolerance_sweep
    from dspine_lab.bench.routing_load_sweep import format_load_table, parse_loads, run_load_sweep
    from dspine_lab.bench.routing_virtual_report import format_virtual_table, run_virtual_bench

    split = SPLITS[args.split] if args.split is not None else None
    if split is not None:
        seeds = list(split.engine_seeds)
        slice_settings = split_settings(settings, split)
    else:
        seeds = parse_seeds(args.engine_seeds if args.engine_seeds is not None else "0,1,2")
        slice_seeds = parse_seeds(args.slices, "--slices") if args.slices is not None else [settings.seed]
        slice_settings = [settings.model_copy(update={"seed": seed}) for seed in slice_seeds]
    tolerances = parse_tolerances(args.sweep_tolerance) if args.sweep_tolerance is not None else None
    loads = parse_loads(args.sweep_load) if args.sweep_load is not None else None
    if loads is not None:
        result = run_load_sweep(slice_settings, seeds, loads, load_bench_slice, progress)
        table = format_load_table
    elif tolerances is None:
        slices = [(these, load_bench_slice(these)) for these in slice_settings]
        result = run_virtual_bench(slices, seeds, progress, tail=args.tail or 0)
        table = format_virtual_table
    else:
        requests = load_bench_slice(settings)
        result = run_tolerance_sweep(requests, settings, seeds, tolerances, progress)
        table = format_sweep_table
    result["command_line"] = list(sys.argv)
    if split is not None:
        result["split"] = split.model_dump(mode="json")
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if args.plot and loads is not None:
        from dspine_lab.bench.routing_load_plot import plot_load_sweep

        plot_load_sweep(result, Path(args.plot))
        progress(f"wrote {args.plot}")
    elif args.plot and tolerances is not None:
        from dspine_lab.bench.routing_frontier_plot import plot_tolerance_sweep

        plot_tolerance_sweep(result, Path(args.plot))
        progress(f"wrote {args.plot}")
    elif args.plot:
        from dspine_lab.bench.paired_plot import plot_paired

        plot_paired(result, Path(args.plot))
        progress(f"wrote {args.plot}")
    print(text if args.json else simulated_lines(table(result)))
    return 0
