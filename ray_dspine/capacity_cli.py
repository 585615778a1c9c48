"""`ray-dspine plan CONFIG`: each pool's capacity on its GPU, or the arithmetic of why it does not fit."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from .capacity import CapacityError, format_plan
from .config_io import ConfigFileError, load_app_configs
from .engines.sglang.hicache import plan_host_tier
from .pools import plan_pool

GIB = 1024**3


def register(subparsers) -> None:
    parser = subparsers.add_parser("plan", help="print each pool's capacity (weights, KV tokens, Mamba slots)")
    parser.add_argument("config", help="a Serve YAML such as clusters/sim.yaml")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=plan_main)


def hicache_host_tier(pool, plan) -> dict | None:
    """The HiCache host pools an SGLang pool's extra_args give (engines/sglang/hicache.py), or None."""
    tier = plan_host_tier(pool.engine.extra_args, plan) if pool.engine.kind == "sglang" else None
    return None if tier is None else asdict(tier)


def hicache_rows(tier: dict | None) -> list[tuple[str, str]]:
    if tier is None:
        return []
    kv, mamba = tier["kv_bytes"] / GIB, tier["mamba_bytes"] / GIB
    return [
        ("hicache host tier", f"{tier['kv_tokens']:,} KV tokens; host memory KV {kv:.1f} + Mamba {mamba:.1f} = "
                              f"{kv + mamba:.1f} GiB per GPU (a drafter's KV host pool not counted)"),
    ]  # fmt: skip


def plan_main(args) -> int:
    try:
        apps = load_app_configs(args.config)
    except ConfigFileError as exc:
        print(f"ray-dspine plan: {exc}", file=sys.stderr)
        return 2
    plans, failures = {}, []
    for app_name, config in apps:
        for pool in config.pools:
            try:
                plan = plan_pool(pool)
            except CapacityError as exc:
                failures.append(f"{app_name}/{pool.name}: {exc}")
                continue
            if plan is None:
                plans[f"{app_name}/{pool.name}"] = None
                if not args.json:
                    print(f"pool {pool.name}: {pool.engine.kind} engine, no capacity section (sized by its own budgets)\n")
                continue
            tier = hicache_host_tier(pool, plan)
            plans[f"{app_name}/{pool.name}"] = plan.model_dump() | {"hicache_host": tier}
            if not args.json:
                print(format_plan(pool.name, plan, hicache_rows(tier)) + "\n")
    if args.json:
        print(json.dumps({"pools": plans, "errors": failures}, indent=2))
    for failure in failures:
        print(f"ray-dspine plan: {failure}", file=sys.stderr)
    return 1 if failures else 0
