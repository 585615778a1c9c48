"""One speculative verify step: feed [last, d1..dk] to the target, keep the longest correct prefix.

Rule (greedy, temperature 0). With target logits z_0..z_k for the positions after last, d1..dk:
let a_i = argmax z_i. Accept d_{i+1} while d_{i+1} = a_i; with m accepted, emit d_1..d_m, a_m.
Every emitted token equals what token-by-token greedy decoding would produce, so the output is
unchanged (up to floating-point differences between a block forward and a one-token forward,
which is why equivalence is checked in fp32).

Rule (sampling, temperature T > 0, top-p P, top-k K, min-p M). The n-gram drafter is deterministic, so its
proposal distribution q is a point mass on d_i. Standard speculative sampling (Leviathan et al. 2023;
Chen et al. 2023) accepts d_i with probability min(1, p_i(d_i) / q(d_i)) = p_i(d_i), where p_i is
the target's tempered, filtered distribution. On the first rejection it samples from the
residual norm(max(0, p_i - q)) = p_i with d_i removed and renormalised, then stops. If all k are
accepted, one more token is sampled from p_k. Each emitted token is distributed exactly as p.

Rule (filters, as SGLang's torch sampler applies them). softmax(z / T), sorted by probability; a token is
dropped when the mass of the tokens above it reaches P, when K >= 1 tokens rank above it, or when its
probability is below M times the top one's; the kept mass is renormalised. The likeliest token always stays.

Rule (penalties, SGLang's, before any choice). Row i of a verify block scores the token after the output so
far plus d_1..d_i, and is penalised by that history's counts c: z - F * c - P * [c > 0] (frequency F, presence
P), then, where c > 0, z / R if z > 0 else z * R (repetition R), then + the request's logit_bias. Counting the
draft tokens before each row makes a penalised verify step choose what decoding one token at a time would
(SGLang's own speculative path gives every row the penalties from before the step).

Cost: one target forward over k+1 positions; the KV cache is cropped by the k - m rejected tokens.
Tokens emitted per step lie in [1, k+1].
"""

from __future__ import annotations

import torch


def target_probs(
    logits: torch.Tensor, temperature: float, top_p: float, top_k: int = 0, min_p: float = 0.0
) -> torch.Tensor:
    """Tempered, filtered probabilities over the last dimension (float32); top_k 0: no top-k (rule `filters`)."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0 or top_k > 0 or min_p > 0.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        drop = torch.zeros_like(sorted_probs, dtype=torch.bool)
        if top_p < 1.0:  # keep the smallest set whose mass reaches top_p (the token that crosses it stays)
            drop |= torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= top_p
        if top_k > 0:
            drop[..., top_k:] = True
        if min_p > 0.0:
            drop |= sorted_probs < min_p * sorted_probs[..., :1]
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def accept_greedy(logits: torch.Tensor, draft: list[int]) -> list[int]:
    """logits: (k+1, vocab) for positions after last, d1..dk. Returns the tokens to emit."""
    best = logits.argmax(dim=-1).tolist()
    emitted: list[int] = []
    for i, proposed in enumerate(draft):
        if proposed != best[i]:
            break  # the target disagrees: its own token replaces the draft and the step ends
        emitted.append(proposed)
    emitted.append(best[len(emitted)])  # correction on mismatch, bonus token when all matched
    return emitted


def accept_sampled(
    logits: torch.Tensor,
    draft: list[int],
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    top_k: int = 0,
    min_p: float = 0.0,
) -> list[int]:
    probs = target_probs(logits, temperature, top_p, top_k, min_p)
    emitted: list[int] = []
    for i, proposed in enumerate(draft):
        p = probs[i]
        u = torch.rand((), generator=generator).item()
        if u < p[proposed].item():  # accept with probability p(d) / q(d), q(d) = 1
            emitted.append(proposed)
            continue
        residual = p.clone()
        residual[proposed] = 0.0  # max(0, p - q): q puts all its mass on the proposed token
        total = residual.sum()
        if total <= 0:  # p was a point mass on the rejected token; cannot happen after u < 1
            residual = p
            total = residual.sum()
        emitted.append(int(torch.multinomial(residual / total, 1, generator=generator).item()))
        return emitted
    emitted.append(int(torch.multinomial(probs[len(draft)], 1, generator=generator).item()))
    return emitted


def penalised(
    logits: torch.Tensor,
    history: list[int],
    draft: list[int],
    frequency: float = 0.0,
    presence: float = 0.0,
    repetition: float = 1.0,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """`logits` (rows for the tokens after history, history + d1, ...) penalised by rule `penalties` (float32)."""
    rows, vocab = logits.shape
    logits = logits.float()
    if frequency or presence or repetition != 1.0:
        counts = torch.zeros(rows, vocab)
        if history:
            counts += torch.bincount(torch.tensor(history, dtype=torch.long), minlength=vocab)[:vocab].float()
        for i, token in enumerate(draft[: rows - 1]):
            counts[i + 1 :, token] += 1.0
        seen = counts > 0
        logits = logits - frequency * counts - presence * seen.float()
        if repetition != 1.0:
            logits = torch.where(seen, torch.where(logits > 0, logits / repetition, logits * repetition), logits)
    if bias is not None:
        logits = logits + bias
    return logits
