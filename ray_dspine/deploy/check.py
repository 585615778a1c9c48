"""`ray-dspine check`: everything that can be known about a Serve config before it is deployed.

Rules (each finding names its field path and a fix; E = error, W = warning):
  E1 file       the YAML parses and has an `applications:` list.
  E2 ray        Ray's ServeDeploySchema, unknown keys and autoscaling configs (serve_schema.py).
  E3 ours       each application whose import_path starts with `ray_dspine.` validates into AppConfig;
                at least one such application exists.
  E4 overrides  each `deployments[].name` is `ingress` or `pool-<name>` of one of the application's pools.
  E5 capacity   plan_pool(pool) fits for every pool with a capacity section (the message is the planner's).
  E6 gpus       an sglang pool reserves num_gpus == capacity.tensor_parallel_size GPUs per replica
                (an override's ray_actor_options.num_gpus wins over the pool's deployment.num_gpus).
  E7 policy     CostAutoscalingPolicy's policy_kwargs validate into CostAutoscalingConfig.
  W1 pins       placeholder sha256 pins or artifact locations (pins.py).
  W2 price      the policy's gpu_hour_usd equals the pool's, and its gpus_per_replica the pool's num_gpus.
  W3 model      the policy's capacity.max_running_requests and total_kv_tokens equal the plan's
                max_running_requests and free_kv_tokens.
  W4 ongoing    max_ongoing_requests >= the plan's max_running_requests (else running slots stay idle).
  E8 sglang     SGLang itself accepts every sglang pool's launch command and its autoregressive fallback:
                its parser, resolution and validation (engines/sglang/validation.py); a rejection is an
                error carrying SGLang's message; no importable SGLang is an error (`sglang=False` skips
                E8-W6 and says so).
  E9 version    the SGLang that judged is the one the pools pin (PINNED_SGLANG).
  W5 algorithm  an algorithm the installed SGLang does not know (no package registered it through the
                `sglang.srt.plugins` entry point) is judged with a stand-in registration and warned about;
                with strict=True it is not stood in, so SGLang's own "Unknown speculative algorithm" fails E8.
  W6 warned     each WARNING SGLang logged while resolving a command.
Complexity: O(applications * (pools + overrides) + pinned files); one capacity plan per pool (two with a
drafter, for the autoregressive fallback command); one SGLang judge process for all commands (~10 s).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from ray_dspine.capacity import CapacityError, plan_capacity, resolve_profile
from ray_dspine.config import AppConfig, PoolConfig
from ray_dspine.config_io import ConfigFileError, read_serve_yaml
from ray_dspine.pools import plan_pool

from ray_dspine.engines.sglang.validation import PINNED_SGLANG, validate_commands

from .findings import CheckReport, PoolReport, validation_findings
from .pins import placeholder_findings
from .serve_schema import ray_schema_findings

COST_POLICY = "ray_dspine.autoscale.ray_policy:CostAutoscalingPolicy"
DEFAULT_SGLANG_PORT = 30000


def check_config(path: str | Path, *, sglang: bool = True, strict: bool = False) -> CheckReport:
    report = CheckReport(config_path=str(path))
    try:
        document = read_serve_yaml(path)
    except ConfigFileError as exc:
        report.add("error", str(path), str(exc), "give a Ray Serve config file with an `applications:` list")
        return report
    report.findings += ray_schema_findings(document)
    ours = 0
    for index, app in enumerate(document["applications"]):
        if isinstance(app, dict) and str(app.get("import_path", "")).startswith("ray_dspine."):
            ours += 1
            _check_application(report, index, app)
    if ours == 0:
        report.add("error", "applications", "no application uses ray_dspine.serve.app:build_app",
                   "set an application's import_path to ray_dspine.serve.app:build_app")  # fmt: skip
    if sglang:
        _judge_commands(report, strict)
    return report


def _judge_commands(report: CheckReport, strict: bool) -> None:
    """E8, E9, W5, W6: SGLang's verdict on every rendered command, in one judge process."""
    jobs: list[tuple[PoolReport, str, list[str], str | None]] = []
    for pool in report.pools:
        if pool.command is None or pool.pool_config is None:
            continue
        engine = pool.pool_config.engine
        if pool.fallback_command is None:
            jobs.append((pool, "command", pool.command, None))
        else:
            jobs.append((pool, "command", pool.command, engine.speculative_algorithm))
            jobs.append((pool, "fallback", pool.fallback_command, None))
    verdicts = validate_commands(
        [(command, pool.pool_config.engine.capacity, algorithm) for pool, _, command, algorithm in jobs], strict=strict
    )
    for (pool, which, _, algorithm), verdict in zip(jobs, verdicts):
        setattr(pool, f"{which}_verdict", verdict)
        label = "launch command" if which == "command" else "autoregressive fallback command"
        where = f"{pool.path}.engine"
        if verdict.stage == "import":
            report.add("error", where, f"the {label} was not validated: SGLang {PINNED_SGLANG} is not importable here "
                       f"({verdict.error})", "run scripts/setup (it installs SGLang's own package for validation), "
                       "or pass --no-sglang to skip this check")  # fmt: skip
            continue
        if not verdict.ok:
            at = f" [{verdict.where}]" if verdict.where else ""
            report.add("error", where, f"SGLang {verdict.sglang_version or ''} rejects the {label}: {verdict.error}{at}",
                       "change the pool so that SGLang accepts the command (its message names the setting)")  # fmt: skip
        if verdict.sglang_version and verdict.sglang_version != PINNED_SGLANG:
            report.add("error", where, f"validated by SGLang {verdict.sglang_version}, but the pools pin "
                       f"{PINNED_SGLANG}", f"install sglang=={PINNED_SGLANG} (scripts/setup)")  # fmt: skip
        for name in verdict.stand_ins:
            report.add("warning", f"{where}.speculative_algorithm", f"the installed SGLang does not know {name}: no "
                       "installed package registers it through the sglang.srt.plugins entry point, so the command "
                       "was judged with a stand-in registration", f"install the package that provides {name} where "
                       "you run check (the image build asserts it is registered)")  # fmt: skip
        for message in verdict.warnings:
            report.add("warning", where, f"SGLang warned about the {label}: {message}",
                       "read SGLang's warning: it will ignore or override that setting")  # fmt: skip


def _check_application(report: CheckReport, index: int, app: dict) -> None:
    prefix = f"applications[{index}].args"
    try:
        config = AppConfig.model_validate(app.get("args") or {})
    except ValidationError as exc:
        report.findings += validation_findings(exc, prefix)
        return
    overrides = _overrides(report, index, app, config)
    app_name = str(app.get("name", f"app{index}"))
    for pool_index, pool in enumerate(config.pools):
        pool_path = f"{prefix}.pools[{pool_index}]"
        for ref_name in ("target", "draft"):
            ref = getattr(pool.engine, ref_name, None)
            if ref is not None:
                report.findings += placeholder_findings(ref, f"{pool_path}.engine.{ref_name}")
        try:
            plan = plan_pool(pool)
        except CapacityError as exc:
            report.add("error", f"{pool_path}.engine.capacity", str(exc), "change the capacity section as the "
                       "message advises, then `ray-dspine plan` it")  # fmt: skip
            continue
        override_path, override = overrides.get(f"pool-{pool.name}", (None, {}))
        pool_report = PoolReport(app_name=app_name, name=pool.name, engine_kind=pool.engine.kind, plan=plan,
                                 path=pool_path, pool_config=pool)  # fmt: skip
        _check_resources(report, pool, pool_path, plan, override_path, override)
        if override_path is not None:
            _check_policy(report, pool, plan, override_path, override)
        if pool.engine.kind == "sglang" and plan is not None:
            pool_report.command, pool_report.fallback_command = sglang_commands(pool)
        report.pools.append(pool_report)


def _overrides(report: CheckReport, index: int, app: dict, config: AppConfig) -> dict[str, tuple[str, dict]]:
    """E4: the application's deployment overrides by name, reporting names that match no deployment."""
    known = ["ingress"] + [f"pool-{pool.name}" for pool in config.pools]
    found: dict[str, tuple[str, dict]] = {}
    entries = app.get("deployments")
    for position, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict):
            continue
        path = f"applications[{index}].deployments[{position}]"
        name = str(entry.get("name", ""))
        if name not in known:
            report.add("error", f"{path}.name", f"no deployment named {name!r} in this application",
                       f"use one of {known} (each pool is deployed as pool-<name>)")  # fmt: skip
            continue
        found[name] = (path, entry)
    return found


def _effective(pool: PoolConfig, override: dict, key: str):
    if key == "num_gpus":
        actor = override.get("ray_actor_options") or {}
        return float(actor.get("num_gpus", pool.deployment.num_gpus))
    return override.get(key, getattr(pool.deployment, key))


def _check_resources(report, pool: PoolConfig, pool_path: str, plan, override_path, override: dict) -> None:
    num_gpus = _effective(pool, override, "num_gpus")
    if pool.engine.kind == "sglang":
        tp = pool.engine.capacity.tensor_parallel_size
        if num_gpus != tp:
            where = f"{override_path}.ray_actor_options.num_gpus" if "ray_actor_options" in override else (
                f"{pool_path}.deployment.num_gpus")
            report.add("error", where, f"reserves {num_gpus:g} GPUs but SGLang shards over tensor_parallel_size {tp}",
                       f"set num_gpus: {tp} so Ray gives the replica exactly the GPUs its server uses")  # fmt: skip
    if plan is None:
        return
    ongoing = int(_effective(pool, override, "max_ongoing_requests"))
    if ongoing < plan.max_running_requests:
        path = f"{override_path}.max_ongoing_requests" if "max_ongoing_requests" in override else (
            f"{pool_path}.deployment.max_ongoing_requests")
        report.add("warning", path, f"{ongoing} is below the planned {plan.max_running_requests} running requests, "
                   "so running slots stay idle", f"raise it to at least {plan.max_running_requests}")  # fmt: skip


def _check_policy(report: CheckReport, pool: PoolConfig, plan, override_path: str, override: dict) -> None:
    """E7, W2, W3 for a pool autoscaled by CostAutoscalingPolicy."""
    autoscaling = override.get("autoscaling_config")
    policy = autoscaling.get("policy") if isinstance(autoscaling, dict) else None
    if not isinstance(policy, dict) or policy.get("policy_function") != COST_POLICY:
        return
    from ray_dspine.autoscale.config import CostAutoscalingConfig

    path = f"{override_path}.autoscaling_config.policy.policy_kwargs"
    try:
        params = CostAutoscalingConfig.model_validate(policy.get("policy_kwargs") or {})
    except ValidationError as exc:
        report.findings += validation_findings(exc, path)
        return
    if params.gpu_hour_usd != pool.gpu_hour_usd:
        report.add("warning", f"{path}.gpu_hour_usd", f"{params.gpu_hour_usd:g} differs from the pool's "
                   f"gpu_hour_usd {pool.gpu_hour_usd:g}", "use one price for both (the dashboard's cost uses the "
                   "pool's)")  # fmt: skip
    num_gpus = _effective(pool, override, "num_gpus")
    if num_gpus > 0 and params.gpus_per_replica != num_gpus:
        report.add("warning", f"{path}.gpus_per_replica", f"{params.gpus_per_replica:g} differs from the "
                   f"replica's num_gpus {num_gpus:g}", f"set gpus_per_replica: {num_gpus:g}")  # fmt: skip
    if plan is None:
        return
    planned_values = (("max_running_requests", plan.max_running_requests), ("total_kv_tokens", plan.free_kv_tokens))
    for field, planned in planned_values:
        value = getattr(params.capacity, field)
        if value != planned:
            report.add("warning", f"{path}.capacity.{field}", f"{value:,} differs from the plan's {planned:,}",
                       f"set it to {planned} (from `ray-dspine plan`)")  # fmt: skip


def sglang_commands(pool: PoolConfig) -> tuple[list[str], list[str] | None]:
    """The replica's launch command (drafter on when it has one) and its autoregressive fallback command,
    with the artifact cache folders the replica fetches into and the pool's preferred port."""
    from ray_dspine.artifacts import local_root
    from ray_dspine.engines.sglang.args import render_command

    engine = pool.engine
    if engine.python_executable is None:
        engine = engine.model_copy(update={"python_executable": "python"})
    capacity = engine.capacity
    profile = resolve_profile(capacity)
    model_dir = local_root(engine.target, engine.cache_dir)
    draft_dir = local_root(engine.draft, engine.cache_dir) if engine.draft is not None else None
    port = engine.port or DEFAULT_SGLANG_PORT
    without_draft = plan_capacity(capacity.model_copy(update={"draft": None}), profile, pool_name=pool.name)
    fallback = render_command(engine, without_draft, model_dir=model_dir, draft_dir=draft_dir, port=port, drafter=False)
    if not engine.has_drafter:
        return fallback, None
    with_draft = plan_capacity(capacity, profile, pool_name=pool.name)
    command = render_command(engine, with_draft, model_dir=model_dir, draft_dir=draft_dir, port=port, drafter=True)
    return command, fallback
