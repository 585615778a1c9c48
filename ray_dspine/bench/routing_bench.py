"""`ray-dspine bench routing`: the routers compared through real Ray Serve on simulated H200 replicas.

Method. One trace slice (routing_workload.py) is replayed open-loop over real HTTP, through Serve's
proxy and our OpenAI ingress, against N simulated replicas of one DSpine pool, once per router, in one
run: Ray's default PowerOfTwoChoices (policy pow2), SGLang Model Gateway's cache_aware rule with its
documented defaults, and ours (headroom). Every router sees the same requests at the same offered
load, in the same order, on a freshly deployed app (empty replicas and prefix caches); only
`router.policy` differs. Per router: TTFT p50/p99 and end-to-end p99 as the client measured them,
output tokens/s, the replicas' prefix-hit rate, requests that waited for memory, retractions, and
peak KV / state utilization per replica (engine counters read from each replica actor). Every figure
comes from the simulated engine: timings are the calibrated twin's, in wall seconds at
`engine_time_scale` wall seconds per simulated GPU second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time

import httpx

from .client import ClientSettings, StreamingClient
from .replay import ReplayConfig, ReplaySink, replay
from .routing_results import Goal, RouterFigures, format_table, goals, router_figures
from .routing_workload import (
    BENCH_MODEL,
    BENCH_POOL,
    ROUTER_LABELS,
    TRACE_PRESETS,
    RoutingBenchSettings,
    bench_app_config,
    describe_slice,
    load_slice,
    ttft_floors_by_request,
)

RATIONALE = (
    "Load where placement matters: the Mooncake conversation trace's first 1,200 s, a 10% sample of its "
    "sessions (whole conversations), arrivals compressed 10x (arrival_scale 0.1) -> ~3.5 requests per "
    "simulated second on 4 simulated H200 replicas (DSpine, ReplaySSM: 473,010 KV tokens and 72 running "
    "requests each), which is about their prefill capacity (mean prompt ~12k tokens at 0.1 ms per uncached "
    "token): replicas run near full, so queueing behind long prefills and prefix-cache hits decide TTFT. "
    "Outputs are capped at 128 tokens so that Ray's per-chunk streaming cost (one chunk per verify step per "
    "request through replica, ingress and proxy) stays within 2 CPU cores; prompts, and so prefill, prefix "
    "sharing and KV use, are the trace's own. engine_time_scale 0.5: the twin runs at half a GPU's speed "
    "in wall time. p99 TTFT cannot go below `slice.ttft_floor_p99_sim_s` (no queueing, ideal cache)."
)
HELP = (
    "compare routers (Ray pow2, cache_aware, ours) through real Ray Serve on simulated replicas; starts its "
    "own local Ray cluster with RAY_AUTH_MODE=disabled"
)
CHECK_COUNTERS = ("num_submitted", "num_admitted", "num_finished", "num_prefix_hit_tokens", "num_prefill_tokens",
                  "num_output_tokens", "num_waited_for_memory", "num_waited_for_state_slots")  # fmt: skip


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "routing",
        help=HELP,
        description=HELP + ". " + RATIONALE,
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
    }
    values.update({k: v for k, v in options.items() if v is not None})
    if args.max_tokens_cap is not None:
        values["max_tokens_cap"] = args.max_tokens_cap or None
    if args.routers:
        values["routers"] = [name.strip() for name in args.routers.split(",") if name.strip()]
    return RoutingBenchSettings(trace=args.trace, **values)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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


def run_router(
    policy: str, endpoint: str, requests, settings: RoutingBenchSettings, floors_sim_s: dict[str, float]
) -> RouterFigures:
    from . import routing_cluster as cluster

    cluster.deploy(bench_app_config(settings, policy), endpoint)
    try:
        probe(endpoint)
        before = cluster.read_replica_counters(BENCH_POOL)
        sink = asyncio.run(_replay(endpoint, requests, settings))
        after = cluster.read_replica_counters(BENCH_POOL)
    finally:
        cluster.undeploy()
    label = ROUTER_LABELS.get(policy, policy)
    counters = subtract(after, before)
    return router_figures(policy, label, sink.records, counters, settings.engine_time_scale, floors_sim_s)


def run_bench(settings: RoutingBenchSettings) -> tuple[dict, dict[str, RouterFigures], list[Goal]]:
    """Replay the slice once per router; returns (the JSON document, figures by router, goal checks)."""
    from . import routing_cluster as cluster

    started = time.monotonic()
    _trace, requests = load_slice(settings)
    if not requests:
        raise ValueError("the slice holds no request: widen --window-s or raise --session-fraction")
    slice_info = describe_slice(requests, settings)
    floors = ttft_floors_by_request(requests, settings)
    progress(
        f"bench routing: {slice_info['num_requests']} requests in {slice_info['num_sessions']} sessions, "
        f"{len(settings.routers)} routers x {settings.num_replicas} simulated replicas; starting Ray"
    )
    endpoint = cluster.start_cluster(settings.ray_num_cpus)
    figures: dict[str, RouterFigures] = {}
    try:
        for index, policy in enumerate(settings.routers, start=1):
            begun = time.monotonic()
            f = run_router(policy, endpoint, requests, settings, floors)
            figures[policy] = f
            hit = "-" if f.prefix_hit_rate is None else f"{f.prefix_hit_rate:.3f}"
            p99 = "-" if f.ttft_p99_s is None else f"{f.ttft_p99_s:.2f}"
            excess = "-" if f.ttft_excess_p99_sim_s is None else f"{f.ttft_excess_p99_sim_s:.2f}"
            progress(
                f"[{index}/{len(settings.routers)}] {policy}: {f.num_ok}/{f.num_requests} ok, TTFT p99 {p99} s "
                f"(over the floor: {excess} simulated s), "
                f"prefix hit {hit}, waited for memory {f.num_waited_for_memory}, retractions {f.num_retractions} "
                f"({time.monotonic() - begun:.0f} s)"
            )
    finally:
        cluster.stop_cluster()
    checks = goals(figures)
    return {
        "simulated": True,
        "command_line": list(sys.argv),
        "note": "every latency and throughput comes from the simulated engine (a calibrated twin, no GPU)",
        "settings": {**settings.model_dump(mode="json"), "rationale": RATIONALE},
        "slice": slice_info,
        "routers": {name: f.model_dump(mode="json") for name, f in figures.items()},
        "goals": [g.model_dump(mode="json") for g in checks],
        "all_goals_met": all(g.met for g in checks) if checks else None,
        "wall_s": time.monotonic() - started,
    }, figures, checks


def routing_main(args) -> int:
    settings = settings_from_args(args)
    # Ray prints its own notices (e.g. "(raylet) ...") on stdout; keep stdout for the result alone.
    with contextlib.redirect_stdout(sys.stderr):
        result, figures, checks = run_bench(settings)
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if args.json:
        print(text)
    else:
        print(format_table(figures, checks))
        print(f"total wall time {result['wall_s']:.0f} s")
    return 0
