"""Incremental detokenization with stop strings.

Rule. After each step the whole output is decoded; the new text is what extends the text already
sent. Text ending in U+FFFD (an incomplete UTF-8 sequence) is held back until the next token
completes it. With stop strings, the last (max stop length - 1) characters are held back too, so a
stop string split across steps is never half-sent; when a stop string appears, the output is cut
just before it and the request finishes with reason "stop".
Cost: O(output length) per step (decoding the whole output), fine for outputs of a few thousand tokens.
"""

from __future__ import annotations


class IncrementalDetokenizer:
    def __init__(self, tokenizer, stop: list[str]):
        self._tokenizer = tokenizer
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._ids: list[int] = []
        self._sent = 0
        self.stopped = False

    def push(self, token_ids: list[int], final: bool = False) -> str:
        """Add tokens; return the text that may be sent now."""
        self._ids.extend(token_ids)
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        for stop in self._stop:
            at = text.find(stop)
            if at != -1:
                self.stopped = True
                text = text[:at]
                final = True
        if not final:
            if text.endswith("\ufffd"):
                text = text.rstrip("\ufffd")
            text = text[: max(self._sent, len(text) - self._hold)]
        delta = text[self._sent :]
        self._sent = max(self._sent, len(text))
        return delta
