"""`bench replay --api responses`: a trace's chat requests sent as OpenAI Responses requests, their answers read.

Rules:
  body     a chat request as an OpenAI Responses client (Codex CLI) would send it: the system (and developer)
           messages before the first other message, joined by newlines, are `instructions`; every other message
           is an input item, in order: a user, assistant, or later system or developer message is
           {role, content: its text} ("" where it has none; an assistant's that has calls only when it has text);
           an assistant's tool calls are function_call items after its text ({call_id, name, arguments as the
           trace wrote them, "{}" where none}); a tool message is a function_call_output item ({call_id: its
           tool_call_id, output: its text}). The trace's tools are function tools ({name, and the description,
           parameters and strict the chat function has}); max_tokens is max_output_tokens; temperature, top_p,
           stop, parallel_tool_calls and tool_choice carry over (a named function as {"type": "function", "name"});
           `stream: true`, `store: false`; the chat request's `user`, if any, is `prompt_cache_key` (a replay's
           chat request carries none: its session is the x-session-id header). serve/openai_responses.py turns
           such a body back into the chat request it came from (tests/bench/test_bench_responses_api.py).
  events   response.output_text.delta, response.reasoning_text.delta, response.reasoning_summary_text.delta and
           response.function_call_arguments.delta events are the answer's content chunks (one token each, as
           the Messages reader counts them); response.output_item.added of a function_call item names a call
           (a chunk too, as a tool_use block's start is), and the arguments deltas of that item (its
           output_index) are its arguments; response.completed and response.incomplete carry the usage and end
           the answer; response.failed fails it (its response.error.message), as an `error` event does.
  usage    in the chat replay's terms: prompt tokens = input_tokens (OpenAI's count holds the cached ones),
           cached = input_tokens_details.cached_tokens, completion tokens = output_tokens, and the speculation
           fields the ingress adds after OpenAI's (verify_steps, accept_length, accept_histogram, path) as they
           are; the status as a finish reason: completed with a function_call item in its output -> tool_calls,
           completed otherwise -> stop, incomplete -> length.
Complexity: O(size of the request) per body, O(1) per event.
"""

from __future__ import annotations

from typing import Any

from ..serve.openai_responses_stream import SPECULATION

FIELDS = ("temperature", "top_p", "stop", "parallel_tool_calls")  # rule `body`: carried as they are
TEXT_DELTAS = ("response.output_text.delta", "response.reasoning_text.delta", "response.reasoning_summary_text.delta")
ENDS = ("response.completed", "response.incomplete")
END = "response.completed"  # what a stream that stopped early lacks


def _text(content: Any) -> str:
    """A chat message's content as text: a string as is, text parts joined, none as ""."""
    if isinstance(content, list):
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return content or ""


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") or choice.get("name")
        return {"type": "function", "name": name}
    return choice


def input_items(messages: list[dict]) -> tuple[list[str], list[dict]]:
    """Rule `body`: (the instructions' texts, the input items) of chat messages."""
    instructions: list[str] = []
    items: list[dict] = []
    for message in messages:
        role, text = message.get("role"), _text(message.get("content"))
        if role in ("system", "developer") and not items:
            instructions.append(text)
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": message.get("tool_call_id") or "", "output": text})
        elif role == "assistant" and message.get("tool_calls"):
            if text:
                items.append({"role": "assistant", "content": text})
            for call in message["tool_calls"]:
                function = call.get("function") or {}
                name, arguments = function.get("name") or "", function.get("arguments") or "{}"
                items.append({"type": "function_call", "call_id": call.get("id") or "", "name": name,
                              "arguments": arguments})  # fmt: skip
        else:
            items.append({"role": role, "content": text})
    return instructions, items


def tools(functions: list[dict]) -> list[dict]:
    """Rule `body`: chat tools as Responses function tools."""
    out = []
    for tool in functions:
        function = tool.get("function") or {}
        described = {key: function[key] for key in ("description", "parameters", "strict") if key in function}
        out.append({"type": "function", "name": function.get("name"), **described})
    return out


def body(chat: dict[str, Any]) -> dict[str, Any]:
    """Rule `body`: the Responses request for a chat request body."""
    instructions, items = input_items(chat.get("messages") or [])
    out: dict[str, Any] = {"model": chat["model"]}
    if instructions:
        out["instructions"] = "\n".join(instructions)
    out["input"] = items
    if chat.get("tools"):
        out["tools"] = tools(chat["tools"])
    if chat.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(chat["tool_choice"])
    if chat.get("max_tokens") is not None:
        out["max_output_tokens"] = chat["max_tokens"]
    out.update({name: chat[name] for name in FIELDS if chat.get(name) is not None})
    out.update({"stream": True, "store": False})
    if chat.get("user"):
        out["prompt_cache_key"] = chat["user"]
    return out


def usage(response: dict) -> dict[str, Any]:
    """Rule `usage`: a response's usage as the chat replay counts it."""
    found = response.get("usage") or {}
    cached = int((found.get("input_tokens_details") or {}).get("cached_tokens") or 0)
    return {"prompt_tokens": int(found.get("input_tokens") or 0),
            "completion_tokens": int(found.get("output_tokens") or 0), "cached_prompt_tokens": cached,
            **{key: found[key] for key in SPECULATION if key in found}}  # fmt: skip


class ResponsesEvents:
    """Rule `events`: feed it each SSE `data:` payload; `feed` returns what a chat stream's parser would see."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] = {}
        self.finish_reason: str | None = None
        self.done = False
        self._calls: dict[Any, int] = {}  # a function_call item's output_index -> its call index

    def _call_index(self, output_index: Any) -> int:
        return self._calls.setdefault(output_index, len(self._calls))

    def feed(self, event: dict) -> tuple[str | None, dict | None, str | None]:
        """(content piece, tool-call delta, error message) of one event; None where it has none."""
        kind = event.get("type")
        if kind in TEXT_DELTAS:
            return event.get("delta") or "", None, None
        if kind == "response.output_item.added" and (event.get("item") or {}).get("type") == "function_call":
            index = self._call_index(event.get("output_index"))
            return None, {"index": index, "function": {"name": event["item"].get("name") or "", "arguments": ""}}, None
        if kind == "response.function_call_arguments.delta":
            index = self._call_index(event.get("output_index"))
            return None, {"index": index, "function": {"arguments": event.get("delta") or ""}}, None
        if kind in ENDS:
            response = event.get("response") or {}
            self.usage = usage(response)
            called = any(item.get("type") == "function_call" for item in response.get("output") or [])
            self.finish_reason = "length" if kind == "response.incomplete" else "tool_calls" if called else "stop"
            self.done = True
        elif kind == "response.failed":
            error = (event.get("response") or {}).get("error") or {}
            return None, None, str(error.get("message") or "the response failed")
        elif kind == "error":
            return None, None, str(event.get("message") or "the response failed")
        return None, None, None
