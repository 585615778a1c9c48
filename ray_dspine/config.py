"""The application's configuration: what a Serve YAML's `args:` validates into.

One `AppConfig` holds the server options, the pools (each an engine config plus deployment options)
and the traffic policy (reasoning level -> pool, sticky A/B arms). Components receive only the
sub-config they need: an engine its engine config, a router its `RouterConfig`, the ingress the
server options and the traffic policy.
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .autoscale.config import SloTargets
from .engines.embedded.config import EmbeddedEngineConfig
from .engines.sglang.config import SGLangEngineConfig
from .engines.simulated.config import SimulatedEngineConfig
from .routing.config import RouterConfig, TrafficConfig

EngineConfig = Annotated[
    Union[EmbeddedEngineConfig, SimulatedEngineConfig, SGLangEngineConfig], Field(discriminator="kind")
]

POOL_NAME_PATTERN = r"^[a-z0-9][a-z0-9\-]{0,40}$"


class DeploymentOptions(BaseModel):
    """Ray Serve options of a pool's replica deployment."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int = Field(default=1, ge=1, le=1024, description="Replicas when autoscaling is off.")
    max_ongoing_requests: int = Field(
        default=8, ge=1, description="Requests Ray sends one replica at once (its engine queues the rest)."
    )
    max_queued_requests: int = Field(
        default=64, ge=-1, description="Requests the handle holds when all replicas are full; -1 is unbounded."
    )
    num_cpus: float = Field(default=1.0, ge=0, description="CPUs reserved per replica.")
    num_gpus: float = Field(default=0.0, ge=0, description="GPUs reserved per replica.")
    health_check_period_s: float = Field(default=10.0, gt=0)
    health_check_timeout_s: float = Field(default=30.0, gt=0)
    graceful_shutdown_timeout_s: float = Field(
        default=60.0, ge=0, description="How long a replica being removed may finish in-flight requests."
    )
    routing_stats_period_s: float = Field(
        default=1.0, gt=0, description="How often replicas report load to the router."
    )
    stream_batch_interval_ms: float = Field(
        default=0.0,
        ge=0.0,
        le=1000.0,
        description="Milliseconds over which a replica merges its chunks before they cross Ray (the first "
        "chunk passes at once): fewer messages through the ingress and proxy, coarser inter-token timing at "
        "the client. 0 passes every chunk as the engine makes it; Ray Serve LLM merges over 50 ms.",
    )
    router: RouterConfig = Field(default_factory=RouterConfig, description="Placement policy of this pool.")


class PoolConfig(BaseModel):
    """A group of identical replicas: one engine configuration, scaled together."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=POOL_NAME_PATTERN, description="Pool name; also the deployment name suffix.")
    description: str = ""
    engine: EngineConfig
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)
    gpu_hour_usd: float = Field(
        default=0.0, ge=0, description="Price of one GPU-hour (for CPU pools: of one replica-hour)."
    )
    slo: SloTargets = Field(
        default_factory=lambda: SloTargets(ttft_p95_s=2.0, itl_p95_ms=100.0),
        description="Latency targets; replicas count misses for the autoscaler (record_autoscaling_stats).",
    )


class ServerConfig(BaseModel):
    """The OpenAI-compatible front door."""

    model_config = ConfigDict(extra="forbid")

    served_model_name: str = Field(default="smollm2-135m-instruct", min_length=1, description="The `model` id.")
    api_key_env: str | None = Field(
        default="DSPINE_API_KEY",
        description="Environment variable holding the API key; when it is set and non-empty, requests need "
        "`Authorization: Bearer <key>`.",
    )
    default_max_tokens: int = Field(default=512, ge=1, description="max_tokens when a request gives none.")
    max_request_bytes: int = Field(default=4_000_000, ge=1024, description="Largest request body accepted.")
    retry_after_s: int = Field(
        default=1, ge=1, description="Retry-After (seconds) on 429/503 answers while a pool has no measured rate yet."
    )
    allow_pool_header: bool = Field(
        default=True, description="Honour an `x-dspine-pool` request header that names the pool to use."
    )
    request_timeout_s: float = Field(default=600.0, gt=0, description="Longest a request may take end to end.")
    max_ongoing_requests: int = Field(
        default=1024, ge=1, description="Requests one ingress replica streams at once (Ray's default of 5 would cap the app)."
    )
    num_ingress_replicas: int = Field(default=1, ge=1, le=64, description="Ingress replicas.")
    retry_unstarted_attempts: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Further tries, on another replica, of a request whose replica died before its first chunk "
        "reached the ingress; never after any output was sent (serve/ingress.py).",
    )
    max_queue_wait_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest estimated wait in the pool's queue a new request is admitted with; beyond it the "
        "answer is 429 with the seconds until it would fit (serve/admission.py).",
    )
    admission_window_completions: int = Field(
        default=32, ge=1, description="The newest completions of a pool the admission estimate measures its rate over."
    )
    admission_min_completions: int = Field(
        default=4,
        ge=1,
        description="Completions below which a pool counts as unmeasured: every request is admitted and Ray's "
        "max_queued_requests alone bounds the queue.",
    )
    pool_recovery_estimate_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a pool without a healthy replica is expected to take to get one back, until the "
        "ingress has measured an outage (its start counts): requests that cannot wait that long get 503 "
        "pool_unavailable with a Retry-After (serve/admission.py).",
    )
    deadline_margin_ms: float = Field(
        default=1000.0,
        ge=0,
        description="Milliseconds before a client's x-dspine-deadline-ms that the ingress answers a late request "
        "(504), so the answer reaches the client in time.",
    )


class AppConfig(BaseModel):
    """Everything `build_app` needs."""

    model_config = ConfigDict(extra="forbid")

    server: ServerConfig = Field(default_factory=ServerConfig)
    pools: list[PoolConfig] = Field(min_length=1)
    traffic: TrafficConfig

    @model_validator(mode="after")
    def _check_references(self) -> "AppConfig":
        names = [pool.name for pool in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique: {names}")
        for rule in self.traffic.rules:
            for pool in [rule.pool] + [arm.pool for arm in rule.arms]:
                if pool not in names:
                    raise ValueError(f"traffic rule names pool {pool!r}, which is not among pools {names}")
        return self

    def pool(self, name: str) -> PoolConfig:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)
