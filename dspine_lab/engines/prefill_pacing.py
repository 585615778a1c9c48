"""Paced prefill: a long uncached prompt prefills as a chain of its own prefixes, so that requests
arriving at the replica meanwhile start between the pieces instead of behind the whole prompt.

An SGLang replica under its default `--schedule-policy fcfs` gives the chunked prefill under way the
whole of every round until its last chunk, so a turn whose prompt is cached on that replica waits for
all of a 100,000-token cold prompt (about 10 s on an H200) before its own 0.2 s of prefill. Sent as
prefix requests of `piece_tokens` each, one after another, the long prompt leaves the engine's queue
after every piece, and whatever arrived meanwhile goes first; the prefix cache keeps each piece, so the
next one prefills only its own tokens.

Rules (B = prefix_block_tokens; C = piece_tokens, a multiple of B; times in seconds):
  long(q)        = uncached(q) >= min_uncached_tokens and pieces(q) is not empty
  paced(q)       = long(q), and no other paced prompt is in progress on the replica (one at a time: two
                   paced prompts would only yield to each other)
  pieces(q)      = b_j = floor(cached(q) / B) * B + j * C  for j = 1, 2, ... while prompt_tokens(q) - b_j >= C / 2
                   (prefix lengths, block-aligned; the request itself, sent last, prefills the final
                   C / 2 to 3C / 2 tokens); no piece at all -> not long
  own_s(a, b)    = (b - a) / prefill_tokens_per_s + attention_ms_per_pair * pairs(a, b - a) / 1000
                   (the prefill of prompt tokens a..b on their own, the first a in KV; pairs:
                   engines/attention_cost.py; without the attention term a late piece, which attends the
                   whole prefix before it, looks held up by others for its own attention)
  budget_s(q)    = yield_fraction * own_s(cached(q), prompt_tokens(q))
                   (how much of other requests' work q lets ahead of it, in seconds of its own delay)
  after piece j, sent at s_j and finished at t_j:
                   yielded_s += max(0, (t_j - s_j) - own_s(b_{j-1}, b_j))   (b_0 = cached(q); a pass's
                   fixed cost counts as yielded too, which only tightens the budget)
  next(q)        = the next piece while yielded_s < budget_s and pieces remain; else q itself, whole
                   (its prefix is now cached, so it prefills only what the pieces did not)
  cached_before  = cached(q): the prompt tokens the replica held when q arrived, where its pieces start
  hit(q)         = prompt_tokens(q) - sum over q's pieces and q itself of (prompt - cached) tokens, as the
                   engine reports each: the prefix hit q reports, i.e. what neither its pieces nor q
                   prefilled (what was cached when it arrived, and what another request prefilled while
                   it was paced); the hits its pieces give each other and q are its own work, not hits
  left(q, now)   = budget_s(q) * rate - yielded_s * rate - max(waited, measuring) - queued_ahead   tokens
                   (the budget still unspent, in tokens of others' prefill: queued_ahead = uncached tokens
                   of requests let in since the piece out was sent, which will run before the next piece;
                   measuring = those let in before it was sent, which its own time will count;
                   waited = rate * max(0, (now - s_j) - own_s(b_{j-1}, b_j)), what the piece out has
                   already taken beyond its own prefill, which piece_done will count: without it, a piece
                   held up for seconds behind the replica's earlier backlog left the budget looking whole
                   until it finished, and a request let in by the router's reading of it was held instead,
                   for the rest of the paced prompt; no now: waited = 0)
  hold(q)        = with hold_long_prompts, while a prompt p is paced: long(q), or uncached(q) > left(p, now).
                   q waits at the replica, behind earlier held requests, until p is sent whole; then the
                   held requests are started again in arrival order (the first long one paced, the rest
                   let in or held again against its budget). Any other request is let in (sent whole
                   now, ahead of p's next piece) and adds its uncached tokens to queued_ahead. So p's
                   delay stays within its budget but for the piece that spends it, and a medium prompt
                   never jumps in between p's pieces to spend the whole budget, and more, in one go.
                   Without hold_long_prompts, every request other than p is let in.
  arrive(q)      = "held" by rule `hold`; else "paced" by rule `paced` when the router permits it
                   (routing/pacing_permit.py); else "whole": q is let in, sent as it is
  yielding       = the paced prompt's tokens after the piece out, plus the held requests' uncached tokens:
                   the replica's prefill backlog that a request within left(p) goes ahead of (reported
                   with left(p), so that a router can tell the two kinds of newcomer apart)
A paced prompt accepts about budget_s of delay (the check comes between pieces, so the piece that
spends the budget may pass it); every request let in while it is paced waits for at most the piece
under way, and every held request for the rest of the paced prompt, as it would without pacing.
Parameters: min_uncached_tokens >= 1; piece_tokens >= B, a multiple of B; yield_fraction >= 0;
prefill_tokens_per_s > 0; attention_ms_per_pair >= 0.
Complexity: O(prompt_tokens / C) to plan; O(1) per piece.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from ray_dspine.engines.attention_cost import attended_pairs
from ray_dspine.engines.prefill_pacing_config import PrefillPacingConfig


Arrival = Literal["held", "paced", "whole"]  # what PrefillPacer.arrive did with a request


def plan_pieces(prompt_tokens: int, cached_tokens: int, piece_tokens: int, block_tokens: int) -> list[int]:
    """Rule `pieces`: the prefix lengths to send before the request itself (empty: do not pace)."""
    start = (cached_tokens // block_tokens) * block_tokens
    out = []
    end = start + piece_tokens
    while prompt_tokens - end >= piece_tokens / 2:
        out.append(end)
        end += piece_tokens
    return out


def own_prefill_s(start_tokens: int, end_tokens: int, rate: float, pair_s: float) -> float:
    """Rule `own_s`: prompt tokens start..end prefilled on their own, the first `start` in KV, at `rate`
    tokens/s and `pair_s` seconds per attended pair."""
    return (end_tokens - start_tokens) / rate + pair_s * attended_pairs(start_tokens, end_tokens - start_tokens)


@dataclass
class PacedPrefill:
    """One paced prompt's progress: which piece is out, and how much delay it has accepted so far."""

    request_id: str
    prompt_tokens: int
    cached_before: int
    budget_s: float
    rate: float
    pieces: list[int]
    pair_s: float = 0.0  # attention seconds per attended pair (rule `own_s`)
    yielded_s: float = 0.0
    sent_s: float | None = None
    sent_tokens: int = 0
    done_tokens: int = field(init=False)
    measuring_tokens: int = 0
    queued_ahead_tokens: int = 0
    prefilled_tokens: int = 0
    engine_hit_tokens: int = 0

    def __post_init__(self) -> None:
        self.done_tokens = self.cached_before

    def own_s(self, start_tokens: int, end_tokens: int) -> float:
        """Rule `own_s` at this prompt's rates."""
        return own_prefill_s(start_tokens, end_tokens, self.rate, self.pair_s)

    def next_piece(self, now_s: float) -> int | None:
        """Rule `next`: the next piece's prefix length, sent now; None: send the request itself now."""
        if not self.pieces or self.yielded_s >= self.budget_s:
            self.pieces.clear()
            return None
        self.sent_tokens = self.pieces.pop(0)
        self.sent_s = now_s
        self.measuring_tokens, self.queued_ahead_tokens = self.queued_ahead_tokens, 0
        return self.sent_tokens

    def record(self, prompt_tokens: int, cached_tokens: int) -> None:
        """A piece of this prompt, or the prompt itself, ended: the engine's prompt and cached tokens for it."""
        self.prefilled_tokens += max(0, prompt_tokens - cached_tokens)
        self.engine_hit_tokens += cached_tokens

    def hit_tokens(self) -> int:
        """Rule `hit`: the prefix hit the request reports (once it and its pieces are recorded)."""
        return max(0, self.prompt_tokens - self.prefilled_tokens)

    def self_hit_tokens(self) -> int:
        """The engine's hits for this request and its pieces that are its own work (engine hits - `hit`)."""
        return max(0, self.engine_hit_tokens - self.hit_tokens())

    def left_tokens(self, now_s: float | None = None) -> int:
        """Rule `left`: the budget still unspent at `now_s`, in tokens of others' prefill (never negative)."""
        waited = 0.0
        if now_s is not None and self.sent_s is not None:
            waited = max(0.0, (now_s - self.sent_s) - self.own_s(self.done_tokens, self.sent_tokens)) * self.rate
        ahead = max(waited, self.measuring_tokens) + self.queued_ahead_tokens
        return max(0, int((self.budget_s - self.yielded_s) * self.rate - ahead))

    def let_in(self, uncached_tokens: int) -> None:
        """A request sent ahead of this prompt's next piece (rule `hold`)."""
        self.queued_ahead_tokens += max(0, uncached_tokens)

    def unsent_tokens(self) -> int:
        """Prompt tokens after the piece out (after the last finished one between pieces)."""
        return self.prompt_tokens - max(self.sent_tokens, self.done_tokens)

    def piece_done(self, now_s: float) -> None:
        """The piece sent last finished at `now_s`: count the time beyond its own prefill as yielded."""
        if self.sent_s is None:
            raise RuntimeError(f"{self.request_id}: piece_done without a piece out")
        self.yielded_s += max(0.0, (now_s - self.sent_s) - self.own_s(self.done_tokens, self.sent_tokens))
        self.done_tokens = self.sent_tokens
        self.sent_s = None
        self.measuring_tokens = 0


class PrefillPacer:
    """A replica's pacing decisions (rule `paced`): at most one paced prompt in progress at a time."""

    def __init__(self, config: PrefillPacingConfig):
        self.config = config
        self._active: PacedPrefill | None = None
        self._held: deque[tuple[str, int]] = deque()  # (request id, uncached tokens) in arrival order

    @property
    def active(self) -> PacedPrefill | None:
        return self._active

    @property
    def held(self) -> tuple[str, ...]:
        return tuple(rid for rid, _ in self._held)

    def is_long(self, prompt_tokens: int, cached_tokens: int) -> bool:
        """Rule `long`: the prompt would be paced were no other prompt paced."""
        cfg = self.config
        if prompt_tokens - cached_tokens < cfg.min_uncached_tokens:
            return False
        return bool(plan_pieces(prompt_tokens, cached_tokens, cfg.piece_tokens, cfg.prefix_block_tokens))

    def should_hold(self, prompt_tokens: int, cached_tokens: int, now_s: float | None = None) -> bool:
        """Rule `hold`: the request is to wait (call `hold`) until the paced prompt is sent whole."""
        if not self.config.hold_long_prompts or self._active is None:
            return False
        if self.is_long(prompt_tokens, cached_tokens):
            return True
        return prompt_tokens - cached_tokens > self._active.left_tokens(now_s)

    def hold(self, request_id: str, uncached_tokens: int) -> None:
        self._held.append((request_id, max(0, uncached_tokens)))

    def release(self, request_id: str) -> None:
        """A held request withdrawn (a cancel) before its turn."""
        self._held = deque(item for item in self._held if item[0] != request_id)

    def let_in(self, uncached_tokens: int) -> None:
        """A request sent whole while a prompt is paced goes ahead of its next piece (rule `hold`)."""
        if self._active is not None:
            self._active.let_in(uncached_tokens)

    def yielding_tokens(self) -> int:
        """Rule `yielding`: backlog a request within the budget goes ahead of (0 when nothing is paced)."""
        if self._active is None:
            return 0
        return self._active.unsent_tokens() + sum(tokens for _, tokens in self._held)

    def left_tokens(self, now_s: float | None = None) -> int:
        """Rule `left` of the paced prompt at `now_s`; 0 when nothing is paced."""
        return 0 if self._active is None else self._active.left_tokens(now_s)

    def arrive(
        self,
        request_id: str,
        prompt_tokens: int,
        cached_tokens: int,
        permitted: bool = True,
        now_s: float | None = None,
    ) -> Arrival:
        """A request reaching the replica at `now_s`: "held" (rule `hold`; it was put on the held list),
        "paced" (rule `paced`; `active` is its PacedPrefill) or "whole" (let in: send it now, as it is). A
        request without the router's permit is never paced."""
        if self.should_hold(prompt_tokens, cached_tokens, now_s):
            self.hold(request_id, prompt_tokens - cached_tokens)
            return "held"
        if permitted and self.start(request_id, prompt_tokens, cached_tokens) is not None:
            return "paced"
        self.let_in(prompt_tokens - cached_tokens)
        return "whole"

    def start(self, request_id: str, prompt_tokens: int, cached_tokens: int) -> PacedPrefill | None:
        """A PacedPrefill when the request is to be paced, else None (send it whole)."""
        cfg = self.config
        uncached = prompt_tokens - cached_tokens
        if self._active is not None or uncached < cfg.min_uncached_tokens:
            return None
        pieces = plan_pieces(prompt_tokens, cached_tokens, cfg.piece_tokens, cfg.prefix_block_tokens)
        if not pieces:  # rule `long`: no piece, not long
            return None
        rate, pair_s = cfg.prefill_tokens_per_s, cfg.attention_ms_per_pair / 1000.0
        budget_s = cfg.yield_fraction * own_prefill_s(cached_tokens, prompt_tokens, rate, pair_s)
        self._active = PacedPrefill(request_id, prompt_tokens, cached_tokens, budget_s, rate, pieces, pair_s=pair_s)
        return self._active

    def finish(self, request_id: str) -> list[str]:
        """The paced request itself was sent (or withdrawn): another prompt may be paced. Returns the held
        requests, in arrival order, to start again now (rule `hold`); they leave the held list."""
        if self._active is None or self._active.request_id != request_id:
            return []
        self._active = None
        released = [rid for rid, _ in self._held]
        self._held.clear()
        return released
