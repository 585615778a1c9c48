"""`ray-dspine tune autoscaling`: tune the cost policy of one pool on a simulated day; write YAML.

Example: ray-dspine tune autoscaling --pool dspine-agent --trace azure-code \
             --out autoscaling/tuned/dspine-agent.yaml
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

from dspine_lab.autoscale.sim_setup import (
    add_pool_arguments,
    base_policy_config,
    command_line,
    remember_command,
    deployment_autoscaling_yaml,
    load_pool_profile,
    load_trace_for,
    resolve_pool,
    SetupError,
    tuned_policy_config,
)
from dspine_lab.autoscale.tuning import SEARCH_SPACE, Trial, apply_point, tune, validate
from ray_dspine.cli_errors import cli_errors
from dspine_lab.sim.config import OursPolicy, SimConfig
from dspine_lab.sim.run import load_day, simulate_day

NOTE = (
    "SIMULATED: measured on the calibrated simulated twin (vendor figures), not on GPUs; "
    "re-tune from GPU measurements when they exist."
)


class _PlainDumper(yaml.SafeDumper):
    """Writes repeated values out in full (no &id anchors), so the file reads top to bottom."""

    def ignore_aliases(self, data) -> bool:
        return True


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("autoscaling", help="tune the cost-per-completed-request policy on the simulator")
    add_pool_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="traffic seed of the tuning day (default 0)")
    parser.add_argument("--num-candidates", type=int, default=8, help="parameter points to simulate (default 8)")
    parser.add_argument("--min-attainment", type=float, default=0.99, help="SLO attainment required (default 0.99)")
    parser.add_argument("--out", type=Path, required=True, help="YAML to write, e.g. autoscaling/tuned/NAME.yaml")
    parser.add_argument(
        "--validation-seeds", default="2,3",
        help="seeds of the validation days the best candidates must also keep the SLO on (default 2,3; 'none')",
    )  # fmt: skip
    parser.add_argument(
        "--start", type=Path,
        help="tuned YAML whose parameters are the first candidate (default: the profile's calibrated defaults)",
    )  # fmt: skip
    parser.set_defaults(func=run)
    remember_command(parser, "tune autoscaling")


def _figures(trial: Trial) -> dict:
    r = trial.result
    return {
        "params": trial.params,
        "cost_per_completed_request_usd": r.cost_per_completed_request_usd,
        "slo_attainment": r.slo_attainment,
        "replica_hours": r.replica_hours,
        "num_scale_ups": r.num_scale_ups,
        "num_scale_downs": r.num_scale_downs,
    }


def _seeds(text: str) -> list[int]:
    if text.strip().lower() in ("", "none"):
        return []
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise SetupError(f"argument --validation-seeds: comma-separated seeds >= 0, e.g. 2,3, or 'none' (got {text!r})")
    return [int(part) for part in parts]


@cli_errors
def run(args: argparse.Namespace) -> int:
    if args.num_candidates < 1:
        raise SetupError(f"argument --num-candidates: needs at least 1 (got {args.num_candidates})")
    if not 0.0 < args.min_attainment <= 1.0:
        raise SetupError(f"argument --min-attainment: a share in (0, 1], e.g. 0.99 (got {args.min_attainment})")
    seeds = _seeds(args.validation_seeds)
    pool, traffic = resolve_pool(args)
    profile = load_pool_profile(pool)
    base = base_policy_config(pool, profile)
    if args.start is not None:
        try:
            base = tuned_policy_config(args.start)
        except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError) as exc:
            raise SetupError(f"argument --start: {args.start} is not a tuned autoscaling file: {exc}") from exc
    sim = SimConfig(pool=pool, traffic=traffic, policy=OursPolicy(params=base))
    trace, day = load_day(sim, load_trace_for(args, pool, traffic))
    print(f"tuning {pool.name}: {day.num_requests} requests ({trace.name}), {args.num_candidates} candidates", file=sys.stderr)
    started = time.monotonic()

    def evaluate(params):
        return simulate_day(sim.model_copy(update={"policy": OursPolicy(params=params)}), trace, profile, day)

    def progress(index: int, trial: Trial) -> None:
        r = trial.result
        print(
            f"  [{index + 1}/{args.num_candidates}] cost/request {r.cost_per_completed_request_usd:.6f} USD  "
            f"attainment {r.slo_attainment:.4f}  replica-hours {r.replica_hours:.1f}  {trial.params}",
            file=sys.stderr,
        )

    ranked = tune(
        base, evaluate, num_candidates=args.num_candidates, seed=args.seed,
        min_attainment=args.min_attainment, progress=progress,
    )  # fmt: skip
    checked: list[Trial] = []
    if seeds:
        days = []
        for seed in seeds:
            validation_sim = sim.model_copy(update={"traffic": traffic.model_copy(update={"seed": seed})})
            days.append((seed, validation_sim, load_day(validation_sim, trace)[1]))

        def evaluate_validation(point):
            """The worst validation day (lowest attainment); stops at the first day under the target."""
            worst = None
            for seed, validation_sim, validation_day in days:
                config = validation_sim.model_copy(update={"policy": OursPolicy(params=apply_point(base, point))})
                result = simulate_day(config, trace, profile, validation_day)
                print(
                    f"  validation day (seed {seed}): attainment {result.slo_attainment:.4f}  "
                    f"cost/request {result.cost_per_completed_request_usd:.6f} USD  {point}",
                    file=sys.stderr,
                )
                if worst is None or result.slo_attainment < worst.slo_attainment:
                    worst = result
                if result.slo_attainment < args.min_attainment:
                    break
            return worst

        ranked, checked = validate(ranked, evaluate_validation, min_attainment=args.min_attainment)
    best = ranked[0]
    tuned = apply_point(base, best.params)
    document = {
        "note": NOTE,
        "simulated": True,
        "pool": pool.name,
        "command": command_line(args),
        "inputs": {
            "trace": {"name": trace.name, "sha256": trace.sha256, "num_requests": day.num_requests},
            "traffic": traffic.model_dump(mode="json"),
            "engine": pool.engine.model_dump(mode="json"),
            "slo": pool.slo.model_dump(mode="json"),
            "gpu_hour_usd": pool.gpu_hour_usd,
            "gpus_per_replica": pool.gpus_per_replica,
            "startup_s": pool.startup_s,
            "search_space": {k: list(v) for k, v in SEARCH_SPACE.items()},
            "min_attainment": args.min_attainment,
        },
        **deployment_autoscaling_yaml(pool, tuned),
        "measurements": {
            "tuned": {**_figures(best), "result": best.result.model_dump(mode="json")},
            "feasible": best.result.slo_attainment >= args.min_attainment,
            "candidates": [_figures(t) for t in ranked],
            "validation": {"seeds": seeds, "worst_day_of_each_checked": [_figures(t) for t in checked]},
            "elapsed_s": round(time.monotonic() - started, 1),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        f.write(f"# Tuned autoscaling for pool {pool.name}. {NOTE}\n# Produced by: {document['command']}\n")
        yaml.dump(document, f, Dumper=_PlainDumper, sort_keys=False, width=120)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0
