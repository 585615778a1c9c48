"""PNG of `bench ab-report`'s latency differences (ab_deltas.py): one panel per candidate arm.

- one row per metric and percentile (TTFT p50, TTFT p99, then the split when present), top to bottom
  in the report's order, and e2e's rows in a panel below with its own scale (seconds of decode would
  flatten tens of milliseconds of TTFT); x: candidate minus baseline in ms.
- a dot at the difference and a bar over its 95% interval (a dot alone when there is none); a
  vertical line at 0.
- colour by the interval's reading: green when wholly under 0 (the candidate is faster), red when
  wholly over 0, grey otherwise (no significant difference, or too few values).
- the panel's title names the candidate, the baseline and each arm's number of requests.
Matplotlib's Agg canvas, as plots.py.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .ab_deltas import PercentileDelta
from .ab_report import AbReport, ArmComparison

READING_COLOURS = {"lower": "tab:green", "higher": "tab:red"}
METRIC_LABELS = {"ttft_ms": "TTFT", "ttft_replica_ms": "TTFT in the replica", "ttft_outside_ms": "TTFT outside it",
                 "e2e_ms": "e2e"}


def delta_rows(comparison: ArmComparison) -> list[tuple[str, PercentileDelta, str]]:
    """(label, delta, colour) per row, top to bottom."""
    return [(f"{METRIC_LABELS.get(d.metric, d.metric)} p{d.percentile}", d,
             READING_COLOURS.get(d.reading, "tab:gray")) for d in comparison.percentile_deltas]


def _split_e2e(rows: list[tuple[str, PercentileDelta, str]]) -> list[list[tuple[str, PercentileDelta, str]]]:
    """[TTFT rows, e2e rows]: e2e gets a panel of its own scale."""
    return [[r for r in rows if r[1].metric != "e2e_ms"], [r for r in rows if r[1].metric == "e2e_ms"]]


def _draw_rows(axes, rows: list[tuple[str, PercentileDelta, str]], xlabel: str) -> None:
    for y, (_, d, colour) in enumerate(rows):
        if d.delta_ci is not None:
            axes.plot(d.delta_ci, [y, y], color=colour, linewidth=2.5, solid_capstyle="butt")
        axes.plot([d.delta], [y], "o", color=colour, markersize=5)
    axes.axvline(0.0, color="black", linewidth=0.8)
    axes.set_yticks(range(len(rows)), [label for label, _, _ in rows], fontsize=7)
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_xlabel(xlabel, fontsize=7)
    axes.grid(True, axis="x", alpha=0.3)


def draw_deltas(report: AbReport) -> Figure:
    comparisons = [c for c in report.comparisons if c.percentile_deltas]
    if not comparisons:
        raise ValueError("no latency differences to draw: the report needs two arms with timed requests")
    groups = [_split_e2e(delta_rows(c)) for c in comparisons]
    heights = [max(len(g[i]) for g in groups) for i in range(2)]
    heights = [h for h in heights if h]
    figure = Figure(figsize=(5.2 * len(comparisons), 1.4 + 0.45 * sum(heights) + 0.5 * len(heights)), dpi=110)
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(len(heights), len(comparisons), height_ratios=heights)
    for k, (comparison, parts) in enumerate(zip(comparisons, groups)):
        first = comparison.percentile_deltas[0]
        xlabel = f"{comparison.candidate} - {comparison.baseline}, ms (95% bootstrap interval)"
        panels = [rows for rows in parts if rows]
        for i, rows in enumerate(panels):
            axes = figure.add_subplot(grid[i, k])
            _draw_rows(axes, rows, xlabel)
            if i == 0:
                axes.set_title(f"{comparison.candidate} ({first.num_candidate} requests) vs {comparison.baseline} "
                               f"({first.num_baseline}); green: faster, red: slower", fontsize=8)
    figure.tight_layout()
    return figure


def plot_deltas(report: AbReport, path: Path) -> Path:
    draw_deltas(report).savefig(path, format="png")
    return path
