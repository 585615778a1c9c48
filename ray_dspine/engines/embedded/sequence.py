"""One request's decoding: chunked prefill, then verify steps until EOS, a stop string or max_tokens.

Rule. Prefill starts after the `cached_tokens` a prefix-cache hit covers (their KV is already in
`cache`) and runs the rest of the prompt in chunks of `prefill_chunk_tokens`; the last chunk's logits give the
first token (counted as one step that produced one token). Each later step feeds
[last, d1..dk] (k = 0 autoregressive, or when the drafter has nothing to propose) and emits the
tokens `speculative.accept_*` returns, cut at the first EOS and at max_tokens. The draft is
shortened so a step never overshoots max_tokens: k <= remaining - 1.
The KV cache holds every token but `last`; rejected draft tokens are cropped right after the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..protocol import Usage
from .detokenizer import IncrementalDetokenizer
from .draft_policy import AcceptanceTracker, StepCosts, choose_draft_length, prior_costs
from .drafter import NgramDrafter
from .speculative import accept_greedy, accept_sampled, target_probs


@dataclass
class StepOutput:
    text: str
    num_tokens: int
    finish_reason: str | None
    num_drafted: int = -1  # draft tokens verified by this decode step; -1 for a prefill step


@dataclass
class Sequence:
    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    eos_token_ids: frozenset[int]
    detokenizer: IncrementalDetokenizer
    drafter: NgramDrafter | None
    generator: torch.Generator | None
    histogram_size: int
    acceptance: AcceptanceTracker | None = None  # set: adaptive draft length (draft_policy.py)
    fixed_cost_ratio: float | None = None  # set: prior costs, this r (seeded sampling stays reproducible)
    cache: object = None
    prefilled: int = 0
    cached_tokens: int = 0  # prompt tokens the prefix cache covered (not prefilled)
    last_token: int | None = None
    output_ids: list[int] = field(default_factory=list)
    verify_steps: int = 0
    accept_histogram: list[int] = field(default_factory=list)
    finished: str | None = None
    path: str = "autoregressive"

    def __post_init__(self) -> None:
        self.accept_histogram = [0] * self.histogram_size

    @property
    def remaining(self) -> int:
        return self.max_tokens - len(self.output_ids)

    def usage(self) -> Usage:
        produced = len(self.output_ids)
        return Usage(
            prompt_tokens=len(self.prompt_ids),
            completion_tokens=produced,
            total_tokens=len(self.prompt_ids) + produced,
            verify_steps=self.verify_steps,
            accept_length=round(produced / self.verify_steps, 4) if self.verify_steps else 0.0,
            accept_histogram=list(self.accept_histogram),
            path=self.path,
            cached_prompt_tokens=self.cached_tokens,
        )

    def kv_tokens(self) -> list[int]:
        """The tokens whose KV the cache holds, in order (every token fed so far but `last`)."""
        held = self.cache.get_seq_length() if self.cache is not None else 0
        return (self.prompt_ids + self.output_ids)[:held]


def _forward(model, ids: list[int], cache, keep_all: bool) -> torch.Tensor:
    input_ids = torch.tensor([ids], dtype=torch.long)
    out = model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=0 if keep_all else 1)
    return out.logits[0]


def _choose(seq: Sequence, logits: torch.Tensor, draft: list[int]) -> list[int]:
    if seq.temperature == 0.0:
        return accept_greedy(logits, draft)
    return accept_sampled(logits, draft, seq.temperature, seq.top_p, seq.generator)


@torch.inference_mode()
def run_step(
    seq: Sequence,
    model,
    prefill_chunk_tokens: int,
    drafter_enabled: bool,
    costs: StepCosts | None = None,
    now: float = 0.0,
) -> StepOutput:
    """Advance `seq` by one prefill chunk or one verify step; with `seq.acceptance` set, the draft is
    cut to draft_policy's k* for the request's acceptance and the measured step costs `costs` (an
    exploration length instead, when `costs.explore` says so at clock `now`), or the prior costs
    c(k) = 1 + r * k for r = `seq.fixed_cost_ratio` (or 0 without `costs`)."""
    if seq.cache is None:
        from transformers import DynamicCache

        seq.cache = DynamicCache()
    if seq.prefilled < len(seq.prompt_ids):
        chunk = seq.prompt_ids[seq.prefilled : seq.prefilled + prefill_chunk_tokens]
        logits = _forward(model, chunk, seq.cache, keep_all=False)
        seq.prefilled += len(chunk)
        if seq.prefilled < len(seq.prompt_ids):
            return StepOutput("", 0, None)
        if seq.temperature == 0.0:
            first = int(logits[-1].argmax().item())
        else:
            probs = target_probs(logits[-1:], seq.temperature, seq.top_p)[0]
            first = int(torch.multinomial(probs, 1, generator=seq.generator).item())
        return _emit(seq, [first])

    proposal: list[int] = []
    if drafter_enabled and seq.drafter is not None and seq.remaining > 1:
        proposal = seq.drafter.propose()[: seq.remaining - 1]
    draft = proposal
    if seq.acceptance is not None and proposal:
        k = None
        if seq.fixed_cost_ratio is not None or costs is None:
            table = prior_costs(seq.fixed_cost_ratio or 0.0, len(proposal))
        else:
            k, table = costs.explore(len(proposal), now), costs.costs(len(proposal))
        draft = proposal[: choose_draft_length(seq.acceptance.alpha, table) if k is None else k]
    logits = _forward(model, [seq.last_token] + draft, seq.cache, keep_all=True)
    emitted = _choose(seq, logits, draft)
    accepted = len(emitted) - 1
    if seq.acceptance is not None:
        if draft:
            seq.acceptance.observe_verify(len(draft), accepted)
        elif proposal:
            seq.acceptance.observe_shadow(proposal[0], emitted[0])  # free: what a 1-token draft would have got
    rejected = len(draft) - accepted
    if rejected:
        seq.cache.crop(-rejected)  # transformers 5.x: a negative count of tokens to drop
    out = _emit(seq, emitted)
    out.num_drafted = len(draft)
    return out


def _emit(seq: Sequence, tokens: list[int]) -> StepOutput:
    for i, token in enumerate(tokens):
        if token in seq.eos_token_ids:
            tokens = tokens[: i + 1]
            seq.finished = "stop"
            break
    tokens = tokens[: seq.remaining]
    seq.verify_steps += 1
    seq.accept_histogram[min(len(tokens), seq.histogram_size) - 1] += 1
    seq.output_ids.extend(tokens)
    seq.last_token = tokens[-1]
    if seq.drafter is not None:
        seq.drafter.extend(tokens)
    if seq.finished is None and seq.remaining <= 0:
        seq.finished = "length"
    visible = [t for t in tokens if t not in seq.eos_token_ids]
    text = seq.detokenizer.push(visible, final=seq.finished is not None)
    if seq.detokenizer.stopped:
        seq.finished = "stop"
    return StepOutput(text, len(tokens), seq.finished)
