"""`bench routing --virtual --sweep-load`: every router's p99 TTFT and prefix hits against offered load.

A router's gain over another is not one number: well under the replicas' prefill capacity every router
is near the floor, and past it queues grow whatever the placement. This sweep replays the same
sessions at several loads, so an operator sees where each router's tail starts to climb, and where
the goals hold, before sizing a pool.

Rules (simulated seconds throughout; the replays are `bench routing --virtual`'s):
  loads   the values of --sweep-load in the order given: multipliers m > 0 of the settings' offered
          load, each at most once; load m replays with arrival_scale = settings.arrival_scale / m,
          the same sessions, turns and prompts with every arrival time divided by m, so the offered
          rate (requests per simulated second) is m times the rate at load 1.
  point   per load: routing_virtual_report.run_virtual_bench over every slice (--split, --slices, else
          --seed) and engine seed: each router's means, the goals, the paired goals and the p99
          ceiling, as `--virtual` reports them at that arrival_scale; plus m, the arrival_scale and
          the offered rate and the p99 floor (means over the slices; the floor has no queueing, so it
          is the same at every load). `is_default` marks m = 1.
Complexity: L * S * E * R replays for L loads, S slices, E engine seeds and R routers.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import ValidationError

from ray_dspine.cli_errors import CliError

from dspine_lab.bench.flag_lists import bounded_float, parse_flag_list
from dspine_lab.bench.paired import PairedGoal, format_paired
from dspine_lab.bench.routing_virtual import mean_or_none
from dspine_lab.bench.routing_virtual_report import run_virtual_bench
from dspine_lab.bench.routing_workload import RoutingBenchSettings
from ray_dspine.bench.traces.model import TraceRequest

FLAG = "--sweep-load"
POINT_FIELDS = ("routers", "goals", "paired_goals", "ttft_p99_reduction_ceiling", "all_goals_met", "slices", "runs")


def parse_loads(text: str) -> list[float]:
    """The loads rule: a comma list of multipliers > 0, each at most once (flag_lists.py)."""
    return parse_flag_list(text, FLAG, "load", "give multipliers > 0 of the offered load", "0.8,1,1.25",
                           lambda part: bounded_float(part, 0.0, low_inclusive=False))  # fmt: skip


def settings_at_load(settings: RoutingBenchSettings, load: float) -> RoutingBenchSettings:
    """The settings of load m (the loads rule); an arrival_scale out of its range is the flag's error."""
    scale = settings.arrival_scale / load
    try:
        return RoutingBenchSettings.model_validate({**settings.model_dump(), "arrival_scale": scale})
    except ValidationError:
        raise CliError(
            f"argument {FLAG}: load {load:g} needs arrival_scale {settings.arrival_scale:g} / {load:g} = {scale:.4g}, "
            f"outside (0, 100]; give loads of at least {settings.arrival_scale / 100:.4g}"
        ) from None


def run_load_sweep(
    slice_settings: list[RoutingBenchSettings],
    engine_seeds: list[int],
    loads: list[float],
    load_requests: Callable[[RoutingBenchSettings], list[TraceRequest]],
    progress: Callable[[str], None],
) -> dict:
    """Replay every router at every load (rules above), over the slices of `slice_settings` (one settings per
    slice, differing only in the slice's window start and seed); returns the sweep's JSON document."""
    started = time.monotonic()
    settings = slice_settings[0]
    points = []
    for load in loads:
        at_load = settings_at_load(settings, load)
        slices = []
        for these in slice_settings:
            these = settings_at_load(these, load)
            slices.append((these, load_requests(these)))
        result = run_virtual_bench(slices, engine_seeds, lambda line, m=load: progress(f"[load {m:g}x] {line}"))
        rate = mean_or_none([info["offered_rate_per_sim_s"] for info in result["slices"]])
        points.append({
            "load": load,
            "is_default": load == 1.0,
            "arrival_scale": at_load.arrival_scale,
            "offered_rate_per_sim_s": rate,
            "ttft_floor_p99_sim_s": mean_or_none([info["ttft_floor_p99_sim_s"] for info in result["slices"]]),
            **{name: result[name] for name in POINT_FIELDS},
        })  # fmt: skip
        summary = ", ".join(f"{name} {_fmt(m['ttft_p99_sim_s'])}" for name, m in result["routers"].items())
        progress(f"[load {load:g}x] {_fmt(rate)} requests per simulated s: "
                 f"TTFT p99 {summary} simulated s")  # fmt: skip
    return {
        "simulated": True,
        "virtual": True,
        "sweep": "load",
        "note": "virtual time: simulated replica cores and the routers' own code; every router replayed "
        "once per load, slice and engine seed; load m divides every arrival time by m",
        "settings": settings.model_dump(mode="json"),
        "engine_seeds": engine_seeds,
        "slice_seeds": [these.seed for these in slice_settings],
        "points": points,
        "wall_s": time.monotonic() - started,
    }


def _fmt(value: float | None, pattern: str = "{:.2f}") -> str:
    return "-" if value is None else pattern.format(value)


def format_load_table(result: dict) -> str:
    names = list(result["points"][0]["routers"]) if result["points"] else []
    header = f"{'load':<7} {'req/s':>6} {'floor':>6}" + "".join(f" {'p99 ' + n:>16}" for n in names)
    lines = [header + "".join(f" {'hit ' + n:>16}" for n in names)]
    for p in result["points"]:
        label = f"{p['load']:g}x" + ("*" if p["is_default"] else "")
        row = f"{label:<7} {_fmt(p['offered_rate_per_sim_s']):>6} {_fmt(p['ttft_floor_p99_sim_s']):>6}"
        row += "".join(f" {_fmt(p['routers'][n]['ttft_p99_sim_s']):>16}" for n in names)
        lines.append(row + "".join(f" {_fmt(p['routers'][n]['prefix_hit_rate'], '{:.3f}'):>16}" for n in names))
    lines.append(
        f"(simulated seconds, virtual time, means over slices {result['slice_seeds']} x engine seeds "
        f"{result['engine_seeds']}; load m: arrivals m times as dense; * the settings' own load; floor: "
        "p99 TTFT with no queueing and an ideal cache)"
    )
    for p in result["points"]:
        for line in format_paired([PairedGoal.model_validate(g) for g in p["paired_goals"]]):
            lines.append(f"load {p['load']:g}x: {line}")
    return "\n".join(lines)
