"""Entry points: load a day's traffic once, simulate it under any policy.

Rule: load_day resolves the trace (rows clamped so prompt + output fits one replica's KV tokens)
and samples the day's arrivals (arrivals.py); simulate_day runs DaySimulation on them. Passing the
loaded trace, profile and day lets several policies replay the very same day.
Complexity: O(trace rows) to load; see simulator.py for a run.
"""

from __future__ import annotations

from ray_dspine.engines.simulated.profile import SimProfile, load_profile
from dspine_lab.sim.arrivals import DayArrivals, sample_day
from dspine_lab.sim.config import SimConfig
from dspine_lab.sim.results import DayResult
from dspine_lab.sim.simulator import DaySimulation
from dspine_lab.sim.traces import TraceTable, load_trace_table


def load_day(config: SimConfig, trace: TraceTable | None = None) -> tuple[TraceTable, DayArrivals]:
    engine = config.pool.engine
    trace = trace or load_trace_table(config.traffic.trace, max_context_tokens=engine.total_kv_tokens)
    t = config.traffic
    day = sample_day(
        trace, rate_scale=t.rate_scale, trough_fraction=t.trough_fraction, trough_hour=t.trough_hour,
        duration_s=t.duration_s, seed=t.seed, start_s=t.start_s,
    )  # fmt: skip
    return trace, day


def simulate_day(
    config: SimConfig, trace: TraceTable | None = None, profile: SimProfile | None = None, day: DayArrivals | None = None
) -> DayResult:
    """Run one simulated day; pass a loaded trace/profile/day to reuse them across runs."""
    if day is None or trace is None:
        trace, day = load_day(config, trace)
    profile = profile or load_profile(config.pool.engine.profile)
    return DaySimulation(config, trace, profile, day).run()
