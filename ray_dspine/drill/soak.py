"""The soak: open-loop Poisson arrivals at a share of the measured capacity, and the stack's memory over it.

Rules:
  rate       lambda = soak_load x capacity (completions/s measured by the concurrency scenario).
  arrivals   send times t_0 = 0, t_(i+1) = t_i + g_i with g_i ~ Exp(lambda) drawn from random.Random(seed)
             (`expovariate`), kept while t_i < soak duration; each arrival is one streaming normal request
             sent at its time whether or not earlier ones have answered (open loop). Expected count:
             lambda x duration.
  end        after the last arrival the soak waits for every request in flight; each is bounded by the client
             timeout, so the soak ends by duration + client timeout.
  memory     RSS of the local Ray cluster's processes (rss.snapshot) just before the first arrival and just
             after the last answer; growth = (after - before) / before in percent.
  pass       0 lost, 0 hung, 0 failed, and growth < rss_growth_limit_percent. With no local Ray cluster the
             memory is "not measured" and does not decide the verdict (the reason says so).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from .context import DrillContext
from .exchange import Exchange
from .result import ScenarioResult, tally, verdict
from .rss import RssSnapshot, growth_percent


def arrival_times(rate_per_s: float, duration_s: float, seed: int) -> list[float]:
    """The `arrivals` rule: Poisson send offsets in [0, duration_s)."""
    rng = random.Random(seed)
    times, t = [], 0.0
    while t < duration_s:
        times.append(t)
        t += rng.expovariate(rate_per_s)
    return times


async def run_soak(ctx: DrillContext, rss: Callable[[], RssSnapshot | None]) -> ScenarioResult:
    s = ctx.settings
    capacity = ctx.capacity_rps or 0.0
    if capacity <= 0.0:
        return verdict(ScenarioResult(name="soak"), ["no measured capacity (concurrency completed nothing)"])
    rate = s.soak_load * capacity
    times = arrival_times(rate, s.soak_s, s.seed)
    ctx.progress.start("soak", len(times))
    before = await asyncio.to_thread(rss)

    async def one(at_s: float, start: float) -> Exchange:
        await ctx.sleep(max(0.0, start + at_s - ctx.clock()))
        ex = await ctx.chat(stream=True)
        ctx.progress.add()
        return ex

    start = ctx.clock()
    exchanges = await asyncio.gather(*(one(t, start) for t in times))
    ctx.progress.finish()
    after = await asyncio.to_thread(rss)
    result = tally("soak", exchanges)
    growth = growth_percent(before, after) if before is not None and after is not None else None
    result.figures = {
        "rate_per_s": rate, "duration_s": s.soak_s, "num_arrivals": len(times),
        "rss_before": before.model_dump() if before else None, "rss_after": after.model_dump() if after else None,
        "rss_total_before_bytes": before.total_bytes if before else None,
        "rss_total_after_bytes": after.total_bytes if after else None,
        "rss_growth_percent": growth,
    }
    problems = []
    if result.lost:
        problems.append(f"{result.lost} lost")
    if result.hung:
        problems.append(f"{result.hung} hung")
    if result.num_failed:
        problems.append(f"{result.num_failed} failed")
    if growth is not None and growth >= s.rss_growth_limit_percent:
        problems.append(f"RSS grew {growth:.1f}% (limit {s.rss_growth_limit_percent:g}%)")
    result = verdict(result, problems)
    if growth is None and result.passed:
        result.reason = "ok (RSS not measured: no local Ray cluster)"
    return result
