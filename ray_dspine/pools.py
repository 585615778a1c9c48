"""Size each pool's engine from its capacity plan before the app starts.

An engine with a `capacity:` section (sglang, simulated) is planned (`ray_dspine.capacity`); a
simulated engine takes the plan's KV tokens, state slots and running-request limit, so the twin
holds exactly what SGLang would on that GPU; the sglang engine plans again itself when it renders
its command line. The embedded CPU engine has no capacity section and keeps its own budgets.
"""

from __future__ import annotations

from .capacity import CapacityPlan, plan_capacity, resolve_profile
from .config import AppConfig, PoolConfig


def plan_pool(pool: PoolConfig) -> CapacityPlan | None:
    """The pool's plan, or None without a capacity section. Raises CapacityError if it does not fit."""
    capacity = getattr(pool.engine, "capacity", None)
    if capacity is None:
        return None
    return plan_capacity(capacity, resolve_profile(capacity), pool_name=pool.name)


def apply_plan(pool: PoolConfig, plan: CapacityPlan | None) -> PoolConfig:
    if plan is None or pool.engine.kind != "simulated":
        return pool
    engine = pool.engine.model_copy(
        update={
            "total_kv_tokens": plan.free_kv_tokens,
            "num_state_slots": plan.num_state_slots,
            "state_slots_per_request": plan.state_slots_per_request,
            "max_running_requests": plan.max_running_requests,
        }
    )
    return pool.model_copy(update={"engine": engine})


def sized(config: AppConfig) -> AppConfig:
    """A copy of the config with every pool sized by its plan."""
    return config.model_copy(update={"pools": [apply_plan(pool, plan_pool(pool)) for pool in config.pools]})
