"""A simulated day of arrivals: the trace's hour, resampled under a diurnal rate curve.

Rules (t in seconds from midnight, D = day_s = 86,400, f = trough_fraction, t_min = trough_hour * 3600):
  curve     c(t) = f + (1 - f) * sin^2(pi * (t - t_min) / D): 1 at the peak (12 h after the trough),
            f at the trough; its mean over a day is (1 + f) / 2.
  rate      lambda(t) = lambda_peak * c(t), lambda_peak = rate_scale * (trace rows / trace span_s).
  arrivals  inhomogeneous Poisson by thinning: N ~ Poisson(lambda_peak * duration_s) uniform times
            in [0, duration_s), each kept with probability c(t), then sorted.
  sizes     each arrival takes the (prompt, output, prefix blocks) of a trace row drawn uniformly
            with replacement, so a row drawn twice repeats its prefix (a cache hit if still cached).
  seed      one numpy Generator(seed) draws N, the times, the thinning and the rows, in that order:
            same seed, same day.
Parameters: rate_scale > 0; f in (0, 1]; trough_hour in [0, 24); duration_s in (0, D].
Complexity: O(N log N) time, O(N) memory, numpy-vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dspine_lab.sim.traces import TraceTable

DAY_S = 86_400.0


def diurnal_factor(t_s: np.ndarray | float, trough_fraction: float, trough_hour: float) -> np.ndarray | float:
    """c(t) = f + (1 - f) * sin^2(pi * (t - t_min) / D)."""
    phase = np.pi * (np.asarray(t_s, dtype=np.float64) - trough_hour * 3600.0) / DAY_S
    return trough_fraction + (1.0 - trough_fraction) * np.sin(phase) ** 2


@dataclass(frozen=True)
class DayArrivals:
    arrival_s: np.ndarray
    row: np.ndarray
    peak_rate_per_s: float

    @property
    def num_requests(self) -> int:
        return int(self.arrival_s.shape[0])


def sample_day(
    trace: TraceTable,
    *,
    rate_scale: float,
    trough_fraction: float,
    trough_hour: float,
    duration_s: float,
    seed: int,
    start_s: float = 0.0,
) -> DayArrivals:
    """Apply the curve, rate, arrivals, sizes and seed rules over [start_s, start_s + duration_s)."""
    rng = np.random.default_rng(seed)
    peak = rate_scale * trace.mean_rate_per_s
    count = int(rng.poisson(peak * duration_s))
    times = start_s + rng.random(count) * duration_s
    keep = rng.random(count) < diurnal_factor(times, trough_fraction, trough_hour)
    times = np.sort(times[keep])
    rows = rng.integers(0, trace.num_requests, size=times.shape[0])
    return DayArrivals(arrival_s=times, row=rows, peak_rate_per_s=peak)


def bin_index(arrival_s: np.ndarray, start_s: float, bin_s: float, num_bins: int) -> np.ndarray:
    """Bin b of each arrival, b = floor((t - start_s) / bin_s) clipped to [0, num_bins - 1]
    (arrivals past the end fall in the last bin)."""
    return np.clip(((arrival_s - start_s) // bin_s).astype(np.int64), 0, num_bins - 1)
