"""Configuration of a simulated day: the pool, the traffic, Ray's control loop and the policy."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dspine_lab.autoscale.baselines import RayDefaultSettings, TtftRuleSettings
from ray_dspine.autoscale.config import CostAutoscalingConfig, SloTargets
from ray_dspine.engines.simulated.config import SimulatedEngineConfig


class DayTraffic(BaseModel):
    """A trace's hour shaped into a day (see arrivals.py for the rules)."""

    model_config = ConfigDict(extra="forbid")

    trace: str = Field(default="azure-code", description="'azure-code', 'azure-conv', 'mooncake' or a file path.")
    rate_scale: float = Field(
        default=1.0, gt=0.0, le=1_000.0, description="Peak arrival rate / the trace's mean rate over its hour."
    )
    trough_fraction: float = Field(default=0.25, gt=0.0, le=1.0, description="Trough rate / peak rate.")
    trough_hour: float = Field(default=3.0, ge=0.0, lt=24.0, description="Hour of the day with the lowest rate.")
    start_s: float = Field(default=0.0, ge=0.0, le=86_400.0, description="Simulated clock at the start, s.")
    duration_s: float = Field(default=86_400.0, gt=0.0, le=86_400.0, description="Length of the simulated day, s.")
    seed: int = Field(default=0, ge=0, description="Seed of arrivals and row sampling.")


class RayControls(BaseModel):
    """The Ray Serve controller's settings around a policy (AutoscalingConfig fields and constants)."""

    model_config = ConfigDict(extra="forbid")

    upscale_delay_s: float = Field(default=0.0, ge=0.0, description="AutoscalingConfig.upscale_delay_s.")
    downscale_delay_s: float = Field(default=0.0, ge=0.0, description="AutoscalingConfig.downscale_delay_s.")
    upscaling_factor: float = Field(default=1.0, gt=0.0, description="AutoscalingConfig.upscaling_factor.")
    downscaling_factor: float = Field(default=1.0, gt=0.0, description="AutoscalingConfig.downscaling_factor.")
    look_back_period_s: float = Field(default=30.0, gt=0.0, description="Window Ray averages metrics over, s.")
    metrics_interval_s: float = Field(
        default=10.0, gt=0.0, description="Replicas push metrics this often (RAY_SERVE_REPLICA_..._PUSH_INTERVAL_S)."
    )
    control_period_s: float = Field(
        default=10.0, gt=0.0, le=60.0,
        description="Policy call period here (Ray's loop runs every 0.1 s; the metrics it reads move every 10 s).",
    )  # fmt: skip

    @property
    def record_interval_s(self) -> float:
        """Ray samples replica stats every min(0.2 * look_back_period_s, metrics_interval_s)."""
        return min(0.2 * self.look_back_period_s, self.metrics_interval_s)


class OursPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["ours"] = "ours"
    params: CostAutoscalingConfig


class RayDefaultPolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["ray-default"] = "ray-default"
    settings: RayDefaultSettings = Field(default_factory=RayDefaultSettings)


class TtftRulePolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["ttft-rule"] = "ttft-rule"
    settings: TtftRuleSettings = Field(default_factory=TtftRuleSettings)


class FixedPolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["fixed"] = "fixed"
    num_replicas: int = Field(ge=1, le=4096, description="Static pool size.")


class SchedulePolicySpec(BaseModel):
    """A replica count per time bin, known in advance (the hindsight schedule, hindsight.py)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["schedule"] = "schedule"
    bin_s: float = Field(gt=0.0, le=86_400.0, description="Length of one bin, s; bin b starts at start_s + b * bin_s.")
    counts: list[int] = Field(min_length=1, description="Replicas wanted in each bin; the last holds past the end.")
    lead_s: float = Field(default=0.0, ge=0.0, le=3_600.0, description="Start replicas this long before their bin, s.")

    @model_validator(mode="after")
    def _positive(self) -> "SchedulePolicySpec":
        if min(self.counts) < 1:
            raise ValueError(f"every bin needs >= 1 replica; got {min(self.counts)}")
        return self

    def count_at(self, elapsed_s: float) -> int:
        """Replicas wanted elapsed_s after the start: max of this bin's count and the count lead_s ahead."""
        last = len(self.counts) - 1

        def at(t: float) -> int:
            return self.counts[min(last, max(0, int(t // self.bin_s)))]

        return max(at(elapsed_s), at(elapsed_s + self.lead_s))


PolicySpec = Annotated[
    Union[OursPolicy, RayDefaultPolicySpec, TtftRulePolicySpec, FixedPolicySpec, SchedulePolicySpec],
    Field(discriminator="kind"),
]


class PoolSimConfig(BaseModel):
    """One pool of simulated replicas and how Ray runs it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9\-]{0,40}$", description="Pool name.")
    engine: SimulatedEngineConfig = Field(default_factory=SimulatedEngineConfig)
    slo: SloTargets
    gpu_hour_usd: float = Field(default=3.5, ge=0.0, le=1_000.0, description="Price of one GPU-hour, USD.")
    gpus_per_replica: float = Field(default=1.0, gt=0.0, le=64.0, description="GPUs one replica holds.")
    min_replicas: int = Field(default=1, ge=1, le=4096)
    max_replicas: int = Field(default=32, ge=1, le=4096)
    initial_replicas: int = Field(default=2, ge=1, le=4096)
    max_ongoing_requests: int = Field(default=64, ge=1, le=100_000, description="Ray routes at most this many per replica.")
    startup_s: float = Field(
        default=120.0, ge=0.0, le=3_600.0,
        description="Request to ready: GPU node already up, SGLang loads 27B + draft weights, captures CUDA graphs.",
    )  # fmt: skip
    graceful_shutdown_timeout_s: float = Field(default=600.0, ge=0.0, le=86_400.0)
    graceful_shutdown_wait_loop_s: float = Field(default=2.0, gt=0.0, le=600.0)
    stats_window_s: float = Field(default=60.0, gt=0.0, le=3_600.0, description="Replica stats window, s.")

    @model_validator(mode="after")
    def _bounds(self) -> "PoolSimConfig":
        if not self.min_replicas <= self.initial_replicas <= self.max_replicas:
            raise ValueError(
                f"need min_replicas {self.min_replicas} <= initial {self.initial_replicas} <= max {self.max_replicas}"
            )
        return self


class SimConfig(BaseModel):
    """Everything one simulated day needs."""

    model_config = ConfigDict(extra="forbid")

    pool: PoolSimConfig
    traffic: DayTraffic = Field(default_factory=DayTraffic)
    controls: RayControls = Field(default_factory=RayControls)
    policy: PolicySpec
