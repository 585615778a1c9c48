"""What one drill runs and the limits it judges by: the typed settings behind `ray-dspine drill`.

Rules:
  order     scenarios always run in SCENARIOS order, whatever order `--only` names them in.
  kill      runs only with a Ray address; left out of the default set without one, a usage error when
            `--only` names it without one.
  soak      its rate is `soak_load` x the capacity the concurrency scenario measured, so it needs
            concurrency in the same run.
  timeout   `client_timeout_s` bounds every request the drill sends; an answer slower than that is "hung".
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..config import ServerConfig

Scenario = Literal["corpus", "concurrency", "burst", "disconnect", "kill", "soak"]
SCENARIOS: tuple[Scenario, ...] = ("corpus", "concurrency", "burst", "disconnect", "kill", "soak")
DEADLINE_HEADER = "x-dspine-deadline-ms"
POOL_HEADER = "x-dspine-pool"


class DrillSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint: str = Field(pattern=r"^https?://[^\s/]+(/[^\s]*)?$", description="Base URL of the stack.")
    api_key: str | None = Field(default=None, description="Bearer token (never written to the receipt).")
    model: str | None = Field(default=None, min_length=1, description="Model id; None: the first of /v1/models.")
    ray_address: str | None = Field(default=None, min_length=1, description="Ray address for the kill scenario.")
    only: list[Scenario] = Field(default_factory=lambda: list(SCENARIOS), min_length=1)
    concurrency: int = Field(default=32, ge=1, le=4096, description="Concurrent streams of the concurrency scenario.")
    burst: int = Field(default=200, ge=1, le=10_000, description="Requests sent at once by the burst scenario.")
    client_timeout_s: float = Field(default=30.0, gt=0.0, le=3600.0, description="Whole-request timeout, seconds.")
    disconnects: int = Field(default=20, ge=1, le=4096, description="Clients that hang up after their first chunk.")
    kill_pool: str = Field(default="spec", pattern=r"^[A-Za-z0-9_.-]+$", description="Pool whose replica is killed.")
    kill_streams: int = Field(default=16, ge=1, le=1024, description="Streams open on the pool when it is killed.")
    soak_minutes: float = Field(default=2.0, gt=0.0, le=24 * 60.0, description="Soak length in minutes.")
    soak_load: float = Field(default=0.8, gt=0.0, le=10.0, description="Soak arrival rate / measured capacity.")
    max_tokens: int = Field(default=32, ge=1, le=100_000, description="max_tokens of the drill's normal requests.")
    seed: int = Field(default=0, ge=0, description="Seed of the soak's arrival times.")
    json_path: Path | None = Field(default=None, description="Where the JSON receipt goes.")
    max_request_bytes: int = Field(
        default=ServerConfig.model_fields["max_request_bytes"].default, ge=1024,
        description="The stack's request body limit in bytes (the corpus's one-byte-over cases).",
    )
    # Limits the drill judges by (no flags: they are the promises under test).
    long_stream_max_tokens: int = Field(default=512, ge=1, description="max_tokens of streams that must still run.")
    kill_error_within_s: float = Field(default=5.0, gt=0.0, description="Kill -> error event on each stream, seconds.")
    pool_serves_within_s: float = Field(default=60.0, gt=0.0, description="Kill -> the pool serves again, seconds.")
    recover_within_s: float = Field(default=60.0, gt=0.0, description="Disconnects -> baseline latency, seconds.")
    baseline_factor: float = Field(default=1.5, ge=1.0, description="'At baseline' = e2e <= factor x baseline ...")
    baseline_slack_s: float = Field(default=0.2, ge=0.0, description="... or <= baseline + this, seconds.")
    rss_growth_limit_percent: float = Field(default=5.0, gt=0.0, description="Soak passes below this RSS growth.")
    parallel_corpus_cases: int = Field(default=8, ge=1, description="Corpus cases in flight at once.")

    @model_validator(mode="after")
    def _scenarios(self) -> DrillSettings:
        chosen = "only" in self.model_fields_set
        self.only = [s for s in SCENARIOS if s in self.only]
        if not chosen and self.ray_address is None:
            self.only = [s for s in self.only if s != "kill"]
        if "kill" in self.only and self.ray_address is None:
            raise ValueError("the kill scenario needs --ray-address (or leave kill out of --only)")
        if "soak" in self.only and "concurrency" not in self.only:
            raise ValueError("soak runs at a share of the capacity concurrency measures: add concurrency to --only")
        return self

    @property
    def soak_s(self) -> float:
        return self.soak_minutes * 60.0


FLAGS = {
    "endpoint": "--endpoint", "model": "--model", "ray_address": "--ray-address", "only": "--only",
    "concurrency": "--concurrency", "burst": "--burst", "client_timeout_s": "--client-timeout-s",
    "disconnects": "--disconnects", "kill_pool": "--kill-pool", "kill_streams": "--kill-streams",
    "soak_minutes": "--soak-minutes", "soak_load": "--soak-load", "max_tokens": "--max-tokens", "seed": "--seed",
    "json_path": "--json", "max_request_bytes": "--max-request-bytes",
}
