"""One batched decode/verify forward over several requests, packed into a single sequence.

Rule (packing, no padding). n requests; request i holds L_i tokens of KV (L_i >= 0) and feeds q_i
tokens this step: a decoding request its last token and its k_i draft tokens (q_i = 1 + k_i); a
prompt chunk (L_i = 0 before a request's first) packs by the same rule, though the engine runs its
chunks alone (engine.py round rule). The step feeds one row of T = q_1 + ... + q_n tokens: request
1's, then request 2's, and so on; request i's tokens are rows [Q_i, Q_i + q_i) with
Q_i = q_1 + ... + q_{i-1}.
  positions: request i's j-th new token has position id L_i + j (the one it would have alone).
  attention: per request (rule `segment`): the queries of rows [Q_i, Q_i + q_i) attend over request
             i's own L_i cached keys followed by its own q_i new keys, query j seeing cached key p for
             every p < L_i and new key j' for j' <= j (`segment_mask`); no request sees another's tokens.
Everything but attention (embeddings, projections, MLPs, norms, the output projection) runs once over
the whole row, so the weights are read once for all n requests.
After the forward, request i's logits are its last r_i rows (r_i = q_i for a verify step, 1 for a
prefill chunk: only those rows go through the output projection), and its own KV cache has grown by
the keys and values of all q_i of its new tokens, as a step alone grows it; the caller crops what the
request does not keep (a verify step's rejected drafts), so every cache stays per request and prefix
reuse (kv_blocks.py) reads it as before.
Worked example: L = (2, 1), q = (1, 2): T = 3; positions (2, 1, 2); request a's query (row 0) attends
[a0 a1 a_new]; request b's rows 1 and 2 attend [b0 b_new0 b_new1] with mask [[1 1 0], [1 1 1]].
Rule `segment` (how): the model's attention implementation is `segment_attention`, installed once per
model in place of transformers' sdpa (`install_segment_attention`). Called without a packed step it is
transformers' sdpa, unchanged; called inside `forward_packed` it appends each request's new keys and
values to the request's own cache (`update`, in place on the engine's slab cache, kv_cache.py) and runs
torch's scaled_dot_product_attention once per request over the keys the cache then holds, so a step
costs sum_i q_i * (L_i + q_i) scores instead of T * (L_1 + ... + L_n + T) under one dense mask, and no
request's cache is copied beside another's. The masks are built once per step, not once per layer.
Floating point: a matrix product over T rows may reduce in a different order than over q_i rows,
so a request's logits can differ in the last bits from running it alone (config `max_batch_requests`).
Rule `row exact` (config `row_exact`, bf16 with packed weights): every row of a decode forward gets the
bits it gets fed alone. Attention runs one query row at a time: row j of request i is torch's
scaled_dot_product_attention of that one query over request i's first L_i + j + 1 keys, no mask, which
is the call a one-token step makes. The packed bf16 linear layers keep rows apart up to
ROW_EXACT_MAX_ROWS rows (config.py; oneDNN's row block on the machine of the figures, and `rows_apart`
in packed_weights.py checks it at load), so a decode forward holds at most that many rows: drafts are
cut to fit (`fit_rows`), and prefill chunks, which are longer, run in forwards of their own (engine.py),
split the same way whether the request speculates or not. Every other layer (embeddings, norms,
rotary positions, activations) works row by row. Greedy output then depends neither on the draft
lengths nor on the requests sharing a forward. A chunk's rows are not kept apart, so the prompt must be
chunked the same way warm or cold: under the rule the prefix cache keeps and reuses whole chunks only
(engine.py, prefix reuse).
"""

from __future__ import annotations

from typing import Sequence

import torch

SEGMENT_ATTENTION = "dspine_segments"
_sdpa = None  # transformers' sdpa_attention_forward, bound by install_segment_attention (transformers loads lazily)


def packed_layout(past_lengths: Sequence[int], new_lengths: Sequence[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """(position ids of the T new tokens, each request's rows (Q_i, q_i)) (rule above)."""
    if len(past_lengths) != len(new_lengths) or not new_lengths:
        raise ValueError("need one past length and one new length per request, at least one request")
    positions: list[int] = []
    spans: list[tuple[int, int]] = []
    start = 0
    for L, q in zip(past_lengths, new_lengths):
        positions.extend(range(L, L + q))
        spans.append((start, q))
        start += q
    return positions, spans


def fit_rows(drafts: Sequence[list[int]], max_rows: int) -> list[list[int]]:
    """The drafts cut so the forward holds at most `max_rows` rows, one per request plus its draft (rule
    `row exact`): the largest cap c with sum(min(k_i, c)) <= max_rows - n, then one more token to each
    request in order whose draft is longer than c, while rows remain. Example: drafts of 31, 31, 5 and 0
    tokens in 32 rows: 28 draft rows, c = 11 (27 rows), so 12, 11, 5 and 0."""
    budget = max_rows - len(drafts)
    if budget < 0:
        raise ValueError(f"{len(drafts)} requests need {len(drafts)} rows, more than {max_rows}")
    lengths = [len(d) for d in drafts]
    if sum(lengths) <= budget:
        return [list(d) for d in drafts]
    cap = 0
    while sum(min(k, cap + 1) for k in lengths) <= budget:
        cap += 1
    spare = budget - sum(min(k, cap) for k in lengths)
    kept = []
    for k in lengths:
        extra = 1 if spare > 0 and k > cap else 0
        spare -= extra
        kept.append(min(k, cap) + extra)
    return [list(d[:k]) for d, k in zip(drafts, kept)]


def segment_mask(past_length: int, new_length: int) -> torch.Tensor | None:
    """Boolean mask q x (L + q), True = may attend: query j sees keys 0 .. L + j; None when q = 1 (it
    sees every key)."""
    if new_length == 1:
        return None
    return torch.ones(new_length, past_length + new_length, dtype=torch.bool).tril(past_length)


class PackedStepCache:
    """The cache a packed step hands the model: the requests' own caches, their rows and their masks.

    The model calls `update(keys, values, layer)` once per layer with the packed row's new keys, which
    are returned as they are: `segment_attention` appends each request's slice to that request's cache."""

    def __init__(self, caches: Sequence[object], spans: Sequence[tuple[int, int]], row_exact: bool = False):
        self.caches = list(caches)
        self.spans = list(spans)
        self.row_exact = row_exact
        self.masks = [segment_mask(cache.get_seq_length(), q) for cache, (_start, q) in zip(self.caches, self.spans)]
        self._length = sum(cache.get_seq_length() for cache in self.caches)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._length

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        return key_states, value_states


def segment_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention interface (rule `segment`): per request inside a packed step, else sdpa."""
    step: PackedStepCache | None = kwargs.pop("dspine_packed_step", None)
    if step is None:
        return _sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    layer = module.layer_idx
    gqa = getattr(module, "num_key_value_groups", 1) > 1
    outputs = []
    for cache, (start, q), mask in zip(step.caches, step.spans, step.masks):
        keys, values = cache.update(key[:, :, start : start + q], value[:, :, start : start + q], layer)
        if step.row_exact:  # rule `row exact`: each query row alone over the keys it may see
            past = keys.shape[-2] - q
            outputs.extend(
                torch.nn.functional.scaled_dot_product_attention(
                    query[:, :, start + j : start + j + 1],
                    keys[..., : past + j + 1, :],
                    values[..., : past + j + 1, :],
                    scale=scaling,
                    enable_gqa=gqa,
                )
                for j in range(q)
            )
            continue
        outputs.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, start : start + q],
                keys,
                values,
                attn_mask=mask,
                scale=scaling,
                enable_gqa=gqa,
            )
        )
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


def install_segment_attention(model) -> None:
    """Make `segment_attention` the model's attention (once; it is sdpa outside packed steps). Only a model
    on sdpa is switched: any other implementation is refused, since outside packed steps it would change."""
    global _sdpa
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    current = model.config._attn_implementation
    if current == SEGMENT_ATTENTION:
        return
    if current != "sdpa":
        raise ValueError(f"packed steps need the model on sdpa attention, not {current!r}")
    _sdpa = sdpa_attention_forward
    AttentionInterface.register(SEGMENT_ATTENTION, segment_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(SEGMENT_ATTENTION, sdpa_mask)  # the same masks outside packed steps
    model.set_attn_implementation(SEGMENT_ATTENTION)


def forward_packed(
    model,
    caches: Sequence[object],
    feeds: Sequence[list[int]],
    logit_rows: Sequence[int] | None = None,
    row_exact: bool = False,
) -> list[torch.Tensor]:
    """One forward of every request's `feeds[i]` behind its cache `caches[i]` (rule above; rule `row exact`
    when `row_exact`, the caller keeping the rows within ROW_EXACT_MAX_ROWS).

    Returns each request's logits (its last `logit_rows[i]` rows, all q_i by default); each request's
    cache has grown by its q_i new tokens, and the caller crops what a request does not keep."""
    install_segment_attention(model)
    past_lengths = [cache.get_seq_length() for cache in caches]
    new_lengths = [len(feed) for feed in feeds]
    rows = list(new_lengths) if logit_rows is None else list(logit_rows)
    positions, spans = packed_layout(past_lengths, new_lengths)
    step_cache = PackedStepCache(caches, spans, row_exact)
    input_ids = torch.tensor([[token for feed in feeds for token in feed]], dtype=torch.long)
    position_ids = torch.tensor([positions], dtype=torch.long)
    keep, end = [], 0
    for q, r in zip(new_lengths, rows):
        end += q
        keep.extend(range(end - r, end))
    out = model(
        input_ids=input_ids,
        position_ids=position_ids,
        attention_mask=torch.ones(1, 1, 1, 1, dtype=torch.bool),  # 4D: taken as prepared; segments mask instead
        past_key_values=step_cache,
        use_cache=True,
        logits_to_keep=torch.tensor(keep, dtype=torch.long),
        dspine_packed_step=step_cache,
    )
    logits, start = [], 0
    for r in rows:
        logits.append(out.logits[0, start : start + r])
        start += r
    return logits
