"""What a simulated day reports, computed from per-request arrays.

Rules:
  completed   a request that received its last token; failed = refused (could never fit a replica)
              or cut off (its replica's graceful shutdown timed out).
  within SLO  the rule of ray_dspine/autoscale/slo.py, per request: completed, TTFT (from the
              arrival at the handle) <= slo.ttft_slo_s and, with >= 2 output tokens, its own mean
              ITL <= slo.itl_slo_ms. slo_attainment = within / all requests (failed ones are outside).
  percentiles nearest rank ("inverted_cdf") over completed requests (ITL: those with >= 2 tokens).
  cost        cost_usd = replica_hours * gpus_per_replica * gpu_hour_usd;
              cost_per_completed_request_usd = cost_usd / completed;
              cost_per_slo_request_usd = cost_usd / within.
Complexity: O(n log n) for n requests.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ray_dspine.autoscale.config import SloTargets
from ray_dspine.autoscale.slo import within_slo


class LatencySummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    p50: float
    p95: float
    p99: float


class DayResult(BaseModel):
    """One policy's simulated day; every figure is SIMULATED (a calibrated twin, not a measurement)."""

    model_config = ConfigDict(extra="forbid")

    simulated: bool = True
    policy: str
    pool: str
    trace: str
    trace_sha256: str
    seed: int
    duration_s: float
    num_requests: int
    num_completed: int
    num_failed: int
    slo_attainment: float = Field(description="Share of all requests within SLO (ray_dspine/autoscale/slo.py).")
    ttft_s: LatencySummary
    itl_ms: LatencySummary
    replica_hours: float
    gpu_hours: float
    cost_usd: float
    cost_per_completed_request_usd: float
    cost_per_slo_request_usd: float
    num_scale_ups: int
    num_scale_downs: int
    mean_replicas: float
    peak_replicas: int
    replicas_by_quarter_hour: list[int] = Field(description="Live replicas (starting + serving) every 15 min.")


def latency_summary(values: np.ndarray, scale: float = 1.0) -> LatencySummary:
    if values.size == 0:
        return LatencySummary(p50=0.0, p95=0.0, p99=0.0)
    p = np.percentile(values, [50, 95, 99], method="inverted_cdf") * scale
    return LatencySummary(p50=float(p[0]), p95=float(p[1]), p99=float(p[2]))


def summarize(
    *,
    policy: str,
    pool: str,
    trace: str,
    trace_sha256: str,
    seed: int,
    duration_s: float,
    slo: SloTargets,
    arrival_s: np.ndarray,
    first_s: np.ndarray,
    finish_s: np.ndarray,
    output_tokens: np.ndarray,
    replica_hours: float,
    gpus_per_replica: float,
    gpu_hour_usd: float,
    scale_events: list[tuple[float, int, int]],
    replica_timeline: list[int],
) -> DayResult:
    """Apply the completed, within-SLO, percentile and cost rules."""
    done = ~np.isnan(finish_s)
    ttft = first_s[done] - arrival_s[done]
    tokens = output_tokens[done]
    multi = tokens >= 2
    itl_ms = 1000.0 * (finish_s[done][multi] - first_s[done][multi]) / (tokens[multi] - 1)
    within = int(np.count_nonzero(within_slo(slo, arrival_s, first_s, finish_s, output_tokens)))
    completed = int(np.count_nonzero(done))
    total = int(arrival_s.shape[0])
    cost = replica_hours * gpus_per_replica * gpu_hour_usd
    ups = sum(1 for _, old, new in scale_events if new > old)
    downs = sum(1 for _, old, new in scale_events if new < old)
    return DayResult(
        policy=policy,
        pool=pool,
        trace=trace,
        trace_sha256=trace_sha256,
        seed=seed,
        duration_s=duration_s,
        num_requests=total,
        num_completed=completed,
        num_failed=total - completed,
        slo_attainment=within / total if total else 1.0,
        ttft_s=latency_summary(ttft),
        itl_ms=latency_summary(itl_ms),
        replica_hours=replica_hours,
        gpu_hours=replica_hours * gpus_per_replica,
        cost_usd=cost,
        cost_per_completed_request_usd=cost / completed if completed else math.inf,
        cost_per_slo_request_usd=cost / within if within else math.inf,
        num_scale_ups=ups,
        num_scale_downs=downs,
        mean_replicas=replica_hours * 3600.0 / duration_s if duration_s > 0 else 0.0,
        peak_replicas=max(replica_timeline) if replica_timeline else 0,
        replicas_by_quarter_hour=replica_timeline,
    )
