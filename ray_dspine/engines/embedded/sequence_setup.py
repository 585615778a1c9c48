"""A request's decoding state: validate lengths against the context, then build its `Sequence`.

Rules (C = min(context_length_tokens, the model's context), P = prompt tokens, M = max_tokens):
  P >= C is refused (400, param messages/prompt); P + M > C is refused (400, param max_tokens) unless
  the request asked to clamp (max_tokens not given), then M = C - P.
  Sampling fields left out (None) take OpenAI's defaults, temperature 1 and top-p 1, no top-k or min-p:
  the model's GGUF names no sampling defaults of its own (SGLang would read generation_config.json).
  A logit_bias key outside the model's vocabulary is refused (400, param logit_bias), as SGLang's
  SamplingParams.verify refuses it; so is a stop_regex pattern the `regex` package cannot compile (400, param
  stop_regex: detokenizer.py searches with it; the ingress has checked it compiles under `re`, as SGLang does).
  A request with a response_format, regex or ebnf constraint, or a forced tool call, decodes under its grammar,
  which the engine compiled beforehand (grammar.py).
  Sampling draws from a generator seeded with the request's seed (a random one without).
  A seeded sampled request drafts with the prior step costs 1 + draft_cost_ratio_prior * k, never the
  measured ones nor an exploration, and its acceptance counts start neutral and feed no pool
  (draft_policy.py rules `cost`, `explore`, `prior`). Any other adaptive request's counts start from,
  and feed, the engine's pool `pooled_acceptance`.
"""

from __future__ import annotations

import uuid

import regex

from ..protocol import EngineError, GenerateRequest
from .config import EmbeddedEngineConfig
from .detokenizer import IncrementalDetokenizer
from .draft_policy import MatchedAcceptance
from .drafter import NgramDrafter
from .grammar import RequestGrammar
from .sequence import Sequence

DEFAULT_TEMPERATURE = 1.0  # OpenAI's, for a request that leaves it out
DEFAULT_TOP_P = 1.0


def make_sequence(
    config: EmbeddedEngineConfig,
    loaded,
    request: GenerateRequest,
    prompt_ids: list[int],
    drafter_enabled: bool,
    pooled_acceptance: MatchedAcceptance | None = None,
    grammar: RequestGrammar | None = None,
) -> Sequence:
    context = min(config.context_length_tokens, loaded.context_length_tokens)
    if len(prompt_ids) >= context:
        raise EngineError(
            f"the prompt is {len(prompt_ids)} tokens, but this model's context window is {context} tokens; "
            "shorten the messages",
            status=400,
            param="messages" if request.messages is not None else "prompt",
            code="context_length_exceeded",
        )
    max_tokens = request.max_tokens
    if len(prompt_ids) + max_tokens > context:
        if not request.clamp_max_tokens:
            raise EngineError(
                f"max_tokens is {max_tokens}, but the prompt is {len(prompt_ids)} tokens and this model's "
                f"context window is {context} tokens; set max_tokens to at most {context - len(prompt_ids)}",
                status=400,
                param="max_tokens",
                code="context_length_exceeded",
            )
        max_tokens = context - len(prompt_ids)
    bias = _dense_bias(request.logit_bias, loaded.model.config.vocab_size) if request.logit_bias else None
    temperature = DEFAULT_TEMPERATURE if request.temperature is None else request.temperature
    generator = None
    if temperature > 0:
        import torch

        generator = torch.Generator()
        generator.manual_seed(request.seed if request.seed is not None else uuid.uuid4().int & (2**63 - 1))
    seeded = generator is not None and request.seed is not None
    drafter = None
    if config.speculative:
        drafter = NgramDrafter(config.num_draft_tokens, config.ngram_min, config.ngram_max, config.ngram_occurrence)
        drafter.extend(prompt_ids)
    return Sequence(
        request_id=request.request_id or uuid.uuid4().hex,
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=DEFAULT_TOP_P if request.top_p is None else request.top_p,
        top_k=max(request.top_k or 0, 0),  # None and -1: off
        min_p=request.min_p or 0.0,
        min_tokens=min(request.min_tokens, max_tokens),
        ignore_eos=request.ignore_eos,
        stop_token_ids=frozenset(request.stop_token_ids),
        no_stop_trim=request.no_stop_trim,
        skip_special_tokens=request.skip_special_tokens,
        frequency_penalty=request.frequency_penalty,
        presence_penalty=request.presence_penalty,
        repetition_penalty=1.0 if request.repetition_penalty is None else request.repetition_penalty,
        logit_bias=bias,
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs if request.logprobs else 0,
        eos_token_ids=loaded.eos_token_ids,
        detokenizer=_detokenizer(loaded.tokenizer, request),
        drafter=drafter,
        generator=generator,
        histogram_size=config.num_draft_tokens + 1,
        acceptance=MatchedAcceptance(
            config.draft_history_decay,
            config.num_draft_tokens,
            config.draft_acceptance_by_match,
            None if seeded else pooled_acceptance,
            config.draft_prior_weight,
        )
        if config.adaptive_draft
        else None,
        fixed_cost_ratio=config.draft_cost_ratio_prior if seeded else None,
        grow=config.draft_grow_on_full_accept and not seeded,
        path="speculative" if drafter_enabled else "autoregressive",
        row_exact=config.row_exact,
        grammar=grammar,
    )


def _dense_bias(logit_bias: dict[str, float], vocab: int):
    """{token id (a digit string): bias} as a dense vector over the vocabulary."""
    import torch

    dense = torch.zeros(vocab)
    for token, value in logit_bias.items():
        if not 0 <= int(token) < vocab:
            raise EngineError(
                f"logit_bias names token {token}, but this model's token ids run from 0 to {vocab - 1}",
                status=400,
                param="logit_bias",
                code="invalid_value",
            )
        dense[int(token)] = value
    return dense


def _detokenizer(tokenizer, request: GenerateRequest) -> IncrementalDetokenizer:
    try:
        return IncrementalDetokenizer(
            tokenizer, request.stop, request.stop_regex, request.no_stop_trim, request.skip_special_tokens
        )
    except regex.error as exc:
        raise EngineError(f"stop_regex: a pattern does not compile ({exc})", status=400, param="stop_regex",
                          code="invalid_value") from exc  # fmt: skip
