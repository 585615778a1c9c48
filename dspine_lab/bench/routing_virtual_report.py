"""The document and table of `bench routing --virtual`: every router over every slice and engine seed.

Rules: each router replays each slice (one per session-sampling seed, `--slices`) once per engine seed
(routing_virtual.py), slices outermost, so run i of every router shares its slice and engine seed; a
router's figure is the mean over its runs (`mean_over_seeds`; retractions: their total), each run's
figures are kept under `runs`; the goals of routing_results.py are point estimates on the means (no
verdict), the paired goals of paired.py (the only verdicts) on run i of ours against run i of each baseline, and the ceiling against each
baseline is 1 - floor_p99 / its mean p99, floor_p99 the mean of the slices' floors; run by run, the
ceiling of run i is 1 - floor_p99(slice of run i) / the baseline's p99 in run i, and the table counts the
runs whose ceiling reaches the goal's target (a router at the floor could meet it there). The order bound
of run i is 1 - ours' order-preserving bound in run i / the baseline's p99 in run i (routing_order_bound.py:
no router that starts requests in their order of arrival cuts more there), counted the same way. A router's
prefix hit lost to the ideal cache, by kind of request, is the mean over its runs (routing_hit_loss.py,
`mean_hit_loss`), under `prefix_hit_loss`. With `tail` = N > 0
each run also lists its N slowest requests and what held each up (routing_tail.py), and the table
prints them run by run after the figures, then each router's census of the rows at the p99 ranks.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from dspine_lab.bench.paired import PairedGoal, all_met, format_paired, paired_goals
from dspine_lab.bench.routing_hit_loss import HitLoss, format_hit_losses, mean_hit_loss
from dspine_lab.bench.routing_results import OURS, P99_CUT_TARGETS, Goal, format_point_goals, goals_from, reduction
from dspine_lab.bench.routing_tail import ListedReplay, SlowRequest, format_tail
from dspine_lab.bench.routing_virtual import VirtualFigures, mean_or_none, replay_virtual
from dspine_lab.bench.routing_workload import (
    RoutingBenchSettings,
    describe_slice,
    format_hit_ceiling,
    ideal_cache_by_request,
    ideal_hit_tokens,
    ttft_floors_by_request,
)
from ray_dspine.bench.traces.model import TraceRequest

MEAN_FIELDS = (
    "ttft_p50_sim_s",
    "ttft_p99_sim_s",
    "ttft_excess_p99_sim_s",
    "ttft_order_bound_p99_sim_s",
    "e2e_p99_sim_s",
    "prefix_hit_rate",
)


def mean_over_seeds(runs: list[VirtualFigures]) -> dict[str, float | None]:
    means: dict[str, float | None] = {name: mean_or_none([getattr(r, name) for r in runs]) for name in MEAN_FIELDS}
    means["num_retractions"] = float(sum(r.num_retractions for r in runs))
    return means


def replay_each(
    requests: list[TraceRequest],
    settings: RoutingBenchSettings,
    policies: list[str],
    engine_seeds: list[int],
    floors: dict[str, float],
    progress: Callable[[str], None],
    tail: int = 0,
    ideal_hits: dict[str, int] | None = None,
) -> dict[str, list[VirtualFigures]]:
    """Each policy replayed once per engine seed (seeds outermost), one progress line per replay."""
    runs: dict[str, list[VirtualFigures]] = {policy: [] for policy in policies}
    for seed in engine_seeds:
        for policy in policies:
            begun = time.monotonic()
            figures = replay_virtual(requests, settings, policy, seed, floors, tail=tail, ideal_hit_tokens=ideal_hits)
            runs[policy].append(figures)
            progress(
                f"[seed {seed}] {policy}: TTFT p99 {figures.ttft_p99_sim_s:.2f} simulated s, "
                f"prefix hit {figures.prefix_hit_rate or 0:.3f} ({time.monotonic() - begun:.1f} s)"
            )
    return runs


def _tagged(progress: Callable[[str], None], tag: str) -> Callable[[str], None]:
    return lambda line: progress(tag + line)


def run_virtual_bench(
    slices: list[tuple[RoutingBenchSettings, list[TraceRequest]]],
    engine_seeds: list[int],
    progress: Callable[[str], None],
    tail: int = 0,
) -> dict:
    """Every router over every (slice, engine seed); `slices` pairs each slice's settings with its requests;
    `tail` > 0 lists that many of each run's slowest requests."""
    if not slices:
        raise ValueError("no slice to replay")
    started = time.monotonic()
    settings = slices[0][0]
    runs: dict[str, list[VirtualFigures]] = {policy: [] for policy in settings.routers}
    infos = []
    for these_settings, requests in slices:
        ideal = ideal_cache_by_request(requests)
        info = describe_slice(requests, these_settings, ideal)
        infos.append({"seed": these_settings.seed, **info})
        floors = ttft_floors_by_request(requests, these_settings, ideal)
        tell = progress if len(slices) == 1 else _tagged(progress, f"[slice {these_settings.seed}] ")
        ideal_hits = ideal_hit_tokens(requests, ideal)
        by_policy = replay_each(
            requests, these_settings, settings.routers, engine_seeds, floors, tell, tail, ideal_hits
        )
        for policy, figures in by_policy.items():
            runs[policy].extend(figures)
    means = {policy: mean_over_seeds(r) for policy, r in runs.items()}
    checks = []
    if OURS in means:
        checks = goals_from(
            {p: m["ttft_p99_sim_s"] for p, m in means.items()},
            {p: m["prefix_hit_rate"] for p, m in means.items()},
            int(means[OURS]["num_retractions"] or 0),
        )
    paired = paired_goals(
        {p: [f.ttft_p99_sim_s for f in r] for p, r in runs.items()},
        {p: [f.prefix_hit_rate for f in r] for p, r in runs.items()},
        OURS,
    )
    floor = sum(info["ttft_floor_p99_sim_s"] for info in infos) / len(infos)
    floor_of_slice = {info["seed"]: info["ttft_floor_p99_sim_s"] for info in infos}
    return {
        "simulated": True,
        "virtual": True,
        "note": "virtual time: simulated replica cores and the routers' own code, no Ray and no wall clock",
        "settings": settings.model_dump(mode="json"),
        "engine_seeds": engine_seeds,
        "slice_seeds": [info["seed"] for info in infos],
        "slice": infos[0],
        "slices": infos,
        "routers": means,
        "runs": {policy: [f.model_dump(mode="json") for f in r] for policy, r in runs.items()},
        "goals": [g.model_dump(mode="json") for g in checks],
        "paired_goals": [g.model_dump(mode="json") for g in paired],
        "ttft_p99_reduction_ceiling": {
            p: reduction(floor, m["ttft_p99_sim_s"]) for p, m in means.items() if p != OURS
        },
        "ttft_p99_reduction_ceiling_by_run": {
            p: [reduction(floor_of_slice[f.slice_seed], f.ttft_p99_sim_s) for f in r]
            for p, r in runs.items()
            if p != OURS
        },
        "ttft_p99_reduction_order_bound_by_run": order_bound_cuts(runs),
        "prefix_hit_loss": {p: _dumped(mean_hit_loss([f.prefix_hit_loss for f in r])) for p, r in runs.items()},
        "all_goals_met": all_met(paired),
        "wall_s": time.monotonic() - started,
    }


def _dumped(loss: HitLoss | None) -> dict | None:
    return None if loss is None else loss.model_dump(mode="json")


def order_bound_cuts(runs: dict[str, list[VirtualFigures]]) -> dict[str, list[float | None]]:
    """Run by run, 1 - ours' order-preserving bound / the baseline's p99: the most a router that starts
    requests in their order of arrival could cut that baseline's p99 on ours' arrivals."""
    if OURS not in runs:
        return {}
    bounds = [f.ttft_order_bound_p99_sim_s for f in runs[OURS]]
    return {
        p: [reduction(b, f.ttft_p99_sim_s) for b, f in zip(bounds, r)] for p, r in runs.items() if p != OURS
    }


def _fmt(value: float | None, pattern: str = "{:.2f}") -> str:
    return "-" if value is None else pattern.format(value)


def format_virtual_table(result: dict) -> str:
    lines = [
        f"{'router':<12} {'TTFT p50':>9} {'TTFT p99':>9} {'excess p99':>10} {'order bound':>11} {'E2E p99':>8} "
        f"{'hit':>6}"
    ]
    for name, m in result["routers"].items():
        lines.append(
            f"{name:<12} {_fmt(m['ttft_p50_sim_s']):>9} {_fmt(m['ttft_p99_sim_s']):>9} "
            f"{_fmt(m['ttft_excess_p99_sim_s']):>10} {_fmt(m.get('ttft_order_bound_p99_sim_s')):>11} "
            f"{_fmt(m['e2e_p99_sim_s']):>8} {_fmt(m['prefix_hit_rate'], '{:.3f}'):>6}"
        )
    slices = result.get("slice_seeds", [result["settings"]["seed"]])
    lines.append(
        f"(simulated seconds, virtual time, mean over slices {slices} x engine seeds {result['engine_seeds']})"
    )
    lines.extend(format_point_goals([Goal.model_validate(g) for g in result["goals"]]))
    lines.extend(format_paired([PairedGoal.model_validate(g) for g in result.get("paired_goals", [])]))
    for name, ceiling in result["ttft_p99_reduction_ceiling"].items():
        if ceiling is not None:
            lines.append(f"ceiling vs {name}: at most {ceiling:.3f}")
    hit_ceiling = format_hit_ceiling(result.get("slices", []))
    if hit_ceiling is not None:
        lines.append(hit_ceiling)
    for name, known, target, reach in _reaching(result.get("ttft_p99_reduction_ceiling_by_run", {})):
        lines.append(
            f"ceiling vs {name} by replay: {min(known):.3f} to {max(known):.3f}; a router at the floor "
            f"reaches the {target:.0%} target in {reach} of {len(known)} replays"
        )
    for name, known, target, reach in _reaching(result.get("ttft_p99_reduction_order_bound_by_run", {})):
        lines.append(
            f"order-preserving bound vs {name}: mean cut {sum(known) / len(known):.3f}, "
            f"{min(known):.3f} to {max(known):.3f} by replay; a router that starts requests in their order "
            f"of arrival reaches the {target:.0%} target in at most {reach} of {len(known)} replays, "
            f"even with an ideal cache (on ours' arrivals)"
        )
    replays = len(result.get("slice_seeds", [0])) * len(result["engine_seeds"])
    losses = {
        name: None if x is None else HitLoss.model_validate(x) for name, x in result.get("prefix_hit_loss", {}).items()
    }
    lines.extend(format_hit_losses(losses, replays))
    lines.extend(_slowest_lines(result))
    return "\n".join(lines)


def _reaching(by_run: dict[str, list[float | None]]) -> list[tuple[str, list[float], float, int]]:
    """(baseline, its known per-run cuts, its p99 target, runs reaching it) for each baseline with a target."""
    out = []
    for name, cuts in by_run.items():
        known = [c for c in cuts if c is not None]
        if known and name in P99_CUT_TARGETS:
            target = P99_CUT_TARGETS[name]
            out.append((name, known, target, sum(c >= target for c in known)))
    return out


def _slowest_lines(result: dict) -> list[str]:
    """Each run's slowest requests (`--tail`), run by run; nothing when the runs carry none."""
    runs = result.get("runs", {})
    listed = {
        name: [
            ListedReplay(f"[slice {run['slice_seed']}, engine seed {run['engine_seed']}] {name}", run["num_requests"],
                         run["ttft_p99_sim_s"], [SlowRequest.model_validate(r) for r in run["slowest"]])  # fmt: skip
            for run in these
            if run.get("slowest")
        ]
        for name, these in runs.items()
    }
    header = "slowest requests (simulated s; prefill: its own prefill step; waited: arrival to that step):"
    return format_tail(header, listed, len(next(iter(runs.values()), [])))
