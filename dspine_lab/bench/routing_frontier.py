"""`bench routing --virtual --sweep-tolerance`: what the TTFT guard trades between p99 TTFT and prefix hits.

The guard (routing/ttft_guard.py) moves a turn off the replica that caches its conversation when
waiting there would cost more than its `tolerance_s` over the best replica: the turn's first token
comes sooner, and its cached prefix is prefilled again elsewhere. This sweep shows the whole trade on
one slice, so that an operator picks the tolerance from a curve rather than from a default.

Rules (simulated seconds throughout; the replays are routing_virtual.py's):
  tolerances  the values of --sweep-tolerance in the order given: seconds >= 0, or `none` (no guard);
              a value given twice is refused.
  replays     every router of the settings other than ours, once per engine seed; ours once per
              (tolerance, engine seed), with the ttft_guard filter's `tolerance_s` set to the tolerance
              and every other field as `virtual_router_config` sets it (`none` leaves the ttft_guard
              filter out, its cached-prefix extension included).
  point       per tolerance: ours' figures averaged over the engine seeds (`mean_over_seeds`), the goals
              of routing_results.goals_from on those means against the baselines' means (point estimates,
              no verdict), and the paired goals of paired.py, ours' replay with engine seed i against each
              baseline's replay with engine seed i (the verdicts: met, missed or undecided).
  frontier    a point is on the frontier unless another point is at least as good on both p99 TTFT
              (lower) and prefix-hit rate (higher) and strictly better on one; points without both
              figures are never on it.
Complexity: (B + T) * S replays for B baselines, T tolerances and S engine seeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ray_dspine.cli_errors import CliError
from ray_dspine.routing.config import RouterConfig, TtftGuardFilter

from dspine_lab.bench.flag_lists import bounded_float, parse_flag_list
from dspine_lab.bench.paired import all_met, paired_goals
from dspine_lab.bench.routing_results import OURS, goals_from, reduction
from dspine_lab.bench.routing_virtual import replay_virtual, virtual_router_config
from dspine_lab.bench.routing_virtual_report import mean_over_seeds, replay_each
from dspine_lab.bench.routing_workload import RoutingBenchSettings, describe_slice, ideal_cache_by_request, ttft_floors_by_request
from ray_dspine.bench.traces.model import TraceRequest

NO_GUARD = "none"
FLAG = "--sweep-tolerance"


def parse_tolerances(text: str) -> list[float | None]:
    """The tolerance rule: a comma list of seconds >= 0 or `none`, each at most once (flag_lists.py)."""

    def one(part: str) -> float | None:
        return None if part.lower() == NO_GUARD else bounded_float(part, 0.0, low_inclusive=True)

    return parse_flag_list(text, FLAG, "tolerance", "give seconds >= 0 or 'none'", "0,2,4,6,8,none", one)


def guard_tolerance(config: RouterConfig) -> float | None:
    """The ttft_guard filter's tolerance_s, or None when the filter is not listed."""
    guard = config.stage("ttft_guard")
    return None if guard is None else guard.tolerance_s


def with_guard_tolerance(config: RouterConfig, tolerance_s: float | None) -> RouterConfig:
    """`config` with the ttft_guard filter's tolerance_s set (None: the filter left out)."""
    if tolerance_s is None:
        return config.without_stage("ttft_guard")
    guard = config.stage("ttft_guard") or TtftGuardFilter()
    return config.with_stage(guard.model_copy(update={"tolerance_s": tolerance_s}))


def tolerance_label(tolerance_s: float | None) -> str:
    return NO_GUARD if tolerance_s is None else f"{tolerance_s:g} s"


def on_frontier(points: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """The frontier rule over (p99 TTFT, prefix-hit rate) pairs, one flag per pair in order."""
    flags = []
    for i, (p99, hit) in enumerate(points):
        if p99 is None or hit is None:
            flags.append(False)
            continue
        dominated = any(
            j != i
            and other_p99 is not None
            and other_hit is not None
            and other_p99 <= p99
            and other_hit >= hit
            and (other_p99 < p99 or other_hit > hit)
            for j, (other_p99, other_hit) in enumerate(points)
        )
        flags.append(not dominated)
    return flags


def run_tolerance_sweep(
    requests: list[TraceRequest],
    settings: RoutingBenchSettings,
    engine_seeds: list[int],
    tolerances: list[float | None],
    progress: Callable[[str], None],
) -> dict:
    """Replay the slice under the replays rule; returns the sweep's JSON document."""
    if OURS not in settings.routers:
        raise CliError(f"argument --routers: {FLAG} sweeps {OURS}'s guard; list {OURS} among the routers")
    started = time.monotonic()
    ideal = ideal_cache_by_request(requests)
    slice_info = describe_slice(requests, settings, ideal)
    floors = ttft_floors_by_request(requests, settings, ideal)
    baselines = [name for name in settings.routers if name != OURS]
    base_runs = replay_each(requests, settings, baselines, engine_seeds, floors, progress)
    base_means = {name: mean_over_seeds(runs) for name, runs in base_runs.items()}
    default_config = virtual_router_config(settings, OURS)
    points = []
    for tolerance in tolerances:
        config = with_guard_tolerance(default_config, tolerance)
        runs = []
        for seed in engine_seeds:
            runs.append(replay_virtual(requests, settings, OURS, seed, floors, config=config))
        means = mean_over_seeds(runs)
        p99s = {name: m["ttft_p99_sim_s"] for name, m in base_means.items()} | {OURS: means["ttft_p99_sim_s"]}
        hits = {name: m["prefix_hit_rate"] for name, m in base_means.items()} | {OURS: means["prefix_hit_rate"]}
        checks = goals_from(p99s, hits, int(means["num_retractions"] or 0))
        paired = paired_goals(
            {name: [f.ttft_p99_sim_s for f in r] for name, r in base_runs.items()} | {OURS: [f.ttft_p99_sim_s for f in runs]},
            {name: [f.prefix_hit_rate for f in r] for name, r in base_runs.items()} | {OURS: [f.prefix_hit_rate for f in runs]},
            OURS,
        )
        points.append({
            "ttft_tolerance_s": tolerance,
            "label": tolerance_label(tolerance),
            "is_default": tolerance == guard_tolerance(default_config),
            **means,
            "ttft_p99_reduction": {
                name: reduction(means["ttft_p99_sim_s"], m["ttft_p99_sim_s"]) for name, m in base_means.items()
            },
            "goals": [g.model_dump(mode="json") for g in checks],
            "paired_goals": [g.model_dump(mode="json") for g in paired],
            "all_goals_met": all_met(paired),
            "runs": [r.model_dump(mode="json") for r in runs],
        })  # fmt: skip
        progress(f"[tolerance {tolerance_label(tolerance)}] {OURS}: TTFT p99 {means['ttft_p99_sim_s']:.2f} simulated s, "
                 f"prefix hit {means['prefix_hit_rate'] or 0:.3f} (mean over engine seeds {engine_seeds})")  # fmt: skip
    for point, flag in zip(points, on_frontier([(p["ttft_p99_sim_s"], p["prefix_hit_rate"]) for p in points])):
        point["on_frontier"] = flag
    return {
        "simulated": True,
        "virtual": True,
        "sweep": "ttft_tolerance_s",
        "note": "virtual time: simulated replica cores and the routers' own code; ours replayed once per "
        "tolerance and engine seed, the baselines once per engine seed",
        "settings": settings.model_dump(mode="json"),
        "engine_seeds": engine_seeds,
        "slice": slice_info,
        "baselines": base_means,
        "baseline_runs": {name: [r.model_dump(mode="json") for r in runs] for name, runs in base_runs.items()},
        "points": points,
        "wall_s": time.monotonic() - started,
    }


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def format_sweep_table(result: dict) -> str:
    base_names = list(result["baselines"])
    ca = result["baselines"].get("cache_aware", {})
    header = f"{'tolerance':<10} {'TTFT p99':>9} {'E2E p99':>8} {'hit':>6}"
    header += "".join(f" {'p99 cut vs ' + name:>22}" for name in base_names)
    header += f" {'hit vs cache_aware':>19}  frontier  paired goals"
    lines = [header]
    for p in result["points"]:
        mark = "*" if p["is_default"] else ""
        row = f"{p['label'] + mark:<10} {_fmt(p['ttft_p99_sim_s'], '{:.2f}'):>9} {_fmt(p['e2e_p99_sim_s'], '{:.2f}'):>8} "
        row += f"{_fmt(p['prefix_hit_rate'], '{:.3f}'):>6}"
        row += "".join(f" {_fmt(p['ttft_p99_reduction'][name], '{:.1%}'):>22}" for name in base_names)
        hit_diff = None
        if ca.get("prefix_hit_rate") is not None and p["prefix_hit_rate"] is not None:
            hit_diff = (p["prefix_hit_rate"] - ca["prefix_hit_rate"]) * 100
        row += f" {_fmt(hit_diff, '{:+.2f} pt'):>19}  {'yes' if p['on_frontier'] else 'no':>8}  "
        verdicts = {}
        for g in p.get("paired_goals", []):
            verdicts.setdefault(g["verdict"], []).append(g["name"])
        row += "; ".join(f"{v}: {', '.join(names)}" for v, names in sorted(verdicts.items())) or "no baseline to pair with"
        lines.append(row)
    for name, m in result["baselines"].items():
        lines.append(f"{name}: TTFT p99 {_fmt(m['ttft_p99_sim_s'], '{:.2f}')}, E2E p99 {_fmt(m['e2e_p99_sim_s'], '{:.2f}')}, "
                     f"hit {_fmt(m['prefix_hit_rate'], '{:.3f}')}")  # fmt: skip
    lines.append(
        f"(simulated seconds, virtual time, means over engine seeds {result['engine_seeds']}; "
        "p99 cut vs X: 1 - ours' p99 TTFT / X's; * the default tolerance)"
    )
    return "\n".join(lines)
