"""Percentiles, means and bootstrap confidence intervals for benchmark figures.

Rules:
- Percentile (numpy's default "linear" method): for sorted x_0..x_(n-1) and q in [0, 100],
  `h = (n - 1) * q / 100`, `P_q = x_floor(h) + (h - floor(h)) * (x_ceil(h) - x_floor(h))`.
  Example: 1..100 gives P50 = 50.5, P95 = 95.05, P99 = 99.01.
- Bootstrap CI on a mean (percentile bootstrap): draw B resamples of size n with replacement from
  the data, take each resample's mean; the (1 - c)/2 and (1 + c)/2 percentiles of those B means
  (by the rule above) bound the interval. A constant array gives the exact interval [c, c].
- Bootstrap CI on a ratio of means `mean(b) / mean(a)`: resample a and b independently (each with
  its own size) B times and take the percentiles of the B ratios; resamples whose `mean(a)` is 0 are
  dropped. Identical groups give a ratio estimate of exactly 1.
- Paired cluster bootstrap on `stat(arm values) / stat(baseline values)` (stat: the mean or P50) over
  pairs (cluster, baseline value, arm value), one pair per item measured on both sides (a turn of a
  conversation replayed on two pools): draw B resamples of the clusters with replacement, each taking
  all its pairs on both sides, and take the percentiles of the B ratios (resamples whose baseline
  stat is 0 are dropped). Resampling whole clusters keeps what a conversation's turns share (their
  growing prompts) inside each draw. Pairs whose arm value is r times their baseline value, for one
  r, give the exact interval [r, r] for the mean; for P50 too when r > 0.
- Cluster bootstrap on a ratio of means over two groups of clusters (each arm of a sticky split holds
  the turns of the conversations it drew, a cluster per conversation): resample each group's clusters
  with replacement, independently, B times; a resample's mean pools the values of the clusters drawn
  (sum of their values / their count); take the percentiles of mean(b) / mean(a), dropping resamples
  whose mean(a) is 0. With one value per cluster this is the ratio bootstrap above. Why: a
  conversation's turns share its growing prompt, so drawing turns one by one treats them as independent
  and narrows the interval to what the arms' draw of conversations decided. Example: baseline clusters
  [1 x 10] and [3 x 10] against a treatment of 2 everywhere: each baseline resample's mean is 1, 2 or 3
  (probability 1/4, 1/2, 1/4), so the 95% interval on the ratio is [2/3, 2]; drawn by turn it would be
  far narrower around 1.
- Cluster bootstrap on a mean (an arm's own interval, a cluster per conversation): resample the
  clusters with replacement B times; a resample's mean pools the values of the clusters drawn; take
  the percentiles of the B means. With one value per cluster this is the mean bootstrap above.
  Example: clusters [1 x 10] and [3 x 10]: each resample's mean is 1, 2 or 3 (probability 1/4, 1/2,
  1/4), so the 95% interval is [1, 3]; drawn value by value it would be far narrower around 2.
Parameters: B = num_resamples (>= 1, default 1,000); confidence c in (0, 1), default 0.95; the
random generator is passed in (`numpy.random.Generator`) so results are reproducible.
Complexity: O(B * n) time, O(B) memory plus one n-row block of indices at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class Distribution(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(ge=0, description="Number of values.")
    mean: float | None = Field(description="Arithmetic mean; None when empty.")
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None


class ConfidenceInterval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    estimate: float = Field(description="The statistic on the full data.")
    low: float = Field(description="Lower bound.")
    high: float = Field(description="Upper bound.")
    confidence: float = Field(gt=0.0, lt=1.0, description="Coverage level, e.g. 0.95.")
    num_resamples: int = Field(ge=1, description="Bootstrap resamples drawn.")


def percentile(values: Sequence[float], q: float) -> float:
    """The linear-interpolation percentile (q in [0, 100]) of a non-empty sequence."""
    if not len(values):
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be in [0, 100], got {q}")
    return float(np.percentile(np.asarray(values, dtype=float), q, method="linear"))


def mean(values: Sequence[float]) -> float:
    if not len(values):
        raise ValueError("mean of an empty sequence")
    return float(np.mean(np.asarray(values, dtype=float)))


def describe(values: Sequence[float]) -> Distribution:
    """count, mean, p50/p95/p99, min, max (all None but count when empty)."""
    if not len(values):
        return Distribution(count=0, mean=None)
    x = np.asarray(values, dtype=float)
    p50, p95, p99 = np.percentile(x, [50.0, 95.0, 99.0], method="linear")
    return Distribution(
        count=len(x), mean=float(x.mean()), p50=float(p50), p95=float(p95), p99=float(p99),
        min=float(x.min()), max=float(x.max()),
    )


def resample_blocks(
    x: np.ndarray, rng: np.random.Generator, num_resamples: int, max_cells: int = 1_000_000
) -> Iterator[np.ndarray]:
    """`num_resamples` resamples of `x` with replacement, as blocks of rows (one resample per row), each
    block at most `max_cells` drawn indices (at least one row), so memory stays bounded."""
    rows = max(1, max_cells // max(1, len(x)))
    for start in range(0, num_resamples, rows):
        yield x[rng.integers(0, len(x), size=(min(rows, num_resamples - start), len(x)))]


def _resampled_means(x: np.ndarray, rng: np.random.Generator, num_resamples: int) -> np.ndarray:
    return np.concatenate([block.mean(axis=1) for block in resample_blocks(x, rng, num_resamples)])


def _check(confidence: float, num_resamples: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if num_resamples < 1:
        raise ValueError(f"num_resamples must be >= 1, got {num_resamples}")


def _interval(estimate: float, draws: np.ndarray, confidence: float, num_resamples: int) -> ConfidenceInterval:
    """The percentile-bootstrap interval: the (1 - c)/2 and (1 + c)/2 percentiles of the resampled `draws`."""
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(draws, [tail, 100.0 - tail], method="linear")
    return ConfidenceInterval(
        estimate=estimate, low=float(low), high=float(high), confidence=confidence, num_resamples=num_resamples
    )


def bootstrap_mean_ci(
    values: Sequence[float], rng: np.random.Generator, *, num_resamples: int = 1000, confidence: float = 0.95
) -> ConfidenceInterval:
    """Percentile-bootstrap interval on the mean of a non-empty sequence."""
    _check(confidence, num_resamples)
    x = np.asarray(values, dtype=float)
    if not len(x):
        raise ValueError("bootstrap of an empty sequence")
    return _interval(float(x.mean()), _resampled_means(x, rng, num_resamples), confidence, num_resamples)


def paired_cluster_ratio_ci(
    pairs: Sequence[tuple[str, float, float]],
    rng: np.random.Generator,
    *,
    stat: str = "p50",
    num_resamples: int = 1000,
    confidence: float = 0.95,
) -> ConfidenceInterval:
    """Paired cluster bootstrap on `stat(arm) / stat(baseline)` over (cluster, baseline, arm) pairs."""
    _check(confidence, num_resamples)
    if stat not in ("mean", "p50"):
        raise ValueError(f"stat must be 'mean' or 'p50', not {stat!r}")
    if not pairs:
        raise ValueError("paired bootstrap needs at least one pair")
    clusters: dict[str, list[tuple[float, float]]] = {}
    for cluster, base, arm in pairs:
        clusters.setdefault(cluster, []).append((base, arm))
    groups = [np.asarray(v, dtype=float) for v in clusters.values()]

    def ratio(rows: np.ndarray) -> float | None:
        if stat == "mean":
            base, arm = float(rows[:, 0].mean()), float(rows[:, 1].mean())
        else:
            base, arm = float(np.percentile(rows[:, 0], 50)), float(np.percentile(rows[:, 1], 50))
        return None if base == 0.0 else arm / base

    estimate = ratio(np.concatenate(groups))
    if estimate is None:
        raise ValueError("paired bootstrap: the baseline's statistic is 0")
    draws = []
    for _ in range(num_resamples):
        chosen = rng.integers(0, len(groups), size=len(groups))
        value = ratio(np.concatenate([groups[i] for i in chosen]))
        if value is not None:
            draws.append(value)
    if not draws:
        raise ValueError("paired bootstrap: the baseline's statistic is 0 in every resample")
    return _interval(estimate, np.asarray(draws), confidence, num_resamples)


def bootstrap_ratio_ci(
    baseline: Sequence[float],
    treatment: Sequence[float],
    rng: np.random.Generator,
    *,
    num_resamples: int = 1000,
    confidence: float = 0.95,
) -> ConfidenceInterval:
    """Percentile-bootstrap interval on `mean(treatment) / mean(baseline)`."""
    _check(confidence, num_resamples)
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(treatment, dtype=float)
    if not len(a) or not len(b):
        raise ValueError("ratio bootstrap needs two non-empty groups")
    if a.mean() == 0.0:
        raise ValueError("ratio bootstrap: baseline mean is 0")
    means_a = _resampled_means(a, rng, num_resamples)
    means_b = _resampled_means(b, rng, num_resamples)
    keep = means_a != 0.0
    return _interval(float(b.mean() / a.mean()), means_b[keep] / means_a[keep], confidence, num_resamples)


def cluster_resamples(
    clusters: Sequence[Sequence[float]], rng: np.random.Generator, num_resamples: int
) -> tuple[np.ndarray, np.ndarray]:
    """(sum of the values, number of values) of each of `num_resamples` resamples of the non-empty
    `clusters` with replacement, as many clusters per resample as there are (rule above)."""
    kept = [c for c in clusters if len(c)]
    if not kept:
        raise ValueError("cluster bootstrap needs a non-empty cluster")
    sums = np.asarray([float(np.sum(c)) for c in kept])
    counts = np.asarray([len(c) for c in kept], dtype=float)
    total_sums, total_counts = [], []
    for chosen in resample_blocks(np.arange(len(kept)), rng, num_resamples):  # bounded blocks of draws
        total_sums.append(sums[chosen].sum(axis=1))
        total_counts.append(counts[chosen].sum(axis=1))
    return np.concatenate(total_sums), np.concatenate(total_counts)


def cluster_mean_ci(
    clusters: Sequence[Sequence[float]],
    rng: np.random.Generator,
    *,
    num_resamples: int = 1000,
    confidence: float = 0.95,
) -> ConfidenceInterval:
    """Cluster-bootstrap interval on the mean of all values, a list of clusters of values (rule above);
    empty clusters are ignored."""
    _check(confidence, num_resamples)
    kept = [list(c) for c in clusters if len(c)]
    if not kept:
        raise ValueError("cluster bootstrap needs a non-empty cluster")
    means = np.divide(*cluster_resamples(kept, rng, num_resamples))
    return _interval(sum(map(sum, kept)) / sum(map(len, kept)), means, confidence, num_resamples)


def cluster_ratio_ci(
    baseline: Sequence[Sequence[float]],
    treatment: Sequence[Sequence[float]],
    rng: np.random.Generator,
    *,
    num_resamples: int = 1000,
    confidence: float = 0.95,
) -> ConfidenceInterval:
    """Cluster-bootstrap interval on `mean(treatment) / mean(baseline)`, each side a list of clusters of
    values (rule above); empty clusters are ignored."""
    _check(confidence, num_resamples)
    a = [list(c) for c in baseline if len(c)]
    b = [list(c) for c in treatment if len(c)]
    if not a or not b:
        raise ValueError("cluster ratio bootstrap needs two non-empty groups")
    mean_a = sum(map(sum, a)) / sum(map(len, a))
    if mean_a == 0.0:
        raise ValueError("ratio bootstrap: baseline mean is 0")
    means_a = np.divide(*cluster_resamples(a, rng, num_resamples))
    means_b = np.divide(*cluster_resamples(b, rng, num_resamples))
    keep = means_a != 0.0
    estimate = float((sum(map(sum, b)) / sum(map(len, b))) / mean_a)
    return _interval(estimate, means_b[keep] / means_a[keep], confidence, num_resamples)
