"""One batched decode/verify forward over several requests, packed into a single sequence.

Rule (packing, no padding). n requests; request i holds L_i tokens of KV (L_i >= 0) and feeds q_i
tokens this step: a decoding request its last token and its k_i draft tokens (q_i = 1 + k_i); a
prompt chunk (L_i = 0 before a request's first) packs by the same rule, though the engine runs its
chunks alone (engine.py round rule). The step feeds one row
of T = q_1 + ... + q_n tokens: request 1's, then request 2's, and so on. The keys the step attends
over are the n KV caches concatenated in the same order, then the T new keys, so with
P_i = L_1 + ... + L_{i-1}, S = L_1 + ... + L_n and Q_i = q_1 + ... + q_{i-1}:
  key of request i's cached token p (p < L_i)  is key P_i + p,
  key of request i's j-th new token (j < q_i)  is key S + Q_i + j, and it is query Q_i + j.
  positions: request i's j-th new token has position id L_i + j (the one it would have alone).
  mask:      query Q_i + j attends key P_i + p for every p < L_i and key S + Q_i + j' for j' <= j;
             nothing else (no request sees another's tokens; causal within its own new tokens).
After the forward, request i's logits are its last r_i rows (r_i = q_i for a verify step, 1 for a
prefill chunk: only those rows go through the output projection), and its own KV cache grows by the
keys and values of its first new tokens that it keeps (a verify step: its last token and its accepted
drafts; a prefill chunk: all of it), so every cache stays per request and prefix reuse (kv_blocks.py)
reads it as before.
Worked example: L = (2, 1), q = (1, 2): T = 3, S = 3; positions (2, 1, 2); key columns
[a0 a1 b0 | a_new b_new0 b_new1]; query 0 (request a) attends {0, 1, 3}; query 1 (b, j = 0) attends
{2, 4}; query 2 (b, j = 1) attends {2, 4, 5}.
Cost: one forward over T tokens (the weights are read once for all n requests) plus attention
over S + T keys per query (masked entries are computed and discarded); the cached keys are copied
once per layer into the packed key tensor.
Floating point: a matrix product over T rows may reduce in a different order than over q_i rows,
so a request's logits can differ in the last bits from running it alone (config `max_batch_requests`).
"""

from __future__ import annotations

from typing import Sequence

import torch


def packed_layout(past_lengths: Sequence[int], new_lengths: Sequence[int]) -> tuple[list[int], torch.Tensor]:
    """(position ids of the T new tokens, boolean mask T x (S + T), True = may attend) (rule above)."""
    if len(past_lengths) != len(new_lengths) or not new_lengths:
        raise ValueError("need one past length and one new length per request, at least one request")
    S, T = sum(past_lengths), sum(new_lengths)
    positions: list[int] = []
    mask = torch.zeros(T, S + T, dtype=torch.bool)
    past_start, new_start = 0, 0
    for L, q in zip(past_lengths, new_lengths):
        for j in range(q):
            row = new_start + j
            positions.append(L + j)
            mask[row, past_start : past_start + L] = True
            mask[row, S + new_start : S + row + 1] = True
        past_start += L
        new_start += q
    return positions, mask


class PackedStepCache:
    """The KV a packed step attends over: the requests' caches, read-only, then the step's new keys.

    The model calls `update(keys, values, layer)` once per layer with the new tokens' keys; this returns
    the concatenation (cached keys of every request, then the new ones) and keeps the new keys so the
    caller can hand each request its own slice (`new_kv`)."""

    def __init__(self, caches: Sequence[object]):
        self._caches = [cache for cache in caches if cache.get_seq_length() > 0]  # an empty one adds no keys
        self._length = sum(cache.get_seq_length() for cache in self._caches)
        self.new: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._length

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        self.new[layer_idx] = (key_states, value_states)
        keys = [cache.layers[layer_idx].keys for cache in self._caches] + [key_states]
        values = [cache.layers[layer_idx].values for cache in self._caches] + [value_states]
        return torch.cat(keys, dim=2), torch.cat(values, dim=2)

    def append_to(self, cache, start: int, count: int) -> None:
        """Append new tokens [start, start + count) of the packed row to one request's own cache."""
        if count <= 0:
            return
        for layer_idx in sorted(self.new):
            keys, values = self.new[layer_idx]
            cache.update(keys[:, :, start : start + count], values[:, :, start : start + count], layer_idx)


def forward_packed(
    model, caches: Sequence[object], feeds: Sequence[list[int]], logit_rows: Sequence[int] | None = None
) -> tuple[list[torch.Tensor], PackedStepCache]:
    """One forward of every request's `feeds[i]` behind its cache `caches[i]` (rule above).

    Returns each request's logits (its last `logit_rows[i]` rows, all q_i by default) and the step cache
    holding the new keys; the caller appends each request's kept tokens with `append_to` (its own caches
    are not modified here)."""
    past_lengths = [cache.get_seq_length() for cache in caches]
    new_lengths = [len(feed) for feed in feeds]
    rows = list(new_lengths) if logit_rows is None else list(logit_rows)
    positions, allowed = packed_layout(past_lengths, new_lengths)
    step_cache = PackedStepCache(caches)
    input_ids = torch.tensor([[token for feed in feeds for token in feed]], dtype=torch.long)
    position_ids = torch.tensor([positions], dtype=torch.long)
    keep, end = [], 0
    for q, r in zip(new_lengths, rows):
        end += q
        keep.extend(range(end - r, end))
    out = model(
        input_ids=input_ids,
        position_ids=position_ids,
        attention_mask=allowed[None, None],
        past_key_values=step_cache,
        use_cache=True,
        logits_to_keep=torch.tensor(keep, dtype=torch.long),
    )
    logits, start = [], 0
    for r in rows:
        logits.append(out.logits[0, start : start + r])
        start += r
    return logits, step_cache
