"""OpenAI's Responses API over the chat path: `POST /v1/responses`.

Coding agents built on OpenAI's Responses API (OpenAI's Codex CLI speaks only it) send this. SGLang 0.5.23
serves it (entrypoints/openai/serving_responses.py) by building a chat request from the input items and
parsing the output into items; the ingress builds the same chat request and sends it down the chat path
whole (validation, reasoning level, traffic split, admission, pools and faults), then turns the chat
stream into the Responses answer. Checked against SGLang's own code by
tests/sglang_contract/test_openai_responses.py.

Rules:
  request   as SGLang's `_construct_input_messages` for a template that takes no system message but the
            first (the ingress cannot know a pool's template; this form loses nothing under any template):
            `instructions` and every system or developer message, in order, are one first system message
            (texts joined by a blank line); a string `input` is one user message. Of input items,
            a message (type "message", or none) keeps its role, except that a developer message is a system
            message whose text opens with "Developer instructions:\\n" (SGLang's label_developer_content);
            its input_text / output_text parts are text parts, refusal parts stay. A function_call is an
            assistant message with that one tool call (id = call_id, arguments a JSON object's text: an object
            sent as JSON is written compactly, text that holds no object is "{}"); a function_call_output is a
            `tool` message (its output parts' texts joined). Reasoning items are left out: the chat path
            carries no reasoning history (SGLang makes them an assistant's reasoning_content). Then runs of
            assistant messages of the same `phase` merge into one turn, as SGLang merges them: contents joined
            by a blank line, tool calls in order; the phase goes no further (the chat path's messages carry
            none).
  fields    max_output_tokens is max_tokens; temperature, top_p, top_k, min_p, frequency_penalty,
            presence_penalty, repetition_penalty and stop carry over; parallel_tool_calls (default true);
            `user`, or else `prompt_cache_key` (the conversation id agents send), is the chat `user`, so an
            agent's session keeps its arm and replica; reasoning.effort is reasoning_effort (`max` and `ultra`
            are xhigh, the highest level here; "none" also turns the template's thinking off, as SGLang does;
            a `reasoning` object without an effort means "medium", SGLang's default); text.format json_schema or
            json_object is the response_format.
  tools     a function tool is a chat function {name, description, parameters, strict when given} (SGLang
            writes `strict: false` on a tool that does not say; a tool here reads as the same tool sent as a
            chat request). The tools OpenAI runs itself (web_search*, file_search, code_interpreter,
            image_generation, mcp, tool_search) are left out, as SGLang leaves them out. tool_choice "auto",
            "required" and "none" carry over and {"type": "function", "name": N} names the function; an object
            naming anything else is "auto", as SGLang reduces it; with no function tools the chat tool_choice is
            "none", as SGLang sends it.
  refused   a 400 naming the field, for what this server cannot do: previous_response_id and conversation
            (nothing is stored here: send the whole conversation as `input`; `store` is accepted and nothing
            is kept), background, prompt (stored prompt templates), truncation "auto", max_tool_calls,
            include "message.output_text.logprobs", input_image / input_file / input_audio parts, custom tools
            and calls (free-form input), and the tools the client runs that a chat function cannot stand for
            (local_shell, shell, computer_use_preview, apply_patch, namespace); item_reference items; a
            tool_choice naming a function the request does not define, or "required" without one (SGLang's
            messages); anything the chat path refuses, named by the chat field.
  answer    the chat stream becomes the Responses events and response: openai_responses_stream.py (rules
            `response`, `stream`, `answer`).
  errors    OpenAI's error shape (errors.py), under /v1/responses as anywhere else. GET /v1/responses/{id}
            is a 404 saying that nothing is stored here.
Complexity: O(size of the request).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from .openai_schema import STRICT, RefusalPart, TokenCount

PATH = "/v1/responses"
DEVELOPER_LABEL = "Developer instructions:"  # SGLang's DEVELOPER_BLOCK_LABEL
EFFORT = {"max": "xhigh", "ultra": "xhigh"}  # rule `fields`: efforts beyond the levels here
HOSTED_TOOLS = ("web_search", "web_search_preview", "web_search_2025_08_26", "file_search", "code_interpreter",
                "image_generation", "mcp", "tool_search")  # fmt: skip
CLIENT_TOOLS = ("local_shell", "shell", "computer_use_preview", "computer", "apply_patch", "custom", "namespace")


# The request's classes: strict types as openai_schema.py's (no coercion); unknown fields are ignored, as
# SGLang's ResponsesRequest ignores them.


class TextPart(BaseModel):
    model_config = STRICT
    type: Literal["input_text", "output_text"]
    text: str


class UnservedPart(BaseModel):
    """A part no pool here reads (rule `refused`)."""

    model_config = STRICT
    type: Literal["input_image", "input_file", "input_audio"]


Part = Annotated[Union[TextPart, RefusalPart, UnservedPart], Field(discriminator="type")]


class MessageItem(BaseModel):
    model_config = STRICT
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(BaseModel):
    model_config = STRICT
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] = "{}"


class OutputText(BaseModel):
    model_config = STRICT
    text: str = ""


class FunctionCallOutputItem(BaseModel):
    model_config = STRICT
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[OutputText]


class ReasoningItem(BaseModel):
    model_config = STRICT
    type: Literal["reasoning"]


class UnservedItem(BaseModel):
    """An item this server cannot take (rule `refused`)."""

    model_config = STRICT
    type: Literal["item_reference", "custom_tool_call", "custom_tool_call_output"]


def _item_kind(item: Any) -> str:
    kind = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", "message")
    return kind if kind in ITEM_KINDS else "unknown"


ITEM_KINDS = {"message": MessageItem, "function_call": FunctionCallItem, "function_call_output": FunctionCallOutputItem,
              "reasoning": ReasoningItem, "item_reference": UnservedItem, "custom_tool_call": UnservedItem,
              "custom_tool_call_output": UnservedItem}  # fmt: skip


class UnknownItem(BaseModel):
    model_config = STRICT
    type: Literal[tuple(ITEM_KINDS)]  # an item of another type fails here, naming the types served


_TAGGED = tuple(Annotated[model, Tag(kind)] for kind, model in ITEM_KINDS.items())
Item = Annotated[Union[_TAGGED + (Annotated[UnknownItem, Tag("unknown")],)], Discriminator(_item_kind)]


class Tool(BaseModel):
    model_config = STRICT
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _known(self):
        if self.type == "function" and not self.name:
            raise ValueError("a function tool needs a `name`")
        if self.type != "function" and self.type not in HOSTED_TOOLS + CLIENT_TOOLS:
            raise ValueError(f"unknown tool type {self.type!r}; a tool here is of type \"function\"")
        return self


class Reasoning(BaseModel):
    model_config = STRICT
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"] | None = "medium"
    summary: Literal["auto", "concise", "detailed"] | None = None


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)
    type: Literal["text", "json_schema", "json_object"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None
    description: str | None = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and self.schema_ is None:
            raise ValueError('type "json_schema" needs a `schema` (and a `name`)')
        return self


class Text(BaseModel):
    model_config = STRICT
    format: TextFormat | None = None


class ResponsesRequest(BaseModel):
    model_config = STRICT
    model: str = Field(min_length=1)
    input: str | list[Item]
    instructions: str | None = None
    max_output_tokens: TokenCount | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    user: str | None = None
    prompt_cache_key: str | None = None
    parallel_tool_calls: bool | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "required", "none"] | dict[str, Any] | None = "auto"  # None: "auto"
    reasoning: Reasoning | None = None
    text: Text | None = None
    include: list[str] | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = True
    background: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    max_tool_calls: int | None = None


class Refused(ValueError):
    """A request this server cannot serve: `param` names the Responses field."""

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param = param


NOTHING_STORED = "nothing is stored here; send the whole conversation as `input` (`store` is accepted, nothing is kept)"


def _refuse_unserved(request: ResponsesRequest) -> None:
    """Rule `refused`, the request's fields."""
    if request.previous_response_id is not None:
        raise Refused("previous_response_id", NOTHING_STORED)
    if request.conversation is not None:
        raise Refused("conversation", NOTHING_STORED)
    if request.background:
        raise Refused("background", "background responses are not served here (nothing is stored); send it without")
    if request.prompt is not None:
        raise Refused("prompt", "stored prompt templates are not served here; send the instructions and input")
    if request.truncation == "auto":
        raise Refused("truncation", '"auto" is not served here: the conversation must fit the context; send "disabled"')
    if request.max_tool_calls is not None:
        raise Refused("max_tool_calls", "is not served here; send the request without it")
    if "message.output_text.logprobs" in (request.include or []):
        raise Refused("include", '"message.output_text.logprobs" is not served on /v1/responses here; '
                      "/v1/chat/completions serves `logprobs`")  # fmt: skip


def _developer(content: str | list[dict]) -> str | list[dict]:
    """SGLang's label_developer_content, on the chat form of the content."""
    if isinstance(content, str):
        return f"{DEVELOPER_LABEL}\n{content}"
    for index, part in enumerate(content):
        if part.get("type") == "text":
            return [*content[:index], {**part, "text": f"{DEVELOPER_LABEL}\n{part['text']}"}, *content[index + 1:]]
    return [{"type": "text", "text": DEVELOPER_LABEL}, *content]


def _content(message: MessageItem, where: str) -> str | list[dict]:
    if isinstance(message.content, str):
        return message.content
    parts = []
    for p, part in enumerate(message.content):
        if isinstance(part, UnservedPart):
            raise Refused(f"{where}.content[{p}].type", f"`{part.type}` parts are not served here; send text")
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        else:
            parts.append({"type": "refusal", "refusal": part.refusal})
    return parts


def _arguments(arguments: str | dict) -> str:
    """A function_call's arguments as the text of a JSON object; "{}" when they are not one (SGLang's rule)."""
    if isinstance(arguments, dict):
        return json.dumps(arguments, separators=(",", ":"))
    try:
        value = json.loads(arguments) if arguments else None
    except ValueError:
        value = None
    return arguments if isinstance(value, dict) else "{}"


def _merge(messages: list[dict]) -> list[dict]:
    """Runs of assistant messages of the same phase as one turn (rule `request`; SGLang's
    `_merge_consecutive_assistant_messages` without reasoning content)."""
    merged: list[dict] = []
    for message in messages:
        last = merged[-1] if merged else None
        if not (last and last["role"] == message["role"] == "assistant" and last.get("phase") == message.get("phase")):
            merged.append(dict(message))
            continue
        content = message.get("content")
        if content not in (None, ""):
            before = last.get("content")
            if before in (None, ""):
                last["content"] = content
            elif isinstance(before, str) and isinstance(content, str):
                last["content"] = before + "\n\n" + content
            else:
                last["content"] = _parts(before) + _parts(content)
        if message.get("tool_calls"):
            last["tool_calls"] = (last.get("tool_calls") or []) + message["tool_calls"]
    return merged


def _parts(content: str | list[dict] | None) -> list[dict]:
    if isinstance(content, list):
        return list(content)
    return [{"type": "text", "text": content}] if content else []


def _messages(request: ResponsesRequest) -> list[dict]:
    """Rule `request`."""
    out: list[dict] = []
    if request.instructions:
        out.append({"role": "system", "content": request.instructions})
    if isinstance(request.input, str):
        return _one_system_message(out + [{"role": "user", "content": request.input}])
    for i, item in enumerate(request.input):
        where = f"input[{i}]"
        if isinstance(item, UnservedItem):
            reason = NOTHING_STORED if item.type == "item_reference" else "custom tools are not served here"
            raise Refused(f"{where}.type", f"`{item.type}` items: {reason}")
        if isinstance(item, MessageItem):
            content = _content(item, where)
            if item.role == "developer":
                out.append({"role": "system", "content": _developer(content)})
            else:
                out.append({"role": item.role, "content": content, "phase": item.phase})
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": _arguments(item.arguments)}}  # fmt: skip
            out.append({"role": "assistant", "tool_calls": [call], "phase": None})
        elif isinstance(item, FunctionCallOutputItem):
            output = item.output if isinstance(item.output, str) else "".join(part.text for part in item.output)
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
    merged = _merge(out)
    for message in merged:
        message.pop("phase", None)
        if message["role"] == "assistant" and message.get("content") is None and not message.get("tool_calls"):
            message["content"] = ""
    return _one_system_message(merged)


def _one_system_message(messages: list[dict]) -> list[dict]:
    """Every system message's texts, in order, as one first system message (rule `request`)."""
    texts: list[str] = []
    others = []
    for message in messages:
        if message["role"] != "system":
            others.append(message)
        elif isinstance(message["content"], str):
            texts.append(message["content"])
        else:
            texts.extend(part["text"] for part in message["content"] if isinstance(part.get("text"), str))
    return ([{"role": "system", "content": "\n\n".join(texts)}] if texts else []) + others


def _tools(request: ResponsesRequest) -> list[dict]:
    """Rule `tools`: the chat functions; a client-run tool no chat function stands for is refused."""
    functions = []
    for t, tool in enumerate(request.tools or []):
        if tool.type in CLIENT_TOOLS:
            kind = "custom tools (free-form input)" if tool.type == "custom" else f"`{tool.type}` tools"
            raise Refused(f"tools[{t}].type", f"{kind} are not served here; declare the tool as type \"function\" "
                          "with a JSON-schema `parameters`")  # fmt: skip
        if tool.type != "function":
            continue
        function: dict[str, Any] = {"name": tool.name}
        if tool.description is not None:
            function["description"] = tool.description
        if tool.parameters is not None:
            function["parameters"] = tool.parameters
        if tool.strict is not None:
            function["strict"] = tool.strict
        functions.append({"type": "function", "function": function})
    return functions


def _tool_choice(request: ResponsesRequest, functions: list[dict]) -> Any:
    """Rule `tools`: SGLang's `effective_tool_choice` and `_chat_tool_choice`, with its refusals."""
    choice = request.tool_choice or "auto"
    if isinstance(choice, dict):
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        choice = {"type": "function", "name": name} if choice.get("type") == "function" and name else "auto"
    names = [f["function"]["name"] for f in functions]
    if choice == "required" and not names:
        raise Refused("tool_choice", '"required" needs at least one tool of type "function"')
    if isinstance(choice, dict):
        if choice["name"] not in names:
            raise Refused("tool_choice", f"tool {choice['name']!r} is not declared in tools {names}")
        choice = {"type": "function", "function": {"name": choice["name"]}}
    return choice if names else "none"


def _response_format(text: Text | None) -> dict | None:
    form = text.format if text is not None else None
    if form is None or form.type == "text":
        return None
    if form.type == "json_object":
        return {"type": "json_object"}
    schema = {"name": form.name or "response", "schema": form.schema_}
    if form.strict is not None:
        schema["strict"] = form.strict
    if form.description is not None:
        schema["description"] = form.description
    return {"type": "json_schema", "json_schema": schema}


def chat_body(body: dict) -> dict:
    """The chat request for a Responses request body (rules `request` to `refused`), streamed with usage on every
    event (openai_responses_stream.py rule `answer`); raises pydantic's ValidationError for a body that is not a
    Responses request, Refused for one not served here."""
    request = ResponsesRequest.model_validate(body)
    _refuse_unserved(request)
    chat: dict[str, Any] = {"model": request.model, "messages": _messages(request), "stream": True,
                            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    if request.max_output_tokens is not None:
        chat["max_tokens"] = request.max_output_tokens
    for name in ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
                 "repetition_penalty", "stop"):  # fmt: skip
        if getattr(request, name) is not None:
            chat[name] = getattr(request, name)
    session = request.user or request.prompt_cache_key
    if session:
        chat["user"] = session
    functions = _tools(request)
    if functions:
        chat["tools"] = functions
    chat["tool_choice"] = _tool_choice(request, functions)
    chat["parallel_tool_calls"] = request.parallel_tool_calls is not False
    if request.reasoning is not None and request.reasoning.effort is not None:
        chat["reasoning_effort"] = EFFORT.get(request.reasoning.effort, request.reasoning.effort)
        if request.reasoning.effort == "none":
            chat["chat_template_kwargs"] = {"enable_thinking": False}
    response_format = _response_format(request.text)
    if response_format is not None:
        chat["response_format"] = response_format
    return chat


def echo(body: dict) -> dict:
    """The request's settings a response repeats (openai_responses_stream.py rule `response`), from a body chat_body
    accepted."""
    request = ResponsesRequest.model_validate(body)
    reasoning = request.reasoning
    text = request.text.model_dump(exclude_none=True, by_alias=True) if request.text and request.text.format else None
    return {
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": request.model,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": None,
        "reasoning": {"effort": reasoning.effort, "summary": reasoning.summary} if reasoning else None,
        "store": False,
        "temperature": request.temperature,
        "text": text or {"format": {"type": "text"}},
        "tool_choice": request.tool_choice or "auto",
        "tools": list(body.get("tools") or []),
        "top_p": request.top_p,
        "truncation": request.truncation or "disabled",
        "user": request.user,
        "metadata": request.metadata or {},
    }
