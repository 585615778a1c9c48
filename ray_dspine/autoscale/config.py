"""Configuration of the cost-per-completed-request autoscaler (all units in the field names).

`CostAutoscalingConfig` is what a pool's `autoscaling_config.policy.policy_kwargs` validates into.
It carries the latency SLOs, the replica capacity model (step-time coefficients of the engine, the
same model the simulated engine runs), the price, and the policy's tunable parameters. Replica
bounds (`min_replicas`, `max_replicas`) stay in Ray's own `autoscaling_config`.
"""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


class SloTargets(BaseModel):
    """Per-request latency bounds; a request keeps them or not (ray_dspine/autoscale/slo.py).

    The older keys ttft_p95_s / itl_p95_ms are still read (the cluster configs use them).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    ttft_slo_s: float = Field(
        gt=0.0, le=600.0, validation_alias=AliasChoices("ttft_slo_s", "ttft_p95_s"),
        description="Bound on one request's time to first token, seconds.",
    )  # fmt: skip
    itl_slo_ms: float = Field(
        gt=0.0, le=60_000.0, validation_alias=AliasChoices("itl_slo_ms", "itl_p95_ms"),
        description="Bound on one request's mean inter-token latency, milliseconds.",
    )  # fmt: skip


class ReplicaCapacityModel(BaseModel):
    """Step times of one replica's engine (ms), as in the simulated engine's step model.

    decode step t(n, C) = base_ms + per_running_ms * n + per_kv_token_ms * C; a verify step adds
    draft_ms + verify_per_token_ms * n * (draft_tokens - 1); prefill = base_ms + prefill_per_token_ms * P.
    """

    model_config = ConfigDict(extra="forbid")

    base_ms: float = Field(ge=0.0, le=10_000.0, description="Fixed cost of one target forward, ms.")
    per_running_ms: float = Field(ge=0.0, le=1_000.0, description="Added per running request, ms.")
    per_kv_token_ms: float = Field(ge=0.0, le=1.0, description="Added per context token attended, ms.")
    prefill_per_token_ms: float = Field(ge=0.0, le=100.0, description="Prefill cost per uncached prompt token, ms.")
    draft_ms: float = Field(default=0.0, ge=0.0, le=10_000.0, description="Fixed cost of drafting one block, ms.")
    verify_per_token_ms: float = Field(
        default=0.0, ge=0.0, le=100.0, description="Added per extra query token a verify step checks, ms."
    )
    draft_tokens: int = Field(default=1, ge=1, le=64, description="Most tokens one verify step yields (D).")
    max_running_requests: int = Field(ge=1, le=4096, description="Requests the engine decodes at once, at most.")
    total_kv_tokens: int = Field(ge=1, description="KV-cache tokens of one replica.")
    itl_tail_factor: float = Field(
        default=1.4,
        ge=1.0,
        le=10.0,
        description="p95 / mean of the per-request mean inter-token latency (acceptance spread, prefill stalls).",
    )
    ttft_wait_factor: float = Field(
        default=1.5,
        ge=0.0,
        le=10.0,
        description="p95 TTFT waits this many mean M/G/1 prefill waits (1.5 ~ ln(20) / 2 for an exponential tail).",
    )


class CostAutoscalingConfig(BaseModel):
    """The policy's parameters; see `ray_dspine.autoscale.policy` for the rules they enter."""

    model_config = ConfigDict(extra="forbid")

    slo: SloTargets
    capacity: ReplicaCapacityModel
    gpu_hour_usd: float = Field(default=0.0, ge=0.0, le=1_000.0, description="Price of one GPU-hour, USD.")
    gpus_per_replica: float = Field(default=1.0, gt=0.0, le=64.0, description="GPUs one replica holds.")
    headroom: float = Field(
        default=0.15, ge=0.0, le=0.9, description="Share of each SLO and of memory kept free: targets * (1 - h)."
    )
    scale_down_utilization: float = Field(
        default=0.8,
        gt=0.0,
        le=1.0,
        description="Scale down only to N with demand <= u_down * N * capacity (u_down < 1 is the hysteresis band).",
    )
    upscale_delay_s: float = Field(default=0.0, ge=0.0, le=3_600.0, description="Upscale wish must last this long, s.")
    downscale_delay_s: float = Field(
        default=300.0, ge=0.0, le=7_200.0, description="Downscale wish must last this long; scales to the window max, s."
    )
    lookahead_s: float = Field(
        default=120.0, ge=0.0, le=1_800.0, description="Demand is extrapolated this far ahead (replica start-up), s."
    )
    trend_window_s: float = Field(
        default=600.0, gt=0.0, le=7_200.0, description="Demand slope: least-squares fit over this much history, s."
    )
    stale_after_s: float = Field(
        default=60.0, gt=0.0, le=3_600.0, description="A replica report older than this is ignored, s."
    )
    guard_min_requests: int = Field(
        default=20, ge=1, le=100_000, description="Completed requests the pool's windows need before misses count."
    )
    guard_miss_ratio: float = Field(
        default=0.05, gt=0.0, le=1.0,
        description="Guard: breach when the pool's share of window requests missing an SLO target exceeds this.",
    )  # fmt: skip
    backlog_drain_s: float = Field(
        default=60.0, gt=0.0, le=3_600.0, description="Queued requests are added to demand as backlog / this, s."
    )
    default_prompt_tokens: int = Field(
        default=2_048, ge=1, le=1_000_000, description="Prompt length assumed before any request completed."
    )
    default_output_tokens: int = Field(
        default=256, ge=1, le=1_000_000, description="Output length assumed before any request completed."
    )


class StatsWindowConfig(BaseModel):
    """What a replica's autoscaling statistics look back over and count as an SLO miss."""

    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(default=60.0, gt=0.0, le=3_600.0, description="Sliding window of the statistics, s.")
    slo: SloTargets
    max_window_requests: int = Field(
        default=20_000, ge=10, le=1_000_000, description="Most finished requests kept (oldest dropped first)."
    )
