"""Step times of the simulated target + drafter, from a profile's coefficients.

Rules (all times in ms; n = requests in the batch, C = their context tokens in all, D = draft block):
  decode  (autoregressive, 1 token per request):
      t_decode(n, C) = base_ms + per_running_ms * n + per_kv_token_ms * C
  verify  (one drafted block per request, 1..D tokens per request):
      t_verify(n, C, D) = t_decode(n, C) + draft_ms + verify_per_token_ms * n * (D - 1)
  prefill (one forward pass over P_u uncached prompt tokens, of one or several requests):
      t_prefill(P_u, A) = base_ms + per_token_ms * P_u + per_token_context_ms * A
  A = the sum over the pass's requests of pairs(c, u) (engines/attention_cost.py): what a request's u
      uncached tokens after c tokens of its prompt already in KV attend
  a prompt alone, chunked into passes of at most B tokens (B = None: one pass), c tokens cached:
      t_alone(P_u, B, c) = t_prefill(P_u, pairs(c, P_u)) + (ceil(P_u / B) - 1) * base_ms
      (the passes' pairs add up to those of one pass over the whole)
  reference throughput of a full batch with acceptance length a:  n * a / t.
Parameters: n in [0, max_running_requests]; C >= 0 tokens; D in [1, 64]; coefficients >= 0 (profile).
Complexity: O(1) per call.
"""

from __future__ import annotations

from ray_dspine.engines.attention_cost import attended_pairs
from ray_dspine.engines.simulated.profile import DrafterProfile, SimProfile


def decode_step_ms(profile: SimProfile, num_running: int, context_tokens: int) -> float:
    d = profile.decode
    return d.base_ms + d.per_running_ms * num_running + d.per_kv_token_ms * context_tokens


def verify_step_ms(profile: SimProfile, drafter: DrafterProfile, num_running: int, context_tokens: int) -> float:
    extra_query_tokens = num_running * (drafter.draft_tokens - 1)
    return (
        decode_step_ms(profile, num_running, context_tokens)
        + drafter.draft_ms
        + profile.verify_per_token_ms * extra_query_tokens
    )


def prefill_step_ms(profile: SimProfile, uncached_prompt_tokens: int, pairs: int = 0) -> float:
    p = profile.prefill
    return profile.decode.base_ms + p.per_token_ms * uncached_prompt_tokens + p.per_token_context_ms * pairs


def prefill_alone_ms(
    profile: SimProfile, uncached_prompt_tokens: int, chunk_tokens: int | None = None, cached_tokens: int = 0
) -> float:
    """t_alone: the prompt's prefill on an idle replica, one base step per chunk."""
    num_passes = 1 if chunk_tokens is None else max(1, -(-uncached_prompt_tokens // chunk_tokens))
    pairs = attended_pairs(cached_tokens, uncached_prompt_tokens)
    return prefill_step_ms(profile, uncached_prompt_tokens, pairs) + (num_passes - 1) * profile.decode.base_ms


def reference_output_tok_s(profile: SimProfile, drafter: DrafterProfile | None, accept_length: float = 1.0) -> float:
    """Output tokens/s of a full batch at the profile's calibration point (n * a / t)."""
    cal = profile.calibration
    n = cal.concurrency
    context = n * cal.context_tokens_per_request
    step_ms = (
        decode_step_ms(profile, n, context) if drafter is None else verify_step_ms(profile, drafter, n, context)
    )
    return n * accept_length / (step_ms / 1000.0)
