"""Paired comparison of ours against a baseline, replay by replay, with a 95% interval and a verdict.

A single replay cannot tell ours' prefix-hit rate from cache_aware's when the two differ by a few
tenths of a point: which large prefixes survive in the LRU caches until reused moves each replay's rate
by that much. Both routers see the same slice with the same engine seed (virtual replay) or the same
repeat of an interleaved run (Ray replay), so their per-replay figures pair up, and the paired
differences cancel what the pair shares.

Rules (n pairs i = 1..n, one per replay shared by ours and the baseline):
  p99 cut        c_i = 1 - p99_ours_i / p99_base_i                 (a fraction; pairs with a missing or
                                                                   zero baseline p99 are left out)
  hit points     d_i = 100 * (hit_ours_i - hit_base_i)             (percentage points)
  mean           m = (1/n) * sum x_i
  spread         s = sqrt(sum (x_i - m)^2 / (n - 1)),  se = s / sqrt(n)
  interval       [m - t * se, m + t * se],  t = t_{0.975, n - 1} (Student's t, two-sided 95%)
  verdict        against a goal "x >= target":
                   met        when the interval's low end >= target (cleared with 95% confidence)
                   missed     when its high end < target
                   undecided  otherwise (these replays cannot tell), and whenever there is no interval
                              (n = 1: the mean is that replay's figure, which decides nothing)
  goals          ttft_p99_reduction_vs_pow2 >= 0.30, ttft_p99_reduction_vs_cache_aware >= 0.15 (on c_i),
                 prefix_hit_points_vs_cache_aware >= 0 (on d_i): the point goals of routing_results.py,
                 per pair.
t quantiles: the two-sided 95% points of Student's t for 1-30 degrees of freedom from the standard
table; above 30 the Cornish-Fisher expansion in z = 1.959964 (error under 1e-4 there).
Complexity: O(n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dspine_lab.bench.routing_results import P99_CUT_TARGETS

# t_{0.975, df} for df = 1..30.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959964

Verdict = Literal["met", "missed", "undecided"]

# (goal name, baseline, measure, target): the point goals, judged per pair.
PAIRED_GOALS: tuple[tuple[str, str, str, float], ...] = (
    ("ttft_p99_reduction_vs_pow2", "pow2", "p99_cut", P99_CUT_TARGETS["pow2"]),
    ("ttft_p99_reduction_vs_cache_aware", "cache_aware", "p99_cut", P99_CUT_TARGETS["cache_aware"]),
    ("prefix_hit_points_vs_cache_aware", "cache_aware", "hit_points", 0.0),
)


def t975(df: int) -> float:
    """The two-sided 95% point of Student's t with `df` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z, v = _Z975, float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
    )


class PairedGoal(BaseModel):
    """One goal judged on paired replays."""

    model_config = ConfigDict(extra="forbid")

    name: str
    baseline: str
    target: float = Field(description="The goal is mean >= target.")
    num_pairs: int = Field(ge=1)
    mean: float
    ci95_low: float | None = Field(description="Low end of the 95% interval; None with one pair.")
    ci95_high: float | None
    verdict: Verdict
    per_pair: list[float] = Field(description="c_i (a fraction) or d_i (points), in replay order.")


def interval95(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """(mean, low, high) by the rule above; low and high are None for one value."""
    n = len(values)
    if n == 0:
        raise ValueError("no pairs")
    m = sum(values) / n
    if n == 1:
        return m, None, None
    s = math.sqrt(sum((x - m) ** 2 for x in values) / (n - 1))
    half = t975(n - 1) * s / math.sqrt(n)
    return m, m - half, m + half


def verdict(low: float | None, high: float | None, target: float) -> Verdict:
    """The verdict rule on a 95% interval [low, high] against a goal "x >= target"; no interval: undecided."""
    if low is None or high is None:
        return "undecided"
    if low >= target:
        return "met"
    if high < target:
        return "missed"
    return "undecided"


def p99_cuts(ours: Sequence[float | None], base: Sequence[float | None]) -> list[float]:
    return [1.0 - o / b for o, b in zip(ours, base) if o is not None and b]


def hit_points(ours: Sequence[float | None], base: Sequence[float | None]) -> list[float]:
    return [100.0 * (o - b) for o, b in zip(ours, base) if o is not None and b is not None]


def paired_goals(
    p99_by_pair: dict[str, Sequence[float | None]], hit_by_pair: dict[str, Sequence[float | None]], ours: str
) -> list[PairedGoal]:
    """The paired goals for every baseline present; lists are per pair, in the same order for every router."""
    out: list[PairedGoal] = []
    for name, base, measure, target in PAIRED_GOALS:
        if base not in p99_by_pair or ours not in p99_by_pair:
            continue
        if measure == "p99_cut":
            values = p99_cuts(p99_by_pair[ours], p99_by_pair[base])
        else:
            values = hit_points(hit_by_pair[ours], hit_by_pair[base])
        if not values:
            continue
        m, low, high = interval95(values)
        out.append(
            PairedGoal(
                name=name, baseline=base, target=target, num_pairs=len(values), mean=m,
                ci95_low=low, ci95_high=high, verdict=verdict(low, high, target), per_pair=values,
            )  # fmt: skip
        )
    return out


def all_met(goals: Sequence[PairedGoal]) -> bool | None:
    """True when every paired goal is met, False when one is not; None without paired goals."""
    return all(g.verdict == "met" for g in goals) if goals else None


def format_paired(goals: Sequence[PairedGoal]) -> list[str]:
    """One line per goal, e.g. 'SIMULATED paired NAME: -0.28 pt (95% CI -0.69 to +0.13, 12 pairs) vs target >= +0.00 pt: undecided'."""
    lines = []
    for g in goals:
        if g.name.startswith("prefix_hit"):
            unit, scale, target = " pt", 1.0, f"{g.target:+.2f} pt"
            pattern = "{:+.2f}"
        else:
            unit, scale, target = "%", 100.0, f"{100 * g.target:.0f}%"
            pattern = "{:.1f}"
        value = pattern.format(scale * g.mean) + unit
        if g.ci95_low is None or g.ci95_high is None:
            spread = "one pair, no interval"
        else:
            low, high = pattern.format(scale * g.ci95_low), pattern.format(scale * g.ci95_high)
            spread = f"95% CI {low} to {high}, {g.num_pairs} pairs"
        lines.append(f"SIMULATED paired {g.name}: {value} ({spread}) vs target >= {target}: {g.verdict}")
    return lines
