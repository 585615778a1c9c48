"""`ray-dspine gpu-check CONFIG`: run each SGLang pool's commands on this node's GPUs and compare what
SGLang does with the plan; the checks that `ray-dspine check` cannot make without a GPU.

Rules, per pool, for its launch command and then its autoregressive fallback:
  G1 start    the replica's own supervisor launches the command (after fetching the pinned artifacts into
              cache_dir; with --dummy-weights SGLang initialises random weights, `--load-format dummy`,
              and `--speculative-draft-load-format dummy`, and the fetch leaves out the pinned weight files,
              WEIGHT_SUFFIXES) and the server becomes ready within the pool's
              startup_timeout_s. A config error or a crash fails G1 with what SGLang printed.
  G2 drafter  a drafter launch passed the supervisor's drafter probe (spec_verify_ct > 0); a launch that
              fell back to autoregressive instead fails G2 with the probe's reason.
  G3 memory   /server_info's max_total_num_tokens (the KV tokens SGLang allocated at start-up) against the
              plan's free_kv_tokens: it fails when SGLang allocated less than (1 - kv_tolerance) of the plan,
              since the router and the autoscaler count on the planned tokens.
  G4 sizes    /server_info's max_running_requests and max_mamba_cache_size equal the plan's.
Each command runs alone (the server is stopped, its process group killed, before the next starts).
Before any launch, what would only fail after minutes of downloading is refused: a config that cannot be
read, a --pool the config lacks, a config with no SGLang pool, placeholder artifact pins (pins.py) in a pool
to check (`selected_pools`), and a node where `nvidia-smi -L` lists no GPU (`visible_gpus`).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ray_dspine.artifacts import ArtifactRef
from ray_dspine.capacity import plan_capacity, resolve_profile
from ray_dspine.config import PoolConfig
from ray_dspine.config_io import ConfigFileError, load_app_configs
from ray_dspine.engines.sglang import SGLangEngine, SGLangEngineConfig
from ray_dspine.engines.sglang.process import launch_subprocess

from .pins import is_placeholder_sha256, is_placeholder_uri

DUMMY_WEIGHTS = ["--load-format", "dummy"]
DUMMY_DRAFT_WEIGHTS = ["--speculative-draft-load-format", "dummy"]
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")  # checkpoint tensors, which dummy loading skips


@dataclass
class CommandResult:
    pool: str
    which: str  # "command" or "fallback"
    checks: dict[str, tuple[bool, str]] = field(default_factory=dict)  # rule -> (passed, what was seen)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for ok, _ in self.checks.values())


def without_weights(ref: ArtifactRef) -> ArtifactRef:
    """The artifact's pins less its weight files (WEIGHT_SUFFIXES): what a dummy-weights launch still reads (config,
    tokenizer, a drafter's code), so --dummy-weights downloads no checkpoint."""
    kept = [pin for pin in ref.files if not pin.path.endswith(WEIGHT_SUFFIXES)]
    return ref.model_copy(update={"files": kept}) if kept else ref


def engine_configs(pool: PoolConfig, *, dummy_weights: bool) -> list[tuple[str, SGLangEngineConfig]]:
    """The pool's engine as configured, and (with a drafter) the same engine without it, which renders the
    autoregressive fallback command. With dummy weights, both fetch their artifacts without the weight files."""
    engine = pool.engine
    assert isinstance(engine, SGLangEngineConfig)
    if dummy_weights:
        engine = engine.model_copy(update={
            "target": without_weights(engine.target),
            "draft": without_weights(engine.draft) if engine.draft is not None else None,
        })  # fmt: skip
    weights = DUMMY_WEIGHTS if dummy_weights else []
    draft_weights = DUMMY_DRAFT_WEIGHTS if dummy_weights and engine.has_drafter else []
    configs = [("command", engine.model_copy(update={"extra_args": [*engine.extra_args, *weights, *draft_weights]}))]
    if engine.has_drafter:
        plain = engine.model_copy(update={
            "draft": None, "speculative_algorithm": None,
            "capacity": engine.capacity.model_copy(update={"draft": None}),
            "extra_args": [*engine.extra_args, *weights],
        })  # fmt: skip
        configs.append(("fallback", plain))
    return configs


async def check_command(
    pool_name: str, which: str, config: SGLangEngineConfig, *, kv_tolerance: float, launcher=launch_subprocess
) -> CommandResult:
    """G1-G4 for one command."""
    result = CommandResult(pool_name, which)
    plan = plan_capacity(config.capacity, resolve_profile(config.capacity), pool_name=pool_name)
    engine = SGLangEngine(config, launcher=launcher, pool_name=pool_name)
    try:
        try:
            await engine.start()
        except Exception as exc:  # the supervisor gave up: every launch crashed
            result.checks["G1 start"] = (False, f"{type(exc).__name__}: {exc}")
            return result
        described = engine.describe()
        if engine.base_url is None:
            error = described.get("config_error") or {}
            seen = error.get("message") or described.get("last_failure") or described["state"]
            result.checks["G1 start"] = (False, f"state {described['state']}: {seen} (log {described['log_path']})")
            return result
        result.checks["G1 start"] = (True, f"ready after {described['num_launches']} launch(es)")
        if config.has_drafter:
            speculating = described["path"] == "speculative"
            reason = described.get("fallback_reason") or described["path"]
            result.checks["G2 drafter"] = (speculating, "probe: spec_verify_ct > 0" if speculating else reason)
        async with httpx.AsyncClient(timeout=30.0) as http:
            info = (await http.get(f"{engine.base_url}/server_info")).json()
        result.checks.update(compare_with_plan(info, plan, kv_tolerance))
    finally:
        await engine.stop()
    return result


def compare_with_plan(info: dict[str, Any], plan, kv_tolerance: float) -> dict[str, tuple[bool, str]]:
    """G3 and G4 from a /server_info body."""
    allocated = info.get("max_total_num_tokens")
    if not isinstance(allocated, int):
        memory = (False, "/server_info has no max_total_num_tokens")
    else:
        ratio = allocated / plan.free_kv_tokens
        memory = (ratio >= 1 - kv_tolerance, f"SGLang allocated {allocated:,} KV tokens, plan {plan.free_kv_tokens:,} "
                  f"({ratio:.3f}x)")  # fmt: skip
    sizes = {"max_running_requests": plan.max_running_requests, "max_mamba_cache_size": plan.max_mamba_cache_size}
    seen = {key: info.get(key) for key in sizes}
    return {
        "G3 memory": memory,
        "G4 sizes": (seen == sizes, ", ".join(f"{key} {seen[key]} (plan {sizes[key]})" for key in sizes)),
    }


class PreflightError(ValueError):
    """The check cannot start: the message names what to fix."""


def selected_pools(path: str | Path, names: list[str] | None) -> list[PoolConfig]:
    """The SGLang pools to check, all of them or those `names` picks; PreflightError if there are none, if a name is
    not one of them, or if a pool's artifact pins are placeholders."""
    try:
        pools = [pool for _, app in load_app_configs(path) for pool in app.pools]
    except ConfigFileError as exc:
        raise PreflightError(str(exc)) from exc
    sglang = [pool for pool in pools if pool.engine.kind == "sglang"]
    if not sglang:
        kinds = ", ".join(sorted({pool.engine.kind for pool in pools}))
        raise PreflightError(f"{path} has no SGLang pool (its pools run {kinds}); gpu-check launches SGLang pools, "
                             "e.g. clusters/prod.yaml's")
    unknown = sorted(set(names or []) - {pool.name for pool in sglang})
    if unknown:
        raise PreflightError(f"--pool {', '.join(unknown)}: no such SGLang pool in {path}; its SGLang pools are "
                             f"{', '.join(pool.name for pool in sglang)}")
    chosen = [pool for pool in sglang if not names or pool.name in names]
    placeholders = []
    for pool in chosen:
        for role, ref in (("target", pool.engine.target), ("draft", pool.engine.draft)):
            if ref is None:
                continue
            if is_placeholder_uri(ref.uri):
                placeholders.append(f"  {pool.name} {role}: placeholder location {ref.uri!r}")
            pinned = sum(is_placeholder_sha256(file.sha256) for file in ref.files)
            if pinned:
                placeholders.append(f"  {pool.name} {role}: {pinned} of {len(ref.files)} sha256 pins are placeholders")
    if placeholders:
        raise PreflightError("artifact pins are placeholders, so nothing could be fetched:\n" + "\n".join(placeholders)
                             + "\n  fix: upload the checkpoints and pin each file's uri, sha256 and size_bytes "
                             "(`ray-dspine check --strict CONFIG` lists every pin still to replace)")
    return chosen


def visible_gpus() -> int:
    """GPUs `nvidia-smi -L` lists (0 without the tool or when it fails)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines()) if listed.returncode == 0 else 0


async def gpu_check(path: str | Path, *, pools: list[str] | None, dummy_weights: bool, kv_tolerance: float,
                    launcher=launch_subprocess, out=print) -> list[CommandResult]:  # fmt: skip
    """G1-G4 for each selected pool's commands; raises PreflightError (selected_pools) before any launch."""
    results: list[CommandResult] = []
    for pool in selected_pools(path, pools):
        for which, config in engine_configs(pool, dummy_weights=dummy_weights):
            out(f"[{pool.name}] {which}: launching (this loads the model; minutes) ...")
            result = await check_command(pool.name, which, config, kv_tolerance=kv_tolerance, launcher=launcher)
            for rule, (ok, seen) in result.checks.items():
                out(f"  {'ok  ' if ok else 'FAIL'} {rule}: {seen}")
            results.append(result)
    return results


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "gpu-check", help="on a GPU node: run each SGLang pool's commands and compare SGLang's sizes with the plan"
    )
    parser.add_argument("config", help="a Serve YAML such as clusters/prod.yaml")
    parser.add_argument("--pool", action="append", help="only this pool (repeatable)")
    parser.add_argument("--dummy-weights", action="store_true",
                        help="random weights (SGLang's --load-format dummy): checks memory and start-up without "
                        "downloading the checkpoints; the drafter probe then only proves that verification runs")
    parser.add_argument("--kv-tolerance", type=float, default=0.02,
                        help="fail G3 when SGLang allocates less than (1 - this) of the planned KV tokens")
    parser.set_defaults(func=gpu_check_main)  # fmt: skip


def gpu_check_main(args) -> int:
    if not 0 <= args.kv_tolerance < 1:
        print(f"ray-dspine gpu-check: --kv-tolerance must be in [0, 1), got {args.kv_tolerance}", file=sys.stderr)
        return 2
    try:
        selected_pools(args.config, args.pool)
    except PreflightError as exc:
        print(f"ray-dspine gpu-check: {exc}", file=sys.stderr)
        return 2
    if visible_gpus() == 0:
        print("ray-dspine gpu-check: no NVIDIA GPU on this node (`nvidia-smi -L` lists none); run it on a GPU node "
              "of the pool's kind. Here, `ray-dspine check CONFIG` validates the config and SGLang's command lines",
              file=sys.stderr)
        return 2
    results = asyncio.run(gpu_check(args.config, pools=args.pool, dummy_weights=args.dummy_weights,
                                    kv_tolerance=args.kv_tolerance))  # fmt: skip
    failed = [f"{r.pool} {r.which}" for r in results if not r.passed]
    print(f"{len(results) - len(failed)} of {len(results)} commands passed" + (f"; failed: {failed}" if failed else ""))
    return 0 if not failed else 1
