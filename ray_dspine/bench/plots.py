"""PNG plots of a replay (matplotlib's Agg canvas; no pyplot, no global backend change).

- `ttft_cdf.png`, `itl_cdf.png`, `e2e_cdf.png`: empirical CDFs, one line per arm; the CDF at x is
  (number of values <= x) / n, over ok requests (ITL: every chunk gap).
- `accept_histogram.png`: per arm, the share of verify steps that produced k tokens,
  `h[k-1] / sum(h)` from the summed accept_histogram (k = 1..len(h)).
- `throughput_over_time.png`: output tokens per second per arm in bins of `bin_s`
  (default: wall time / 60, at least 1 s), counting each content chunk's tokens at its arrival time;
  when a request's chunk counts do not add up to its output tokens (the server did not report
  per-chunk counts), its output tokens are spread evenly over its chunks.
Every plot is written even without data (it then says so), so a run's file list is predictable.
Complexity: O(n log n) for n plotted values.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .records import RequestRecord
from .summary import arm_of

PLOT_FILES = ("ttft_cdf.png", "itl_cdf.png", "e2e_cdf.png", "accept_histogram.png", "throughput_over_time.png")


def _figure() -> tuple[Figure, Axes]:
    figure = Figure(figsize=(7, 4.2), dpi=110)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot(1, 1, 1)


def _save(figure: Figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, format="png")
    return path


def _by_arm(records: Sequence[RequestRecord]) -> dict[str, list[RequestRecord]]:
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(arm_of(r), []).append(r)
    return dict(sorted(groups.items()))


def _no_data(axes: Axes, what: str) -> None:
    axes.text(0.5, 0.5, f"no {what} data", ha="center", va="center", transform=axes.transAxes)


def plot_cdf(records: Sequence[RequestRecord], metric: str, path: Path, title: str) -> Path:
    figure, axes = _figure()
    drawn = False
    for arm, rs in _by_arm(records).items():
        ok = [r for r in rs if r.ok]
        if metric == "itl_s":
            values = [g for r in ok for g in r.itl_s]
        else:
            values = [v for v in (getattr(r, metric) for r in ok) if v is not None]
        if not values:
            continue
        x = np.sort(np.asarray(values, dtype=float))
        y = np.arange(1, len(x) + 1) / len(x)
        axes.step(x * 1000.0, y, where="post", label=f"{arm} (n={len(x)})")
        drawn = True
    axes.set_xlabel(f"{title} (ms)")
    axes.set_ylabel("fraction <= x")
    axes.set_title(f"{title} CDF by arm")
    axes.grid(alpha=0.3)
    if drawn:
        axes.legend(loc="lower right")
    else:
        _no_data(axes, title)
    return _save(figure, path)


def plot_acceptance(records: Sequence[RequestRecord], path: Path) -> Path:
    figure, axes = _figure()
    groups = _by_arm(records)
    histograms: dict[str, np.ndarray] = {}
    for arm, rs in groups.items():
        size = max((len(r.accept_histogram) for r in rs if r.ok), default=0)
        h = np.zeros(size)
        for r in rs:
            if r.ok:
                h[: len(r.accept_histogram)] += r.accept_histogram
        if h.sum() > 0:
            histograms[arm] = h / h.sum()
    width = 0.8 / max(1, len(histograms))
    for i, (arm, share) in enumerate(histograms.items()):
        k = np.arange(1, len(share) + 1)
        axes.bar(k + (i - (len(histograms) - 1) / 2) * width, share, width=width, label=arm)
    axes.set_xlabel("tokens produced by one verify step")
    axes.set_ylabel("share of verify steps")
    axes.set_title("Acceptance histogram by arm")
    axes.grid(alpha=0.3, axis="y")
    if histograms:
        axes.legend()
    else:
        _no_data(axes, "acceptance")
    return _save(figure, path)


def _chunk_weights(record: RequestRecord) -> list[float]:
    if not record.chunk_tokens or sum(record.chunk_tokens) == record.output_tokens or not record.ok:
        return [float(n) for n in record.chunk_tokens]
    return [record.output_tokens / len(record.chunk_tokens)] * len(record.chunk_tokens)


def plot_throughput(records: Sequence[RequestRecord], path: Path, bin_s: float | None = None) -> Path:
    figure, axes = _figure()
    events = [
        (arm_of(r), r.start_unix_s + offset, tokens)
        for r in records
        for offset, tokens in zip(r.chunk_offsets_s, _chunk_weights(r))
    ]
    if events:
        t0 = min(r.start_unix_s for r in records)
        span = max(t for _, t, _ in events) - t0
        width = bin_s or max(1.0, span / 60.0)
        edges = np.arange(0.0, span + width, width)
        if len(edges) < 2:
            edges = np.array([0.0, width])
        for arm in sorted({a for a, _, _ in events}):
            times = [t - t0 for a, t, _ in events if a == arm]
            weights = [n for a, _, n in events if a == arm]
            counts, _ = np.histogram(times, bins=edges, weights=weights)
            axes.step(edges[:-1], counts / width, where="post", label=arm)
        axes.legend()
        axes.set_xlabel(f"time since replay start (s), bins of {width:.3g} s")
    else:
        _no_data(axes, "throughput")
        axes.set_xlabel("time since replay start (s)")
    axes.set_ylabel("output tokens / s")
    axes.set_title("Output throughput over time by arm")
    axes.grid(alpha=0.3)
    return _save(figure, path)


def write_plots(records: Sequence[RequestRecord], out_dir: Path) -> list[Path]:
    """Write the five PNGs into `out_dir` (created if missing); returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        plot_cdf(records, "ttft_s", out_dir / "ttft_cdf.png", "TTFT"),
        plot_cdf(records, "itl_s", out_dir / "itl_cdf.png", "Inter-token latency (per chunk)"),
        plot_cdf(records, "e2e_s", out_dir / "e2e_cdf.png", "End-to-end latency"),
        plot_acceptance(records, out_dir / "accept_histogram.png"),
        plot_throughput(records, out_dir / "throughput_over_time.png"),
    ]
