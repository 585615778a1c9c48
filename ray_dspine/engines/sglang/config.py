"""Configuration of the SGLang engine: one SGLang server process per replica, spoken to over HTTP."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...artifacts import ArtifactRef
from ...capacity import CapacityConfig
from .hicache import check_args as check_hicache_args
from .supervision import SupervisionConfig

SpeculativeAlgorithm = Literal["DSPINE", "DFLASH"]
# Subsets of SGLang's ATTENTION_BACKEND_CHOICES / DRAFT_ATTENTION_BACKEND_CHOICES /
# LINEAR_ATTN_KERNEL_BACKEND_CHOICES (python/sglang/srt/server_args.py) that apply to NVIDIA GPUs.
AttentionBackend = Literal["fa3", "fa4", "flashinfer", "triton", "trtllm_mha"]
DraftAttentionBackend = Literal["fa3", "fa4", "flashinfer", "triton", "trtllm_mha"]
LinearAttnBackend = Literal["triton", "cutedsl", "flashinfer"]


class SGLangEngineConfig(BaseModel):
    """A replica that runs `python -m sglang.launch_server` on a local port and supervises it."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["sglang"] = "sglang"
    target: ArtifactRef = Field(description="The target model (Qwen3.8-27B): S3 prefix or local folder, pinned.")
    draft: ArtifactRef | None = Field(default=None, description="The drafter's weights; None serves autoregressively.")
    speculative_algorithm: SpeculativeAlgorithm | None = Field(
        default=None, description="DSPINE (Tencent's plugin) or DFLASH (built in); None without a drafter."
    )
    capacity: CapacityConfig = Field(description="GPU and memory knobs; the planner turns them into SGLang sizes.")
    served_model_name: str = Field(default="qwen3.8-27b", min_length=1, description="--served-model-name.")
    dtype: Literal["auto", "bfloat16", "float16"] = Field(default="bfloat16", description="--dtype.")
    attention_backend: AttentionBackend = Field(default="fa3", description="--attention-backend of the target.")
    draft_attention_backend: DraftAttentionBackend | None = Field(
        default="fa3", description="--speculative-draft-attention-backend; None lets SGLang choose."
    )
    linear_attn_backend: LinearAttnBackend = Field(
        default="triton", description="--linear-attn-backend (Gated DeltaNet kernels)."
    )
    trust_remote_code: bool = Field(
        default=False,
        description="--trust-remote-code: run the Python files that come with the checkpoints (DSpine's drafter "
        "ships its own). Only pinned files are fetched, so the code that runs is the code whose sha256 you pinned.",
    )
    reasoning_parser: str | None = Field(default="qwen3", description="--reasoning-parser; None disables it.")
    tool_call_parser: str | None = Field(default="qwen3_coder", description="--tool-call-parser; None disables it.")
    speculative_num_steps: int | None = Field(
        default=None, ge=1, le=64, description="--speculative-num-steps; None leaves it to the algorithm."
    )
    speculative_eagle_topk: int | None = Field(
        default=None, ge=1, le=16, description="--speculative-eagle-topk; ReplaySSM needs None or 1."
    )
    port: int | None = Field(
        default=None, ge=1024, le=65535, description="Preferred HTTP port; when busy or None the OS picks a free one."
    )
    startup_timeout_s: float = Field(
        default=1800.0, gt=0, le=7200, description="Longest wait for /health after a launch (weights + CUDA graphs)."
    )
    health_poll_s: float = Field(default=2.0, gt=0, le=60, description="Interval between /health probes at startup.")
    load_poll_s: float = Field(default=1.0, gt=0, le=60, description="Interval between /v1/loads + /metrics polls.")
    request_timeout_s: float = Field(
        default=600.0, gt=0, description="Longest silence on a stream before the request fails."
    )
    max_restarts: int = Field(default=5, ge=0, le=100, description="Crashes tolerated within crash_window_s.")
    crash_window_s: float = Field(default=600.0, gt=0, description="Window in which crashes are counted.")
    fallback_after_crashes: int = Field(
        default=2, ge=1, le=100,
        description="Crashes with the drafter on (startup failures included) within the window before the replica "
        "relaunches autoregressively.",
    )
    restart_backoff_s: float = Field(default=1.0, ge=0, le=600, description="First restart delay; doubles per crash.")
    restart_backoff_max_s: float = Field(default=60.0, ge=0, le=3600, description="Largest restart delay.")
    stop_grace_s: float = Field(default=30.0, ge=0, le=600, description="SIGTERM to SIGKILL delay when stopping.")
    drain_s: float = Field(
        default=30.0, ge=0, le=3600, description="Longest wait for in-flight requests before a drafter switch restart."
    )
    prefill_tokens_per_s: float | None = Field(
        default=10_000.0, gt=0,
        description="Prefill rate (tokens/s) the replica assumes until it has measured its own from long prompts "
        "(prefill_backlog.py). The default is the router's default_prefill_tokens_per_s (ASSUMED: about 0.1 ms "
        "per token for a 27B target on an H200); None assumes none (the running prefill counts whole).",
    )
    prefix_block_tokens: int = Field(
        default=512, ge=1,
        description="Tokens per prefix-hash block, as the router's prefix_block_tokens (sizes the backlog's "
        "block LRU).",
    )
    accept_ema_alpha: float = Field(default=0.1, gt=0, le=1, description="Weight of the newest request in the EMA.")
    cache_dir: str = Field(default="/tmp/ray-dspine-artifacts", description="Local cache for S3 artifacts.")
    artifact_workers: int = Field(default=8, ge=1, le=64, description="Parallel downloads when fetching artifacts.")
    log_dir: str | None = Field(default=None, description="Folder for the server log; None uses a temporary folder.")
    python_executable: str | None = Field(default=None, description="Interpreter with sglang; None is this one.")
    supervision: SupervisionConfig = Field(
        default_factory=SupervisionConfig,
        description="How the supervisor watches a started server: /health_generate hang checks, the drafter "
        "probe, and the log tail read to tell a config error from a crash (supervision.py).",
    )
    extra_args: list[str] = Field(default_factory=list, description="More launch_server arguments, passed verbatim.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the server process.")

    @model_validator(mode="after")
    def _check_drafter(self) -> SGLangEngineConfig:
        have = {
            "draft": self.draft is not None,
            "speculative_algorithm": self.speculative_algorithm is not None,
            "capacity.draft": self.capacity.draft is not None,
        }
        if len(set(have.values())) != 1:
            raise ValueError(f"draft, speculative_algorithm and capacity.draft must be set together, got {have}")
        logging_flags = [arg for arg in self.extra_args if arg.split("=", 1)[0].startswith("--log-requests")]
        if logging_flags:
            raise ValueError(f"extra_args may not log request contents: remove {logging_flags}")
        check_hicache_args(self.extra_args)
        if "--trust-remote-code" in self.extra_args:
            raise ValueError("set trust_remote_code: true instead of passing --trust-remote-code in extra_args")
        if self.restart_backoff_max_s < self.restart_backoff_s:
            raise ValueError("restart_backoff_max_s must be at least restart_backoff_s")
        return self

    @property
    def has_drafter(self) -> bool:
        return self.draft is not None
