"""A file of conversations in OpenAI message format (JSON or JSONL).

Accepted shapes: a JSONL file with one conversation per line, or a JSON file holding a list of
conversations (or `{"conversations": [...]}`). A conversation is either a bare message list or an
object with `messages` and optionally `session_id` (or `id`), `arrival_s` (seconds) and
`workload_class` ("agent", "chat" or "code").
Rules: conversation c becomes session `session_id` (default `f"{source}-{c:05d}"`); its assistant
turns become requests by the turn rule of conversation.py (a conversation with no assistant message is
one request); its class is the given one, else "agent" if any message carries tool calls or is a tool
result, else "chat"; it starts at its `arrival_s`, else by the session start rule.
Complexity: O(sum of m^2) characters for conversations of m messages.
"""

from __future__ import annotations

import json
from pathlib import Path

from .conversation import read_message, requests_from_conversation, session_starts
from .model import ToolCallMode, TraceRequest

_CLASSES = ("agent", "chat", "code")


def _read_conversations(path: Path) -> list[object]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
        rows = []
        for line_number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{line_number}: not JSON ({exc.msg})") from exc
        return rows
    if isinstance(data, dict) and isinstance(data.get("conversations"), list):
        return data["conversations"]
    if isinstance(data, list) and data and all(isinstance(m, dict) and "role" in m for m in data):
        return [data]  # one bare conversation
    if isinstance(data, list):
        return data
    return [data]


def parse_openai_log(
    path: Path,
    *,
    seed: int,
    max_prompt_tokens: int | None,
    tool_calls: ToolCallMode,
    session_rate_per_s: float | None = None,
    source: str = "openai-log",
) -> list[TraceRequest]:
    conversations = _read_conversations(path)
    starts = session_starts(len(conversations), session_rate_per_s=session_rate_per_s, seed=seed)
    requests: list[TraceRequest] = []
    for index, (conversation, start_s) in enumerate(zip(conversations, starts)):
        meta = conversation if isinstance(conversation, dict) else {}
        raw_messages = conversation if isinstance(conversation, list) else meta.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            raise ValueError(f"{path}: conversation {index} has no 'messages' list")
        messages = [read_message(m) for m in raw_messages]
        workload_class = meta.get("workload_class")
        if workload_class not in _CLASSES:
            tools = any(m.tool_calls or m.role == "tool" for m in messages)
            workload_class = "agent" if tools else "chat"
        arrival = meta.get("arrival_s")
        requests.extend(
            requests_from_conversation(
                messages,
                session_id=str(meta.get("session_id") or meta.get("id") or f"{source}-{index:05d}"),
                source=source,
                workload_class=workload_class,
                arrival_s=float(arrival) if isinstance(arrival, (int, float)) else start_s,
                tool_calls=tool_calls,
                max_prompt_tokens=max_prompt_tokens,
            )
        )
    return requests
