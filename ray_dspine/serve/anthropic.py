"""Anthropic's Messages API over the chat path: `POST /v1/messages`.

Agents built on Anthropic's SDK (Claude Code among them, pointed here by ANTHROPIC_BASE_URL) speak this API.
SGLang 0.5.23 serves it by translating to its chat endpoint and back (entrypoints/anthropic/serving.py); the
ingress does the same, so a Messages request takes the chat path whole: validation, reasoning level, traffic
split, admission, pools and faults. Checked against SGLang's own translation by
tests/sglang_contract/test_anthropic_messages.py.

Rules:
  request   as SGLang's `_convert_to_chat_completion_request`: `system` (a string, or its text blocks joined by
            newlines) is a first system message. A message whose content is a string keeps it. Of block content,
            text blocks are text parts (one alone: the string), tool_use blocks the message's `tool_calls` (id,
            name, arguments = json.dumps(input)), and a user's tool_result a `tool` message (tool_call_id =
            tool_use_id; content its string, or its text blocks one message each when several), placed after
            the user's text before it. An assistant message with neither text nor calls is content "". A user
            message of tool results alone adds no user message. thinking blocks are left out: the chat path
            carries no reasoning history (SGLang leaves them out too for a model without a reasoning parser).
  fields    max_tokens, temperature, top_p, top_k and stop_sequences (as `stop`) carry over; `stream` asks for the
            usage on every event, as SGLang does (continuous_usage_stats); `metadata.user_id` is the chat `user`,
            so an agent's session keeps its arm.
  tools     a custom tool (no `type`, or "custom") is a function {name, description, parameters: input_schema,
            strict when given} and must have its input_schema (SGLang writes `strict: false` on a tool that
            does not say, which a template that writes the tools out shows the model; a tool here reads as the
            same tool sent as a chat request); a tool of another `type` is one of Anthropic's own
            (web_search_*, bash_*, text_editor_*, computer_*, ...), which runs on Anthropic's side: it is left
            out, as SGLang leaves its four server tools out. tool_choice auto / any / tool / none is "auto" /
            "required" / the named function / "none", and `disable_parallel_tool_use` is parallel_tool_calls
            false; tools without a tool_choice mean "auto".
  reasoning `thinking` enabled or adaptive turns the template's thinking on, disabled off
            (chat_template_kwargs.enable_thinking, which picks the reasoning level: routing/traffic.py);
            `output_config.effort` is the reasoning_effort (`max` is `xhigh`, the highest level here);
            `output_config.format` (a JSON schema) is response_format json_schema.
  refused   a 400 naming the Anthropic field: image, document and redacted_thinking blocks (no pool here reads
            images or documents; redacted thinking is ciphertext only Anthropic can read); tool_choice naming a
            tool the request does not define; anything the chat path refuses (its field names are the chat
            request's: `stop` is stop_sequences).
  response  (as SGLang's `_convert_response`): id `msg_` + the request's id, content blocks thinking (the
            reasoning), text, then one tool_use per call with input = the arguments parsed ({} when they do not
            parse), an empty text block when there is nothing else. stop_reason: length -> max_tokens,
            tool_calls -> tool_use, stop -> end_turn, except that a stop ended by one of the request's
            stop_sequences is stop_reason "stop_sequence" with that `stop_sequence`, as Anthropic's API
            answers (SGLang says end_turn). usage: input_tokens = prompt tokens not read from the prefix cache,
            cache_read_input_tokens = those read from it (when any), output_tokens; then ours, as the chat
            usage carries them once a request ends: verify_steps, accept_length, accept_histogram and path (the
            speculation each answer got; clients read Anthropic's fields and leave the rest).
  stream    events as SGLang sends them: message_start with the first chat event (its usage: input_tokens and
            cache_read_input_tokens as in rule `response`, output_tokens 0), then per block
            content_block_start, its deltas (text_delta, thinking_delta, input_json_delta) and
            content_block_stop (a new block starts when the kind changes and at each tool call; within one
            chat event, reasoning, then text, then calls, the order the model wrote them in: SGLang puts an
            event's calls before its text), then message_delta with the stop_reason and the usage (all of it,
            as Anthropic's API counts it at the end: SGLang sends output_tokens only), then message_stop. A
            stream that fails once started (a chat error event) closes its open block and ends with an `error`
            event and message_stop.
  count     `POST /v1/messages/count_tokens` takes a Messages request without max_tokens and answers
            {"input_tokens": n}: the prompt tokens the request would be prefilled with on the pool it would go
            to (an embedded pool tokenizes it as it would for generation; an sglang pool's SGLang counts the
            request itself, handed the fields above without what rule `request` leaves out, at the reasoning
            level the ingress chose: engines/sglang/mapping.py rule `count`). Simulated pools have no
            tokenizer: 400.
  errors    {"type": "error", "error": {"type", "message"}} with the chat path's status; the type by status as
            SGLang maps it (ERROR_TYPES), 413 as Anthropic's request_too_large. Every answer under /v1/messages,
            the API-key gate's and the framework's included, takes this shape.
Complexity: O(size of the request) to translate it, O(1) per stream event.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, Iterable, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .openai_schema import STRICT, TextPart, TokenCount

PATH = "/v1/messages"  # and what lies under it
SPECULATION = ("verify_steps", "accept_length", "accept_histogram", "path")  # ours, after Anthropic's usage
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "request_timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "api_error",
}
# a chat error event's type (errors.py, by status) -> Anthropic's type for the same status
FROM_CHAT_TYPES = {"invalid_request_error": "invalid_request_error", "authentication_error": "authentication_error",
                   "permission_error": "permission_error", "rate_limit_exceeded": "rate_limit_error",
                   "service_unavailable": "overloaded_error"}  # fmt: skip
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
EFFORT = {"max": "xhigh"}  # rule `reasoning`: Anthropic's efforts beyond the levels here


# The request's classes: strict types as openai_schema.py's (no coercion); unknown fields, such as the
# `cache_control` agents put on blocks, system and tools, are ignored.


class ToolUseBlock(BaseModel):
    model_config = STRICT
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class UnservedBlock(BaseModel):
    """A block no pool here reads (rule `refused`)."""

    model_config = STRICT
    type: Literal["image", "document", "redacted_thinking"]


class ToolResultBlock(BaseModel):
    model_config = STRICT
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[Annotated[Union[TextPart, UnservedBlock], Field(discriminator="type")]] = ""
    is_error: bool | None = None


class ThinkingBlock(BaseModel):
    model_config = STRICT
    type: Literal["thinking"]
    thinking: str = ""


Block = Annotated[Union[TextPart, ToolUseBlock, ToolResultBlock, ThinkingBlock, UnservedBlock],
                  Field(discriminator="type")]  # fmt: skip


class Message(BaseModel):
    model_config = STRICT
    role: Literal["user", "assistant"]
    content: str | list[Block]


class Tool(BaseModel):
    model_config = STRICT
    type: str | None = None
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    strict: bool | None = None

    def server_side(self) -> bool:
        """Rule `tools`: a tool of Anthropic's own kinds (a `type` other than "custom") runs on Anthropic's side."""
        return self.type not in (None, "custom")

    @model_validator(mode="after")
    def _custom_has_a_schema(self):
        if not self.server_side() and self.input_schema is None:
            raise ValueError("a custom tool needs `input_schema` (a JSON schema of its input)")
        return self


class ToolChoice(BaseModel):
    model_config = STRICT
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class Thinking(BaseModel):
    model_config = STRICT
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None


class OutputFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(BaseModel):
    model_config = STRICT
    effort: Literal["minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


class Metadata(BaseModel):
    model_config = STRICT
    user_id: str | None = None


class MessagesRequest(BaseModel):
    model_config = STRICT
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    max_tokens: TokenCount
    system: str | list[TextPart] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=1)
    metadata: Metadata | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None


class Refused(ValueError):
    """A request this API cannot serve here: `param` names the Anthropic field."""

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param = param


def _text(parts: list[dict]) -> str | list[dict]:
    return parts[0]["text"] if len(parts) == 1 else list(parts)


def _messages(request: MessagesRequest) -> list[dict]:
    """Rule `request`."""
    out: list[dict] = []
    system = request.system
    if not isinstance(system, str):
        system = "\n".join(block.text for block in system or [] if block.text)
    if system.strip():
        out.append({"role": "system", "content": system})
    for m, message in enumerate(request.messages):
        if isinstance(message.content, str):
            out.append({"role": message.role, "content": message.content})
            continue
        parts: list[dict] = []
        calls: list[dict] = []
        for b, block in enumerate(message.content):
            where = f"messages[{m}].content[{b}]"
            if isinstance(block, UnservedBlock):
                raise Refused(f"{where}.type", f"`{block.type}` blocks are not served here; send text")
            if isinstance(block, TextPart):
                parts.append({"type": "text", "text": block.text})
            elif isinstance(block, ToolUseBlock):
                calls.append({"id": block.id, "type": "function",
                              "function": {"name": block.name, "arguments": json.dumps(block.input)}})  # fmt: skip
            elif isinstance(block, ToolResultBlock):
                results = _tool_result(block, where)
                if message.role == "user":
                    if parts:
                        out.append({"role": "user", "content": _text(parts)})
                        parts = []
                    out.extend({"role": "tool", "tool_call_id": block.tool_use_id, "content": r} for r in results)
                else:
                    parts.append({"type": "text", "text": "Tool result: " + "\n".join(results)})
        turn: dict = {"role": message.role}
        if calls:
            turn["tool_calls"] = calls
        if parts:
            out.append({**turn, "content": _text(parts)})
        elif calls:
            out.append(turn)
        elif message.role == "assistant":
            out.append({**turn, "content": ""})
    return out


def _tool_result(block: ToolResultBlock, where: str) -> list[str]:
    if isinstance(block.content, str):
        return [block.content]
    texts = []
    for i, item in enumerate(block.content):
        if isinstance(item, UnservedBlock):
            raise Refused(f"{where}.content[{i}].type", f"`{item.type}` blocks are not served here; send text")
        if item.text:
            texts.append(item.text)
    return texts or [""]


def chat_body(body: dict) -> dict:
    """The chat request for a Messages request body (rules `request` to `refused`); raises pydantic's
    ValidationError for a body that is not a Messages request, Refused for one not served here."""
    request = MessagesRequest.model_validate(body)
    chat: dict[str, Any] = {"model": request.model, "messages": _messages(request), "max_tokens": request.max_tokens}
    if request.stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    for name in ("temperature", "top_p", "top_k"):
        if getattr(request, name) is not None:
            chat[name] = getattr(request, name)
    if request.stop_sequences:
        chat["stop"] = list(request.stop_sequences)
    if request.metadata is not None and request.metadata.user_id:
        chat["user"] = request.metadata.user_id
    _tools(request, chat)
    if request.thinking is not None:
        chat["chat_template_kwargs"] = {"enable_thinking": request.thinking.type != "disabled"}
    config = request.output_config
    if config is not None and config.effort is not None:
        chat["reasoning_effort"] = EFFORT.get(config.effort, config.effort)
    if config is not None and config.format is not None:
        schema = {"name": "response", "schema": config.format.schema_, "strict": True}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    return chat


def count_body(body: dict) -> dict:
    """Rule `count`: the Messages request `body` (max_tokens not needed) as Anthropic's count_tokens body, with
    only the fields this module reads, and without what rule `request` leaves out of the chat request (thinking
    blocks, and the tools that run on Anthropic's side)."""
    request = MessagesRequest.model_validate({**body, "max_tokens": 1})
    counted = request.model_dump(include={"model", "messages", "system", "tool_choice", "thinking", "output_config"},
                                 exclude_none=True, by_alias=True)  # fmt: skip
    for message in counted["messages"]:
        if isinstance(message["content"], list):
            message["content"] = [block for block in message["content"] if block["type"] != "thinking"]
    tools = [tool.model_dump(exclude_none=True) for tool in request.tools or [] if not tool.server_side()]
    if tools:
        counted["tools"] = tools
    return counted


def _tools(request: MessagesRequest, chat: dict) -> None:
    """Rule `tools`."""
    functions = []
    for tool in request.tools or []:
        if tool.server_side():
            continue
        function = {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema}
        if tool.strict is not None:
            function["strict"] = tool.strict
        functions.append({"type": "function", "function": function})
    if functions:
        chat["tools"] = functions
    choice = request.tool_choice
    if choice is None:
        return
    if choice.disable_parallel_tool_use:
        chat["parallel_tool_calls"] = False
    if choice.type == "none":
        chat["tool_choice"] = "none"
    elif choice.type == "auto" and functions:
        chat["tool_choice"] = "auto"
    elif choice.type in ("any", "tool"):
        names = [f["function"]["name"] for f in functions]
        if not names:
            raise Refused("tool_choice.type", f"`{choice.type}` needs at least one tool with an input_schema")
        if choice.type == "any":
            chat["tool_choice"] = "required"
        elif choice.name not in names:
            raise Refused("tool_choice.name", f"{choice.name!r} is not one of the request's tools {names}")
        else:
            chat["tool_choice"] = {"type": "function", "function": {"name": choice.name}}


def _stop(finish: str | None, matched: Any, stops: Iterable[str]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a chat finish reason (rule `response`)."""
    if finish == "stop" and isinstance(matched, str) and matched in stops:
        return "stop_sequence", matched
    return STOP_REASONS.get(finish or "stop", "end_turn"), None


def _usage(usage: dict | None) -> dict:
    usage = usage or {}
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    out = {"input_tokens": max(0, int(usage.get("prompt_tokens") or 0) - cached)}
    if cached:
        out["cache_read_input_tokens"] = cached
    out["output_tokens"] = int(usage.get("completion_tokens") or 0)
    out.update({key: usage[key] for key in SPECULATION if key in usage})
    return out


def tool_input(arguments: str) -> dict:
    """A call's arguments as a tool_use block's input: the JSON object they hold, {} when they hold none."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def message(payload: dict, stop_sequences: Iterable[str] = ()) -> dict:
    """The Messages response for a non-streamed chat completion `payload` (rule `response`)."""
    choice = payload["choices"][0]
    said = choice["message"]
    content: list[dict] = []
    if said.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": said["reasoning_content"]})
    if said.get("content"):
        content.append({"type": "text", "text": said["content"]})
    for call in said.get("tool_calls") or []:
        function = call["function"]
        content.append({"type": "tool_use", "id": call["id"], "name": function["name"],
                        "input": tool_input(function["arguments"])})  # fmt: skip
    reason, sequence = _stop(choice.get("finish_reason"), choice.get("matched_stop"), stop_sequences)
    return {
        "id": message_id(payload["id"]),
        "type": "message",
        "role": "assistant",
        "content": content or [{"type": "text", "text": ""}],
        "model": payload["model"],
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": _usage(payload.get("usage")),
    }


def message_id(request_id: str) -> str:
    return "msg_" + request_id.split("-", 1)[-1]


def error_body(status: int, message: str) -> dict:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def sse(event: dict) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"


class MessageStream:
    """Rule `stream`: feed it the chat stream's SSE events in order; it returns the Messages events to send."""

    def __init__(self, model: str, stop_sequences: Iterable[str] = ()):
        self._id = "msg_" + uuid.uuid4().hex[:24]  # until the first event names the request
        self._model = model
        self._stops = list(stop_sequences)
        self._started = False
        self._index = -1
        self._open: str | None = None  # kind of the open block
        self._finish: str | None = None
        self._matched: Any = None
        self._usage: dict | None = None
        self.done = False

    def feed(self, event: str) -> list[str]:
        if self.done or not event.startswith("data: "):
            return []
        data = event[len("data: "):].strip()
        if data == "[DONE]":
            return self._end()
        body = json.loads(data)
        if "error" in body and "choices" not in body:
            error = body["error"] or {}
            return self._fail(FROM_CHAT_TYPES.get(error.get("type"), "api_error"), error.get("message") or "")
        if not self._started and body.get("id"):
            self._id = message_id(body["id"])
        out = self._start(body.get("usage"))
        if body.get("usage") and not body.get("choices"):
            self._usage = body["usage"]
            return out
        for choice in body.get("choices") or []:
            delta = choice.get("delta") or {}
            if choice.get("finish_reason"):
                self._finish, self._matched = choice["finish_reason"], choice.get("matched_stop")
            if delta.get("reasoning_content"):
                out += self._block("thinking", {"type": "thinking", "thinking": ""})
                out.append(self._delta({"type": "thinking_delta", "thinking": delta["reasoning_content"]}))
            if delta.get("content"):
                out += self._block("text", {"type": "text", "text": ""})
                out.append(self._delta({"type": "text_delta", "text": delta["content"]}))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                if function.get("name"):
                    start = {"type": "tool_use", "id": call.get("id") or "", "name": function["name"], "input": {}}
                    out += self._block("tool_use", start, new=True)
                if function.get("arguments") and self._open == "tool_use":
                    out.append(self._delta({"type": "input_json_delta", "partial_json": function["arguments"]}))
        return out

    def _start(self, usage: dict | None = None) -> list[str]:
        if self._started:
            return []
        self._started = True
        message = {"id": self._id, "type": "message", "role": "assistant", "content": [],
                   "model": self._model, "stop_reason": None, "stop_sequence": None,
                   "usage": {**_usage(usage), "output_tokens": 0}}  # fmt: skip
        return [sse({"type": "message_start", "message": message})]

    def _block(self, kind: str, start: dict, new: bool = False) -> list[str]:
        if self._open == kind and not new:
            return []
        out = self._close()
        self._index += 1
        self._open = kind
        return out + [sse({"type": "content_block_start", "index": self._index, "content_block": start})]

    def _delta(self, delta: dict) -> str:
        return sse({"type": "content_block_delta", "index": self._index, "delta": delta})

    def _close(self) -> list[str]:
        if self._open is None:
            return []
        self._open = None
        return [sse({"type": "content_block_stop", "index": self._index})]

    def _end(self) -> list[str]:
        self.done = True
        reason, sequence = _stop(self._finish, self._matched, self._stops)
        out = self._start() + self._close()
        out.append(sse({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                        "usage": _usage(self._usage)}))  # fmt: skip
        return out + [sse({"type": "message_stop"})]

    def _fail(self, kind: str, text: str) -> list[str]:
        self.done = True
        error = {"type": "error", "error": {"type": kind, "message": text}}
        return self._start() + self._close() + [sse(error), sse({"type": "message_stop"})]
