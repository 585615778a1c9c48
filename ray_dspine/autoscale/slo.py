"""What "within SLO" means, stated once for the policy, the simulator, the benchmarks and the docs.

Rules (per request; a pool's SloTargets give ttft_slo_s and itl_slo_ms):
  TTFT        ttft_s = first token - arrival at the handle (queueing included), seconds.
  ITL         itl_ms = 1000 * (finish - first token) / (output tokens - 1): the request's own mean
              inter-token latency, ms; a request with one output token has no ITL (only TTFT counts).
  within SLO  a request is within SLO when it completed (received its last token), ttft_s <= ttft_slo_s
              and, when it has an ITL, itl_ms <= itl_slo_ms. A request that failed, was refused or
              was cut off counts as outside.
  attainment  slo_attainment = requests within SLO / all requests offered (failed ones included).
No figure here is a percentile: the targets bound each request, and the share of requests that
keep them is the attainment (the pool's goal, e.g. 99%, is a bound on that share).
Complexity: O(1) per request; O(n) for n requests (numpy-vectorised).
"""

from __future__ import annotations

import math

import numpy as np

from ray_dspine.autoscale.config import SloTargets


def request_within_slo(slo: SloTargets, ttft_s: float | None, itl_ms: float | None) -> bool:
    """One request: ttft_s None = never completed; itl_ms None = one output token (no ITL)."""
    if ttft_s is None or ttft_s > slo.ttft_slo_s:
        return False
    return itl_ms is None or itl_ms <= slo.itl_slo_ms


def within_slo(
    slo: SloTargets, arrival_s: np.ndarray, first_s: np.ndarray, finish_s: np.ndarray, output_tokens: np.ndarray
) -> np.ndarray:
    """Per request (arrays of one day; NaN finish = failed): the within-SLO rule, as booleans."""
    done = ~np.isnan(finish_s)
    ok = done & (np.nan_to_num(first_s - arrival_s, nan=math.inf) <= slo.ttft_slo_s)
    multi = done & (output_tokens >= 2)
    itl_ms = 1000.0 * (finish_s[multi] - first_s[multi]) / (output_tokens[multi] - 1)
    ok[multi] &= itl_ms <= slo.itl_slo_ms
    return ok


def slo_attainment(within: np.ndarray) -> float:
    """Share of requests within SLO; 1.0 for no requests."""
    return float(np.count_nonzero(within)) / within.shape[0] if within.shape[0] else 1.0
