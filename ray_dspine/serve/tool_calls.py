"""Assemble a non-streaming answer's tool calls from the streamed deltas, and join one call's deltas.

Rules (OpenAI's streaming format, as SGLang's tool-call parser emits it):
  key        deltas belong to the call with their `index`; a delta without one belongs to the last call
             seen (index 0 when none was).
  first      the first delta of a call sets its `id` and `function.name`; a later non-null `id` or
             `name` replaces them (null ones never do).
  arguments  `function.arguments` is the concatenation of the deltas' argument strings, in arrival
             order ("" when none came).
  output     one {"id", "type": "function", "function": {"name", "arguments"}} per call, by index.
  join       (for one streamed chunk that carries several deltas) a delta with the same index as the one
             before it and no id or name is joined to it: one delta, the arguments concatenated. Assembled
             by the rules above, the joined list gives the same calls.
Complexity: O(deltas).
"""

from __future__ import annotations

from typing import Iterable


def merge_tool_calls(deltas: Iterable[dict]) -> list[dict]:
    calls: dict[int, dict] = {}
    last = 0
    for delta in deltas:
        index = delta.get("index")
        index = last if not isinstance(index, int) else index
        last = index
        call = calls.setdefault(index, {"id": None, "type": "function", "function": {"name": None, "arguments": ""}})
        if delta.get("id") is not None:
            call["id"] = delta["id"]
        function = delta.get("function") or {}
        if function.get("name") is not None:
            call["function"]["name"] = function["name"]
        if function.get("arguments"):
            call["function"]["arguments"] += function["arguments"]
    return [calls[index] for index in sorted(calls)]


def join_deltas(deltas: Iterable[dict]) -> list[dict]:
    """Rule `join`."""
    joined: list[dict] = []
    for delta in deltas:
        function = delta.get("function") or {}
        last = joined[-1] if joined else None
        if (last is not None and delta.get("index") == last.get("index") and delta.get("id") is None
                and function.get("name") is None):  # fmt: skip
            joined_function = last["function"]
            joined_function["arguments"] = (joined_function.get("arguments") or "") + (function.get("arguments") or "")
            continue
        joined.append({**delta, "function": dict(function)})
    return joined
