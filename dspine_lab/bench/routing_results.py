"""Figures of one router's replay, and how the routers compare.

Rules (ok = a request that finished without error; every replica of the pool is counted):
  latency      TTFT p50/p99 and end-to-end p99 over ok requests, wall seconds as the client measured
               them (percentile rule of stats.py); `_sim_s` = wall / engine_time_scale.
  excess       ttft_excess_p99_sim_s = p99 over ok requests with a floor of (ttft / engine_time_scale -
               floor(q)), floor(q) = the request's own prefill with an ideal cache and no queueing
               (routing_workload.py): the part of TTFT a router can change (queueing, lost cache
               hits, overheads), which raw p99 hides when the largest prompts set it.
  order bound  ttft_order_bound_p99_sim_s_by_replay = for each replay, order_bound_p99 of routing_order_bound.py
               over its ok requests that have a floor, each arriving at start_offset_s / engine_time_scale
               (simulated seconds on the client's clock), on the pool's num_replicas: the p99 no router
               that starts requests in their order of arrival can beat on that replay's arrivals.
               order_bound_reductions: replay i, 1 - ours' bound in replay i / baseline's p99 in replay i
               (simulated seconds), as the ceiling is taken against the floor.
  replays      records carry their replay in `repetition`; every figure pools all replays' requests
               and replicas (p99 over 3 x 419 requests is steadier than over 419);
               ttft_p99_s_by_replay gives each replay's own p99 and prefix_hit_rate_by_replay its own
               hit rate from the answers' usage (sum cached_prompt_tokens / sum prompt_tokens over its
               ok requests), so the spread between replays shows next to the pooled figure.
  throughput   output_tokens_per_s = sum of ok output tokens / sum over replays of (last end - first
               send), wall seconds.
  prefix hits  prefix_hit_rate = sum_r prefix-hit tokens / sum_r (prefix-hit + prefilled tokens), from
               the replicas' engine counters; prefix_hit_rate_usage = sum cached_prompt_tokens /
               sum prompt_tokens from the answers' usage (a cross-check; equal when every request ended).
  hit loss     prefix_hit_loss_by_replay = for each replay, routing_hit_loss.py's rules over its ok
               requests (sent at start_offset_s, replica from the x-dspine-replica header, cached from
               usage), against the ideal cache's hit tokens per trace request: points of hit rate lost
               by first turns, by turns that stayed on their conversation's replica, and by turns moved.
  outside      outside_replica_by_replay = for each replay, routing_outside_replica.py's figures: the
               part of each TTFT that passed outside its replica (the answers' Server-Timing header),
               p50 / p99 / max, and at the replay's TTFT p99 ranks.
  serving CPU  serving_cpu_by_replay = for each replay, routing_serving_cpu.py's CPU seconds of the
               client, the proxy, the ingress and the replicas (read around the replay by the bench).
  memory       num_waited_for_memory / num_waited_for_state_slots: requests that waited at the head of
               a replica's queue for KV tokens / state slots; num_retractions: running requests pushed
               back for memory; num_recomputed_tokens: what their readmission prefilled again;
               num_evicted_cache_blocks: unreferenced prefix-cache blocks dropped
               (never a running request's); peak KV / state utilization per replica.
  goals        ttft_p99 reduction of r against b = 1 - ttft_p99(r) / ttft_p99(b); "ours" is headroom:
               >= 0.30 against pow2, >= 0.15 against cache_aware, prefix_hit_rate >= cache_aware's,
               and num_retractions == 0. A goal whose routers were not run is left out. These are point
               estimates and carry no verdict: a goal is met, missed or undecided only by its paired 95%
               interval (paired.py).
  ceiling      ttft_p99_reduction_ceiling(b) = 1 - floor_p99 / ttft_p99_sim(b): the most any router could
               cut b's p99 TTFT on this slice (p99 at the floor: no queueing, an ideal cache).
Complexity: O(n log n) for n records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ray_dspine.bench.records import RequestRecord
from dspine_lab.bench.routing_hit_loss import HitLoss, PlacedRequest, hit_loss
from dspine_lab.bench.routing_order_bound import order_bound_p99
from dspine_lab.bench.routing_outside_replica import OutsideReplica, format_outside, outside_replica
from dspine_lab.bench.routing_serving_cpu import ServingCpu, format_serving_cpu

OURS = "headroom"


class ReplicaFigures(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replica: str
    num_requests: int = Field(description="Requests the engine finished.")
    prefix_hit_rate: float | None = None
    peak_kv_utilization: float
    peak_state_utilization: float


class FailedRequest(BaseModel):
    """A request of the replay that got no complete answer, as the client recorded it."""

    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(description="The trace's request id.")
    replay: int = Field(description="The replay it belongs to, from 0.")
    error_kind: str
    error: str | None
    replica: str = Field(description="x-dspine-replica of the answer, if one came.")
    sent_s: float = Field(description="Send time after the replay started, wall seconds.")
    ttft_s: float | None = Field(description="Its first token after sending, if one came (wall seconds).")
    prompt_tokens: int


MAX_FAILED_LISTED = 20


class RouterFigures(BaseModel):
    model_config = ConfigDict(extra="forbid")

    router: str
    label: str
    num_requests: int
    num_ok: int
    errors: dict[str, int] = Field(default_factory=dict, description="Failed requests by kind.")
    failed: list[FailedRequest] = Field(
        default_factory=list, description=f"The first {MAX_FAILED_LISTED} failed requests, in order of sending."
    )
    wall_s: float = Field(description="First send to last end, wall seconds.")
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    e2e_p99_s: float | None
    ttft_p50_sim_s: float | None
    ttft_p99_sim_s: float | None
    e2e_p99_sim_s: float | None
    ttft_excess_p99_sim_s: float | None = Field(
        default=None, description="p99 of TTFT minus the request's own TTFT floor, simulated seconds."
    )
    ttft_order_bound_p99_sim_s_by_replay: list[float | None] = Field(
        default_factory=list,
        description="Each replay's order-preserving bound on p99 TTFT, simulated seconds: one first-come-first-"
        "served queue over the pool with the ideal cache, on that replay's arrivals (routing_order_bound.py).",
    )
    output_tokens_per_s: float
    output_tokens_per_sim_s: float
    prefix_hit_rate: float | None
    prefix_hit_rate_usage: float | None
    num_waited_for_memory: int
    num_waited_for_state_slots: int
    num_retractions: int
    num_recomputed_tokens: int = Field(
        default=0, description="Tokens the replicas prefilled again for retracted requests (wasted), over every replay."
    )
    num_evicted_cache_blocks: int
    num_paced: int = Field(
        default=0, description="Prompts the replicas paced (engines/prefill_pacing.py), over every replay."
    )
    replicas: list[ReplicaFigures]
    num_replays: int = Field(default=1, description="Replays of the slice pooled into these figures.")
    ttft_p99_s_by_replay: list[float | None] = Field(
        default_factory=list, description="TTFT p99 of each replay alone, wall seconds (the spread between runs)."
    )
    prefix_hit_rate_by_replay: list[float | None] = Field(
        default_factory=list, description="Each replay's prefix-hit rate from the answers' usage."
    )
    prefix_hit_loss_by_replay: list[HitLoss | None] = Field(
        default_factory=list,
        description="Each replay's points of hit rate lost to the ideal cache by kind of request, from the "
        "answers' usage and replica headers (routing_hit_loss.py).",
    )
    outside_replica_by_replay: list[OutsideReplica] = Field(
        default_factory=list,
        description="Each replay's TTFT outside the replica, from the answers' Server-Timing header "
        "(routing_outside_replica.py).",
    )
    serving_cpu_by_replay: list[ServingCpu] = Field(
        default_factory=list,
        description="Each replay's CPU seconds in the client, proxy, ingress and replicas (routing_serving_cpu.py).",
    )


class Goal(BaseModel):
    """A goal's point estimate: no verdict (a verdict comes from the paired interval, paired.py)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    target: str
    value: float | None


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else None


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _hit_rate(hit: int, prefilled: int) -> float | None:
    total = hit + prefilled
    return hit / total if total > 0 else None


def _error_kind(record: RequestRecord) -> str:
    """How a failure is counted and listed: http_<status> for an HTTP error, else the client's kind."""
    return f"http_{record.http_status}" if record.error_kind == "http_error" else str(record.error_kind)


def failed_requests(records: list[RequestRecord]) -> list[FailedRequest]:
    """The first MAX_FAILED_LISTED failed records, in order of (replay, sending)."""
    failed = sorted((r for r in records if not r.ok), key=lambda r: (r.repetition, r.start_offset_s))
    return [
        FailedRequest(
            request_id=r.trace_request_id, replay=r.repetition,
            error_kind=_error_kind(r),
            error=r.error, replica=r.replica, sent_s=r.start_offset_s, ttft_s=r.ttft_s,
            prompt_tokens=r.prompt_tokens,
        )  # fmt: skip
        for r in failed[:MAX_FAILED_LISTED]
    ]


def router_figures(
    router: str,
    label: str,
    records: list[RequestRecord],
    counters: list[dict],
    engine_time_scale: float,
    floors_sim_s: dict[str, float] | None = None,
    num_replicas: int | None = None,
    ideal_hit_tokens: Mapping[str, int] | None = None,
) -> RouterFigures:
    ok = [r for r in records if r.ok]
    floors = floors_sim_s or {}
    excess = [
        r.ttft_s / engine_time_scale - floors[r.trace_request_id]
        for r in ok
        if r.ttft_s is not None and r.trace_request_id in floors
    ]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    by_replay: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_replay.setdefault(r.repetition, []).append(r)
    wall_s = sum(max(r.end_unix_s for r in rs) - min(r.start_unix_s for r in rs) for rs in by_replay.values())
    p99_by_replay = [
        _percentile([r.ttft_s for r in rs if r.ok and r.ttft_s is not None], 99) for _, rs in sorted(by_replay.items())
    ]
    hit_by_replay = [_usage_hit_rate([r for r in rs if r.ok]) for _, rs in sorted(by_replay.items())]
    bound_by_replay = (
        [_order_bound(rs, floors, engine_time_scale, num_replicas) for _, rs in sorted(by_replay.items())]
        if num_replicas is not None and floors
        else []
    )
    loss_by_replay = (
        [_hit_loss(rs, ideal_hit_tokens) for _, rs in sorted(by_replay.items())] if ideal_hit_tokens is not None else []
    )
    output_tokens = sum(r.output_tokens for r in ok)
    errors = Counter(_error_kind(r) for r in records if not r.ok)
    replicas = []
    totals: Counter[str] = Counter()
    for entry in counters:
        c = entry["counters"]
        for key in ("num_prefix_hit_tokens", "num_prefill_tokens", "num_waited_for_memory",
                    "num_waited_for_state_slots", "num_retractions", "num_evicted_blocks", "num_paced",
                    "num_recomputed_tokens"):  # fmt: skip
            totals[key] += int(c.get(key, 0))
        replicas.append(
            ReplicaFigures(
                replica=entry["replica"],
                num_requests=int(c.get("num_finished", 0)),
                prefix_hit_rate=_hit_rate(int(c.get("num_prefix_hit_tokens", 0)), int(c.get("num_prefill_tokens", 0))),
                peak_kv_utilization=float(c.get("peak_kv_utilization", 0.0)),
                peak_state_utilization=float(c.get("peak_state_utilization", 0.0)),
            )
        )
    to_sim = 1.0 / engine_time_scale
    ttft_p50, ttft_p99, e2e_p99 = _percentile(ttft, 50), _percentile(ttft, 99), _percentile(e2e, 99)
    rate = output_tokens / wall_s if wall_s > 0 else 0.0
    return RouterFigures(
        router=router,
        label=label,
        num_requests=len(records),
        num_ok=len(ok),
        errors=dict(errors),
        failed=failed_requests(records),
        wall_s=wall_s,
        ttft_p50_s=ttft_p50,
        ttft_p99_s=ttft_p99,
        e2e_p99_s=e2e_p99,
        ttft_p50_sim_s=_scaled(ttft_p50, to_sim),
        ttft_p99_sim_s=_scaled(ttft_p99, to_sim),
        e2e_p99_sim_s=_scaled(e2e_p99, to_sim),
        ttft_excess_p99_sim_s=_percentile(excess, 99),
        output_tokens_per_s=rate,
        output_tokens_per_sim_s=rate * engine_time_scale,
        prefix_hit_rate=_hit_rate(totals["num_prefix_hit_tokens"], totals["num_prefill_tokens"]),
        prefix_hit_rate_usage=_usage_hit_rate(ok),
        num_waited_for_memory=totals["num_waited_for_memory"],
        num_waited_for_state_slots=totals["num_waited_for_state_slots"],
        num_retractions=totals["num_retractions"],
        num_recomputed_tokens=totals["num_recomputed_tokens"],
        num_evicted_cache_blocks=totals["num_evicted_blocks"],
        num_paced=totals["num_paced"],
        replicas=replicas,
        num_replays=len(by_replay),
        ttft_p99_s_by_replay=p99_by_replay,
        prefix_hit_rate_by_replay=hit_by_replay,
        ttft_order_bound_p99_sim_s_by_replay=bound_by_replay,
        prefix_hit_loss_by_replay=loss_by_replay,
        outside_replica_by_replay=[outside_replica(rs) for _, rs in sorted(by_replay.items())],
    )


def _hit_loss(records: list[RequestRecord], ideal_hit_tokens: Mapping[str, int]) -> HitLoss | None:
    """routing_hit_loss.py's rules over one replay's ok requests (sent: the client's send offset)."""
    placed = [
        PlacedRequest(r.trace_request_id, r.session_id, r.replica, r.start_offset_s, r.prompt_tokens,
                      r.cached_prompt_tokens or 0)  # fmt: skip
        for r in records
        if r.ok
    ]
    return hit_loss(placed, ideal_hit_tokens)


def _order_bound(
    records: list[RequestRecord], floors: dict[str, float], engine_time_scale: float, num_replicas: int
) -> float | None:
    """The order-bound rule for one replay's ok requests that have a floor."""
    arrivals = [
        (r.start_offset_s / engine_time_scale, floors[r.trace_request_id])
        for r in records
        if r.ok and r.trace_request_id in floors
    ]
    return order_bound_p99(arrivals, num_replicas)


def _usage_hit_rate(ok: list[RequestRecord]) -> float | None:
    prompt_tokens = sum(r.prompt_tokens for r in ok)
    return sum(r.cached_prompt_tokens or 0 for r in ok) / prompt_tokens if prompt_tokens > 0 else None


# The goal rule's p99 TTFT cuts: ours at least 30% under pow2's and 15% under cache_aware's.
P99_CUT_TARGETS = {"pow2": 0.30, "cache_aware": 0.15}


def reduction(ours: float | None, base: float | None) -> float | None:
    """1 - ours / base; None when either is missing or base is 0."""
    if ours is None or base is None or base == 0:
        return None
    return 1.0 - ours / base


def goals(figures: dict[str, RouterFigures]) -> list[Goal]:
    ours = figures.get(OURS)
    if ours is None:
        return []
    return goals_from(
        {name: f.ttft_p99_s for name, f in figures.items()},
        {name: f.prefix_hit_rate for name, f in figures.items()},
        ours.num_retractions,
    )


def goals_from(ttft_p99: dict[str, float | None], hit_rate: dict[str, float | None], our_retractions: int) -> list[Goal]:
    """The goal rule on per-router p99 TTFT (any one unit) and prefix-hit rates; ours must be present."""
    out: list[Goal] = []
    for base, target in P99_CUT_TARGETS.items():
        if base in ttft_p99:
            value = reduction(ttft_p99[OURS], ttft_p99[base])
            out.append(Goal(name=f"ttft_p99_reduction_vs_{base}", target=f">= {target:.2f}", value=value))
    if "cache_aware" in hit_rate:
        mine, theirs = hit_rate[OURS], hit_rate["cache_aware"]
        value = None if mine is None or theirs is None else mine - theirs
        out.append(Goal(name="prefix_hit_rate_minus_cache_aware", target=">= 0", value=value))
    out.append(Goal(name="retractions", target="== 0", value=float(our_retractions)))
    return out


def reduction_ceilings(figures: dict[str, RouterFigures], floor_p99_sim_s: float) -> dict[str, float | None]:
    """The ceiling rule for every router other than ours."""
    return {name: reduction(floor_p99_sim_s, f.ttft_p99_sim_s) for name, f in figures.items() if name != OURS}


def order_bound_reductions(figures: dict[str, RouterFigures], engine_time_scale: float) -> dict[str, list[float | None]]:
    """Replay by replay, 1 - ours' order-preserving bound / each baseline's p99 TTFT (simulated seconds):
    the most a router that starts requests in their order of arrival could cut it, on ours' arrivals."""
    ours = figures.get(OURS)
    if ours is None or not ours.ttft_order_bound_p99_sim_s_by_replay:
        return {}
    to_sim = 1.0 / engine_time_scale
    return {
        name: [
            reduction(bound, _scaled(p99, to_sim))
            for bound, p99 in zip(ours.ttft_order_bound_p99_sim_s_by_replay, f.ttft_p99_s_by_replay)
        ]
        for name, f in figures.items()
        if name != OURS
    }


def format_order_bound(figures: dict[str, RouterFigures], reductions: dict[str, list[float | None]]) -> list[str]:
    """Each router's bound per replay, then what ours' bound allows against each baseline."""
    lines = []
    for name, f in figures.items():
        if f.ttft_order_bound_p99_sim_s_by_replay:
            bounds = " / ".join(_fmt(b) for b in f.ttft_order_bound_p99_sim_s_by_replay)
            lines.append(f"{name:<12} order-preserving bound on p99 TTFT per replay: {bounds} simulated s")
    for name, cuts in reductions.items():
        if name in P99_CUT_TARGETS and any(c is not None for c in cuts):
            lines.append(
                f"order-preserving bound vs {name} per replay: {' / '.join(_fmt(c, '{:.3f}') for c in cuts)} "
                f"(target {P99_CUT_TARGETS[name]:.2f}: the most a router that starts requests in their order of "
                "arrival could cut, with an ideal cache and no transport, on ours' arrivals)"
            )
    return lines


def _fmt(value: float | None, pattern: str = "{:.2f}") -> str:
    return "-" if value is None else pattern.format(value)


def format_table(figures: dict[str, RouterFigures], checks: list[Goal]) -> str:
    header = f"{'router':<12} {'ok':>5} {'TTFT p50':>9} {'TTFT p99':>9} {'excess p99':>10} {'E2E p99':>8} " \
             f"{'out tok/s':>9} {'hit':>6} {'wait mem':>8} {'retract':>7}  peak KV / state per replica"  # fmt: skip
    lines = [header]
    for name, f in figures.items():
        peaks = " ".join(f"{r.peak_kv_utilization:.2f}/{r.peak_state_utilization:.2f}" for r in f.replicas)
        lines.append(
            f"{name:<12} {f.num_ok:>5} {_fmt(f.ttft_p50_s):>9} {_fmt(f.ttft_p99_s):>9} "
            f"{_fmt(f.ttft_excess_p99_sim_s):>10} {_fmt(f.e2e_p99_s):>8} "
            f"{f.output_tokens_per_s:>9.0f} {_fmt(f.prefix_hit_rate, '{:.3f}'):>6} {f.num_waited_for_memory:>8} "
            f"{f.num_retractions:>7}  {peaks}"
        )
    lines.append(
        "(latencies in wall seconds; simulated GPU seconds = wall / engine_time_scale; excess p99: TTFT over "
        "each request's own no-queueing floor, simulated seconds)"
    )
    for name, f in figures.items():
        if f.num_replays > 1:
            p99s = " / ".join(_fmt(v) for v in f.ttft_p99_s_by_replay)
            hits = " / ".join(_fmt(v, "{:.3f}") for v in f.prefix_hit_rate_by_replay)
            lines.append(f"{name:<12} per replay: TTFT p99 {p99s}; hit {hits}")
    for name, f in figures.items():
        lines.extend(format_outside(name, f.outside_replica_by_replay))
    for name, f in figures.items():
        lines.extend(format_serving_cpu(name, f.serving_cpu_by_replay))
    for name, f in figures.items():
        for r in f.failed:
            first = "no first token" if r.ttft_s is None else f"first token after {r.ttft_s:.2f} s"
            where = f" on replica {r.replica}" if r.replica else ""
            lines.append(
                f"{name:<12} failed: {r.request_id} (replay {r.replay + 1}, {r.prompt_tokens} prompt tokens, sent at "
                f"{r.sent_s:.1f} s{where}, {first}): {r.error_kind}: {r.error or '-'}"
            )
    lines.extend(format_point_goals(checks))
    return "\n".join(lines)


def format_point_goals(checks: list[Goal]) -> list[str]:
    """One line per goal's point estimate, without a verdict (verdicts: the paired lines)."""
    return [
        f"point {goal.name}: {_fmt(goal.value, '{:.3f}')} (target {goal.target}; a point estimate, no verdict: "
        "see the paired line)"
        for goal in checks
    ]
