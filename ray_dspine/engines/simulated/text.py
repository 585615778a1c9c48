"""Placeholder text of a simulated completion: one word per token, fixed by (request id, token index).

Rule: token i of request r is WORDS[(h(r) + 7919 * i) mod |WORDS|], h = first 8 bytes of blake2b(r),
so the same request id always streams the same text, however its tokens are grouped into chunks.
Complexity: O(n) for n tokens.
"""

from __future__ import annotations

import hashlib

WORDS: tuple[str, ...] = (
    " sim", " def", " return", " self", " value", " token", " if", " else", " for", " in", " range",
    " import", " cache", " block", " draft", " verify", " accept", " replica", " pool", " state",
    " request", " output", " None", " True", " list", " dict", " yield", " await", " async", " class",
    " test", " assert",
)  # fmt: skip


def _request_offset(request_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(request_id.encode("utf-8"), digest_size=8).digest(), "big")


def simulated_text(request_id: str, first_index: int, num_tokens: int) -> str:
    """Words for tokens first_index .. first_index + num_tokens - 1 of the request."""
    offset = _request_offset(request_id)
    n = len(WORDS)
    return "".join(WORDS[(offset + 7919 * i) % n] for i in range(first_index, first_index + num_tokens))
