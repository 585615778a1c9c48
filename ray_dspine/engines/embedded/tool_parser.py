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
             name is not a string naming one of the request's tools, is dropped (SGLang logs and skips). A list
             entry that is not an object is dropped too (SGLang's parser fails on it, and its serving sends the
             whole answer as text). A call's arguments are json.dumps(P or A or {}) of its "parameters" P or
             "arguments" A (non-ASCII kept).
  parallel   parallel_tool_calls false: only the answer's first call is kept (OpenAI: at most one call).
  ids        "call_" + 24 hex digits, SGLang's form, from the injected `new_id`; a call's `index` is its
             position among the answer's calls.
  finish     an answer with a call that ended with "stop" ends with "tool_calls" and no matched stop; "length"
             stays "length" (read whole, a call the limit cut off is not a call).
  stream     content streams as it arrives, but a tail that may still be the start of a marker, and whitespace
             that may still come right before one, wait until the text after them decides. Whitespace sent at
             the start of content is not taken back: where SGLang strips it in front of a call, the stream
             (and the answer assembled from it) keeps it.
  whole      a request that is not streamed gets each call whole, as one delta {index, id, type, function:
             {name, arguments}}, when its end tag arrives: the rules above, exactly.
  streamed   a streamed request gets a call as it is written, in OpenAI's streaming form: once the block's
             object has read its "name" (a string naming a tool), a first delta {index, id, type, function:
             {name, arguments: ""}}; then {index, function: {arguments}} deltas carrying its first "arguments"
             or "parameters" member as json_prefix.py reads it (each delta only text no later token can
             change, in the form `calls` gives); "{}" at the object's end when it has neither. A block that
             holds a list, names no tool, or breaks before its name went out goes whole at its end tag, as
             above. A stream cannot take back what it sent, so where the rest of a block
             breaks the rules above, the call stays as sent while the answer read whole has none (as in
             SGLang's own streaming): JSON that breaks after the name, no end tag before the answer ends (a
             call the limit cut off ends "length" part-sent), text after the object, a repeated key (sent
             as written, which loads to the same arguments), and an object with both "arguments" and
             "parameters" or a falsy "parameters" (the first is sent).
Complexity: a chunk costs O(its characters) plus, before a marker, the few characters held; a streamed call is
read once, character by character.
"""

from __future__ import annotations

import json
import uuid
from typing import Callable

from ..protocol import Chunk, GenerateRequest
from .json_prefix import JsonPrefix

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


def offered_tools(request: GenerateRequest) -> list[dict]:
    """The request's tools, or only the one a named tool_choice names (what the prompt shows, prompt.py rule
    `tools`, and what a forced call may call, grammar.py rule `forced`)."""
    choice = request.tool_choice
    named = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    return [tool for tool in request.tools or [] if named is None or tool["function"]["name"] == named]


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_block(block: str, names: set[str]) -> list[tuple[str, str]]:
    """Rule `calls` for one block's text: (name, arguments) of each call it holds."""
    try:
        parsed = json.loads(block.strip())
    except ValueError:  # not JSON, or an integer too long for Python to read
        return []
    calls = []
    for entry in parsed if isinstance(parsed, list) else [parsed]:
        if not isinstance(entry, dict) or not _known(entry.get("name"), names):
            continue
        arguments = entry.get("parameters") or entry.get("arguments", {})
        calls.append((entry["name"], json.dumps(arguments, ensure_ascii=False)))
    return calls


def _known(name: object, names: set[str]) -> bool:
    return isinstance(name, str) and name in names


def _marker_prefix(text: str) -> int:
    """Length of the longest proper prefix of CALL_START that `text` ends with."""
    for size in range(min(len(text), len(CALL_START) - 1), 0, -1):
        if CALL_START.startswith(text[-size:]):
            return size
    return 0


class _Block:
    """One call block being read (after its marker): streamed while `json` is set, else read whole."""

    def __init__(self, streamed: bool) -> None:
        self.json: JsonPrefix | None = JsonPrefix() if streamed else None
        self.fed = 0  # characters of the block's text the JSON reader has been given
        self.searched = 0  # characters of the block's text searched for the end tag
        self.index: int | None = None  # the call's index once its name went out
        self.sent = 0  # characters of its arguments sent


class ToolCallReader:
    """Reads one answer's chunks (rule `stream`); `read` maps each chunk to the chunk the client gets."""

    def __init__(
        self, tool_names: set[str], parallel: bool = True, new_id: Callable[[], str] = new_call_id,
        streamed: bool = False,
    ):  # fmt: skip
        self._names = tool_names
        self._parallel = parallel
        self._new_id = new_id
        self._streamed = streamed
        self._held = ""  # text not yet sent: before a marker, an undecided tail; after one, the open block's text
        self._in_calls = False
        self._block: _Block | None = None
        self._calls = 0

    @classmethod
    def for_request(cls, request: GenerateRequest, new_id: Callable[[], str] = new_call_id) -> "ToolCallReader | None":
        if not tools_active(request):
            return None
        names = {tool["function"]["name"] for tool in request.tools or []}
        return cls(names, request.parallel_tool_calls is not False, new_id, request.stream)

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
        deltas = self._read_blocks()
        if final:
            self._held, self._block = "", None
        return content, deltas

    def _read_blocks(self) -> list[dict]:
        """Rules `calls`, `whole` and `streamed` over the text after the first marker."""
        deltas: list[dict] = []
        while True:
            block = self._block
            if block is None:
                start = self._held.find(CALL_START)
                if start < 0:  # text between or after calls: kept only as far as a marker may be starting
                    self._held = self._held[len(self._held) - _marker_prefix(self._held) :]
                    return deltas
                self._held = self._held[start + len(CALL_START) :]
                block = self._block = _Block(self._streamed)
            if block.json is not None:
                deltas += self._stream(block)
            end = self._held.find(CALL_END, max(0, block.searched - len(CALL_END) + 1))
            if end < 0:
                block.searched = len(self._held)
                return deltas
            if block.index is None:
                for name, arguments in parse_block(self._held[:end], self._names):
                    if self._parallel or self._calls == 0:
                        deltas.append(self._first_delta(name, arguments))
            self._held, self._block = self._held[end + len(CALL_END) :], None

    def _stream(self, block: _Block) -> list[dict]:
        """Rule `streamed` for the block's text so far."""
        reader = block.json
        reader.feed(self._held[block.fed :])
        block.fed = len(self._held)
        deltas = []
        if block.index is None:
            name = reader.members.get("name")
            if reader.broken or (reader.done and name is None) or reader.text[:1] == "[":
                block.json = None  # read whole at the end tag
                return []
            if name is None or name[1] is None:
                return []
            value = json.loads(reader.text[name[0] : name[1]])
            if not (_known(value, self._names) and (self._parallel or self._calls == 0)):
                block.json = None  # dropped at the end tag (or, with a repeated "name", read whole there)
                return []
            block.index = self._calls
            deltas.append(self._first_delta(value, ""))
        spans = [reader.members[key] for key in ("arguments", "parameters") if key in reader.members]
        if spans:
            start, end = min(spans, key=lambda span: span[0])
            arguments = reader.text[start : len(reader.text) if end is None else end]
        else:
            arguments = "{}" if reader.done else ""
        if len(arguments) > block.sent:
            deltas.append({"index": block.index, "function": {"arguments": arguments[block.sent :]}})
            block.sent = len(arguments)
        if reader.done or reader.broken:
            block.json = None  # all it will send is sent; the end tag closes the block
        return deltas

    def _first_delta(self, name: str, arguments: str) -> dict:
        self._calls += 1
        return {"index": self._calls - 1, "id": self._new_id(), "type": "function",
                "function": {"name": name, "arguments": arguments}}  # fmt: skip
