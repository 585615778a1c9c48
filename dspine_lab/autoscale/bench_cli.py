"""`ray-dspine bench autoscaling`: one simulated day, Ray's default, Ray LLM's TTFT rule and ours.

Rule: the same day (trace, seed, pool, start-up, load balancer, Ray controller) runs under each
policy. The better baseline is the cheapest per completed request among baselines keeping >= 99%
of requests within the SLOs, or, when none does, the one with the highest attainment. The goal is
met when ours keeps >= 99% and costs >= 25% less per completed request than the better baseline.
With --sweep-baselines each baseline's main knob is also swept (Ray: target_ongoing_requests, as its
docs advise load-testing it; TTFT rule: ttft_target_s) and the cheapest setting within SLO reported.
With --hindsight the day's hindsight schedule (sim/hindsight.py) is computed too and every verdict
states the cost reduction it reaches against the same better baseline (that schedule is chosen with
the day's own arrivals, so it is a bound, not a policy tuned on equal terms).
With --frontier the command instead runs frontier.py: every policy's 8-point grid on the tuning day
(--tuning-seed), the cheapest configuration meeting each attainment target, reported on the held-out
day (--seed); it prints the table and writes the receipt JSON and PNG
(default docs/receipts/autoscaling/frontier-<pool>.{json,png}).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from dspine_lab.autoscale.baselines import RayDefaultSettings, TtftRuleSettings
from dspine_lab.autoscale import frontier
from dspine_lab.autoscale.plot import arrivals_per_quarter_hour, plot_day, plot_frontier
from dspine_lab.autoscale.sim_setup import (
    add_pool_arguments,
    base_policy_config,
    command_line,
    remember_command,
    load_pool_profile,
    load_trace_for,
    resolve_pool,
    SetupError,
    tuned_policy_config,
)
from ray_dspine.cli_errors import cli_errors
from dspine_lab.sim.config import OursPolicy, RayDefaultPolicySpec, SimConfig, TtftRulePolicySpec
from dspine_lab.sim.hindsight import hindsight_day
from dspine_lab.sim.run import load_day, simulate_day
from dspine_lab.sim.simulator import effective_controls

GOAL_COST_REDUCTION = 0.25
GOAL_ATTAINMENT = 0.99
RAY_SWEEP = (1.0, 2.0, 4.0, 8.0, 16.0)
TTFT_SWEEP_FRACTIONS = (0.25, 0.5)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("autoscaling", help="simulated day: Ray default vs Ray LLM TTFT rule vs ours")
    add_pool_arguments(parser, default_pool="dspine-agent")
    parser.add_argument("--seed", type=int, default=1, help="traffic seed (default 1: a day the tuner did not see)")
    parser.add_argument("--tuned", type=Path, help="tuned YAML (default autoscaling/tuned/<pool>.yaml if present)")
    parser.add_argument("--sweep-baselines", action="store_true", help="also sweep each baseline's main knob")
    parser.add_argument(
        "--hindsight", action="store_true",
        help="also compute the day's hindsight schedule: the fewest replicas per bin keeping 99%% within SLO",
    )  # fmt: skip
    parser.add_argument("--hindsight-bin-s", type=float, default=300.0, help="hindsight bin length, s (default 300)")
    parser.add_argument(
        "--frontier", action="store_true",
        help="sweep every policy's 8-point grid on the tuning day; report each attainment target's cheapest "
        "configuration on the held-out day (--seed)",
    )  # fmt: skip
    parser.add_argument("--tuning-seed", type=int, default=0, help="seed of the tuning day for --frontier (default 0)")
    parser.add_argument("--json", action="store_true", help="print the JSON report (always written with --out)")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument(
        "--plot", type=Path, help="write a PNG of live replicas over the day per policy (with --hindsight: its schedule)"
    )
    parser.set_defaults(func=run)
    remember_command(parser, "bench autoscaling")


def _row(name: str, spec, sim: SimConfig, trace, profile, day) -> dict:
    config = sim.model_copy(update={"policy": spec})
    started = time.process_time()
    result = simulate_day(config, trace, profile, day)
    print(
        f"  {name}: cost/request {result.cost_per_completed_request_usd:.6f} USD  attainment "
        f"{result.slo_attainment:.4f}  replica-hours {result.replica_hours:.1f}",
        file=sys.stderr,
    )
    return {
        "name": name,
        "settings": spec.model_dump(mode="json"),
        "ray_controls": effective_controls(config).model_dump(mode="json"),
        "cpu_s": round(time.process_time() - started, 1),
        **result.model_dump(mode="json"),
    }


def better_baseline(rows: list[dict]) -> dict:
    """The cheapest baseline within SLO (attainment >= 99%); with none, the one with the best attainment."""
    ok = [r for r in rows if r["slo_attainment"] >= GOAL_ATTAINMENT]
    if ok:
        return min(ok, key=lambda r: r["cost_per_completed_request_usd"])
    return max(rows, key=lambda r: (r["slo_attainment"], -r["cost_per_completed_request_usd"]))


def _verdict(ours: dict, baselines: list[dict], hindsight: dict | None = None) -> dict:
    better = better_baseline(baselines)
    cheapest = min(baselines, key=lambda r: r["cost_per_completed_request_usd"])
    cost = ours["cost_per_completed_request_usd"]
    out = {
        "ours_attainment_ok": ours["slo_attainment"] >= GOAL_ATTAINMENT,
        "better_baseline": better["name"],
        "better_baseline_within_slo": better["slo_attainment"] >= GOAL_ATTAINMENT,
        "cost_reduction_vs_better_baseline": 1.0 - cost / better["cost_per_completed_request_usd"],
        "cheapest_baseline": cheapest["name"],
        "cost_reduction_vs_cheapest_baseline": 1.0 - cost / cheapest["cost_per_completed_request_usd"],
    }
    out["goal_met"] = bool(
        out["ours_attainment_ok"] and out["cost_reduction_vs_better_baseline"] >= GOAL_COST_REDUCTION
    )
    if hindsight is not None:
        best = hindsight["cost_per_completed_request_usd"]
        out["hindsight_cost_reduction_vs_better_baseline"] = 1.0 - best / better["cost_per_completed_request_usd"]
        out["hindsight_attainment"] = hindsight["slo_attainment"]
        out["goal_reachable_in_hindsight"] = bool(
            hindsight["slo_attainment"] >= GOAL_ATTAINMENT
            and out["hindsight_cost_reduction_vs_better_baseline"] >= GOAL_COST_REDUCTION
        )
        out["ours_cost_over_hindsight"] = cost / best - 1.0
    return out


def _clock(t_s: float) -> str:
    """HH:MM of a simulated clock reading (seconds from midnight)."""
    minutes = int(round(t_s / 60.0))
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def run_frontier(args: argparse.Namespace) -> int:
    """--frontier: frontier.py on the pool; prints the table (SIMULATED), writes receipt and plot."""
    if args.tuning_seed == args.seed:
        raise SetupError(f"argument --tuning-seed: must differ from --seed (the held-out day), both {args.seed}")
    pool, traffic = resolve_pool(args)
    profile = load_pool_profile(pool)
    base = base_policy_config(pool, profile)
    held_sim = SimConfig(pool=pool, traffic=traffic, policy=OursPolicy(params=base))
    tune_sim = held_sim.model_copy(update={"traffic": traffic.model_copy(update={"seed": args.tuning_seed})})
    trace = load_trace_for(args, pool, traffic)
    _, tune_day = load_day(tune_sim, trace)
    _, held_day = load_day(held_sim, trace)
    grid = frontier.grids(pool, base, args.tuning_seed)
    started = time.monotonic()

    def runner(sim: SimConfig, day, name: str):
        def run_point(point: frontier.GridPoint):
            result = simulate_day(sim.model_copy(update={"policy": point.spec}), trace, profile, day)
            print(
                f"  SIMULATED {name} day (seed {sim.traffic.seed}) {point.policy}[{point.index}] {point.params}: "
                f"attainment {result.slo_attainment:.4f}  cost/request {result.cost_per_completed_request_usd:.6f} USD  "
                f"peak {result.peak_replicas}  ({time.monotonic() - started:.0f} s)",
                file=sys.stderr, flush=True,
            )  # fmt: skip
            return result

        return run_point

    print(
        f"frontier {pool.name}: tuning day seed {args.tuning_seed} ({tune_day.num_requests} requests), held-out day "
        f"seed {args.seed} ({held_day.num_requests} requests), {frontier.GRID_SIZE} configurations per policy",
        file=sys.stderr,
    )
    result = frontier.frontier(grid, runner(tune_sim, tune_day, "tuning"), runner(held_sim, held_day, "held-out"))
    report = {
        "simulated": True,
        "note": "SIMULATED days on the calibrated twin; every figure is simulated, not measured on GPUs.",
        "command": command_line(args),
        "pool": pool.model_dump(mode="json"),
        "traffic": traffic.model_dump(mode="json"),
        "tuning_seed": args.tuning_seed,
        "held_out_seed": args.seed,
        "slo_semantics": "ray_dspine/autoscale/slo.py: per request, completed with TTFT <= ttft_slo_s and mean "
        "ITL <= itl_slo_ms; attainment = share of all offered requests (failed ones are outside)",
        "grid_size": frontier.GRID_SIZE,
        "grids": {p: [g.params for g in points] for p, points in grid.items()},
        "labels": frontier.LABELS,
        "targets": list(frontier.TARGETS),
        "goal": {"cost_reduction_at_least": frontier.GOAL_COST_REDUCTION, "against": "ray-default"},
        "elapsed_s": round(time.monotonic() - started, 1),
        **result,
    }
    stem = Path("docs/receipts/autoscaling") / f"frontier-{pool.name}"
    out = args.out or stem.with_suffix(".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    hours = f"{_clock(traffic.start_s)}-{_clock(traffic.start_s + traffic.duration_s)}"
    title = (
        f"{pool.name}, {traffic.trace} x{traffic.rate_scale:g}, {hours}; chosen on seed {args.tuning_seed}, "
        f"shown on held-out seed {args.seed} (SIMULATED)"
    )
    plot = plot_frontier(result, frontier.POLICIES, frontier.LABELS, title, args.plot or stem.with_suffix(".png"))
    for line in frontier.table_lines(pool.name, result):
        print(line)
    print(f"wrote {out} and {plot}", file=sys.stderr)
    return 0


@cli_errors
def run(args: argparse.Namespace) -> int:
    if args.frontier:
        return run_frontier(args)
    if not 0.0 < args.hindsight_bin_s <= 86_400.0:
        raise SetupError(f"argument --hindsight-bin-s: a length in (0, 86400] s (got {args.hindsight_bin_s:g})")
    pool, traffic = resolve_pool(args)
    profile = load_pool_profile(pool)
    tuned_path = args.tuned or Path("autoscaling/tuned") / f"{pool.name}.yaml"
    params = tuned_policy_config(tuned_path) if tuned_path.is_file() else base_policy_config(pool, profile)
    sim = SimConfig(pool=pool, traffic=traffic, policy=OursPolicy(params=params))
    trace, day = load_day(sim, load_trace_for(args, pool, traffic))
    ray_spec = RayDefaultPolicySpec(settings=RayDefaultSettings(max_ongoing_requests=pool.max_ongoing_requests))
    ttft_spec = TtftRulePolicySpec(settings=TtftRuleSettings(ttft_target_s=pool.slo.ttft_slo_s))
    rows = []
    for name, spec in (("ray-default", ray_spec), ("ray-llm-ttft", ttft_spec), ("ours", OursPolicy(params=params))):
        print(f"simulating {name} on {pool.name} ({day.num_requests} requests)", file=sys.stderr)
        rows.append(_row(name, spec, sim, trace, profile, day))
    baselines, ours = rows[:2], rows[2]
    sweeps = []
    if args.sweep_baselines:
        for target in RAY_SWEEP:
            spec = ray_spec.model_copy(update={"settings": ray_spec.settings.model_copy(update={"target_ongoing_requests": target})})
            sweeps.append(_row(f"ray-default(target_ongoing_requests={target:g})", spec, sim, trace, profile, day))
        for fraction in TTFT_SWEEP_FRACTIONS:
            value = fraction * pool.slo.ttft_slo_s
            spec = ttft_spec.model_copy(update={"settings": ttft_spec.settings.model_copy(update={"ttft_target_s": value})})
            sweeps.append(_row(f"ray-llm-ttft(ttft_target_s={value:g})", spec, sim, trace, profile, day))
    hindsight = None
    if args.hindsight:
        print(f"computing the hindsight schedule of {pool.name} ({args.hindsight_bin_s:g} s bins)", file=sys.stderr)
        started = time.process_time()
        found = hindsight_day(
            sim, trace, profile, day, bin_s=args.hindsight_bin_s, min_attainment=GOAL_ATTAINMENT,
            progress=lambda message: print(f"  hindsight: {message}", file=sys.stderr),
        )  # fmt: skip
        replay = found.replay
        print(
            f"  hindsight: cost/request {replay.cost_per_completed_request_usd:.6f} USD  attainment "
            f"{replay.slo_attainment:.4f}  replica-hours {replay.replica_hours:.1f}",
            file=sys.stderr,
        )
        hindsight = {"cpu_s": round(time.process_time() - started, 1), **found.model_dump(mode="json")}
    report = {
        "simulated": True,
        "note": "SIMULATED day on the calibrated twin; every figure is simulated, not measured on GPUs.",
        "command": command_line(args),
        "pool": pool.model_dump(mode="json"),
        "traffic": traffic.model_dump(mode="json"),
        "tuned_params_from": str(tuned_path) if tuned_path.is_file() else "defaults (no tuned file)",
        "goal": {"cost_reduction_at_least": GOAL_COST_REDUCTION, "slo_attainment_at_least": GOAL_ATTAINMENT},
        "policies": rows,
        "verdict": _verdict(ours, baselines, hindsight and hindsight["replay"]),
    }
    if hindsight is not None:
        report["hindsight"] = hindsight
    if sweeps:
        report["baseline_sweeps"] = sweeps
        report["verdict_with_sweeps"] = _verdict(ours, baselines + sweeps, hindsight and hindsight["replay"])
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.plot is not None:
        shown = rows + ([{"name": "hindsight", **hindsight["replay"]}] if hindsight is not None else [])
        rate = arrivals_per_quarter_hour(day.arrival_s, traffic.start_s, traffic.duration_s)
        title = f"{pool.name}, {traffic.trace} x{traffic.rate_scale:g}, seed {traffic.seed} (SIMULATED)"
        print(f"wrote {plot_day(shown, rate, title, args.plot)}", file=sys.stderr)
    if args.json or args.out is None:
        print(text)
    return 0
