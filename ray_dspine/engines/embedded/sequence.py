"""One request's decoding: chunked prefill, then verify steps until an end token, a stop string or max_tokens.

Rule. Prefill starts after the `cached_tokens` a prefix-cache hit covers (their KV is already in
`cache`) and runs the rest of the prompt in chunks of `prefill_chunk_tokens`; the last chunk's logits give the
first token (counted as one step that produced one token). Each later step feeds
[last, d1..dk] (k = 0 autoregressive, or when the drafter has nothing to propose) and emits the
tokens `speculative.accept_*` returns, cut at the first end token and at max_tokens. The draft is
shortened so a step never overshoots max_tokens: k <= remaining - 1.
The KV cache holds every token but `last`; rejected draft tokens are cropped right after the step.
`run_step` is a step alone; a batched step (engine.py, batch.py) runs the same pieces around one
packed forward: `propose`, `choose_draft`, `finish_verify`, `drop_rejected`, `emit_verified`,
`next_chunk`, `after_prefill`. A verify block of two or more tokens alone is a packed forward of one
request too, so its attention reads the cache's key/value heads as they are (batch.py rule `segment`):
transformers' sdpa path copies them out to every query head whenever a block of more than one token
comes with a mask, a copy of the whole cache per layer. The logits are the same bits; on the engine's
CPU model a 9-token verify block behind 3,000 cached tokens took 90.4 ms instead of 114.1 ms (MEASURED,
fp32, docs/results/embedded-engine.md). A one-token step (no draft) and prefill chunks keep the model's
own forward: no copy is made for one token, and a chunk gains nothing measurable.
Rule `end tokens` (SGLang's): the end tokens are EOS and the request's stop_token_ids. The first one emitted
finishes the request ("stop", its id the request's matched_stop) and is not shown (with no_stop_trim it is, as
text if it has any: special tokens have text only with skip_special_tokens false); with ignore_eos none does. A
stop string or stop pattern ends the request at the token that completes it, later tokens of its step dropped
(detokenizer.py).
While fewer than min_tokens tokens are out, every logits row for a position below min_tokens has the end
tokens at -inf, so none is chosen there. A request with a grammar (grammar.py) has every row it chooses from
masked to what the grammar allows there, and ends where the grammar ends.
Rule `logprobs`: with the request's logprobs, every choice of tokens (the first token's, a verify step's) reads their
log-probabilities off the rows it chose them from (logprobs.py), and the step's output carries those of the tokens
it keeps, cut where the tokens are cut (an end token, max_tokens, a stop string), so a request gets one entry per
completion token.
Under `row_exact` (batch.py rule `row exact`) a draft is cut to ROW_EXACT_MAX_ROWS - 1 tokens and its
block's attention runs one query row at a time, so every row's logits are a one-token step's bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..protocol import EngineError, Usage
from .batch import fit_rows, forward_packed
from .config import ROW_EXACT_MAX_ROWS
from .detokenizer import IncrementalDetokenizer
from .draft_policy import AcceptanceTracker, MatchedAcceptance, StepCosts, choose_draft_length, prior_costs
from .drafter import NgramDrafter
from .grammar import RequestGrammar
from .kv_cache import SlabCache
from .logprobs import Entry, entries
from .speculative import accept_greedy, accept_sampled, penalised, target_probs


@dataclass
class StepOutput:
    text: str
    num_tokens: int
    finish_reason: str | None
    num_drafted: int = -1  # draft tokens verified by this decode step; -1 for a prefill step
    logprobs: list[Entry] | None = None  # rule `logprobs`: one per token of num_tokens
    error: EngineError | None = None  # set: the request ends with this error (finish_reason "error")


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
    acceptance: MatchedAcceptance | None = None  # set: adaptive draft length (draft_policy.py)
    fixed_cost_ratio: float | None = None  # set: prior costs, this r (seeded sampling stays reproducible)
    grow: bool = False  # draft_policy.py rule `grow`
    accepted_whole: tuple[int, int] | None = None  # (match length, k) of the last draft accepted whole
    cache: object = None
    prefilled: int = 0
    cached_tokens: int = 0  # prompt tokens the prefix cache covered (not prefilled)
    sent_first: bool = False  # the request's first chunk has gone (it carries the prompt's counts)
    last_token: int | None = None
    match_length: int = 0  # n of the n-gram the latest proposal matched (0: none)
    output_ids: list[int] = field(default_factory=list)
    verify_steps: int = 0
    accept_histogram: list[int] = field(default_factory=list)
    finished: str | None = None
    matched_stop: int | str | None = None  # what ended a "stop" (rule `end tokens`; detokenizer.py `matched`)
    path: str = "autoregressive"
    row_exact: bool = False  # batch.py rule `row exact`
    top_k: int = 0  # 0: off (speculative.py rule `filters`)
    min_p: float = 0.0
    min_tokens: int = 0  # rule `end tokens`
    ignore_eos: bool = False
    stop_token_ids: frozenset[int] = frozenset()
    no_stop_trim: bool = False  # rule `end tokens`; detokenizer.py rule `cut`
    skip_special_tokens: bool = True  # rule `end tokens`
    frequency_penalty: float = 0.0  # speculative.py rule `penalties`
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: torch.Tensor | None = None  # dense over the vocabulary; None: none
    logprobs: bool = False  # rule `logprobs`
    top_logprobs: int = 0
    chosen_logprobs: list[Entry] | None = None  # of the tokens the last choice emitted, until `_emit` takes them
    grammar: RequestGrammar | None = None  # set: constrained decoding (grammar.py)

    def __post_init__(self) -> None:
        self.accept_histogram = [0] * self.histogram_size

    @property
    def prefilling(self) -> bool:
        return self.prefilled < len(self.prompt_ids)

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

    @property
    def end_token_ids(self) -> frozenset[int]:
        """The tokens that end the request (rule `end tokens`)."""
        return self.eos_token_ids | self.stop_token_ids

    def tracker(self) -> AcceptanceTracker | None:
        """The acceptance counts for the latest proposal's match length (draft_policy.py rule `match`)."""
        return None if self.acceptance is None else self.acceptance.of(self.match_length)

    def kv_capacity(self) -> int:
        """Positions the request's KV may hold at most: its prompt, max_tokens and one verify block (the
        reservation its admission counts; kv_cache.py starts the cache with this room)."""
        return len(self.prompt_ids) + self.max_tokens + self.histogram_size

    def kv_tokens(self) -> list[int]:
        """The tokens whose KV the cache holds, in order (every token fed so far but `last`)."""
        held = self.cache.get_seq_length() if self.cache is not None else 0
        return (self.prompt_ids + self.output_ids)[:held]


def _forward(model, ids: list[int], cache, keep_all: bool) -> torch.Tensor:
    """The model's own forward of `ids` behind `cache`: every row's logits, or the last row's."""
    input_ids = torch.tensor([ids], dtype=torch.long)
    out = model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=0 if keep_all else 1)
    return out.logits[0]


def _adjusted(seq: Sequence, logits: torch.Tensor, draft: list[int]) -> torch.Tensor:
    """`logits` (rows for the next output positions: after the output, then after each of `draft`) penalised
    (speculative.py rule `penalties`), masked to the request's grammar (grammar.py rule `mask`), with the end
    tokens at -inf in every row whose position is below min_tokens (rule `end tokens`; grammar.py rule
    `min_tokens`); the same tensor when the request asks for none of these."""
    if seq.frequency_penalty or seq.presence_penalty or seq.repetition_penalty != 1.0 or seq.logit_bias is not None:
        logits = penalised(logits, seq.output_ids, draft, seq.frequency_penalty, seq.presence_penalty,
                           seq.repetition_penalty, seq.logit_bias)  # fmt: skip
    if seq.grammar is not None:
        logits = seq.grammar.mask(logits, draft)
    rows = min(seq.min_tokens - len(seq.output_ids), logits.shape[0])
    if rows > 0:
        unmasked, logits = logits, logits.clone()
        logits[:rows, sorted(seq.end_token_ids)] = float("-inf")
        if seq.grammar is not None:
            nothing_left = torch.isneginf(logits[:rows]).all(dim=-1)
            logits[:rows][nothing_left] = unmasked[:rows][nothing_left]
    return logits


def _choose(seq: Sequence, logits: torch.Tensor, draft: list[int]) -> list[int]:
    logits = _adjusted(seq, logits, draft)
    if seq.temperature == 0.0:
        emitted = accept_greedy(logits, draft)
    else:
        emitted = accept_sampled(logits, draft, seq.temperature, seq.top_p, seq.generator, seq.top_k, seq.min_p)
    _note_logprobs(seq, logits, emitted)
    return emitted


def _note_logprobs(seq: Sequence, adjusted: torch.Tensor, tokens: list[int]) -> None:
    """Rule `logprobs`: the entries of `tokens`, read off the rows of `adjusted` they were chosen from."""
    if seq.logprobs:
        seq.chosen_logprobs = entries(adjusted, seq.temperature, tokens, seq.top_logprobs)


def next_chunk(seq: Sequence, chunk_tokens: int) -> list[int] | None:
    """The prompt tokens the request's next prefill chunk feeds; None once it decodes."""
    return seq.prompt_ids[seq.prefilled : seq.prefilled + chunk_tokens] if seq.prefilling else None


def after_prefill(seq: Sequence, chunk: list[int], logits: torch.Tensor) -> StepOutput:
    """After a forward fed `chunk`: advance `seq.prefilled`; nothing yet, or once the prompt is whole the
    first token from the chunk's last logits row."""
    seq.prefilled += len(chunk)
    if seq.prefilling:
        return StepOutput("", 0, None)
    last = _adjusted(seq, logits[-1:], [])
    if seq.temperature == 0.0:
        first = int(last[0].argmax().item())
    else:
        probs = target_probs(last, seq.temperature, seq.top_p, seq.top_k, seq.min_p)[0]
        first = int(torch.multinomial(probs, 1, generator=seq.generator).item())
    _note_logprobs(seq, last, [first])
    return _emit(seq, [first])


def propose(seq: Sequence, drafter_enabled: bool) -> list[int]:
    """The drafter's proposal for the next verify step, cut so it never overshoots max_tokens; sets
    `seq.match_length`."""
    seq.match_length, proposal = 0, []
    if drafter_enabled and seq.drafter is not None and seq.remaining > 1:
        seq.match_length, proposal = seq.drafter.lookup()
    return proposal[: seq.remaining - 1]


def choose_draft(
    seq: Sequence,
    proposal: list[int],
    costs: StepCosts | None,
    now: float,
    rest_tokens: float = 0.0,
    rest_draft: int = 0,
    may_explore: bool = True,
) -> list[int]:
    """The draft to verify: the whole proposal without `seq.acceptance`; else cut to draft_policy's k*
    (rule `choice`; in a batched step the other requests are worth `rest_tokens` expected tokens and
    `rest_draft` draft tokens, 0 and 0 alone, and `costs` is the table of the step's batch size), raised
    to rule `grow`'s doubled draft after a draft accepted whole when `seq.grow`, or to an exploration
    length when `may_explore` and `costs.explore` says so. A seeded sampled request always uses the
    prior costs of a step alone, so its draws stay reproducible."""
    if seq.acceptance is None or not proposal:
        return proposal
    values = seq.tracker().values(len(proposal))
    if seq.fixed_cost_ratio is not None or costs is None:
        return proposal[: choose_draft_length(values, prior_costs(seq.fixed_cost_ratio or 0.0, len(proposal)))]
    if may_explore:
        k = costs.explore(len(proposal), now)
        if k is not None:
            return proposal[:k]
    k = choose_draft_length(values, costs.costs(rest_draft + len(proposal)), rest_tokens, rest_draft)
    if seq.grow and seq.accepted_whole is not None and seq.accepted_whole[0] == seq.match_length:
        k = max(k, min(2 * seq.accepted_whole[1], len(proposal)))
    return proposal[:k]


def finish_verify(seq: Sequence, logits: torch.Tensor, proposal: list[int], draft: list[int]) -> list[int]:
    """Accept from a verify step's logits (rows for last, d1..dk); updates the acceptance counts."""
    emitted = _choose(seq, logits, draft)
    accepted = len(emitted) - 1
    seq.accepted_whole = (seq.match_length, len(draft)) if draft and accepted == len(draft) else None
    tracker = seq.tracker()
    if tracker is not None:
        if draft:
            tracker.observe_verify(len(draft), accepted)
        elif proposal:
            tracker.observe_shadow(proposal[0], emitted[0])  # free: what a 1-token draft would have got
    return emitted


def emit_verified(seq: Sequence, emitted: list[int], draft: list[int]) -> StepOutput:
    out = _emit(seq, emitted)
    out.num_drafted = len(draft)
    return out


@torch.inference_mode()
def run_step(
    seq: Sequence,
    model,
    prefill_chunk_tokens: int,
    drafter_enabled: bool,
    costs: StepCosts | None = None,
    now: float = 0.0,
) -> StepOutput:
    """Advance `seq` by one prefill chunk or one verify step, alone; with `seq.acceptance` set, the draft
    is cut to draft_policy's k* for the request's acceptance and the measured step costs `costs` (an
    exploration length instead, when `costs.explore` says so at clock `now`), or the prior costs
    c(k) = 1 + r * k for r = `seq.fixed_cost_ratio` (or 0 without `costs`)."""
    ensure_cache(seq)
    chunk = next_chunk(seq, prefill_chunk_tokens)
    if chunk is not None:
        return after_prefill(seq, chunk, _forward(model, chunk, seq.cache, keep_all=False))

    proposal = propose(seq, drafter_enabled)
    draft = choose_draft(seq, proposal, costs, now)
    if seq.row_exact:
        (draft,) = fit_rows([draft], ROW_EXACT_MAX_ROWS)
    feed = [seq.last_token] + draft
    if draft:
        logits = forward_packed(model, [seq.cache], [feed], row_exact=seq.row_exact)[0]
    else:
        logits = _forward(model, feed, seq.cache, keep_all=True)
    emitted = finish_verify(seq, logits, proposal, draft)
    drop_rejected(seq, draft, emitted)
    return emit_verified(seq, emitted, draft)


def drop_rejected(seq: Sequence, draft: list[int], emitted: list[int]) -> None:
    """Crop the verify block's rejected drafts from the cache: it keeps `last` and the accepted ones."""
    rejected = len(draft) - (len(emitted) - 1)
    if rejected:
        seq.cache.crop(-rejected)  # transformers 5.x: a negative count of tokens to drop


def ensure_cache(seq: Sequence) -> None:
    """Give a request that has none its KV cache, with room for its reservation (kv_cache.py)."""
    if seq.cache is None:
        seq.cache = SlabCache(seq.kv_capacity())


def _emit(seq: Sequence, tokens: list[int]) -> StepOutput:
    ends = frozenset() if seq.ignore_eos else seq.end_token_ids
    ended = seq.grammar.advance(tokens) if seq.grammar is not None else None
    if ended is not None:  # grammar.py rule `end`
        tokens = tokens[: ended + 1]
        seq.finished, seq.matched_stop = "stop", tokens[-1]
    for i, token in enumerate(tokens):
        if token in ends:
            tokens = tokens[: i + 1]
            seq.finished, seq.matched_stop = "stop", token
            break
    tokens = tokens[: seq.remaining]
    if seq.finished is None and len(tokens) >= seq.remaining:
        seq.finished = "length"
    # an EOS is text only with skip_special_tokens false (under ignore_eos), as SGLang decodes it
    shown = [i for i, token in enumerate(tokens) if token not in seq.eos_token_ids or not seq.skip_special_tokens]
    if seq.finished == "stop":  # the matched end token is not shown, as SGLang trims it, but with no_stop_trim
        shown = [i for i in shown if i < len(tokens) - 1] + ([len(tokens) - 1] if seq.no_stop_trim else [])
    text = seq.detokenizer.push([tokens[i] for i in shown], final=seq.finished is not None)
    if seq.detokenizer.error is not None:  # detokenizer.py rule `budget`
        seq.finished = "error"
        error = EngineError(seq.detokenizer.error, status=400, param="stop_regex", code="invalid_value")
        return StepOutput("", 0, "error", error=error)
    if seq.detokenizer.stopped:  # a stop string or pattern ends the request at its token (detokenizer.py)
        tokens = tokens[: shown[seq.detokenizer.kept - 1] + 1]
        seq.finished, seq.matched_stop = "stop", seq.detokenizer.matched
    seq.verify_steps += 1
    seq.accept_histogram[min(len(tokens), seq.histogram_size) - 1] += 1
    seq.output_ids.extend(tokens)
    seq.last_token = tokens[-1]
    if seq.drafter is not None:
        seq.drafter.extend(tokens)
    found, seq.chosen_logprobs = seq.chosen_logprobs, None
    return StepOutput(text, len(tokens), seq.finished, logprobs=None if found is None else found[: len(tokens)])
