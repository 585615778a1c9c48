"""The GPU pools' simulated twins: engine, SLOs, price and the day of traffic each is tuned on.

Until GPU measurements exist, each production pool is represented by the simulated engine on the
H200 profile (calibrated from vendor figures) with its drafter. Assumptions, stated once:
  price       3.50 USD per H200 GPU-hour (on-demand cloud list prices, 2025, order of magnitude).
  replica     one GPU; 262,144 KV tokens; 64 running requests at most; Ray max_ongoing_requests 64.
  start-up    120 s from request to serving (node already up: SGLang loads 27B + 2B draft weights
              from local disk and captures CUDA graphs for target and drafter).
  traffic     dspine-agent and dflash2 (its A/B arm): Azure code trace (long prompts, short
              outputs, coding-assistant-like); dspine-reasoning: Azure conversation trace (longer
              outputs). rate_scale is chosen so one simulated day runs in about a minute on one core.
  SLOs        per request (ray_dspine/autoscale/slo.py): agent pools TTFT <= 2 s and mean ITL <= 100 ms;
              reasoning TTFT <= 3 s and mean ITL <= 60 ms.
  large fleet dspine-agent-fleet: the dspine-agent twin at rate_scale 12 with max_replicas 64 and 10
              initial replicas, so its busy hours need more than 10 replicas (one replica is under 10%
              of the peak) and a window starting mid-morning does not start cold.
A `--config` YAML (clusters/sim.yaml) may override engine, price and GPUs per replica per pool.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ray_dspine.autoscale.config import SloTargets
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from dspine_lab.sim.config import PoolSimConfig, DayTraffic


def _twin(
    name: str, drafter: str, slo: SloTargets, trace: str, rate_scale: float, max_replicas: int = 32, initial: int = 2
) -> tuple[PoolSimConfig, DayTraffic]:
    """A production pool's calibrated H200 twin (USD 3.50 per GPU-hour) and the traffic it is tuned on."""
    engine = SimulatedEngineConfig(profile="h200-qwen3.8-27b", drafter=drafter)
    pool = PoolSimConfig(
        name=name, engine=engine, slo=slo, gpu_hour_usd=3.5, max_replicas=max_replicas, initial_replicas=initial
    )
    return pool, DayTraffic(trace=trace, rate_scale=rate_scale)


AGENT_SLO = SloTargets(ttft_slo_s=2.0, itl_slo_ms=100.0)
REASONING_SLO = SloTargets(ttft_slo_s=3.0, itl_slo_ms=60.0)

TWIN_POOLS: dict[str, tuple[PoolSimConfig, DayTraffic]] = {
    "dspine-agent": _twin("dspine-agent", "dspine", AGENT_SLO, "azure-code", 2.5),
    "dflash2": _twin("dflash2", "dflash2", AGENT_SLO, "azure-code", 2.5),
    "dspine-reasoning": _twin("dspine-reasoning", "dspine", REASONING_SLO, "azure-conv", 1.0),
    "dspine-agent-fleet": _twin(
        "dspine-agent-fleet", "dspine", AGENT_SLO, "azure-code", 12.0, max_replicas=64, initial=10
    ),
}


def pool_from_cluster_yaml(path: Path, name: str, base: PoolSimConfig) -> PoolSimConfig:
    """Take engine, gpu_hour_usd and deployment.num_gpus of pool `name` from a Serve config file."""
    with path.open(encoding="utf-8") as f:
        document = yaml.safe_load(f) or {}
    names = []
    for app in document.get("applications", []):
        for pool in (app.get("args") or {}).get("pools", []):
            names.append(str(pool.get("name")))
            if pool.get("name") != name:
                continue
            engine = pool.get("engine") or {}
            if engine.get("kind") != "simulated":
                raise ValueError(f"pool {name!r} in {path} is not a simulated pool (engine kind {engine.get('kind')!r})")
            update: dict = {"engine": SimulatedEngineConfig.model_validate(engine)}
            if "gpu_hour_usd" in pool:
                update["gpu_hour_usd"] = float(pool["gpu_hour_usd"])
            gpus = float((pool.get("deployment") or {}).get("num_gpus", 0.0) or 0.0)
            if gpus > 0:
                update["gpus_per_replica"] = gpus
            return base.model_copy(update=update)
    raise ValueError(f"no pool {name!r} in {path}; its pools: {', '.join(names) or 'none'}")
