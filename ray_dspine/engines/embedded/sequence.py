"""One request's decoding: chunked prefill, then verify steps until EOS, a stop string or max_tokens.

Rule. Prefill runs the prompt in chunks of `prefill_chunk_tokens`; the last chunk's logits give the
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
from .drafter import NgramDrafter
from .speculative import accept_greedy, accept_sampled, target_probs


@dataclass
class StepOutput:
    text: str
    num_tokens: int
    finish_reason: str | None


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
    cache: object = None
    prefilled: int = 0
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
        )


def _forward(model, ids: list[int], cache, keep_all: bool) -> torch.Tensor:
    input_ids = torch.tensor([ids], dtype=torch.long)
    out = model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=0 if keep_all else 1)
    return out.logits[0]


def _choose(seq: Sequence, logits: torch.Tensor, draft: list[int]) -> list[int]:
    if seq.temperature == 0.0:
        return accept_greedy(logits, draft)
    return accept_sampled(logits, draft, seq.temperature, seq.top_p, seq.generator)


@torch.inference_mode()
def run_step(seq: Sequence, model, prefill_chunk_tokens: int, drafter_enabled: bool) -> StepOutput:
    """Advance `seq` by one prefill chunk or one verify step."""
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

    draft: list[int] = []
    if drafter_enabled and seq.drafter is not None and seq.remaining > 1:
        draft = seq.drafter.propose()[: seq.remaining - 1]
    logits = _forward(model, [seq.last_token] + draft, seq.cache, keep_all=True)
    emitted = _choose(seq, logits, draft)
    rejected = len(draft) - (len(emitted) - 1)
    if rejected:
        seq.cache.crop(-rejected)  # transformers 5.x: a negative count of tokens to drop
    return _emit(seq, emitted)


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
