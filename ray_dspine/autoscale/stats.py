"""A replica's autoscaling statistics over a sliding window: what `record_autoscaling_stats` returns.

Ray samples `record_autoscaling_stats()` every min(0.2 * look_back_period_s, metrics_interval_s)
and averages each key over `look_back_period_s` (time-weighted mean, the default aggregation), so
every value here is a gauge: rates and percentiles of the last `window_s`, never running counters.

Rules (W = window_s, t = clock(), t0 = started_s, else the first record or snapshot; a request counts in the window
when it finished in (t - W', t]; arrivals likewise):
  window        W' = min(W, t - t0), at least 1e-9.
  rates         arrivals_per_s = arrivals / W'; completed_per_s = finished / W';
                output_tokens_per_s = sum(output tokens) / W'.
  percentiles   nearest rank: p-th of n sorted values is v[ceil(p * n) - 1]; 0.0 when n = 0.
  ITL           per request: itl_ms = 1000 * decode_s / (output_tokens - 1) for output_tokens >= 2
                (decode_s = finish - first token); requests with one token have no ITL.
  SLO misses    per request as in ray_dspine/autoscale/slo.py: ttft_slo_miss_ratio = #(ttft_s >
                slo.ttft_slo_s) / n; itl_slo_miss_ratio likewise (itl_ms > slo.itl_slo_ms) over requests
                with an ITL; slo_miss_ratio = #(either) / n (1 - attainment over completed requests).
  acceptance    accept_length_window = sum(output tokens) / sum(verify steps) (0.0 without steps);
                accept_length_ema, drafter_active (0/1) come from the engine's LoadSnapshot.
  load          num_running, num_queued; kv_utilization = 1 - free_kv / total_kv (0 if total = 0),
                state_utilization likewise for state slots.
  busy          busy_fraction = share of snapshots in the window with num_running > 0;
                concurrency_mean = sum over window requests of (ttft_s + decode_s) / W' (Little's law).
Parameters: window_s in (0, 3600] s; slo targets as in SloTargets; max_window_requests bounds memory.
Complexity: O(1) per record; O(n log n) per snapshot for n window requests; memory O(n).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ray_dspine.autoscale.config import StatsWindowConfig
from ray_dspine.engines.protocol import LoadSnapshot, Usage

STAT_KEYS: tuple[str, ...] = (
    "window_s",
    "arrivals_per_s",
    "completed_per_s",
    "num_window_requests",
    "output_tokens_per_s",
    "prompt_tokens_mean",
    "prompt_tokens_p95",
    "uncached_prompt_tokens_mean",
    "output_tokens_mean",
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_ms",
    "itl_p95_ms",
    "ttft_slo_miss_ratio",
    "itl_slo_miss_ratio",
    "slo_miss_ratio",
    "accept_length_window",
    "accept_length_ema",
    "drafter_active",
    "num_running",
    "num_queued",
    "kv_utilization",
    "state_utilization",
    "busy_fraction",
    "concurrency_mean",
)


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values; 0.0 for none."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    return sorted_values[min(n - 1, max(0, math.ceil(p * n) - 1))]


@dataclass(frozen=True)
class _Finished:
    finished_s: float
    ttft_s: float
    decode_s: float
    prompt_tokens: int
    cached_prompt_tokens: int
    output_tokens: int
    verify_steps: int
    itl_ms: float | None


class ReplicaWindowStats:
    """Accumulates one replica's finished requests and load samples; `snapshot` gives the flat dict."""

    def __init__(self, config: StatsWindowConfig, clock: Callable[[], float], started_s: float | None = None):
        self._config = config
        self._clock = clock
        self._t0 = started_s
        self._arrivals: deque[float] = deque()
        self._finished: deque[_Finished] = deque()
        self._samples: deque[tuple[float, bool]] = deque()

    def _now(self) -> float:
        now = self._clock()
        if self._t0 is None:
            self._t0 = now
        return now

    def record_arrival(self) -> None:
        """A request was handed to this replica."""
        self._arrivals.append(self._now())
        if len(self._arrivals) > self._config.max_window_requests:
            self._arrivals.popleft()

    def record_finished(self, ttft_s: float, decode_s: float, usage: Usage) -> None:
        """A request finished: seconds to its first token, seconds from first to last token, its usage."""
        self._finished.append(
            _Finished(
                finished_s=self._now(),
                ttft_s=max(0.0, ttft_s),
                decode_s=max(0.0, decode_s),
                prompt_tokens=usage.prompt_tokens,
                cached_prompt_tokens=usage.cached_prompt_tokens,
                output_tokens=usage.completion_tokens,
                verify_steps=usage.verify_steps,
                itl_ms=1000.0 * max(0.0, decode_s) / (usage.completion_tokens - 1) if usage.completion_tokens >= 2 else None,
            )
        )
        if len(self._finished) > self._config.max_window_requests:
            self._finished.popleft()

    def _trim(self, now: float) -> float:
        start = now - self._config.window_s
        while self._arrivals and self._arrivals[0] <= start:
            self._arrivals.popleft()
        while self._samples and self._samples[0][0] <= start:
            self._samples.popleft()
        while self._finished and self._finished[0].finished_s <= start:
            self._finished.popleft()
        t0 = self._t0 if self._t0 is not None else now
        return max(1e-9, min(self._config.window_s, now - t0))

    def snapshot(self, load: LoadSnapshot) -> dict[str, float]:
        """Sample the engine's load and return every key of STAT_KEYS as a float."""
        now = self._now()
        self._samples.append((now, load.num_running > 0))
        window = self._trim(now)
        ttft_target, itl_target = self._config.slo.ttft_slo_s, self._config.slo.itl_slo_ms
        ttfts: list[float] = []
        itls: list[float] = []
        prompts: list[float] = []
        output_tokens = verify_steps = uncached = 0
        in_system_s = 0.0
        ttft_miss = itl_miss = any_miss = 0
        for r in self._finished:  # one pass over the window's requests
            ttfts.append(r.ttft_s)
            prompts.append(float(r.prompt_tokens))
            output_tokens += r.output_tokens
            verify_steps += r.verify_steps
            uncached += r.prompt_tokens - r.cached_prompt_tokens
            in_system_s += r.ttft_s + r.decode_s
            late = r.ttft_s > ttft_target
            slow = False
            if r.itl_ms is not None:
                itls.append(r.itl_ms)
                slow = r.itl_ms > itl_target
            ttft_miss += late
            itl_miss += slow
            any_miss += late or slow
        ttfts.sort()
        itls.sort()
        prompts.sort()
        n = len(ttfts)
        samples = len(self._samples)
        return {
            "window_s": window,
            "arrivals_per_s": len(self._arrivals) / window,
            "completed_per_s": n / window,
            "num_window_requests": float(n),
            "output_tokens_per_s": output_tokens / window,
            "prompt_tokens_mean": sum(prompts) / n if n else 0.0,
            "prompt_tokens_p95": percentile(prompts, 0.95),
            "uncached_prompt_tokens_mean": uncached / n if n else 0.0,
            "output_tokens_mean": output_tokens / n if n else 0.0,
            "ttft_p50_s": percentile(ttfts, 0.50),
            "ttft_p95_s": percentile(ttfts, 0.95),
            "itl_p50_ms": percentile(itls, 0.50),
            "itl_p95_ms": percentile(itls, 0.95),
            "ttft_slo_miss_ratio": ttft_miss / n if n else 0.0,
            "itl_slo_miss_ratio": itl_miss / len(itls) if itls else 0.0,
            "slo_miss_ratio": any_miss / n if n else 0.0,
            "accept_length_window": output_tokens / verify_steps if verify_steps else 0.0,
            "accept_length_ema": float(load.accept_length_ema),
            "drafter_active": 1.0 if load.drafter_active else 0.0,
            "num_running": float(load.num_running),
            "num_queued": float(load.num_queued),
            "kv_utilization": 1.0 - load.free_kv_tokens / load.total_kv_tokens if load.total_kv_tokens else 0.0,
            "state_utilization": (
                1.0 - load.free_state_slots / load.total_state_slots if load.total_state_slots else 0.0
            ),
            "busy_fraction": sum(1 for _, busy in self._samples if busy) / samples if samples else 0.0,
            "concurrency_mean": in_system_s / window,
        }
