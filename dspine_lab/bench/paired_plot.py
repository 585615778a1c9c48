"""PNG of the paired goals (paired.py): one panel per goal, one dot per pair.

- x: the pair (replay) index in run order; y: its figure, the p99 cut in percent or the hit
  difference in points.
- a solid line at the pairs' mean and a shaded band over its 95% interval (none with one pair);
  a dashed red line at the goal's target; the panel's title names the goal, the mean, the interval
  and the verdict, so the picture reads without the table.
Matplotlib's Agg canvas, as plots.py.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from dspine_lab.bench.paired import PairedGoal, format_paired


def _scale(goal: PairedGoal) -> tuple[float, str]:
    return (1.0, "ours - cache_aware, points") if goal.name.startswith("prefix_hit") else (100.0, "p99 TTFT cut, %")


def draw_paired(goals: list[PairedGoal], title: str) -> Figure:
    if not goals:
        raise ValueError("no paired goal to draw: replay ours and at least one baseline")
    figure = Figure(figsize=(4.2 * len(goals), 4.2), dpi=110)
    FigureCanvasAgg(figure)
    for k, (goal, line) in enumerate(zip(goals, format_paired(goals)), start=1):
        axes = figure.add_subplot(1, len(goals), k)
        scale, label = _scale(goal)
        xs = list(range(1, goal.num_pairs + 1))
        axes.scatter(xs, [scale * v for v in goal.per_pair], s=18, color="tab:blue", zorder=3, label="pair")
        axes.axhline(scale * goal.mean, color="tab:blue", linewidth=1.2, label="mean")
        if goal.ci95_low is not None and goal.ci95_high is not None:
            axes.axhspan(scale * goal.ci95_low, scale * goal.ci95_high, color="tab:blue", alpha=0.15, label="95% CI")
        axes.axhline(scale * goal.target, color="tab:red", linestyle="--", linewidth=1, label="target")
        head, _, tail = line.removeprefix("SIMULATED paired ").partition(": ")
        value, _, against = tail.partition(" vs ")
        axes.set_title(f"{head}\n{value}\nvs {against}", fontsize=7)
        axes.set_xlabel("pair (replay)")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_ylabel(label)
        axes.grid(True, alpha=0.3)
        if k == 1:
            axes.legend(fontsize=7, loc="best")
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    return figure


def plot_paired(result: dict, path: Path) -> Path:
    goals = [PairedGoal.model_validate(g) for g in result.get("paired_goals", [])]
    virtual = "virtual time" if result.get("virtual") else "Ray Serve replay"
    figure = draw_paired(goals, f"ours against each baseline, pair by pair (SIMULATED, {virtual})")
    figure.savefig(path, format="png")
    return path
