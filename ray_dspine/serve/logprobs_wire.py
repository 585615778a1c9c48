"""Log-probabilities in OpenAI's two wire shapes, from the protocol's per-token entries (engines/protocol.py).

Rules (entries e_1..e_n of one choice, or of one stream event, in token order):
  chat         `{"content": [{token, bytes, logprob, top_logprobs: [{token, bytes, logprob}]}]}`, each entry as it is
               (OpenAI's ChatCompletionTokenLogprob; SGLang's ChoiceLogprobs).
  completions  parallel lists `{tokens, token_logprobs, top_logprobs, text_offset}`: token_logprobs[i] = e_i's
               logprob, top_logprobs[i] = {alternative's token: its logprob} in rank order, as OpenAI's legacy API
               and SGLang's LogProbs spell them; a request that asked for no alternatives (`logprobs: 0`) gets
               `top_logprobs: []`, as SGLang's `to_openai_style_logprobs` leaves it.
  lossless     in `tokens` and the `top_logprobs` keys, a token whose text holds U+FFFD and whose bytes are not
               valid UTF-8 (a piece of a multi-byte character) is written as its bytes read as Latin-1, one
               character per byte, so no two pieces share a key and the bytes can be recovered (SGLang's
               `_lossless_token_text`). Other tokens keep their text.
  text_offset  the character offset in the choice's text where e_i's bytes start: the characters that the
               UTF-8 decoding of e_1..e_{i-1}'s bytes completes (a piece of a character not yet whole counts
               nothing, so every piece of one character has that character's offset). SGLang sends -1, "not
               supported"; OpenAI's API sends the offset. Across a stream's events the count goes on.
Complexity: O(bytes of the tokens) per event.
"""

from __future__ import annotations

import codecs

from ..engines.protocol import TokenLogprob, TopLogprob


def chat_logprobs(entries: list[TokenLogprob]) -> dict:
    """Rule `chat`."""
    return {"content": [entry.model_dump() for entry in entries]}


def lossless(entry: TopLogprob) -> str:
    """Rule `lossless`."""
    if "\ufffd" not in entry.token:
        return entry.token
    raw = bytes(entry.bytes)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
    return entry.token


class CompletionLogprobs:
    """Rules `completions`, `lossless` and `text_offset` for one choice, over as many events as it takes."""

    def __init__(self, alternatives: bool = True) -> None:
        """`alternatives`: the request asked for at least one (rule `completions`)."""
        self._alternatives = alternatives
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._chars = 0

    def wire(self, entries: list[TokenLogprob]) -> dict:
        offsets = []
        for entry in entries:
            offsets.append(self._chars)
            self._chars += len(self._decoder.decode(bytes(entry.bytes)))
        return {
            "tokens": [lossless(entry) for entry in entries],
            "token_logprobs": [entry.logprob for entry in entries],
            "top_logprobs": [{lossless(top): top.logprob for top in entry.top_logprobs} for entry in entries]
            if self._alternatives
            else [],
            "text_offset": offsets,
        }
