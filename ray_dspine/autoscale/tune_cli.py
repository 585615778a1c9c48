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

from ray_dspine.autoscale.sim_setup import (
    add_pool_arguments,
    base_policy_config,
    command_line,
    remember_command,
    deployment_autoscaling_yaml,
    load_pool_profile,
    load_trace_for,
    resolve_pool,
)
from ray_dspine.autoscale.tuning import SEARCH_SPACE, Trial, apply_point, tune
from ray_dspine.sim.config import OursPolicy, SimConfig
from ray_dspine.sim.run import load_day, simulate_day

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


def run(args: argparse.Namespace) -> int:
    pool, traffic = resolve_pool(args)
    traffic = traffic.model_copy(update={"seed": args.seed})
    profile = load_pool_profile(pool)
    base = base_policy_config(pool, profile)
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
            "elapsed_s": round(time.monotonic() - started, 1),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        f.write(f"# Tuned autoscaling for pool {pool.name}. {NOTE}\n# Produced by: {document['command']}\n")
        yaml.dump(document, f, Dumper=_PlainDumper, sort_keys=False, width=120)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0
