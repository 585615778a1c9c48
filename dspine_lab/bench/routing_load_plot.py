"""PNG of a load sweep (routing_load_sweep.py): p99 TTFT and prefix-hit rate against offered load.

- left panel: each router's mean p99 TTFT (simulated s) against the offered rate (requests per
  simulated s), one line with a marker per load, points sorted by rate; the p99 floor
  (no queueing, ideal cache) as a dashed line; the p99 axis starts at 0; when both ours and
  cache_aware were replayed, each of ours' points is labelled with its paired p99 cut against
  cache_aware (the mean over the pairs, in %).
- right panel: each router's mean prefix-hit rate on the same axis.
- both panels: a dotted vertical line at the settings' own load (m = 1) when it was swept.
A load without an offered rate (one request) and a router's point without the figure are left out.
Matplotlib's Agg canvas, as plots.py.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dspine_lab.bench.routing_results import OURS

COLORS = {"pow2": "tab:gray", "cache_aware": "tab:orange", "headroom": "tab:blue", "least_load": "tab:green"}
CUT_GOAL = "ttft_p99_reduction_vs_cache_aware"


def plot_load_sweep(result: dict, path: Path) -> Path:
    figure = draw_load_sweep(result)
    figure.savefig(path, format="png")
    return path


def draw_load_sweep(result: dict) -> Figure:
    figure = Figure(figsize=(10.0, 4.4), dpi=110)
    FigureCanvasAgg(figure)
    p99_axes = figure.add_subplot(1, 2, 1)
    hit_axes = figure.add_subplot(1, 2, 2)
    points = sorted((p for p in result["points"] if p["offered_rate_per_sim_s"] is not None),
                    key=lambda p: p["offered_rate_per_sim_s"])  # fmt: skip
    names = list(points[0]["routers"]) if points else []
    for name in names:
        for axes, field in ((p99_axes, "ttft_p99_sim_s"), (hit_axes, "prefix_hit_rate")):
            pairs = [(p["offered_rate_per_sim_s"], p["routers"][name][field]) for p in points]
            pairs = [(x, y) for x, y in pairs if y is not None]
            axes.plot([x for x, _ in pairs], [y for _, y in pairs], marker="o", color=COLORS.get(name), label=name)
    rates = [p["offered_rate_per_sim_s"] for p in points]
    p99_axes.plot(rates, [p["ttft_floor_p99_sim_s"] for p in points], linestyle="--", color="black",
                  linewidth=1, label="floor (no queueing, ideal cache)")  # fmt: skip
    if OURS in names and "cache_aware" in names:
        p99_axes.plot([], [], " ", label=f"labels: {OURS}'s paired p99 cut vs cache_aware")
        for p in points:
            cut = next((g["mean"] for g in p["paired_goals"] if g["name"] == CUT_GOAL), None)
            y = p["routers"][OURS]["ttft_p99_sim_s"]
            if cut is not None and y is not None:
                p99_axes.annotate(f"{100 * cut:.0f}%", (p["offered_rate_per_sim_s"], y), textcoords="offset points",
                                  xytext=(0, -13), ha="center", fontsize=8, color=COLORS[OURS])  # fmt: skip
    default = next((p for p in points if p["is_default"]), None)
    for axes in (p99_axes, hit_axes):
        if default is not None:
            axes.axvline(default["offered_rate_per_sim_s"], linestyle=":", color="tab:gray", linewidth=1,
                         label="the settings' own load")  # fmt: skip
        axes.set_xlabel("offered load (requests per simulated s)")
        axes.grid(True, alpha=0.3)
    p99_axes.set_ylim(bottom=0.0)
    p99_axes.set_ylabel("TTFT p99 (simulated s)")
    hit_axes.set_ylabel("prefix-cache hit rate (cached / prompt tokens)")
    p99_axes.legend(fontsize=8, loc="upper left")
    settings = result["settings"]
    figure.suptitle(f"Routers against offered load: {settings['trace']} slices {result['slice_seeds']}, "
                    f"{settings['num_replicas']} replicas, engine seeds {result['engine_seeds']} (SIMULATED)",
                    fontsize=9)  # fmt: skip
    figure.tight_layout()
    return figure
