"""`ray-dspine plan CONFIG`: each pool's capacity on its GPU, or the arithmetic of why it does not fit."""

from __future__ import annotations

import json
import sys

from .capacity import CapacityError, format_plan
from .config_io import ConfigFileError, load_app_configs
from .pools import plan_pool


def register(subparsers) -> None:
    parser = subparsers.add_parser("plan", help="print each pool's capacity (weights, KV tokens, Mamba slots)")
    parser.add_argument("config", help="a Serve YAML such as clusters/sim.yaml")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=plan_main)


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
            plans[f"{app_name}/{pool.name}"] = plan.model_dump()
            if not args.json:
                print(format_plan(pool.name, plan) + "\n")
    if args.json:
        print(json.dumps({"pools": plans, "errors": failures}, indent=2))
    for failure in failures:
        print(f"ray-dspine plan: {failure}", file=sys.stderr)
    return 1 if failures else 0
