"""Simulated acceptance: how many tokens each verify step produces.

Rules (mu = the profile's acceptance length, cv = its per-request spread, D = draft block size):
  per request r: verify steps per token s_r = clip(Normal(1/mu, cv/mu), 1/D, 1), request mean m_r = 1/s_r.
      Drawing steps-per-token (not tokens-per-step) makes the aggregate over equal-length requests,
      sum(tokens) / sum(steps) = 1 / E[s_r], equal mu: the way acceptance length is reported.
  per verify step: k in {1..D} tokens, P(k >= j) = alpha_r^(j-1) (each further drafted token is kept
      with probability alpha_r until the first miss; the step always yields >= 1 token), so
      P(k) = alpha^(k-1) (1 - alpha) for k < D, P(D) = alpha^(D-1), and
      E[k] = (1 - alpha^D) / (1 - alpha)   (= D at alpha = 1).
      alpha_r solves E[k] = m_r by bisection (E[k] rises monotonically in alpha on [0, 1]).
  sampling: k = min(D, 1 + floor(ln u / ln alpha)), u ~ U(0, 1]  (inverse transform).
Parameters: mu in [1, D]; cv in [0, 1]; D in [1, 64]. Each request draws from its own random.Random,
  seeded from (replica seed, request id), so draws do not depend on how requests interleave.
Complexity: O(1) per step draw; O(60) bisection per request.
"""

from __future__ import annotations

import math
import random

_BISECTION_ROUNDS = 60


def mean_tokens_per_step(alpha: float, draft_tokens: int) -> float:
    """E[k] = (1 - alpha^D) / (1 - alpha), the mean of the capped geometric."""
    if alpha >= 1.0:
        return float(draft_tokens)
    return (1.0 - alpha**draft_tokens) / (1.0 - alpha)


def solve_alpha(mean: float, draft_tokens: int) -> float:
    """The per-token keep probability whose capped geometric has the given mean."""
    if mean <= 1.0 or draft_tokens == 1:
        return 0.0
    if mean >= draft_tokens:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(_BISECTION_ROUNDS):
        mid = 0.5 * (lo + hi)
        if mean_tokens_per_step(mid, draft_tokens) < mean:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def draw_step_tokens(alpha: float, draft_tokens: int, rng: random.Random, log_alpha: float | None = None) -> int:
    """Tokens one verify step produces: min(D, 1 + floor(ln u / ln alpha)); log_alpha = ln(alpha) if known."""
    if alpha <= 0.0:
        return 1
    if alpha >= 1.0:
        return draft_tokens
    u = 1.0 - rng.random()  # in (0, 1]
    return min(draft_tokens, 1 + int(math.log(u) / (math.log(alpha) if log_alpha is None else log_alpha)))


class RequestAcceptance:
    """One request's acceptance: its own mean m_r and keep probability, and its own random stream."""

    def __init__(self, mean: float, draft_tokens: int, rng: random.Random):
        self.mean = mean
        self.draft_tokens = draft_tokens
        self.alpha = solve_alpha(mean, draft_tokens)
        self._rng = rng
        self._log_alpha = math.log(self.alpha) if 0.0 < self.alpha < 1.0 else None  # once per request

    def draw(self) -> int:
        return draw_step_tokens(self.alpha, self.draft_tokens, self._rng, self._log_alpha)


class AcceptanceModel:
    """Per-drafter acceptance distribution (mu, cv, D) that hands each request its own stream."""

    def __init__(self, accept_length_mean: float, per_request_cv: float, draft_tokens: int):
        if not 1.0 <= accept_length_mean <= draft_tokens:
            raise ValueError(f"acceptance length {accept_length_mean} must lie in [1, D={draft_tokens}]")
        self.accept_length_mean = accept_length_mean
        self.per_request_cv = per_request_cv
        self.draft_tokens = draft_tokens

    def request_mean(self, rng: random.Random) -> float:
        """m_r = 1 / clip(Normal(1/mu, cv/mu), 1/D, 1)."""
        steps_per_token = rng.gauss(1.0 / self.accept_length_mean, self.per_request_cv / self.accept_length_mean)
        steps_per_token = min(1.0, max(1.0 / self.draft_tokens, steps_per_token))
        return 1.0 / steps_per_token

    def for_request(self, base_seed: int, request_id: str) -> RequestAcceptance:
        rng = random.Random(f"{base_seed}:{request_id}")
        return RequestAcceptance(self.request_mean(rng), self.draft_tokens, rng)
