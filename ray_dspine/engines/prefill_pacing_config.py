"""The configuration of paced prefill, and how a paced prompt's pieces are named.

A replica may prefill a long uncached prompt as a chain of its own prefixes ("pieces"), so that
requests arriving meanwhile start between the pieces instead of behind the whole prompt. The pacing
itself is an engine wrapper found through the entry point group `ray_dspine.engine_wrappers`
(engines/wrappers.py) under the name "prefill_pacing"; this module holds only what the core's configs
and engines need of it: the typed settings a pool's simulated engine carries, and the mark that tells
a piece's request id from a request's own.

Rules (B = prefix_block_tokens, C = piece_tokens):
  piece id      = "<request id>" + PIECE_MARK + "<prefix tokens>"
  C mod B       = 0 (a piece the prefix cache cannot keep whole would be prefilled again)
Complexity: O(1).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

# A paced prompt's piece is sent as request "<request id>/piece/<prefix tokens>".
PIECE_MARK = "/piece/"


class PrefillPacingConfig(BaseModel):
    """When and how a replica paces a long uncached prompt (the rules: the "prefill_pacing" engine wrapper)."""

    model_config = ConfigDict(extra="forbid")

    min_uncached_tokens: int = Field(
        ge=1, description="Prompts with at least this many uncached tokens are paced (80,000: ~8 s on an H200)."
    )
    piece_tokens: int = Field(
        default=16_384, ge=1, description="Prompt tokens per piece; a multiple of the prefix block (512)."
    )
    yield_fraction: float = Field(
        default=0.5,
        ge=0.0,
        le=10.0,
        description="Delay a paced prompt accepts from requests let ahead of it, as a share of its own prefill.",
    )
    prefill_tokens_per_s: float = Field(
        default=10_000.0, gt=0.0, description="The replica's prefill rate, tokens/s (for the budget)."
    )
    attention_ms_per_pair: float = Field(
        default=0.0,
        ge=0.0,
        description="The replica's attention cost per (new token, earlier prompt token) pair, ms (rule `own_s`; "
        "7.09e-7 on an H200 for Qwen3.8-27B's shape, docs/results/prefill-floor-h200.md); 0: prefill time linear in tokens.",
    )
    prefix_block_tokens: int = Field(default=512, ge=1, description="The prefix cache's block, tokens.")
    hold_long_prompts: bool = Field(
        default=True,
        description="Requests arriving while a prompt is paced that are long, or larger than what is left of "
        "its budget, wait for it at the replica instead of going ahead of its pieces (rule `hold`).",
    )

    @model_validator(mode="after")
    def _pieces_whole_blocks(self) -> "PrefillPacingConfig":
        if self.piece_tokens % self.prefix_block_tokens:
            raise ValueError(
                f"piece_tokens ({self.piece_tokens}) must be a multiple of prefix_block_tokens "
                f"({self.prefix_block_tokens}): a piece the cache cannot keep whole is prefilled again"
            )
        return self
