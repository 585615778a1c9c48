"""Shared command-line setup of `tune autoscaling` and `bench autoscaling`: which pool, which day."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import yaml
from pydantic import ValidationError

from dspine_lab.autoscale.calibration import capacity_from_profile
from ray_dspine.autoscale.config import CostAutoscalingConfig, SloTargets
from dspine_lab.autoscale.sim_pools import TWIN_POOLS, pool_from_cluster_yaml
from ray_dspine.bench.traces.loader import TraceNotFoundError
from ray_dspine.cli_errors import CliError, flag_error
from ray_dspine.engines.simulated.profile import SimProfile, load_profile
from dspine_lab.sim.config import PoolSimConfig, DayTraffic
from dspine_lab.sim.traces import TraceTable, load_trace_table

POLICY_FUNCTION = "ray_dspine.autoscale.ray_policy:CostAutoscalingPolicy"
FLAG_OF_FIELD = {
    "rate_scale": "--rate-scale", "duration_s": "--duration-s", "start_s": "--start-s", "trace": "--trace", "seed": "--seed",
    "max_replicas": "--max-replicas", "ttft_slo_s": "--ttft-slo-s", "itl_slo_ms": "--itl-slo-ms",
    "profile": "--profile", "drafter": "--drafter", "name": "--pool",
}  # fmt: skip


class SetupError(CliError):
    """A flag or file the simulated day cannot be built from; the message names it and the fix."""


def _flag_error(exc: ValidationError) -> SetupError:
    return flag_error(exc, FLAG_OF_FIELD, SetupError)


def add_pool_arguments(parser: argparse.ArgumentParser, default_pool: str | None = None) -> None:
    """The pool flags; `default_pool` None makes --pool required."""
    twins = ", ".join(TWIN_POOLS)
    if default_pool is None:
        parser.add_argument("--pool", required=True, help=f"pool name; twins built in: {twins}")
    else:
        parser.add_argument(
            "--pool", default=default_pool, help=f"pool name (default {default_pool}); twins built in: {twins}"
        )
    parser.add_argument("--config", type=Path, help="Serve config (clusters/sim.yaml) to take the pool's engine from")
    parser.add_argument("--trace", help="azure-code | azure-conv | mooncake | a file (default: the pool's)")
    parser.add_argument("--traces-dir", type=Path, help="folder holding the named traces")
    parser.add_argument("--profile", help="simulated profile (default: the pool's), e.g. h200-qwen3.8-27b")
    parser.add_argument("--drafter", choices=("dspine", "dflash2", "none"), help="drafter (default: the pool's)")
    parser.add_argument("--rate-scale", type=float, help="peak rate / the trace's mean rate (default: the pool's)")
    parser.add_argument("--duration-s", type=float, help="simulate less than a day (tests, quick looks)")
    parser.add_argument("--start-s", type=float, help="simulated clock at the start, s from midnight (default 0)")
    parser.add_argument("--ttft-slo-s", type=float, help="bound on one request's TTFT, s (default: the pool's)")
    parser.add_argument(
        "--itl-slo-ms", type=float, help="bound on one request's mean inter-token latency, ms (default: the pool's)"
    )
    parser.add_argument("--max-replicas", type=int, help="replica ceiling (default 32)")


def resolve_pool(args: argparse.Namespace) -> tuple[PoolSimConfig, DayTraffic]:
    """The built-in twin of --pool (or a generic one), overridden by --config and the flags."""
    try:
        return _resolve_pool(args)
    except ValidationError as exc:
        raise _flag_error(exc) from exc
    except (OSError, ValueError, yaml.YAMLError) as exc:  # reading --config (pool_from_cluster_yaml)
        raise SetupError(f"argument --config: {exc}") from exc


def _resolve_pool(args: argparse.Namespace) -> tuple[PoolSimConfig, DayTraffic]:
    if args.pool in TWIN_POOLS:
        pool, traffic = TWIN_POOLS[args.pool]
    elif args.config is None:
        raise SetupError(
            f"argument --pool: {args.pool!r} is not a built-in twin ({', '.join(TWIN_POOLS)}); "
            "to simulate another pool, name it in a Serve config and pass --config CLUSTER.yaml"
        )
    else:
        pool, traffic = TWIN_POOLS["dspine-agent"]
        pool = pool.model_copy(update={"name": args.pool})
    if args.config is not None:
        pool = pool_from_cluster_yaml(args.config, args.pool, pool)
    engine_update = {k: v for k, v in (("profile", args.profile), ("drafter", args.drafter)) if v is not None}
    slo = pool.slo.model_copy(
        update={k: v for k, v in (("ttft_slo_s", args.ttft_slo_s), ("itl_slo_ms", args.itl_slo_ms)) if v is not None}
    )
    pool_update: dict = {"engine": pool.engine.model_copy(update=engine_update), "slo": SloTargets(**slo.model_dump())}
    if args.max_replicas is not None:
        pool_update["max_replicas"] = args.max_replicas
    pool = PoolSimConfig.model_validate({**pool.model_dump(), **{k: v for k, v in pool_update.items()}})
    traffic_update = {
        k: v
        for k, v in (
            ("trace", args.trace), ("rate_scale", args.rate_scale), ("duration_s", args.duration_s),
            ("start_s", getattr(args, "start_s", None)),
        )
        if v is not None
    }  # fmt: skip
    traffic_update["seed"] = getattr(args, "seed", traffic.seed)
    return pool, DayTraffic.model_validate({**traffic.model_dump(), **traffic_update})


def load_trace_for(args: argparse.Namespace, pool: PoolSimConfig, traffic: DayTraffic) -> TraceTable:
    try:
        return load_trace_table(
            traffic.trace, max_context_tokens=pool.engine.total_kv_tokens, traces_dir=getattr(args, "traces_dir", None)
        )
    except TraceNotFoundError as exc:
        raise SetupError(f"argument --trace: {exc}; pass --traces-dir or a file path") from exc


def base_policy_config(pool: PoolSimConfig, profile: SimProfile) -> CostAutoscalingConfig:
    return CostAutoscalingConfig(
        slo=pool.slo,
        capacity=capacity_from_profile(profile, pool.engine),
        gpu_hour_usd=pool.gpu_hour_usd,
        gpus_per_replica=pool.gpus_per_replica,
    )


def load_pool_profile(pool: PoolSimConfig) -> SimProfile:
    try:
        return load_profile(pool.engine.profile)
    except (OSError, ValueError) as exc:
        raise SetupError(f"argument --profile: {exc}") from exc


def tuned_policy_config(path: Path) -> CostAutoscalingConfig:
    """policy_kwargs of a tuned file written by `tune autoscaling`."""
    with path.open(encoding="utf-8") as f:
        document = yaml.safe_load(f)
    kwargs = document["autoscaling_config"]["policy"]["policy_kwargs"]
    return CostAutoscalingConfig.model_validate(kwargs)


def remember_command(parser: argparse.ArgumentParser, words: str) -> None:
    """Let `command_line` rebuild the invocation from the parsed arguments (however main was called)."""
    flags = [(a.dest, a.option_strings[-1], a.default, a.nargs == 0) for a in parser._actions if a.option_strings]
    parser.set_defaults(command_words=words, command_flags=flags)


def command_line(args: argparse.Namespace) -> str:
    """`ray-dspine <words>` plus every option whose value differs from its default."""
    parts = ["ray-dspine", args.command_words]
    for dest, flag, default, is_switch in args.command_flags:
        value = getattr(args, dest, default)
        if dest == "help" or value == default:
            continue
        parts.append(flag if is_switch else f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


def deployment_autoscaling_yaml(pool: PoolSimConfig, params: CostAutoscalingConfig) -> dict:
    """The block to put under the pool deployment (Ray's delays off: the policy keeps its own)."""
    return {
        "autoscaling_config": {
            "min_replicas": pool.min_replicas,
            "initial_replicas": pool.initial_replicas,
            "max_replicas": pool.max_replicas,
            "look_back_period_s": 30.0,
            "upscale_delay_s": 0.0,
            "downscale_delay_s": 0.0,
            "policy": {"policy_function": POLICY_FUNCTION, "policy_kwargs": params.model_dump(mode="json")},
        },
        "max_ongoing_requests": pool.max_ongoing_requests,
        "graceful_shutdown_timeout_s": pool.graceful_shutdown_timeout_s,
        "graceful_shutdown_wait_loop_s": pool.graceful_shutdown_wait_loop_s,
    }
