"""PNG of a tolerance sweep (routing_frontier.py): p99 TTFT against prefix-hit rate.

- ours: one marker per tolerance, joined in the order swept and labelled with it; filled when the
  point is on the frontier, hollow when another point beats it; the default tolerance ringed.
- each baseline: one labelled marker at its mean p99 TTFT and hit rate.
- the axes span ours' points, cache_aware's and the goal region's corner, with 10% margins; a
  baseline outside them is named with its figures in the legend instead of stretching the axes.
- the goal region, when cache_aware was replayed: hit rate >= cache_aware's and p99 TTFT <= the
  lower of 0.85 x cache_aware's and (with pow2) 0.70 x pow2's, shaded; a point inside has mean figures
  that reach the p99 and hit targets, which is no verdict (the table's paired goals give those).
Points without both figures are left out. Matplotlib's Agg canvas, as plots.py.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dspine_lab.bench.routing_results import OURS, P99_CUT_TARGETS

# The goal rule's p99 reductions (routing_results.P99_CUT_TARGETS) as the most p99 each baseline allows.
P99_FACTOR = {name: 1.0 - target for name, target in P99_CUT_TARGETS.items()}
BASELINE_MARKERS = {"pow2": "s", "cache_aware": "D", "least_load": "^"}


def plot_tolerance_sweep(result: dict, path: Path) -> Path:
    figure = draw_tolerance_sweep(result)
    figure.savefig(path, format="png")
    return path


def draw_tolerance_sweep(result: dict) -> Figure:
    figure = Figure(figsize=(7.5, 4.8), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    points = [p for p in result["points"] if _drawable(p)]
    xs = [p["prefix_hit_rate"] for p in points]
    ys = [p["ttft_p99_sim_s"] for p in points]
    axes.plot(xs, ys, color="tab:blue", linewidth=1, zorder=2, label=f"{OURS} (TTFT guard tolerance)")
    for i, (p, x, y) in enumerate(zip(points, xs, ys)):
        axes.scatter([x], [y], s=40, zorder=3, edgecolors="tab:blue",
                     facecolors="tab:blue" if p["on_frontier"] else "white")  # fmt: skip
        if p["is_default"]:
            axes.scatter([x], [y], s=160, zorder=3, facecolors="none", edgecolors="black", linewidths=1)
        axes.annotate(p["label"], (x, y), textcoords="offset points", xytext=(6, 6 if i % 2 == 0 else -12), fontsize=8)
    baselines = {name: m for name, m in result["baselines"].items() if _drawable(m)}
    span_x, span_y = list(xs), list(ys)
    goal = None
    if "cache_aware" in baselines:
        hit_min = baselines["cache_aware"]["prefix_hit_rate"]
        p99_max = min(P99_FACTOR[n] * baselines[n]["ttft_p99_sim_s"] for n in P99_FACTOR if n in baselines)
        goal = (hit_min, p99_max)
        span_x += [hit_min]
        span_y += [baselines["cache_aware"]["ttft_p99_sim_s"], p99_max]
    x_lo, x_hi = _padded(span_x or [0.0, 1.0])
    y_lo, y_hi = _padded(span_y or [0.0, 1.0])
    for name, m in baselines.items():
        x, y = m["prefix_hit_rate"], m["ttft_p99_sim_s"]
        if x_lo <= x <= x_hi and y_lo <= y <= y_hi:
            axes.scatter([x], [y], marker=BASELINE_MARKERS.get(name, "o"), s=50, color="tab:gray", zorder=3, label=name)
            axes.annotate(name, (x, y), textcoords="offset points", xytext=(6, -12), fontsize=8)
        else:
            axes.plot([], [], " ", label=f"{name} (off the axes): hit {x:.3f}, p99 {y:.2f} s")
    if goal is not None:
        axes.fill_between([goal[0], x_hi], y_lo, goal[1], color="tab:green", alpha=0.12, zorder=1,
                          label="p99 and hit targets (point estimates; verdicts: paired)")  # fmt: skip
    axes.set_xlim(x_lo, x_hi)
    axes.set_ylim(y_lo, y_hi)
    axes.set_xlabel("prefix-cache hit rate (cached / prompt tokens)")
    axes.set_ylabel("TTFT p99 (simulated s)")
    settings = result["settings"]
    axes.set_title(f"SIMULATED TTFT guard sweep: {settings['trace']} slice, seed {settings['seed']}, "
                   f"{settings['num_replicas']} replicas, engine seeds {result['engine_seeds']}", fontsize=9)  # fmt: skip
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    return figure


def _padded(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    margin = 0.1 * (hi - lo) or 0.05 * abs(hi) or 1.0
    return lo - margin, hi + margin


def _drawable(figures: dict) -> bool:
    return figures["ttft_p99_sim_s"] is not None and figures["prefix_hit_rate"] is not None
