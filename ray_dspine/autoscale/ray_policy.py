"""Ray Serve adapter: `autoscaling_config.policy.policy_function` for a pool deployment.

Ray 2.60 imports `policy_function` ("module:Class"), instantiates a class once with
`policy_kwargs`, and calls the instance with an `AutoscalingContext` every control-loop tick; the
call returns (desired replicas, policy_state). Ray then applies upscale/downscale factors, its own
`upscale_delay_s`/`downscale_delay_s` and the min/max bounds. This policy keeps its own delays, so
the pool's `autoscaling_config` sets Ray's delays to 0. Only context attributes are read: no ray import.
"""

from __future__ import annotations

from typing import Any

from ray_dspine.autoscale.config import CostAutoscalingConfig
from ray_dspine.autoscale.observation import observation_from_context
from ray_dspine.autoscale.policy import ScalingDecision, decide


class CostAutoscalingPolicy:
    """Callable policy; `policy_kwargs` validate into CostAutoscalingConfig."""

    def __init__(self, **policy_kwargs: Any):
        self.config = CostAutoscalingConfig.model_validate(policy_kwargs)
        self.last_decision: ScalingDecision | None = None

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        decision = decide(self.config, observation_from_context(ctx), dict(ctx.policy_state or {}))
        self.last_decision = decision
        return decision.num_replicas, decision.state
