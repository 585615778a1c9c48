"""PNG of a simulated day: live replicas every 15 minutes per policy, over the offered load.

Lines: each policy's `replicas_by_quarter_hour` (starting + serving replicas, sampled every 900 s) as
a step line labelled with its cost per completed request and SLO attainment; behind them, the
arrival rate of each quarter hour (arrivals in the bin / 900 s) on a right-hand axis.
Matplotlib's Agg canvas only (no pyplot, no global backend change).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dspine_lab.sim.arrivals import bin_index

QUARTER_S = 900.0


def arrivals_per_quarter_hour(arrival_s: np.ndarray, start_s: float, duration_s: float) -> np.ndarray:
    """Requests per second in each 900 s bin from start_s (arrivals past the end fall in the last bin)."""
    bins = max(1, int(np.ceil(duration_s / QUARTER_S - 1e-9)))
    return np.bincount(bin_index(arrival_s, start_s, QUARTER_S, bins), minlength=bins) / QUARTER_S


def plot_day(rows: list[dict], rate_per_s: np.ndarray, title: str, path: Path) -> Path:
    """rows: DayResult dicts with a `name`; writes the PNG and returns its path."""
    figure = Figure(figsize=(9, 4.8), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    load = axes.twinx()
    hours = np.arange(len(rate_per_s)) * QUARTER_S / 3600.0
    load.fill_between(hours, rate_per_s, step="post", color="0.85", zorder=0)
    load.set_ylabel("offered load, requests/s")
    axes.set_zorder(load.get_zorder() + 1)
    axes.patch.set_visible(False)
    for row in rows:
        counts = row["replicas_by_quarter_hour"]
        label = (
            f"{row['name']}: {1000 * row['cost_per_completed_request_usd']:.3f} mUSD/req, "
            f"{100 * row['slo_attainment']:.2f}% in SLO"
        )
        axes.step(np.arange(len(counts)) * QUARTER_S / 3600.0, counts, where="post", label=label, linewidth=1.6)
    axes.set_xlabel("hour of the simulated day")
    axes.set_ylabel("live replicas")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def plot_frontier(result: dict, policies: tuple[str, ...], labels: dict[str, str], title: str, path: Path) -> Path:
    """Cost per completed request against SLO attainment on the held-out day, one line per policy:
    the configuration chosen for each attainment target (frontier.py), each point marked with the
    targets it was chosen for; a target a policy has no configuration for leaves no point."""
    figure = Figure(figsize=(9, 5.2), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    for policy in policies:
        points = []
        for entry in result["frontier"]:
            row = entry["policies"].get(policy)
            if row is not None:
                h = row["held_out"]
                points.append((100 * h["slo_attainment"], 1000 * h["cost_per_completed_request_usd"], entry["target"]))
        if not points:
            continue
        merged: dict[tuple[float, float], list[float]] = {}  # one configuration chosen for several targets
        for x, y, target in points:
            merged.setdefault((x, y), []).append(target)
        xy = sorted(merged)
        line = axes.plot([p[0] for p in xy], [p[1] for p in xy], marker="o", linewidth=1.4, label=labels[policy])
        for x, y in xy:
            text = ", ".join(f"{100 * t:g}" for t in merged[(x, y)])
            axes.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=6, color=line[0].get_color())
    axes.set_xlabel("SLO attainment on the held-out day, % (label: the target it was chosen for)")
    axes.set_ylabel("cost per completed request, mUSD")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path
