"""The hindsight schedule: the fewest replicas per time bin that still keep the day's SLO attainment.

A reference for reading a policy's cost: what a planner that knew the whole day in advance would pay.

Rules (bin b covers [start_s + b * bin_s, start_s + (b + 1) * bin_s); sizes are whole replica counts):
  sizes     the day runs with a fixed pool of N replicas for N = min_replicas, min_replicas + 1, ...
            up to and including the first N whose day keeps >= 1 - (1 - min_attainment) / 2 of
            requests within SLO, and never past max_replicas or max_sizes sizes.
            misses[N][b] = requests arriving in bin b that are not within SLO under N.
  choose    minimise sum_b N_b (replica-hours = bin_s / 3600 * sum_b N_b) subject to
            sum_b misses[N_b][b] <= budget = floor((1 - min_attainment) * requests):
            (1) Lagrangian: at a price lam per miss each bin takes argmin_N (N + lam * misses[N][b]),
                ties to fewer replicas; bisection (60 halvings of [0, largest - smallest + 1]; at the
                top one miss outweighs every replica) finds the lowest lam whose choice fits budget.
            (2) fill: while budget is left, the bin whose next smaller size adds the fewest misses
                (ties: the earlier bin) steps down, if the added misses still fit.
  infeasible when the largest size in every bin still misses more than budget: every bin takes
            the largest size and feasible is False.
  replay    the schedule runs as a policy (SchedulePolicySpec, lead_s = startup_s, so a bin's
            replicas are ready when it begins; removed replicas drain as under any policy), starting
            with the first bin's count. The replayed day is the reference's cost and attainment;
            the estimate from the fixed days is reported beside it.
  tighten   transitions cost misses the fixed days do not see: while the replay keeps fewer than
            min_attainment of requests within SLO (at most max_replays replays), the budget shrinks
            by the replay's shortfall in requests and the schedule is chosen and replayed again.
Not a proof of optimality: a bin's misses under N depend on the queue it inherits from the bin before
under the same N, and bins are whole. It is a hindsight reference, not a bound a real policy could reach.
Complexity: (#sizes + #replays) simulated days + O(bins * sizes * 60) to choose, O(bins^2) to fill.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ray_dspine.engines.simulated.profile import SimProfile
from dspine_lab.sim.arrivals import DayArrivals, bin_index
from dspine_lab.sim.config import FixedPolicySpec, SchedulePolicySpec, SimConfig
from dspine_lab.sim.results import DayResult
from dspine_lab.sim.simulator import DaySimulation
from dspine_lab.sim.traces import TraceTable

BISECTIONS = 60


class FixedDay(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_replicas: int
    slo_attainment: float
    replica_hours: float
    cost_per_completed_request_usd: float


class HindsightResult(BaseModel):
    """The hindsight schedule of one day; SIMULATED like every figure of the simulator."""

    model_config = ConfigDict(extra="forbid")

    simulated: bool = True
    bin_s: float
    min_attainment: float
    fixed_days: list[FixedDay]
    counts: list[int] = Field(description="Replicas per bin.")
    feasible: bool
    replays: int = Field(description="Schedules replayed (tighten rule).")
    estimated_attainment: float = Field(description="From the fixed days' misses, before the replay.")
    estimated_replica_hours: float
    replay: DayResult


def choose_counts(sizes: list[int], misses: np.ndarray, budget: int) -> tuple[list[int], bool]:
    """Apply the choose rule; misses[i][b] belongs to sizes[i] (ascending). Returns (counts, feasible)."""
    sizes_arr = np.asarray(sizes, dtype=float)
    bins = np.arange(misses.shape[1])

    def pick(lam: float) -> np.ndarray:
        return np.argmin(sizes_arr[:, None] + lam * misses, axis=0)  # first minimum: fewer replicas

    def used(index: np.ndarray) -> float:
        return float(misses[index, bins].sum())

    top = float(sizes[-1] - sizes[0] + 1)
    if used(pick(top)) > budget:
        return [sizes[-1]] * misses.shape[1], False
    lo, hi = 0.0, top
    if used(pick(lo)) <= budget:
        hi = lo
    for _ in range(BISECTIONS):
        if hi == lo:
            break
        mid = (lo + hi) / 2.0
        if used(pick(mid)) <= budget:
            hi = mid
        else:
            lo = mid
    index = pick(hi)
    spent = used(index)
    while True:
        steps = [(misses[index[b] - 1, b] - misses[index[b], b], int(b)) for b in bins if index[b] > 0]
        fitting = [(extra, b) for extra, b in steps if spent + extra <= budget]
        if not fitting:
            break
        extra, b = min(fitting)
        index[b] -= 1
        spent += extra
    return [sizes[i] for i in index], True


def misses_by_bin(
    ok: np.ndarray, arrival_s: np.ndarray, start_s: float, bin_s: float, num_bins: int
) -> tuple[np.ndarray, np.ndarray]:
    """(misses, requests) per bin from the per-request within-SLO mask."""
    b = bin_index(arrival_s, start_s, bin_s, num_bins)
    return np.bincount(b, weights=(~ok).astype(float), minlength=num_bins), np.bincount(b, minlength=num_bins)


def hindsight_day(
    config: SimConfig,
    trace: TraceTable,
    profile: SimProfile,
    day: DayArrivals,
    *,
    bin_s: float = 300.0,
    min_attainment: float = 0.99,
    max_sizes: int = 16,
    max_replays: int = 3,
    progress: Callable[[str], None] = lambda _: None,
) -> HindsightResult:
    """Apply the sizes, choose and replay rules to one loaded day."""
    pool, traffic = config.pool, config.traffic
    num_bins = max(1, math.ceil(traffic.duration_s / bin_s - 1e-9))
    stop_at = 1.0 - (1.0 - min_attainment) / 2.0
    sizes: list[int] = []
    rows: list[np.ndarray] = []
    fixed: list[FixedDay] = []
    for n in range(pool.min_replicas, min(pool.max_replicas, pool.min_replicas + max_sizes - 1) + 1):
        progress(f"fixed pool of {n} replica(s)")
        sim_pool = pool.model_copy(update={"initial_replicas": n})
        sim = DaySimulation(config.model_copy(update={"pool": sim_pool, "policy": FixedPolicySpec(num_replicas=n)}),
                            trace, profile, day)  # fmt: skip
        result = sim.run()
        missed, _ = misses_by_bin(sim.within_slo(), day.arrival_s, traffic.start_s, bin_s, num_bins)
        sizes.append(n)
        rows.append(missed)
        fixed.append(FixedDay(
            num_replicas=n, slo_attainment=result.slo_attainment, replica_hours=result.replica_hours,
            cost_per_completed_request_usd=result.cost_per_completed_request_usd,
        ))  # fmt: skip
        if result.slo_attainment >= stop_at:
            break
    misses = np.vstack(rows)
    total = int(day.num_requests)
    allowed = math.floor((1.0 - min_attainment) * total + 1e-9)
    budget = allowed
    for attempt in range(1, max_replays + 1):
        counts, feasible = choose_counts(sizes, misses, budget)
        index = [sizes.index(c) for c in counts]
        estimated_misses = float(sum(misses[i, b] for b, i in enumerate(index)))
        schedule = SchedulePolicySpec(bin_s=bin_s, counts=counts, lead_s=pool.startup_s)
        progress(f"replay {attempt}: hindsight schedule of {min(counts)}-{max(counts)} replicas")
        replay_pool = pool.model_copy(update={"initial_replicas": counts[0]})
        replay = DaySimulation(config.model_copy(update={"pool": replay_pool, "policy": schedule}),
                               trace, profile, day).run()  # fmt: skip
        shortfall = round((1.0 - replay.slo_attainment) * total) - allowed
        if shortfall <= 0 or not feasible or budget <= 0:
            break
        budget = max(0, budget - shortfall)
    return HindsightResult(
        bin_s=bin_s,
        min_attainment=min_attainment,
        fixed_days=fixed,
        counts=counts,
        feasible=feasible,
        replays=attempt,
        estimated_attainment=1.0 - estimated_misses / total if total else 1.0,
        estimated_replica_hours=sum(
            c * min(bin_s, traffic.duration_s - b * bin_s) for b, c in enumerate(counts)
        ) / 3600.0,  # fmt: skip
        replay=replay,
    )
