"""Paced prefill: a long uncached prompt prefills as a chain of its own prefixes, so that requests
arriving at the replica meanwhile start between the pieces instead of behind the whole prompt.

An SGLang replica under its default `--schedule-policy fcfs` gives the chunked prefill under way the
whole of every round until its last chunk, so a turn whose prompt is cached on that replica waits for
all of a 100,000-token cold prompt (about 10 s on an H200) before its own 0.2 s of prefill. Sent as
prefix requests of `piece_tokens` each, one after another, the long prompt leaves the engine's queue
after every piece, and whatever arrived meanwhile goes first; the prefix cache keeps each piece, so the
next one prefills only its own tokens.

Rules (B = prefix_block_tokens; C = piece_tokens, a multiple of B; times in seconds):
  paced(q)       = uncached(q) >= min_uncached_tokens, and no other paced prompt is in progress on the
                   replica (one at a time: two paced prompts would only yield to each other)
  pieces(q)      = b_j = floor(cached(q) / B) * B + j * C  for j = 1, 2, ... while prompt_tokens(q) - b_j >= C / 2
                   (prefix lengths, block-aligned; the request itself, sent last, prefills the final
                   C / 2 to 3C / 2 tokens); no piece at all -> not paced
  budget_s(q)    = yield_fraction * uncached(q) / prefill_tokens_per_s
                   (how much of other requests' work q lets ahead of it, in seconds of its own delay)
  after piece j, sent at s_j and finished at t_j:
                   yielded_s += max(0, (t_j - s_j) - (b_j - b_{j-1}) / prefill_tokens_per_s)   (b_0 = cached(q);
                   a pass's fixed cost counts as yielded too, which only tightens the budget)
  next(q)        = the next piece while yielded_s < budget_s and pieces remain; else q itself, whole
                   (its prefix is now cached, so it prefills only what the pieces did not)
  cached_before  = cached(q): the prompt tokens the replica held before the first piece, which is the
                   prefix hit q reports (the pieces' own tokens were prefilled, not hit)
A paced prompt accepts about budget_s of delay (the check comes between pieces, so the piece that
spends the budget may pass it); every request that arrives while it is paced waits for at most the
piece under way.
Parameters: min_uncached_tokens >= 1; piece_tokens >= B, a multiple of B; yield_fraction >= 0;
prefill_tokens_per_s > 0.
Complexity: O(prompt_tokens / C) to plan; O(1) per piece.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator


class PrefillPacingConfig(BaseModel):
    """When and how a replica paces a long uncached prompt (module docstring)."""

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
    prefix_block_tokens: int = Field(default=512, ge=1, description="The prefix cache's block, tokens.")

    @model_validator(mode="after")
    def _pieces_whole_blocks(self) -> "PrefillPacingConfig":
        if self.piece_tokens % self.prefix_block_tokens:
            raise ValueError(
                f"piece_tokens ({self.piece_tokens}) must be a multiple of prefix_block_tokens "
                f"({self.prefix_block_tokens}): a piece the cache cannot keep whole is prefilled again"
            )
        return self


def plan_pieces(prompt_tokens: int, cached_tokens: int, piece_tokens: int, block_tokens: int) -> list[int]:
    """Rule `pieces`: the prefix lengths to send before the request itself (empty: do not pace)."""
    start = (cached_tokens // block_tokens) * block_tokens
    out = []
    end = start + piece_tokens
    while prompt_tokens - end >= piece_tokens / 2:
        out.append(end)
        end += piece_tokens
    return out


@dataclass
class PacedPrefill:
    """One paced prompt's progress: which piece is out, and how much delay it has accepted so far."""

    request_id: str
    prompt_tokens: int
    cached_before: int
    budget_s: float
    rate: float
    pieces: list[int]
    yielded_s: float = 0.0
    sent_s: float | None = None
    sent_tokens: int = 0
    done_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.done_tokens = self.cached_before

    def next_piece(self, now_s: float) -> int | None:
        """Rule `next`: the next piece's prefix length, sent now; None: send the request itself now."""
        if not self.pieces or self.yielded_s >= self.budget_s:
            self.pieces.clear()
            return None
        self.sent_tokens = self.pieces.pop(0)
        self.sent_s = now_s
        return self.sent_tokens

    def piece_done(self, now_s: float) -> None:
        """The piece sent last finished at `now_s`: count the time beyond its own prefill as yielded."""
        if self.sent_s is None:
            raise RuntimeError(f"{self.request_id}: piece_done without a piece out")
        own_s = (self.sent_tokens - self.done_tokens) / self.rate
        self.yielded_s += max(0.0, (now_s - self.sent_s) - own_s)
        self.done_tokens = self.sent_tokens
        self.sent_s = None


class PrefillPacer:
    """A replica's pacing decisions (rule `paced`): at most one paced prompt in progress at a time."""

    def __init__(self, config: PrefillPacingConfig):
        self.config = config
        self._active: PacedPrefill | None = None

    @property
    def active(self) -> PacedPrefill | None:
        return self._active

    def start(self, request_id: str, prompt_tokens: int, cached_tokens: int) -> PacedPrefill | None:
        """A PacedPrefill when the request is to be paced, else None (send it whole)."""
        cfg = self.config
        uncached = prompt_tokens - cached_tokens
        if self._active is not None or uncached < cfg.min_uncached_tokens:
            return None
        pieces = plan_pieces(prompt_tokens, cached_tokens, cfg.piece_tokens, cfg.prefix_block_tokens)
        if not pieces:
            return None
        budget_s = cfg.yield_fraction * uncached / cfg.prefill_tokens_per_s
        self._active = PacedPrefill(request_id, prompt_tokens, cached_tokens, budget_s, cfg.prefill_tokens_per_s, pieces)
        return self._active

    def finish(self, request_id: str) -> None:
        """The paced request itself was sent (or withdrawn): another prompt may be paced."""
        if self._active is not None and self._active.request_id == request_id:
            self._active = None
