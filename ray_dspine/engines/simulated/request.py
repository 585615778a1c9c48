"""Values the simulated core takes and gives: requests in, events and counters out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ray_dspine.engines.protocol import FinishReason, Usage
from ray_dspine.engines.simulated.acceptance import RequestAcceptance

SimEventKind = Literal["first_token", "tokens", "finished"]


@dataclass(frozen=True)
class SimRequest:
    """A request as the core sees it: sizes in tokens, no text.

    `prefix_block_hashes[i]` names the prompt's first (i + 1) blocks of `prefix_block_tokens` each
    (chained hashes); only hashes of full prompt blocks are used.
    """

    request_id: str
    prompt_tokens: int
    max_tokens: int
    prefix_block_hashes: tuple[str, ...] = ()
    session_id: str | None = None

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1:
            raise ValueError(f"prompt_tokens must be >= 1, got {self.prompt_tokens}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        object.__setattr__(self, "prefix_block_hashes", tuple(self.prefix_block_hashes))


@dataclass(frozen=True)
class SimEvent:
    """Something a request saw at simulated time `time_s` (seconds since the core's time zero)."""

    kind: SimEventKind
    request_id: str
    time_s: float
    num_tokens: int = 0
    usage: Usage | None = None  # "finished": the request's; "first_token": so far (its prompt counts)
    finish_reason: FinishReason | None = None


class SimCounters(BaseModel):
    """Counters since the core was made; all simulated."""

    model_config = ConfigDict(extra="forbid")

    num_submitted: int = 0
    num_admitted: int = 0
    num_finished: int = 0
    num_cancelled: int = 0
    num_retractions: int = Field(default=0, description="Decoding requests retracted for KV (retraction.py).")
    num_retracted_output_tokens: int = Field(
        default=0, description="Tokens the retracted requests had generated when retracted (SGLang's metric)."
    )
    num_recomputed_tokens: int = Field(
        default=0, description="Tokens prefilled again when retracted requests were readmitted (wasted work)."
    )
    num_evicted_blocks: int = 0
    num_waited_for_memory: int = Field(default=0, description="Requests that waited at the head for KV tokens.")
    num_waited_for_state_slots: int = Field(default=0, description="Requests that waited at the head for slots.")
    num_prefix_hit_tokens: int = Field(default=0, description="Prompt tokens not prefilled (tier loads included).")
    num_tier_hit_tokens: int = Field(default=0, description="Of the prefix hits, tokens loaded from a HiCache tier.")
    num_prefill_tokens: int = Field(default=0, description="Uncached prompt tokens prefilled.")
    num_output_tokens: int = 0
    num_prefill_steps: int = Field(default=0, description="Prefill passes (one prompt each, or one round when chunked).")
    num_decode_steps: int = Field(default=0, description="Batched autoregressive steps.")
    num_verify_steps: int = Field(default=0, description="Batched speculative (draft + verify) steps.")
    busy_s: float = Field(default=0.0, description="Simulated seconds spent in steps.")
    peak_kv_utilization: float = 0.0
    peak_state_utilization: float = 0.0


@dataclass
class RunningRequest:
    """Book-keeping of one admitted request (prefilling or decoding)."""

    request: SimRequest
    cached_tokens: int
    private_kv_tokens: int
    pinned_hashes: list[str]
    acceptance: RequestAcceptance | None
    arrival: int = 0  # order of submission to the replica (ties of the prefill schedule)
    prefilled_tokens: int = 0  # of the uncached prompt, prefilled so far (chunked prefill)
    num_generated: int = 0
    num_steps: int = 0
    histogram: list[int] = field(default_factory=list)
    used_autoregressive: bool = False
    loaded_tokens: int = 0  # of cached_tokens, those loaded from a HiCache tier (paid in the first round)
    refill_tokens: int = 0  # generated tokens prefilled again after a retraction (retraction.py rule `readmit`)
    decode_kv_tokens: int = 0  # KV tokens held beyond the prompt (retraction.py rule `need`'s a)
    num_retractions: int = 0

    @property
    def context_tokens(self) -> int:
        return self.request.prompt_tokens + self.num_generated

    @property
    def prefill_left_tokens(self) -> int:
        """Uncached fill tokens still to prefill (at least 1 before the first token: hits stop a token short)."""
        return self.request.prompt_tokens + self.refill_tokens - self.cached_tokens - self.prefilled_tokens

    @property
    def num_remaining(self) -> int:
        return self.request.max_tokens - self.num_generated

    def record_step(self, num_tokens: int) -> None:
        self.num_generated += num_tokens
        self.num_steps += 1
        self.histogram[num_tokens - 1] += 1

    def usage(self) -> Usage:
        completion = self.num_generated
        return Usage(
            prompt_tokens=self.request.prompt_tokens,
            completion_tokens=completion,
            total_tokens=self.request.prompt_tokens + completion,
            verify_steps=self.num_steps,
            accept_length=completion / self.num_steps if self.num_steps else 0.0,
            accept_histogram=list(self.histogram),
            path="autoregressive" if self.used_autoregressive else "speculative",
            cached_prompt_tokens=self.cached_tokens,
        )
