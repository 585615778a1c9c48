"""Candidate minus baseline at a latency percentile, with a bootstrap 95% interval (`bench ab-report`).

Rules:
- Values: one per completed request, in ms (TTFT; its share in the replica and the rest, over the
  answers that carried Server-Timing's `replica`; end-to-end). Percentiles 50 and 99, by the linear
  rule (rank p/100 * (n - 1) of the sorted values).
- delta(p) = P_p(candidate) - P_p(baseline). Negative: the candidate is faster at that percentile.
- Interval (percentile bootstrap, arms resampled independently): B times, draw each arm's n values
  with replacement and take P_p of each draw; delta* = candidate* - baseline*; the interval is the
  2.5th and 97.5th percentiles of the B values of delta*. When an arm's values carry their
  conversations (bench ab-report passes them: session_id and repetition), a draw takes as many whole
  conversations as the arm has, with replacement, and P_p of all their values: a sticky split assigns
  conversations, whose turns share a growing prompt. None when an arm has fewer than 2 values, or
  fewer than 2 conversations when they are given. A metric that either arm lacks is left out.
- Reading: "lower" when the interval's high end is under 0, "higher" when its low end is over 0,
  else "no significant difference".
Caveats: requests of one arm share queues, so even whole conversations are not independent draws,
and the interval is narrower than the truth when load correlates them. Under 100 values, an arm's P99
lies between its two largest values, and its interval says little more than how large those two are.
Parameters: B in [100, 100000]; the generator is passed in. Complexity: O(B * n log n) per arm and
metric, in blocks of at most 2,000,000 drawn indices.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ray_dspine.bench.stats import resample_blocks

PERCENTILES = (50, 99)
_BLOCK_CELLS = 2_000_000


class PercentileDelta(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str = Field(description="ttft_ms, ttft_replica_ms, ttft_outside_ms or e2e_ms.")
    percentile: int
    num_candidate: int = Field(description="Values the candidate arm's percentile rests on.")
    num_baseline: int
    candidate: float = Field(description="The candidate arm's percentile (ms).")
    baseline: float = Field(description="The baseline arm's percentile (ms).")
    delta: float = Field(description="Candidate minus baseline (ms); negative: the candidate is faster.")
    delta_ci: tuple[float, float] | None = Field(description="Bootstrap 95% interval of the delta (ms).")

    @property
    def reading(self) -> str:
        if self.delta_ci is None:
            return "too few values"
        low, high = self.delta_ci
        if high < 0:
            return "lower"
        if low > 0:
            return "higher"
        return "no significant difference"


def bootstrap_percentiles(values: np.ndarray, percentiles: Sequence[float], rng: np.random.Generator,
                          num_resamples: int) -> np.ndarray:
    """Shape (len(percentiles), num_resamples): each percentile of each resample of `values`."""
    parts = [np.percentile(block, list(percentiles), axis=1)
             for block in resample_blocks(values, rng, num_resamples, _BLOCK_CELLS)]
    return np.concatenate(parts, axis=1)


def bootstrap_conversation_percentiles(values: np.ndarray, conversations: Sequence[Hashable],
                                       percentiles: Sequence[float], rng: np.random.Generator,
                                       num_resamples: int) -> np.ndarray:
    """Shape (len(percentiles), num_resamples): each percentile of each resample of whole conversations
    (the values sharing a label in `conversations`), as many per resample as there are (rule above)."""
    groups: dict[Hashable, list[float]] = {}
    for value, conversation in zip(values, conversations):
        groups.setdefault(conversation, []).append(float(value))
    ordered = np.concatenate([np.asarray(group) for group in groups.values()])  # conversation after conversation
    sizes = np.asarray([len(group) for group in groups.values()])
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    draws = np.empty((len(percentiles), num_resamples))
    for j in range(num_resamples):
        chosen = rng.integers(0, len(sizes), size=len(sizes))
        # the positions of the chosen conversations' values in `ordered`, without a Python loop over them
        lengths = sizes[chosen]
        offsets = np.repeat(starts[chosen] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        draws[:, j] = np.percentile(ordered[offsets + np.arange(lengths.sum())], list(percentiles))
    return draws


def percentile_deltas(metric: str, candidate: Sequence[float], baseline: Sequence[float],
                      rng: np.random.Generator, num_resamples: int,
                      percentiles: Sequence[int] = PERCENTILES, *,
                      candidate_conversations: Sequence[Hashable] | None = None,
                      baseline_conversations: Sequence[Hashable] | None = None) -> list[PercentileDelta]:
    """One delta per percentile; none when either arm has no values. `*_conversations`, when given, label
    each value of that arm with its conversation (rule `Interval`)."""
    c, b = np.asarray(candidate, dtype=float), np.asarray(baseline, dtype=float)
    if not c.size or not b.size:
        return []

    for values, conversations in ((c, candidate_conversations), (b, baseline_conversations)):
        if conversations is not None and len(conversations) != values.size:
            raise ValueError("need one conversation label per value")

    def resamplable(values: np.ndarray, conversations: Sequence[Hashable] | None) -> bool:
        return values.size > 1 if conversations is None else len(set(conversations)) > 1

    def draws(values: np.ndarray, conversations: Sequence[Hashable] | None) -> np.ndarray:
        if conversations is None:
            return bootstrap_percentiles(values, percentiles, rng, num_resamples)
        return bootstrap_conversation_percentiles(values, conversations, percentiles, rng, num_resamples)

    intervals: list[tuple[float, float] | None] = [None] * len(percentiles)
    if resamplable(c, candidate_conversations) and resamplable(b, baseline_conversations):
        delta_draws = draws(c, candidate_conversations) - draws(b, baseline_conversations)
        intervals = [(float(np.percentile(row, 2.5)), float(np.percentile(row, 97.5))) for row in delta_draws]
    out = []
    for p, ci in zip(percentiles, intervals):
        cp, bp = float(np.percentile(c, p)), float(np.percentile(b, p))
        out.append(PercentileDelta(metric=metric, percentile=p, num_candidate=c.size, num_baseline=b.size,
                                   candidate=cp, baseline=bp, delta=cp - bp, delta_ci=ci))
    return out
