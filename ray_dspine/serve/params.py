"""Name a request field the way OpenAI's errors do: `messages[0].content`, `stop[2]`, `stream_options.include_usage`.

Rules:
  spell      keys join with ".", list indices are written "[i]" after the key they index; a key that is
             not valid Unicode text (a lone surrogate) is written with backslash escapes.
  from loc   a pydantic error location also holds names that are not in the body: union members
             (`str`, `list[ContentPart]`), tagged-union tags (`user`), validator wrappers. Walking the body
             along the location, a part is kept when the body has it (a key of the object or an index of
             the list there); the last part of a `missing` error is kept though absent (the missing
             field); other parts are dropped.
Complexity: O(len(loc)).
"""

from __future__ import annotations

from typing import Any, Sequence


def _text(key: str) -> str:
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


def spell(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + _text(str(part))
    return out


def from_loc(loc: Sequence[str | int], body: Any, missing: bool = False) -> str | None:
    """The OpenAI-spelled field of a pydantic error location over `body` (rules above); None for the body."""
    return spell(kept_parts(loc, body, missing)) or None


def kept_parts(loc: Sequence[str | int], body: Any, missing: bool = False) -> list[str | int]:
    kept: list[str | int] = []
    current = body
    last = len(loc) - 1
    for position, part in enumerate(loc):
        if isinstance(current, dict) and isinstance(part, str) and part in current:
            kept.append(part)
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            kept.append(part)
            current = current[part]
        elif missing and position == last and isinstance(current, dict) and isinstance(part, str):
            kept.append(part)
            current = None
    return kept
