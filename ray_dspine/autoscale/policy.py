"""The replica count that minimises predicted cost per completed request within the latency SLOs.

Objective. Over a control interval a pool of N replicas costs price * g * N * dt (price = USD per
GPU-hour, g = GPUs per replica) and completes lambda * dt requests as long as it keeps up, so
    cost per completed request = price * g * N / (3600 * lambda)     (USD; lambda in req/s)
rises with N: the cheapest pool is the smallest N that meets the SLOs, N* = ceil(lambda / mu),
where mu is one replica's highest SLO-compliant rate (capacity_model.py: it scales with the
measured acceptance EMA, so a drafter only buys capacity while its acceptance holds).

Rules (obs = PoolObservation; T = Ray's current target, R = running replicas; state persists in
Ray's policy_state; all times in seconds):
  R1 missing   no fresh report (observation.py: none has `arrivals_per_s`, or all are older than
               stale_after_s) -> hold: N = T. Never scales to zero on an empty metrics dict.
  R2 demand    lambda = sum(arrivals_per_s over fresh reports) * R / #fresh
                        + (handle_queued + sum(num_queued)) / backlog_drain_s.
               slope s = max(0, least-squares slope of (t, lambda) over the last trend_window_s), 0 until
               the history spans half that window; lambda_up = lambda + s * lookahead_s (replicas take
               minutes to start).
  R3 capacity  mu = max_rate_per_replica(capacity, slo, workload, headroom); mu <= 0 -> hold.
               With the drafter on, state keeps drafter_gain = mu / mu(drafter off): below 1 the
               drafter costs more per request than it saves (acceptance too low).
  R4 up        N_up = ceil(lambda_up / mu). If N_up > T for upscale_delay_s -> N = N_up.
  R5 guard     pooled over fresh reports, W = sum(num_window_requests) and
               m = sum(num_window_requests * slo_miss_ratio) / W (requests that missed the TTFT or
               ITL target). W >= guard_min_requests and m > guard_miss_ratio (default 0.05, what
               p95 targets allow), while R == T (none starting) -> N_up >= T + 1 (measurement
               overrides the model) and no downscale. Pooled, one replica's bad window (a long
               prefill stalling its batch, which another replica would not cure) is diluted.
  R6 down      N_down = ceil(lambda / (u_down * mu)), u_down = scale_down_utilization (< 1 leaves a
               band [N_up, N_down] where the count holds: hysteresis). When N_down < T has held for
               downscale_delay_s, N = max(N_down over that window) (the window's peak, not its end).
  R7 drain     N >= ceil((sum(num_running + num_queued) + handle_queued) / max_running_requests):
               never remove capacity that in-flight requests need. Removed replicas drain: Ray stops
               routing to them and waits up to graceful_shutdown_timeout_s (polling every
               graceful_shutdown_wait_loop_s) for their requests to finish before it stops them.
  R8 bounds    N = min(max_replicas, max(min_replicas, N)), and N >= 1 while any request is in flight.
Parameters: see CostAutoscalingConfig (headroom in [0, 0.9], u_down in (0, 1], delays in s).
Complexity: O(replicas * keys) per call plus one capacity bisection (60 predictions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ray_dspine.autoscale.capacity_model import max_rate_per_replica
from ray_dspine.autoscale.config import CostAutoscalingConfig
from ray_dspine.autoscale.observation import PoolObservation, fresh_reports, pool_workload

STATE_PREFIX = "dspine_"


@dataclass(frozen=True)
class ScalingDecision:
    num_replicas: int
    reason: str
    demand_per_s: float
    capacity_per_s: float
    num_up: int
    num_down: int
    state: dict[str, Any]


def cost_per_completed_request_usd(
    num_replicas: float, demand_per_s: float, gpu_hour_usd: float, gpus_per_replica: float
) -> float:
    """price * g * N / (3600 * lambda); infinite without demand."""
    if demand_per_s <= 0.0:
        return math.inf
    return gpu_hour_usd * gpus_per_replica * num_replicas / (3600.0 * demand_per_s)


def demand_slope(history: list[tuple[float, float]], window_s: float) -> float:
    """max(0, least-squares slope of demand over time); 0 with a history shorter than window_s / 2."""
    if len(history) < 3 or history[-1][0] - history[0][0] < window_s / 2.0:
        return 0.0
    n = len(history)
    mean_t = sum(t for t, _ in history) / n
    mean_v = sum(v for _, v in history) / n
    var = sum((t - mean_t) ** 2 for t, _ in history)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in history)
    return max(0.0, cov / var) if var > 0 else 0.0


def _bounded(n: int, obs: PoolObservation, floor: int) -> int:
    return min(obs.max_replicas, max(obs.min_replicas, floor, n))


def decide(config: CostAutoscalingConfig, obs: PoolObservation, state: dict[str, Any]) -> ScalingDecision:
    """Apply rules R1-R8 to one observation; returns the count and the state to keep."""
    state = dict(state)  # Ray's own keys (its delay bookkeeping) pass through untouched
    target = obs.target_replicas
    reports = fresh_reports(obs, config.stale_after_s)
    if not reports:  # R1
        return ScalingDecision(target, "hold: no fresh metrics", 0.0, 0.0, target, target, state)

    # R2 demand and its trend.
    running = max(obs.num_running_replicas, len(reports))
    queued = obs.handle_queued + sum(r.values.get("num_queued", 0.0) for r in reports)
    arrivals = sum(r.values.get("arrivals_per_s", 0.0) for r in reports) * running / len(reports)
    demand = arrivals + queued / config.backlog_drain_s
    history = [(t, v) for t, v in state.get(STATE_PREFIX + "history", []) if t > obs.now_s - config.trend_window_s]
    history.append((obs.now_s, demand))
    state[STATE_PREFIX + "history"] = [[t, v] for t, v in history]
    slope = demand_slope(history, config.trend_window_s)
    demand_up = demand + slope * config.lookahead_s

    # R3 capacity.
    workload = pool_workload(reports, config)
    capacity = max_rate_per_replica(config.capacity, config.slo, workload, config.headroom)
    mu = capacity.rate_per_s
    state[STATE_PREFIX + "capacity_per_s"] = mu
    if workload.drafter_active:  # what the drafter buys at the measured acceptance (< 1: it costs)
        off = max_rate_per_replica(config.capacity, config.slo, replace(workload, drafter_active=False), config.headroom)
        state[STATE_PREFIX + "drafter_gain"] = mu / off.rate_per_s if off.rate_per_s > 0 else 0.0
    if mu <= 0.0:
        return ScalingDecision(target, "hold: zero capacity", demand, mu, target, target, state)

    # R7 drain floor.
    inflight = queued + sum(r.values.get("num_running", 0.0) for r in reports) * running / len(reports)
    floor = math.ceil(inflight / config.capacity.max_running_requests - 1e-9)
    floor = max(floor, 1 if inflight > 0 else 0)

    # R4 / R5 up.
    n_up = math.ceil(demand_up / mu - 1e-9)
    window = sum(r.values.get("num_window_requests", 0.0) for r in reports)
    missed = sum(r.values.get("num_window_requests", 0.0) * r.values.get("slo_miss_ratio", 0.0) for r in reports)
    breached = window >= config.guard_min_requests and missed > config.guard_miss_ratio * window
    guard = breached and obs.num_running_replicas >= target
    if guard:
        n_up = max(n_up, target + 1)
    n_down = max(n_up, math.ceil(demand / (config.scale_down_utilization * mu) - 1e-9))
    key_up, key_down, key_hist = STATE_PREFIX + "up_since", STATE_PREFIX + "down_since", STATE_PREFIX + "down_max"

    if n_up > target:
        state.pop(key_down, None)
        state.pop(key_hist, None)
        since = state.setdefault(key_up, obs.now_s)
        if obs.now_s - since + 1e-9 >= config.upscale_delay_s:
            state.pop(key_up, None)
            n = _bounded(n_up, obs, floor)
            return ScalingDecision(n, "up: guard" if guard else "up: demand", demand, mu, n_up, n_down, state)
        return ScalingDecision(target, "up: waiting", demand, mu, n_up, n_down, state)
    state.pop(key_up, None)

    # R6 down (with the R5 guard blocking it).
    if n_down < target and not breached:
        since = state.setdefault(key_down, obs.now_s)
        window_max = max(int(state.get(key_hist, 0)), n_down)
        state[key_hist] = window_max
        if obs.now_s - since + 1e-9 >= config.downscale_delay_s:
            state.pop(key_down, None)
            state.pop(key_hist, None)
            n = _bounded(window_max, obs, floor)
            return ScalingDecision(n, "down", demand, mu, n_up, n_down, state)
        return ScalingDecision(_bounded(target, obs, floor), "down: waiting", demand, mu, n_up, n_down, state)
    state.pop(key_down, None)
    state.pop(key_hist, None)
    return ScalingDecision(_bounded(target, obs, floor), "hold: in band", demand, mu, n_up, n_down, state)
