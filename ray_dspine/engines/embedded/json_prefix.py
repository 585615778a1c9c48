"""Reading one JSON value while its text is still arriving: what of its final form is already certain.

The final form is json.dumps(value, ensure_ascii=False) with Python's default separators, the form
tool_parser.py gives a call's arguments. Rules, for text fed in pieces of any size:
  tokens    whitespace between tokens (space, tab, newline, carriage return) is dropped; `{ } [ ]` are written
            as they are, `:` as ": " and `,` as ", ".
  strings   a string (key or value) is written a character at a time as its characters are decoded, each
            escaped as json.dumps escapes it. An escape is written once it is whole; a high surrogate escape
            waits for the escape after it, since `\\uD83D\\uDE00` decodes to one character.
  scalars   a number, true, false, null, NaN or Infinity is written once the character after it arrives (it may
            still grow until then), as json.dumps(json.loads(token)): `1E2` is written `100.0`.
  done      the value is done at the character that closes it; `consumed` counts the characters read, so the
            text after the value is the fed text from `consumed` on. Nothing more is read after it.
  broken    text that json.loads refuses (a character out of place, a raw control character in a string, a bad
            escape or scalar, a bracket that does not match its opener) stops the reader: it writes nothing more.
  repeated  a key that repeats in one object is written again, so the written text loads (the last value wins)
            to what the raw text loads to, while json.dumps of that value would show the key once.
  members   for a top-level object, `members` maps each key to the [start, end) of its first value in `text`
            (end None while the value is open), so a reader can take one member as it streams.
Complexity: O(1) amortized per character; a scalar is parsed once, when it ends.
"""

from __future__ import annotations

import json

WHITESPACE = " \t\n\r"
SCALAR_START = "-0123456789tfnNI"
ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
HEX = "0123456789abcdefABCDEF"


def _escaped(char: str) -> str:
    return json.dumps(char, ensure_ascii=False)[1:-1]


class JsonPrefix:
    """One JSON value's reader (the rules above): `feed` text, read `text` (what is certain so far)."""

    def __init__(self) -> None:
        self.text = ""
        self.done = False
        self.broken = False
        self.consumed = 0
        self.members: dict[str, list] = {}
        self._stack: list[list[str]] = []  # [kind "obj" | "arr", what comes next]
        self._mode = "between"  # between | string | escape | unicode | scalar
        self._is_key = False
        self._key = ""  # the key being read; then the last key of the innermost object
        self._member: str | None = None  # the top-level member whose value is open
        self._hex = ""  # the digits of a \u escape so far
        self._pending = ""  # a high surrogate waiting for the escape after it
        self._scalar = ""

    def feed(self, text: str) -> str:
        """Reads `text` and returns what it added to `self.text`."""
        before = len(self.text)
        for char in text:
            if self.done or self.broken:
                break
            if self._read(char):
                self.consumed += 1
        return self.text[before:]

    # -- one character ---------------------------------------------------------------------------------------------

    def _read(self, char: str) -> bool:
        """Reads one character; False when it is not the value's (it ended a top-level scalar) or broke it."""
        if self._mode == "string":
            self._string_char(char)
        elif self._mode == "escape":
            self._escape_char(char)
        elif self._mode == "unicode":
            self._unicode_char(char)
        elif self._mode == "scalar":
            if char.isalnum() or char in "+-.":
                self._scalar += char
                return True
            self._end_scalar()
            if self.broken or self.done:
                return False
            self._between(char)
        else:
            self._between(char)
        return not self.broken

    def _between(self, char: str) -> None:
        if char in WHITESPACE:
            return
        expect = self._stack[-1][1] if self._stack else "value"
        if expect in ("value", "value_or_close"):
            if char == "]" and expect == "value_or_close":
                self._close(char)
            elif char in "{[":
                self._start_value()
                self.text += char
                self._stack.append(["obj", "key_or_close"] if char == "{" else ["arr", "value_or_close"])
            elif char == '"':
                self._start_value()
                self.text += char
                self._mode, self._is_key = "string", False
            elif char in SCALAR_START:
                self._start_value()
                self._mode, self._scalar = "scalar", char
            else:
                self.broken = True
        elif expect in ("key", "key_or_close"):
            if char == '"':
                self.text += char
                self._mode, self._is_key, self._key = "string", True, ""
            elif char == "}" and expect == "key_or_close":
                self._close(char)
            else:
                self.broken = True
        elif expect == "colon":
            if char == ":":
                self.text += ": "
                self._stack[-1][1] = "value"
            else:
                self.broken = True
        else:  # comma_or_close
            kind = self._stack[-1][0]
            if char == ",":
                self.text += ", "
                self._stack[-1][1] = "key" if kind == "obj" else "value"
            elif char == ("}" if kind == "obj" else "]"):
                self._close(char)
            else:
                self.broken = True

    def _string_char(self, char: str) -> None:
        if char == '"':
            self._flush_surrogate()
            self.text += char
            self._mode = "between"
            if self._is_key:
                self._stack[-1][1] = "colon"
            else:
                self._end_value()
        elif char == "\\":
            self._mode = "escape"
        elif ord(char) < 0x20:
            self.broken = True
        else:
            self._flush_surrogate()
            self._emit(char)

    def _escape_char(self, char: str) -> None:
        if char == "u":
            self._mode = "unicode"
            self._hex = ""
        elif char in ESCAPES:
            self._flush_surrogate()
            self._emit(ESCAPES[char])
            self._mode = "string"
        else:
            self.broken = True

    def _unicode_char(self, char: str) -> None:
        if char not in HEX:
            self.broken = True
            return
        self._hex += char
        if len(self._hex) < 4:
            return
        self._mode = "string"
        code = int(self._hex, 16)
        if self._pending and 0xDC00 <= code <= 0xDFFF:
            high, self._pending = ord(self._pending), ""
            self._emit(chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)))
            return
        self._flush_surrogate()
        if 0xD800 <= code <= 0xDBFF:
            self._pending = chr(code)
        else:
            self._emit(chr(code))

    # -- values ------------------------------------------------------------------------------------------------------

    def _emit(self, char: str) -> None:
        self.text += _escaped(char)
        if self._is_key:
            self._key += char

    def _flush_surrogate(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, ""
            self._emit(pending)

    def _end_scalar(self) -> None:
        token, self._scalar = self._scalar, ""
        self._mode = "between"
        try:
            value = json.loads(token)
        except ValueError:
            self.broken = True
            return
        self.text += json.dumps(value)
        self._end_value()

    def _start_value(self) -> None:
        if len(self._stack) == 1 and self._stack[0][0] == "obj" and self._key not in self.members:
            self.members[self._key] = [len(self.text), None]
            self._member = self._key

    def _close(self, char: str) -> None:
        self.text += char
        self._stack.pop()
        self._end_value()

    def _end_value(self) -> None:
        if not self._stack:
            self.done = True
            return
        self._stack[-1][1] = "comma_or_close"
        if len(self._stack) == 1 and self._member is not None:
            self.members[self._member][1] = len(self.text)
            self._member = None
