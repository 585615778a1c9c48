"""Prompt fingerprints: chained block hashes for prefix affinity, and a conversation's session key.

    block_i    = text[i * B : (i + 1) * B]                     for every FULL block, i = 0 .. floor(len/B) - 1
    h_0        = blake2b_128(block_0)
    h_i        = blake2b_128(h_{i-1} || block_i)               (h_i covers all text up to the end of block i)
    session(m) = sha256(canon(first system-or-developer message) || canon(first user message))[:128 bits]

Only full blocks are hashed: a trailing partial block changes as a conversation grows, so it would never
match the next turn. Prompts shorter than one block get no hashes (session affinity covers them).
`conversation_text` is the canonical serialisation hashed for chat requests: each message renders as
role, content and tool calls, so appending a turn only appends text and earlier hashes stay valid.
Everything uses hashlib (never Python's `hash()`), so values are stable across processes and hosts.
Parameters: B = block_chars >= 1 characters (2048 by default, ~500 tokens). Complexity: O(len(text)).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

_DIGEST_BYTES = 16
_SEP = "\x1e"  # record separator between message fields


def prefix_hashes(text: str, block_chars: int = 2048) -> list[str]:
    if block_chars < 1:
        raise ValueError(f"block_chars must be >= 1, got {block_chars}")
    out: list[str] = []
    previous = b""
    for start in range(0, len(text) - block_chars + 1, block_chars):
        block = text[start : start + block_chars].encode("utf-8", "surrogatepass")
        digest = hashlib.blake2b(previous + block, digest_size=_DIGEST_BYTES).digest()
        out.append(digest.hex())
        previous = digest
    return out


def _field(message: Any, name: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name, None)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        parts = [p.get("text", "") if isinstance(p, Mapping) else str(p) for p in content]
        return "".join(str(p) for p in parts)
    return json.dumps(content, sort_keys=True, default=str)


def canonical_message(message: Any) -> str:
    role = str(_field(message, "role") or "")
    text = _content_text(_field(message, "content"))
    tool_calls = _field(message, "tool_calls")
    calls = json.dumps(tool_calls, sort_keys=True, default=str) if tool_calls else ""
    return f"{role}{_SEP}{text}{_SEP}{calls}{_SEP}\n"


def conversation_text(messages: Sequence[Any]) -> str:
    """Canonical text of a chat, the input to `prefix_hashes` for chat requests."""
    return "".join(canonical_message(m) for m in messages)


def session_fingerprint(messages: Sequence[Any]) -> str:
    """Hash of the conversation's opening: its first system (or developer) and first user message."""
    if not messages:
        raise ValueError("session_fingerprint needs at least one message")
    system = next((m for m in messages if _field(m, "role") in ("system", "developer")), None)
    user = next((m for m in messages if _field(m, "role") == "user"), None)
    opening = [m for m in (system, user) if m is not None] or [messages[0]]
    digest = hashlib.sha256("".join(canonical_message(m) for m in opening).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[: 2 * _DIGEST_BYTES]
