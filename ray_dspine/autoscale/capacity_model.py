"""Predicted latency of one replica at a request rate, and the highest rate that meets the SLOs.

Rules (ms unless stated; lambda = requests/s sent to the replica; workload: P = mean prompt tokens,
P95 = p95 prompt tokens, Pu = mean uncached prompt tokens, O = mean output tokens, a = acceptance
length, 1.0 with the drafter off; capacity coefficients b, r, k, p, d, v, D as in ReplicaCapacityModel):
  step      t_step(c) = A + B * c with A = b (+ d with the drafter), B = r + k * L (+ v * (D - 1) with
            the drafter), L = P + O / 2 context tokens per running request.
  prefill   t_pf = b + p * Pu; t_pf95 = b + p * P95 * Pu / P; rho = lambda * t_pf / 1000 (share of
            time in prefill; prefill runs first, so decoding gets 1 - rho of the replica).
  decode    S = max(O - 1, 0) / a verify steps per request after its first token;
            x = lambda * S / (1000 * (1 - rho)); running requests by Little's law c = x * A / (1 - x * B)
            (stable iff rho < 1 and x * B < 1).
  latency   itl_mean = t_step(c) / (a * (1 - rho)); itl_p95 = itl_tail_factor * itl_mean;
            ttft_p95 = t_step(c) + t_pf95 * (1 + f * rho / (1 - rho))   (f = ttft_wait_factor, 1.5 ~
            ln(20) / 2 for an exponential-tail M/G/1 wait for the prefills ahead; then the step in
            flight and the own prefill; the tuner calibrates f and itl_tail_factor on the twin).
  memory    c <= max_running_requests and c * (Pu + O) <= total_kv_tokens.
  capacity  mu = the largest lambda with, for h = headroom: itl_p95 <= (1 - h) * slo.itl_slo_ms,
            ttft_p95 <= (1 - h) * 1000 * slo.ttft_slo_s, and both memory bounds scaled by (1 - h).
            Every predicted quantity rises with lambda, so mu is found by bisection on
            [0, 1000 / t_pf). A latency bound already broken at lambda -> 0 cannot be fixed by adding
            replicas; it is dropped and reported (unreachable).
  drafter   the drafter raises a (fewer steps per token) but adds d and v * (D - 1) per step: with a
            falling acceptance EMA mu falls, and below break-even the drafter-off mu is larger.
Parameters: lambda >= 0 req/s; P, O >= 1 tokens; a in [1, D]; h in [0, 0.9].
Complexity: O(1) per prediction; O(iterations) = 60 predictions per capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

from ray_dspine.autoscale.config import ReplicaCapacityModel, SloTargets

_BISECTION_ROUNDS = 60


@dataclass(frozen=True)
class Workload:
    prompt_tokens_mean: float
    prompt_tokens_p95: float
    uncached_prompt_tokens_mean: float
    output_tokens_mean: float
    accept_length: float
    drafter_active: bool


@dataclass(frozen=True)
class ReplicaPrediction:
    rate_per_s: float
    stable: bool
    prefill_share: float
    num_running: float
    step_ms: float
    itl_mean_ms: float
    itl_p95_ms: float
    ttft_p95_ms: float
    kv_tokens: float


@dataclass(frozen=True)
class Capacity:
    rate_per_s: float
    unreachable: tuple[str, ...]


def _coefficients(cap: ReplicaCapacityModel, w: Workload) -> tuple[float, float, float]:
    context = w.prompt_tokens_mean + w.output_tokens_mean / 2.0
    a_ms = cap.base_ms
    b_ms = cap.per_running_ms + cap.per_kv_token_ms * context
    accept = 1.0
    if w.drafter_active and cap.draft_tokens > 1:
        a_ms += cap.draft_ms
        b_ms += cap.verify_per_token_ms * (cap.draft_tokens - 1)
        accept = min(float(cap.draft_tokens), max(1.0, w.accept_length))
    return a_ms, b_ms, accept


def predict_replica(cap: ReplicaCapacityModel, w: Workload, rate_per_s: float) -> ReplicaPrediction:
    """Apply the step, prefill, decode, latency and memory rules at one rate."""
    a_ms, b_ms, accept = _coefficients(cap, w)
    uncached = max(0.0, w.uncached_prompt_tokens_mean)
    t_pf = cap.base_ms + cap.prefill_per_token_ms * uncached
    ratio = uncached / w.prompt_tokens_mean if w.prompt_tokens_mean > 0 else 1.0
    t_pf95 = cap.base_ms + cap.prefill_per_token_ms * w.prompt_tokens_p95 * ratio
    rho = rate_per_s * t_pf / 1000.0
    steps = max(w.output_tokens_mean - 1.0, 0.0) / accept
    inf = float("inf")
    if rho >= 1.0:
        return ReplicaPrediction(rate_per_s, False, rho, inf, inf, inf, inf, inf, inf)
    x = rate_per_s * steps / (1000.0 * (1.0 - rho))
    if x * b_ms >= 1.0:
        return ReplicaPrediction(rate_per_s, False, rho, inf, inf, inf, inf, inf, inf)
    running = x * a_ms / (1.0 - x * b_ms)
    step_ms = a_ms + b_ms * running
    itl_mean = step_ms / (accept * (1.0 - rho))
    ttft = step_ms + t_pf95 * (1.0 + cap.ttft_wait_factor * rho / (1.0 - rho))
    return ReplicaPrediction(
        rate_per_s=rate_per_s,
        stable=True,
        prefill_share=rho,
        num_running=running,
        step_ms=step_ms,
        itl_mean_ms=itl_mean,
        itl_p95_ms=cap.itl_tail_factor * itl_mean,
        ttft_p95_ms=ttft,
        kv_tokens=running * (uncached + w.output_tokens_mean),
    )


def _violations(cap: ReplicaCapacityModel, slo: SloTargets, headroom: float, p: ReplicaPrediction) -> set[str]:
    keep = 1.0 - headroom
    broken = set()
    if not p.stable:
        return {"stability"}
    if p.itl_p95_ms > keep * slo.itl_slo_ms:
        broken.add("itl")
    if p.ttft_p95_ms > keep * 1000.0 * slo.ttft_slo_s:
        broken.add("ttft")
    if p.num_running > keep * cap.max_running_requests:
        broken.add("running")
    if p.kv_tokens > keep * cap.total_kv_tokens:
        broken.add("kv")
    return broken


def max_rate_per_replica(cap: ReplicaCapacityModel, slo: SloTargets, w: Workload, headroom: float) -> Capacity:
    """Apply the capacity rule: the highest rate one replica serves within the (reachable) SLOs."""
    unreachable = _violations(cap, slo, headroom, predict_replica(cap, w, 0.0)) & {"itl", "ttft"}
    t_pf = cap.base_ms + cap.prefill_per_token_ms * max(0.0, w.uncached_prompt_tokens_mean)
    lo, hi = 0.0, 1000.0 / max(t_pf, 1e-9)
    for _ in range(_BISECTION_ROUNDS):
        mid = 0.5 * (lo + hi)
        if _violations(cap, slo, headroom, predict_replica(cap, w, mid)) - unreachable:
            hi = mid
        else:
            lo = mid
    return Capacity(rate_per_s=lo, unreachable=tuple(sorted(unreachable)))
