"""`bench replay --api messages`: a trace's chat requests sent as Anthropic Messages requests, their answers read.

Rules:
  body     a chat request as an Anthropic client would send it: the system (and developer) messages before the
           first other message, joined by newlines, are `system`; a user or assistant message's text is its
           content (a string; "" where it has none); an assistant's tool calls are tool_use blocks after its text
           (input = the call's arguments parsed, {} when they are not a JSON object); each run of tool messages
           is one user message of tool_result blocks; the trace's tools are custom tools (input_schema = their
           parameters). serve/anthropic.py turns such a body back into the chat request it came from, calls'
           arguments written as json.dumps writes them (tests/bench/test_bench_messages_api.py).
  events   content_block_delta events are the answer's content chunks (text_delta, thinking_delta,
           input_json_delta: one token each, as Anthropic's events carry no running count); a tool_use block's
           content_block_start names a call and its input_json_delta events are its arguments; message_delta
           carries the stop reason and the usage; message_stop ends the answer; an `error` event fails it.
  usage    in the chat replay's terms: prompt tokens = input_tokens + cache_read_input_tokens, cached =
           cache_read_input_tokens, completion tokens = output_tokens, and the speculation fields the ingress
           adds after Anthropic's (verify_steps, accept_length, accept_histogram, path) as they are; the stop
           reason as a finish reason: end_turn and stop_sequence -> stop, max_tokens -> length, tool_use ->
           tool_calls.
Complexity: O(size of the request) per body, O(1) per event.
"""

from __future__ import annotations

from typing import Any

from ..serve.anthropic import SPECULATION, tool_input
from .traces.model import TraceMessage

FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


def body_parts(messages: list[TraceMessage], tools: list[dict] | None) -> dict[str, Any]:
    """Rule `body`: the `system`, `messages` and `tools` of the Messages request."""
    system: list[str] = []
    out: list[dict] = []
    for message in messages:
        if message.role in ("system", "developer") and not out:
            system.append(message.content or "")
        elif message.role == "tool":
            result = {"type": "tool_result", "tool_use_id": message.tool_call_id or "",
                      "content": message.content or ""}  # fmt: skip
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
        elif message.role == "assistant" and message.tool_calls:
            blocks = [{"type": "text", "text": message.content}] if message.content else []
            blocks += [{"type": "tool_use", "id": call.id, "name": call.function.name,
                        "input": tool_input(call.function.arguments)} for call in message.tool_calls]  # fmt: skip
            out.append({"role": "assistant", "content": blocks})
        else:
            role = "assistant" if message.role == "assistant" else "user"
            out.append({"role": role, "content": message.content or ""})
    parts: dict[str, Any] = {"messages": out}
    if system:
        parts["system"] = "\n".join(system)
    if tools:
        functions = [tool["function"] for tool in tools]
        parts["tools"] = [{"name": f["name"], "description": f.get("description", ""),
                           "input_schema": f.get("parameters") or {"type": "object"}} for f in functions]  # fmt: skip
    return parts


class MessagesEvents:
    """Rule `events`: feed it each SSE `data:` payload; `feed` returns what a chat stream's parser would see."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] = {}
        self.finish_reason: str | None = None
        self.done = False
        self._block: tuple[str, int] | None = None  # (kind, call index) of the open block
        self._calls = 0

    def feed(self, event: dict) -> tuple[str | None, dict | None, str | None]:
        """(content piece, tool-call delta, error message) of one event; None where it has none."""
        kind = event.get("type")
        if kind == "error":
            error = event.get("error") or {}
            return None, None, str(error.get("message", error) if isinstance(error, dict) else error)
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                self._block = ("tool_use", self._calls)
                self._calls += 1
                call = {"index": self._calls - 1, "function": {"name": block.get("name", ""), "arguments": ""}}
                return None, call, None
            self._block = (block.get("type", ""), -1)
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "input_json_delta" and self._block and self._block[0] == "tool_use":
                return None, {"index": self._block[1], "function": {"arguments": delta.get("partial_json", "")}}, None
            return delta.get("text") or delta.get("thinking") or "", None, None
        elif kind == "message_delta":
            stop = (event.get("delta") or {}).get("stop_reason")
            self.finish_reason = FINISH.get(stop, stop)
            usage = event.get("usage") or {}
            cached = int(usage.get("cache_read_input_tokens") or 0)
            self.usage = {"prompt_tokens": int(usage.get("input_tokens") or 0) + cached,
                          "completion_tokens": int(usage.get("output_tokens") or 0), "cached_prompt_tokens": cached,
                          **{key: usage[key] for key in SPECULATION if key in usage}}
        elif kind == "message_stop":
            self.done = True
        return None, None, None
