"""A real local Ray Serve app scales up under a load step and back down after it, with our policy.

Replicas wrap the simulated engine in real time and report `record_autoscaling_stats` through
ReplicaWindowStats; the deployment names CostAutoscalingPolicy in `autoscaling_config.policy`.
The load is prefill-heavy (4,000-token prompts, 20-token answers): with a 1 s TTFT target one
replica serves about 1.07 requests/s (capacity model), and the step sends 3 requests/s for 15 s.
Starts its own local Ray cluster with token auth disabled (RAY_AUTH_MODE=disabled, as new local
clusters turn it on by default); shuts Serve and Ray down at the end.
"""

import os
import time
import uuid
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray import serve  # noqa: E402

from dspine_lab.autoscale.calibration import capacity_from_profile  # noqa: E402
from ray_dspine.autoscale.config import CostAutoscalingConfig, SloTargets, StatsWindowConfig  # noqa: E402
from ray_dspine.autoscale.stats import ReplicaWindowStats  # noqa: E402
from ray_dspine.engines.protocol import GenerateRequest  # noqa: E402
from ray_dspine.engines.simulated.config import SimulatedEngineConfig  # noqa: E402
from ray_dspine.engines.simulated.engine import SimulatedEngine  # noqa: E402
from ray_dspine.engines.simulated.profile import load_profile  # noqa: E402

pytestmark = pytest.mark.serve

REPO_ROOT = Path(__file__).resolve().parents[2]
APP = "autoscale-test"
ENGINE = SimulatedEngineConfig(profile="h200-qwen3.8-27b", drafter="dspine", time_scale=1.0)
SLO = SloTargets(ttft_slo_s=1.0, itl_slo_ms=1000.0)
PROMPT_TOKENS, MAX_TOKENS = 4000, 20
NUM_REQUESTS, RATE_PER_S = 45, 3.0


def policy_kwargs() -> dict:
    config = CostAutoscalingConfig(
        slo=SLO, capacity=capacity_from_profile(load_profile(ENGINE.profile), ENGINE), headroom=0.0,
        upscale_delay_s=0.0, downscale_delay_s=3.0, lookahead_s=0.0, stale_after_s=30.0,
        default_prompt_tokens=PROMPT_TOKENS, default_output_tokens=MAX_TOKENS,
    )  # fmt: skip
    return config.model_dump(mode="json")


@serve.deployment(
    ray_actor_options={"num_cpus": 0},
    max_ongoing_requests=16,
    graceful_shutdown_timeout_s=60.0,
    graceful_shutdown_wait_loop_s=0.5,
    autoscaling_config={
        "min_replicas": 1,
        "max_replicas": 4,
        "initial_replicas": 1,
        "metrics_interval_s": 0.5,
        "look_back_period_s": 2.0,
        "upscale_delay_s": 0.0,
        "downscale_delay_s": 0.0,
        "policy": {
            "policy_function": "ray_dspine.autoscale.ray_policy:CostAutoscalingPolicy",
            "policy_kwargs": policy_kwargs(),
        },
    },
)
class SimAutoscaledReplica:
    async def __init__(self):
        self.engine = SimulatedEngine(ENGINE)
        await self.engine.start()
        self.stats = ReplicaWindowStats(StatsWindowConfig(window_s=4.0, slo=SLO), time.monotonic, time.monotonic())

    async def generate(self, request_id: str) -> dict:
        self.stats.record_arrival()
        started, first, usage, finish, tokens = time.monotonic(), None, None, None, 0
        request = GenerateRequest(
            request_id=request_id, prompt="x", max_tokens=MAX_TOKENS, estimated_prompt_tokens=PROMPT_TOKENS
        )
        async for chunk in self.engine.generate(request):
            if first is None and chunk.num_tokens:
                first = time.monotonic()
            tokens += chunk.num_tokens
            if chunk.finish_reason is not None:
                finish, usage = chunk.finish_reason, chunk.usage
        if usage is not None and first is not None:
            self.stats.record_finished(first - started, time.monotonic() - first, usage)
        return {"finish_reason": finish, "tokens": tokens}

    async def record_autoscaling_stats(self) -> dict[str, float]:
        return self.stats.snapshot(self.engine.load())




def num_running() -> int:
    deployment = serve.status().applications[APP].deployments["SimAutoscaledReplica"]
    return int(deployment.replica_states.get("RUNNING", 0))


def test_load_step_scales_up_then_down(serve_instance):
    handle = serve.run(SimAutoscaledReplica.bind(), name=APP, route_prefix=None)
    assert num_running() == 1
    responses, peak = [], 1
    for _ in range(NUM_REQUESTS):
        responses.append(handle.generate.remote(uuid.uuid4().hex))
        peak = max(peak, num_running())
        time.sleep(1.0 / RATE_PER_S)
    results = [r.result(timeout_s=120) for r in responses]
    peak = max(peak, num_running())
    assert peak >= 2, "the pool never scaled up under the load step"
    # no request failed or was cut off: every one produced all its tokens
    assert all(r == {"finish_reason": "length", "tokens": MAX_TOKENS} for r in results)
    deadline = time.monotonic() + 40.0
    while num_running() > 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert num_running() == 1, "the pool did not scale back down after the load"
