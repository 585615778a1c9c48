"""The two policies ours is compared with, configured as their documentation recommends.

Ray Serve default (`ray.serve.autoscaling_policy.replica_queue_length_autoscaling_policy`, 2.60):
  R = running replicas, Q = total_num_requests (ongoing = running + queued, Ray's mean over
  look_back_period_s), t = target_ongoing_requests:
      R = 0 and Q > 0 -> max(1, T) (cold start);  R = 0 -> T;  else desired = R * Q / (t * R) = Q / t.
  Ray then applies its delays (upscale 30 s, downscale 600 s by default) and bounds.
  Setting for LLM serving: t = 32 with max_ongoing_requests = 64, i.e. half the engine's batch
  limit, as in Ray Serve LLM's own example (Qwen2.5-32B: max_num_seqs 64, max_ongoing_requests 64,
  target_ongoing_requests 32). Ray Serve LLM's builder leaves the target unset (1e9), so the user
  must pick one.
Ray Serve LLM TTFTAutoscalingPolicy (ray.serve.llm.autoscaling; doc "Autoscaling on time-to-first-
  token"): with p = p99 TTFT of the model over the last minute (Prometheus histogram_quantile over
  rate([1m])), T = current target, q = total_num_requests / R:
      p unavailable -> T (hold);  p > ttft_target_s -> T + 1;  q < idle_threshold -> max(0, T - 1);
      else T.  Defaults: ttft_target_s = 2.0 (set here to the pool's TTFT SLO), idle_threshold = 1.0,
  with Ray's default delays (upscale 30 s, downscale 600 s).
Complexity: O(1) per call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RayDefaultSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target_ongoing_requests: float = Field(default=32.0, gt=0.0, description="Ongoing requests per replica.")
    max_ongoing_requests: int = Field(default=64, ge=1, description="Requests Ray sends one replica at once.")
    upscale_delay_s: float = Field(default=30.0, ge=0.0, description="Ray's default.")
    downscale_delay_s: float = Field(default=600.0, ge=0.0, description="Ray's default.")
    look_back_period_s: float = Field(default=30.0, gt=0.0, description="Ray's default.")
    source: str = Field(
        default=(
            "Ray Serve LLM example LLMConfig (Qwen2.5-32B-Instruct): max_num_seqs 64, max_ongoing_requests 64, "
            "autoscaling_config.target_ongoing_requests 32; Ray AutoscalingConfig defaults for delays and look-back"
        ),
        description="Where the settings come from.",
    )


class TtftRuleSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttft_target_s: float = Field(default=2.0, gt=0.0, description="p99 TTFT above which a replica is added.")
    idle_threshold: float = Field(default=1.0, ge=0.0, description="Ongoing requests per replica counted as idle.")
    rate_window_s: float = Field(default=60.0, gt=0.0, description="PromQL rate() window of the p99.")
    upscale_delay_s: float = Field(default=30.0, ge=0.0, description="Ray's default.")
    downscale_delay_s: float = Field(default=600.0, ge=0.0, description="Ray's default.")
    look_back_period_s: float = Field(default=30.0, gt=0.0, description="Ray's default.")
    source: str = Field(
        default=(
            "ray.serve.llm.autoscaling.TTFTAutoscalingPolicy defaults (idle_threshold 1.0, rate window 1m); "
            "ttft_target_s set to the pool's TTFT SLO; Ray AutoscalingConfig default delays"
        ),
        description="Where the settings come from.",
    )


class RayDefaultPolicy:
    """Ray's request-queue policy: desired = total ongoing requests / target_ongoing_requests."""

    def __init__(self, settings: RayDefaultSettings):
        self.settings = settings

    def __call__(self, ctx: Any) -> tuple[float, dict[str, Any]]:
        running = ctx.current_num_replicas
        if running == 0:
            if ctx.total_num_requests > 0:
                return max(1, ctx.target_num_replicas), ctx.policy_state
            return ctx.target_num_replicas, {}
        return ctx.total_num_requests / self.settings.target_ongoing_requests, {}


class TtftRulePolicy:
    """Ray Serve LLM's TTFT rule; `read_p99_ttft_s(ctx)` stands in for its Prometheus query."""

    def __init__(self, settings: TtftRuleSettings, read_p99_ttft_s: Callable[[Any], float | None]):
        self.settings = settings
        self._read = read_p99_ttft_s

    def __call__(self, ctx: Any) -> tuple[float, dict[str, Any]]:
        target, running = ctx.target_num_replicas, ctx.current_num_replicas
        p99 = self._read(ctx)
        if p99 is None:
            return float(target), {"signal": "no_data"}
        if p99 > self.settings.ttft_target_s:
            return float(target + 1), {"signal": "scale_up", "p99_ttft_s": p99}
        per_replica = ctx.total_num_requests / running if running > 0 else 0.0
        if per_replica < self.settings.idle_threshold:
            return float(max(0, target - 1)), {"signal": "scale_down", "p99_ttft_s": p99}
        return float(target), {"signal": "steady", "p99_ttft_s": p99}
