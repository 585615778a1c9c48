"""Turning a recorded chat conversation into replayable requests (tau-bench, OpenAI logs).

Rules:
- Turn rule: every assistant message at position a becomes one request whose `messages` are the
  history `m[0:a]` (recorded tool results included), whose `max_tokens` is the recorded reply's
  estimated length, `max(1, ceil(chars(flat(m[a])) / 4))`, and whose `recorded_calls` are the names of
  the functions `m[a]` called. Turn k of a conversation is sent only after turn k-1 finished, so the
  replay is a multi-turn agent. A conversation with no assistant message
  becomes one request over all its messages with `default_max_tokens`.
- Token estimate of a message list: `sum(ceil(chars(flat(m)) / 4) + MESSAGE_OVERHEAD_TOKENS)` with
  MESSAGE_OVERHEAD_TOKENS = 4 (role markers of a chat template).
- Flatten rule (tool_calls="flatten", for servers that refuse tool-call messages): an assistant's calls
  become text `<tool_call>\\n{"name": N, "arguments": A}\\n</tool_call>` after its content, and a run
  of consecutive tool results becomes one user message of `<tool_response>\\nR\\n</tool_response>`
  blocks - the way Qwen's chat template renders them, so the model sees the same shape of text.
- Clamp rule (prompt estimate > B = max_prompt_tokens): keep the first system message cut to at most
  B/2 tokens, then the newest messages that fit whole in what is left, newest first; if the newest
  alone does not fit, keep its last characters. A kept tool result whose call was cut off is flattened
  into a user message so the history stays valid.
- Session start rule (text traces record no times): with no rate every conversation starts at 0 s;
  with `session_rate_per_s = r`, starts are a Poisson process: `t_0 = 0`, `t_k = t_(k-1) + E_k`,
  `E_k ~ Exponential(mean 1/r)` from `numpy.random.default_rng(seed)`.
- Message reading: `content` given as a list of parts keeps the text parts joined by newlines; keys
  other than role, content, tool_calls, tool_call_id and name are dropped.
Complexity: O(m) per request, O(m^2) characters per conversation of m messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from ...engines.embedded.tool_parser import call_text
from .model import ToolCallMode, TraceMessage, TraceRequest, WorkloadClass
from .synthetic import CHARS_PER_TOKEN, estimate_tokens

MESSAGE_OVERHEAD_TOKENS = 4


def read_message(raw: Mapping[str, object]) -> TraceMessage:
    """Apply the message-reading rule to one OpenAI-format message."""
    content = raw.get("content")
    if isinstance(content, list):
        content = "\n".join(
            str(part.get("text", "")) for part in content if isinstance(part, Mapping) and part.get("type") == "text"
        )
    calls = None
    if raw.get("tool_calls"):
        calls = []
        for k, call in enumerate(raw["tool_calls"]):  # type: ignore[arg-type]
            function = call.get("function") or {}
            arguments = function.get("arguments", "")
            calls.append(
                {
                    "id": call.get("id") or f"call_{k}",
                    "function": {
                        "name": function.get("name", ""),
                        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                    },
                }
            )
    return TraceMessage.model_validate(
        {
            "role": raw.get("role"),
            "content": content,
            "tool_calls": calls,
            "tool_call_id": raw.get("tool_call_id"),
            "name": raw.get("name") if raw.get("role") == "tool" else None,
        }
    )


def session_starts(num_sessions: int, *, session_rate_per_s: float | None, seed: int) -> list[float]:
    """Apply the session start rule."""
    if session_rate_per_s is None or num_sessions == 0:
        return [0.0] * num_sessions
    gaps = np.random.default_rng(seed).exponential(1.0 / session_rate_per_s, size=num_sessions - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def flat_text(message: TraceMessage) -> str:
    """A message's text with its tool calls (if any) rendered in Qwen's `<tool_call>` form."""
    parts = [message.content] if message.content else []
    parts += [call_text(call.function.name, call.function.arguments) for call in message.tool_calls or []]
    if message.role == "tool":
        return f"<tool_response>\n{message.content or ''}\n</tool_response>"
    return "\n".join(parts)


def message_tokens(message: TraceMessage) -> int:
    return estimate_tokens(flat_text(message)) + MESSAGE_OVERHEAD_TOKENS


def estimate_messages_tokens(messages: list[TraceMessage]) -> int:
    return sum(message_tokens(m) for m in messages)


def flatten_tool_messages(messages: list[TraceMessage]) -> list[TraceMessage]:
    """Apply the flatten rule: no tool_calls, no tool role left."""
    out: list[TraceMessage] = []
    for message in messages:
        if message.role == "tool":
            text = flat_text(message)
            previous = out[-1] if out else None
            if previous is not None and previous.role == "user" and (previous.content or "").startswith(
                "<tool_response>"
            ):
                out[-1] = TraceMessage(role="user", content=f"{previous.content}\n{text}")
            else:
                out.append(TraceMessage(role="user", content=text))
        elif message.tool_calls:
            out.append(TraceMessage(role=message.role, content=flat_text(message)))
        else:
            out.append(message)
    return out


def _cut_head(message: TraceMessage, num_tokens: int) -> TraceMessage:
    return TraceMessage(role=message.role, content=flat_text(message)[: num_tokens * CHARS_PER_TOKEN])


def _cut_tail(message: TraceMessage, num_tokens: int) -> TraceMessage:
    text = flat_text(message)
    role = "user" if message.role == "tool" else message.role
    return TraceMessage(role=role, content=text[max(0, len(text) - num_tokens * CHARS_PER_TOKEN) :])


def clamp_messages(messages: list[TraceMessage], max_prompt_tokens: int | None) -> list[TraceMessage]:
    """Apply the clamp rule; returns the list unchanged when it already fits."""
    if max_prompt_tokens is None or estimate_messages_tokens(messages) <= max_prompt_tokens:
        return messages
    budget = max_prompt_tokens
    head: list[TraceMessage] = []
    rest = messages
    if messages and messages[0].role == "system":
        system_budget = max(1, budget // 2 - MESSAGE_OVERHEAD_TOKENS)
        system = messages[0]
        if message_tokens(system) > budget // 2:
            system = _cut_head(system, system_budget)
        head = [system]
        budget -= message_tokens(system)
        rest = messages[1:]
    kept: list[TraceMessage] = []
    for message in reversed(rest):
        cost = message_tokens(message)
        if cost <= budget:
            kept.append(message)
            budget -= cost
            continue
        if not kept:
            kept.append(_cut_tail(message, max(1, budget - MESSAGE_OVERHEAD_TOKENS)))
        break
    kept.reverse()
    answered: set[str] = {c.id for m in kept for c in (m.tool_calls or [])}
    fixed = [
        TraceMessage(role="user", content=flat_text(m))
        if m.role == "tool" and m.tool_call_id not in answered
        else m
        for m in kept
    ]
    return head + fixed


def requests_from_conversation(
    messages: list[TraceMessage],
    *,
    session_id: str,
    source: str,
    workload_class: WorkloadClass,
    arrival_s: float,
    tool_calls: ToolCallMode,
    max_prompt_tokens: int | None,
    default_max_tokens: int = 256,
) -> list[TraceRequest]:
    """Apply the turn rule (then flatten and clamp) to one recorded conversation."""
    turns = [a for a, m in enumerate(messages) if m.role == "assistant"]
    plans: list[tuple[list[TraceMessage], int, list[str]]] = [
        (messages[:a], max(1, estimate_tokens(flat_text(messages[a]))),
         [call.function.name for call in messages[a].tool_calls or []])
        for a in turns if a > 0
    ]  # fmt: skip
    if not turns and messages:
        plans = [(messages, default_max_tokens, [])]
    requests: list[TraceRequest] = []
    for turn_index, (history, max_tokens, calls) in enumerate(plans):
        shaped = flatten_tool_messages(history) if tool_calls == "flatten" else history
        recorded = estimate_messages_tokens(shaped)
        clamped = clamp_messages(shaped, max_prompt_tokens)
        requests.append(
            TraceRequest(
                request_id=f"{session_id}-t{turn_index:03d}",
                session_id=session_id,
                turn_index=turn_index,
                arrival_s=arrival_s,
                workload_class=workload_class,
                messages=clamped,
                prompt_tokens=estimate_messages_tokens(clamped),
                recorded_prompt_tokens=recorded,
                max_tokens=max_tokens,
                recorded_calls=calls,
                source=source,
            )
        )
    return requests
