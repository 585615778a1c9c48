"""The tools an agent trace's requests are sent with (`bench replay --tools from-trace`).

Agent traces record the calls an agent made, not the tool schemas it declared, yet an agent sends its tools
with every request: they lengthen every prompt and let the model answer with a call.

Rule `from trace`: one tool per function name the trace's calls use (in the histories and in the recorded
replies), sorted by name; its parameters are an object schema whose properties are the argument names seen
in that function's calls, sorted, each `{}` (any value), none required. Every request of the trace gets the
same list, read from the whole file before any limit, as an agent's tool set does not change with how many
of its conversations are replayed. A trace without calls has no tools: an error naming the trace.
Complexity: O(calls).
"""

from __future__ import annotations

from ...engines.embedded.tool_parser import call_arguments
from .model import TraceRequest

DESCRIPTION = "A function the recorded agent called (its schema is not in the trace)."


class NoToolsInTrace(ValueError):
    """`--tools from-trace` on a trace that records no call."""


def tools_from_trace(requests: list[TraceRequest]) -> list[dict]:
    """Rule `from trace`: the tool list ([] when the trace records no call)."""
    arguments: dict[str, set[str]] = {}
    for request in requests:
        for name in request.recorded_calls:
            arguments.setdefault(name, set())
        for message in request.messages or []:
            for call in message.tool_calls or []:
                seen = arguments.setdefault(call.function.name, set())
                value = call_arguments(call.function.arguments)
                if isinstance(value, dict):
                    seen.update(value)
    return [
        {"type": "function", "function": {"name": name, "description": DESCRIPTION, "parameters": {
            "type": "object", "properties": {key: {} for key in sorted(arguments[name])}}}}
        for name in sorted(arguments)
    ]  # fmt: skip
