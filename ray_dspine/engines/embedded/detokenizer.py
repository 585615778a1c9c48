"""Incremental detokenization with stop strings and stop patterns (SGLang's `stop`, `stop_regex`, `no_stop_trim`).

Rules:
  new text   after each push the whole output is decoded; the text sent is what extends the text already
             sent. Text ending in U+FFFD (an incomplete UTF-8 sequence) is held back until a token completes it.
  stop at    the request stops at the first pushed token after which the output's text contains a stop string
             or a stop pattern matches it (a search over the whole output text, as `re.search`). A step that pushes
             several tokens (a verify step) is searched token by token, so the earliest stop wins and a
             pattern anchored at the end (`END$`) is caught even when a later token of the step breaks it.
             `kept` says how many of the push's tokens come before the stop, it included; the rest are
             dropped, as SGLang's finished_len drops them.
  cut        a stop string: the text ends just before its earliest occurrence (of two at the same place, the
             first in the request's order), or just after it with `keep_stop` (SGLang's no_stop_trim). A stop
             pattern (the first in the request's order that matches): the text ends with the stopping token,
             the match kept, except that where the pattern's own text occurs in it, it is cut there as a stop
             string would be: SGLang 0.5.23 trims a pattern stop with its stop-string trim. A stop string
             beats a pattern that stops at the same token, as in SGLang.
  matched    what stopped the request, SGLang's matched_stop: the stop string the text is cut at, or the pattern
             (as the request gave it) when no stop string is in the text.
  hold back  unless `keep_stop`, the last (longest stop string or pattern - 1) characters are held back too, so
             text the cut may remove is never sent.
  budget     a push's pattern searches take STOP_SEARCH_BUDGET_S at most, all together; past that the request
             ends with `error` set, naming the pattern. A pattern that backtracks without end on the output
             (`(a|aa)+\\d` took 0.85 s on 32 a's under Python's `re`, 2.6 times longer with every 2 more a's,
             MEASURED) would otherwise hold the engine's thread, and under `re`, which keeps the interpreter
             lock while it searches, the whole replica. Patterns are compiled by the `regex` package in its
             `re`-compatible syntax (VERSION0), which can time out and lets go of the lock while it searches.
Cost: O(output length) per push, and O(pushed tokens x output length) while any stop is set and a push of
several tokens may hold one (each earlier prefix of the push is decoded).
"""

from __future__ import annotations

import time

import regex

STOP_SEARCH_BUDGET_S = 0.1  # rule `budget`


class IncrementalDetokenizer:
    def __init__(
        self, tokenizer, stop: list[str], stop_regex: list[str] = (), keep_stop: bool = False, skip_special: bool = True
    ):
        """`stop_regex` must compile (the ingress checks it, as SGLang does): regex.error otherwise.
        `skip_special` False: special tokens decode to their text (SGLang's skip_special_tokens)."""
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        self._stop = [s for s in stop if s]
        self._patterns = [regex.compile(p, regex.VERSION0) for p in stop_regex]
        self._keep = keep_stop
        self._deadline = 0.0
        trimmed = self._stop + [p.pattern for p in self._patterns]
        self._hold = 0 if keep_stop else max((len(s) for s in trimmed), default=1) - 1
        self._ids: list[int] = []
        self._sent = 0
        self.stopped = False
        self.kept = 0
        self.matched: str | None = None  # rule `matched`
        self.error: str | None = None  # rule `budget`

    def push(self, token_ids: list[int], final: bool = False) -> str:
        """Add tokens; return the text that may be sent now (rule `new text`)."""
        before = len(self._ids)
        self._ids.extend(token_ids)
        self.kept = len(token_ids)
        text = self._decode(len(self._ids))
        if self._stop or self._patterns:
            self._deadline = time.monotonic() + STOP_SEARCH_BUDGET_S
            try:
                found = self._stop_at(before, text)
            except _TooSlow as slow:
                self.stopped, self.kept = True, 0
                self.error = (f"stop_regex `{slow.pattern}` took over {STOP_SEARCH_BUDGET_S * 1000:.0f} ms to search "
                              "the output (it backtracks too much); use a pattern without nested repeats")
                return ""
            if found is not None:
                self.stopped, final = True, True
                self.kept, text = found[0] - before, found[1]
                del self._ids[found[0] :]
        if not final:
            text = text.rstrip("\ufffd") if text.endswith("\ufffd") else text
            text = text[: max(self._sent, len(text) - self._hold)]
        delta = text[self._sent :]
        self._sent = max(self._sent, len(text))
        return delta

    def _decode(self, n: int) -> str:
        return self._tokenizer.decode(self._ids[:n], skip_special_tokens=self._skip_special)

    def _stop_at(self, before: int, whole: str) -> tuple[int, str] | None:
        """(n, the text to end with) for the first prefix ids[:n], n > before, that holds a stop (rule `stop
        at`); None when none does."""
        last = len(self._ids)
        if last == before or (not self._stops_in(whole) and (last - before == 1 or not self._patterns)):
            return None  # without patterns, a prefix holds a stop string only if the whole text does
        for n in range(before + 1, last + 1):
            text = whole if n == last else self._decode(n)
            cut = self._cut(text)
            if cut is not None:
                return n, cut
        return None

    def _stops_in(self, text: str) -> bool:
        return any(s in text for s in self._stop) or any(self._search(p, text) for p in self._patterns)

    def _search(self, pattern, text: str) -> bool:
        """Whether `pattern` matches `text`, within what is left of the push's budget (rule `budget`)."""
        try:
            left = max(self._deadline - time.monotonic(), 1e-3)
            return pattern.search(text, timeout=left, concurrent=True) is not None
        except TimeoutError:
            raise _TooSlow(pattern.pattern) from None

    def _cut(self, text: str) -> str | None:
        """The text to end with when `text` holds a stop (rule `cut`), else None."""
        found = [(text.find(s), i, s) for i, s in enumerate(self._stop) if s in text]
        if found:
            at, _, self.matched = min(found)
            return text[: at + len(self.matched)] if self._keep else text[:at]
        pattern = next((p.pattern for p in self._patterns if self._search(p, text)), None)
        if pattern is None:
            return None
        self.matched = pattern
        at = text.find(pattern)
        return text if at == -1 else text[: at + len(pattern)] if self._keep else text[:at]


class _TooSlow(Exception):
    def __init__(self, pattern: str):
        super().__init__(pattern)
        self.pattern = pattern
