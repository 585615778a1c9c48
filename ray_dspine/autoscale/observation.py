"""What the policy sees of a pool, built from the fields of Ray's `AutoscalingContext`.

Rules:
  reports   one per running replica that has metrics: values[key] = aggregated_metrics[key][replica]
            (Ray's mean over look_back_period_s of the replica's `record_autoscaling_stats`);
            age_s = current_time - newest timestamp in raw_metrics for that replica (None if Ray
            gave no raw series). Replicas without values (started < ~10 s ago) have no report.
  fresh     a report is fresh when it has `arrivals_per_s` and its age is None or <= stale_after_s.
  workload  over fresh reports, weights w_i = num_window_requests_i: prompt/uncached/output means and
            prompt p95 are w-weighted means; acceptance = sum(a_i * out_i) / sum(out_i) with
            out_i = w_i * output_tokens_mean_i and a_i = accept_length_ema_i (the engine's measured EMA);
            drafter_active when most fresh replicas report it. With sum(w) = 0 the config defaults
            (default_prompt_tokens, default_output_tokens) and the plain mean EMA are used.
Complexity: O(replicas * keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ray_dspine.autoscale.capacity_model import Workload
from ray_dspine.autoscale.config import CostAutoscalingConfig


@dataclass(frozen=True)
class ReplicaReport:
    values: Mapping[str, float]
    age_s: float | None = None


@dataclass(frozen=True)
class PoolObservation:
    now_s: float
    num_running_replicas: int
    target_replicas: int
    min_replicas: int
    max_replicas: int
    handle_queued: float = 0.0
    reports: tuple[ReplicaReport, ...] = field(default_factory=tuple)


def _newest_timestamp(series: Any) -> float | None:
    newest = None
    for point in series or ():
        stamp = getattr(point, "timestamp", None)
        if stamp is not None and (newest is None or stamp > newest):
            newest = float(stamp)
    return newest


def observation_from_context(ctx: Any) -> PoolObservation:
    """Read the fields Ray 2.60 puts on an AutoscalingContext (duck-typed: no ray import)."""
    aggregated: Mapping[str, Mapping[Any, float]] = ctx.aggregated_metrics or {}
    raw: Mapping[str, Mapping[Any, Any]] = ctx.raw_metrics or {}
    now = float(ctx.current_time) if ctx.current_time is not None else 0.0
    reports = []
    for replica in ctx.running_replicas or ():
        values = {key: float(per_replica[replica]) for key, per_replica in aggregated.items() if replica in per_replica}
        if not values:
            continue
        stamps = [_newest_timestamp(per_replica.get(replica)) for per_replica in raw.values()]
        stamps = [s for s in stamps if s is not None]
        reports.append(ReplicaReport(values=values, age_s=(now - max(stamps)) if stamps else None))
    queued = ctx.total_queued_requests
    return PoolObservation(
        now_s=now,
        num_running_replicas=int(ctx.current_num_replicas),
        target_replicas=int(ctx.target_num_replicas),
        min_replicas=int(ctx.capacity_adjusted_min_replicas),
        max_replicas=int(ctx.capacity_adjusted_max_replicas),
        handle_queued=float(queued) if queued is not None else 0.0,
        reports=tuple(reports),
    )


def fresh_reports(obs: PoolObservation, stale_after_s: float) -> list[ReplicaReport]:
    return [
        r for r in obs.reports if "arrivals_per_s" in r.values and (r.age_s is None or r.age_s <= stale_after_s)
    ]


def pool_workload(reports: list[ReplicaReport], config: CostAutoscalingConfig) -> Workload:
    """Apply the workload rule."""
    weights = [max(0.0, r.values.get("num_window_requests", 0.0)) for r in reports]
    total = sum(weights)
    emas = [r.values.get("accept_length_ema", 1.0) for r in reports]
    drafter = sum(1 for r in reports if r.values.get("drafter_active", 0.0) >= 0.5) * 2 > len(reports)
    if total <= 0.0:
        prompt = float(config.default_prompt_tokens)
        return Workload(prompt, prompt, prompt, float(config.default_output_tokens), sum(emas) / len(emas), drafter)

    def mean(key: str) -> float:
        return sum(w * r.values.get(key, 0.0) for w, r in zip(weights, reports)) / total

    outputs = [w * r.values.get("output_tokens_mean", 0.0) for w, r in zip(weights, reports)]
    out_total = sum(outputs)
    accept = sum(a * o for a, o in zip(emas, outputs)) / out_total if out_total > 0 else sum(emas) / len(emas)
    return Workload(
        prompt_tokens_mean=max(1.0, mean("prompt_tokens_mean")),
        prompt_tokens_p95=max(1.0, mean("prompt_tokens_p95")),
        uncached_prompt_tokens_mean=mean("uncached_prompt_tokens_mean"),
        output_tokens_mean=max(1.0, mean("output_tokens_mean")),
        accept_length=max(1.0, accept),
        drafter_active=drafter,
    )
