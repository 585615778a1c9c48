"""Tool calls in the embedded engine's answers: the text format, and reading calls out of a stream of chunks.

The format is the one SGLang 0.5.23's `qwen25` tool-call parser reads (Qwen2.5 and Hermes models write it):
a call is `<tool_call>\\n` + a JSON object {"name": N, "arguments": A} + `\\n</tool_call>`.

Rules (SGLang's Qwen25Detector.detect_and_parse and OpenAIServingChat._process_tool_calls, non-streaming):
  active     a chat request with `tools` and a tool_choice other than "none"; otherwise the answer is text.
  content    without a call marker (`<tool_call>` + newline) the whole answer is content; with one, content is the
             text before the first marker, whitespace stripped at both ends, and the text from the marker on is
             read for calls only (between and after calls nothing is content).
  calls      the blocks from a marker to the first end tag (newline + `</tool_call>`) after it, left to right.
             A block holds one JSON object or a list of them; a block whose JSON does not parse, or a call whose
             name is not one of the request's tools, is dropped (SGLang logs and skips). A list entry that is not
             an object is dropped too (SGLang's parser fails on it, and its serving sends the whole answer as
             text). A call's arguments are json.dumps(P or A or {}) of its "parameters" P or "arguments" A
             (non-ASCII kept).
  parallel   parallel_tool_calls false: only the answer's first call is kept (OpenAI: at most one call).
  ids        "call_" + 24 hex digits, SGLang's form, from the injected `new_id`; a call's `index` is its
             position among the answer's calls.
  finish     an answer with a call that ended with "stop" ends with "tool_calls" and no matched stop; "length"
             stays "length" (a call the limit cut off is not a call).
  stream     content streams as it arrives, but a tail that may still be the start of a marker, and whitespace
             that may still come right before one, wait until the text after them decides; a call is sent whole,
             as one delta {index, id, type, function: {name, arguments}}, when its end tag arrives. Whitespace
             sent at the start of content is not taken back: where SGLang strips it in front of a call, the
             stream (and the answer assembled from it) keeps it.
Complexity: a chunk costs O(the text held): before a marker a few characters, after one the call still open
(so a call of n characters streamed in k chunks is O(n k) character comparisons, in str.find).
"""

from __future__ import annotations

import json
import uuid
from typing import Callable

from ..protocol import Chunk, GenerateRequest

CALL_START = "<tool_call>\n"
CALL_END = "\n</tool_call>"


def call_arguments(arguments: str | None) -> object:
    """The JSON value an OpenAI call's `arguments` string holds: {} when empty, the string itself when it is
    not JSON."""
    try:
        return json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return arguments


def call_text(name: str, arguments: str) -> str:
    """A call as the format writes it (for the conversation's earlier turns), its arguments as `call_arguments`
    reads them."""
    body = json.dumps({"name": name, "arguments": call_arguments(arguments)}, ensure_ascii=False)
    return f"{CALL_START}{body}{CALL_END}"


def tools_active(request: GenerateRequest) -> bool:
    """Rule `active`."""
    return request.messages is not None and bool(request.tools) and request.tool_choice != "none"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_block(block: str, names: set[str]) -> list[tuple[str, str]]:
    """Rule `calls` for one block's text: (name, arguments) of each call it holds."""
    try:
        parsed = json.loads(block.strip())
    except json.JSONDecodeError:
        return []
    calls = []
    for entry in parsed if isinstance(parsed, list) else [parsed]:
        if not isinstance(entry, dict) or entry.get("name") not in names:
            continue
        arguments = entry.get("parameters") or entry.get("arguments", {})
        calls.append((entry["name"], json.dumps(arguments, ensure_ascii=False)))
    return calls


def _marker_prefix(text: str) -> int:
    """Length of the longest proper prefix of CALL_START that `text` ends with."""
    for size in range(min(len(text), len(CALL_START) - 1), 0, -1):
        if CALL_START.startswith(text[-size:]):
            return size
    return 0


class ToolCallReader:
    """Reads one answer's chunks (rule `stream`); `read` maps each chunk to the chunk the client gets."""

    def __init__(self, tool_names: set[str], parallel: bool = True, new_id: Callable[[], str] = new_call_id):
        self._names = tool_names
        self._parallel = parallel
        self._new_id = new_id
        self._held = ""  # text not yet sent: before a marker, an undecided tail; after one, calls not yet closed
        self._in_calls = False
        self._calls = 0

    @classmethod
    def for_request(cls, request: GenerateRequest, new_id: Callable[[], str] = new_call_id) -> "ToolCallReader | None":
        if not tools_active(request):
            return None
        names = {tool["function"]["name"] for tool in request.tools or []}
        return cls(names, request.parallel_tool_calls is not False, new_id)

    def read(self, chunk: Chunk) -> Chunk:
        if chunk.error is not None:
            return chunk
        final = chunk.finish_reason is not None
        content, calls = self._feed(chunk.text, final)
        update: dict = {"text": content, "tool_calls": calls or None}
        if final and self._calls and chunk.finish_reason == "stop":
            update.update(finish_reason="tool_calls", matched_stop=None)
        return chunk.model_copy(update=update)

    def _feed(self, text: str, final: bool) -> tuple[str, list[dict]]:
        self._held += text
        content = ""
        if not self._in_calls:
            start = self._held.find(CALL_START)
            if start < 0:
                if final:
                    content, self._held = self._held, ""
                    return content, []
                undecided = self._held[: len(self._held) - _marker_prefix(self._held)]
                cut = len(undecided.rstrip())
                content, self._held = self._held[:cut], self._held[cut:]
                return content, []
            content, self._held = self._held[:start].rstrip(), self._held[start:]
            self._in_calls = True
        return content, self._closed_calls(final)

    def _closed_calls(self, final: bool) -> list[dict]:
        deltas = []
        while True:
            start = self._held.find(CALL_START)
            end = self._held.find(CALL_END, start + len(CALL_START)) if start >= 0 else -1
            if end < 0:
                break
            for name, arguments in parse_block(self._held[start + len(CALL_START) : end], self._names):
                if self._parallel or self._calls == 0:
                    deltas.append({"index": self._calls, "id": self._new_id(), "type": "function",
                                   "function": {"name": name, "arguments": arguments}})  # fmt: skip
                    self._calls += 1
            self._held = self._held[end + len(CALL_END) :]
        if final:
            self._held = ""
        return deltas
