"""Log-probabilities of the output tokens (OpenAI's `logprobs`), taken as SGLang's sampler takes them.

Rules:
  which   one entry per output token, in order: every token usage.completion_tokens counts, a trimmed end
          token or the token that completed a stop string included (their text is not shown). Row i of a
          verify step is the distribution of the step's i-th emitted token (speculative.py); the first token's
          is the prompt's last row.
  values  the row's logits after the penalties, logit_bias, the grammar's mask and the min_tokens mask
          (sequence.py `_adjusted`),
          then: greedy, log_softmax(z); sampled at temperature T, log_softmax(z / T), the tempered
          distribution before the top-p, top-k and min-p filters. SGLang 0.5.23's sampler returns the
          same (`log_softmax(logits)` when greedy, `log(softmax(logits / T))` before its filters when
          sampling). A value below float32's least (a masked token's -inf) is clamped to it, as SGLang clamps,
          so the JSON stays finite.
  top     with top_logprobs n >= 1: the n likeliest tokens of the row, the likeliest first, ties to the
          smaller id: the first n of a stable descending sort of the row. Taken without sorting the vocabulary:
          v = the row's n-th largest value (topk), then a stable sort of the ids with a value >= v, in id order
          (n of them, more only where values tie at v), which gives the same n. The emitted token is among them
          only if it ranks there.
  text    a token's `token` is its id decoded alone, special tokens included (SGLang's
          detokenize_logprob_tokens); its `bytes` are its raw bytes. A tokenizer is byte-level (GPT-2's BPE)
          when every piece of its base vocabulary (added tokens aside) is spelled in byte-level characters;
          then a piece so spelled goes through the GPT-2 byte decoder (a piece of a multi-byte character keeps
          its bytes, though its text is U+FFFD). Otherwise, and for an added token, the UTF-8 of its text.
Complexity: O(rows x vocabulary) per step for log_softmax and for top n's topk, then a sort of about n ids a row.
"""

from __future__ import annotations

import torch

from ..protocol import TokenLogprob, TopLogprob

# (token id, log-probability) of an emitted token, with its position's top alternatives
Entry = tuple[int, float, list[tuple[int, float]]]


def row_logprobs(adjusted: torch.Tensor, temperature: float) -> torch.Tensor:
    """Rule `values`: log-probabilities of every row of `adjusted` (rows x vocabulary), float32, clamped."""
    logits = adjusted.float() if temperature == 0.0 else adjusted.float() / temperature
    values = torch.log_softmax(logits, dim=-1)
    return values.clamp_(min=torch.finfo(torch.float32).min)


def entries(adjusted: torch.Tensor, temperature: float, tokens: list[int], top: int) -> list[Entry]:
    """Rules `which`, `values` and `top` for `tokens`, token i read off row i of `adjusted`."""
    values = row_logprobs(adjusted[: len(tokens)], temperature)
    picked = values[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)].tolist()
    alternatives: list[list[tuple[int, float]]] = [[] for _ in tokens]
    if top > 0:
        floors = values.topk(top, dim=-1).values[:, -1]
        for i, (row, floor) in enumerate(zip(values, floors)):
            ids = torch.nonzero(row >= floor).flatten()
            ranked, order = torch.sort(row[ids], descending=True, stable=True)
            alternatives[i] = list(zip(ids[order[:top]].tolist(), ranked[:top].tolist()))
    return [(token, value, alt) for token, value, alt in zip(tokens, picked, alternatives)]


def _byte_decoder() -> dict[str, int]:
    """GPT-2's table from a byte-level character to its byte: printable Latin-1 bytes stand for
    themselves, the other 68 bytes for the characters from U+0100 up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {chr(b): b for b in printable}
    others = [b for b in range(256) if b not in table.values()]
    table.update({chr(256 + n): b for n, b in enumerate(others)})
    return table


BYTE_DECODER = _byte_decoder()


class TokenTexts:
    """Rule `text` for one tokenizer, each id's text and bytes worked out once."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._known: dict[int, tuple[str, list[int]]] = {}
        added = tokenizer.get_added_vocab()
        base = (piece for piece in tokenizer.get_vocab() if piece not in added)
        self.byte_level = all(ch in BYTE_DECODER for piece in base for ch in piece)

    def of(self, token_id: int) -> tuple[str, list[int]]:
        known = self._known.get(token_id)
        if known is None:
            text = self.tokenizer.decode([token_id], skip_special_tokens=False)
            piece = self.tokenizer.convert_ids_to_tokens(token_id) or ""
            if self.byte_level and piece and all(ch in BYTE_DECODER for ch in piece):
                raw = [BYTE_DECODER[ch] for ch in piece]
            else:
                raw = list(text.encode("utf-8"))
            known = self._known[token_id] = (text, raw)
        return known

    def top(self, token_id: int, value: float) -> TopLogprob:
        text, raw = self.of(token_id)
        return TopLogprob(token=text, bytes=raw, logprob=value)

    def wire(self, found: list[Entry]) -> list[TokenLogprob]:
        """The protocol's entries (engines/protocol.py TokenLogprob) for `found`."""
        out = []
        for token_id, value, alternatives in found:
            text, raw = self.of(token_id)
            top = [self.top(i, v) for i, v in alternatives]
            out.append(TokenLogprob(token=text, bytes=raw, logprob=value, top_logprobs=top))
        return out
