"""Which OpenAI request features a pool serves; a request asking for one its pool does not serve is refused.

A field asks for something only through its value: what SDKs send by default (false, 0, null, an
empty map, `response_format: {"type": "text"}`) always passes, so clients that fill in every field
keep working. Nothing is dropped silently: a feature is either carried to the engine or refused.

Rules, checked in this order; the first that applies refuses with 400, param = the field, code
`unsupported_parameter` unless named otherwise:
  logprobs            chat: `logprobs` true or `top_logprobs` > 0; completions: `logprobs` set. Refused
                      on every pool: answers carry no log-probabilities.
  echo/best_of/suffix completions: `echo` true, `best_of` > 1, `suffix` non-empty. Refused on every pool.
  response_format     completions: refused (a chat field). Chat, any type but "text": sglang pools only
                      (SGLang constrains decoding with its grammar backend).
  penalties           `frequency_penalty` or `presence_penalty` non-zero: sglang pools only.
  logit_bias          non-empty: sglang pools only.
  tools               non-empty: sglang pools only (SGLang's --tool-call-parser turns calls into deltas).
  tool_choice         must be "none", "auto", "required" or {"type": "function", "function": {"name": N}}
                      (code invalid_value); "required" or a named function needs `tools`, and N must name
                      one of them (code invalid_value), as OpenAI answers.
Complexity: O(number of tools).
"""

from __future__ import annotations

from dataclasses import dataclass

from .openai_schema import ChatCompletionRequest, CompletionRequest

# Engine kinds whose pools carry sampling controls, structured output and tools to the model.
FULL_FEATURE_ENGINES = frozenset({"sglang"})


@dataclass(frozen=True)
class Refusal:
    param: str
    message: str
    code: str = "unsupported_parameter"


def refusal(parsed: ChatCompletionRequest | CompletionRequest, pool: str, engine_kind: str) -> Refusal | None:
    """The first rule above that `parsed` breaks on a pool of `engine_kind`, or None."""
    chat = isinstance(parsed, ChatCompletionRequest)
    full = engine_kind in FULL_FEATURE_ENGINES
    where = f"pool {pool!r} ({engine_kind} engine)"
    for check in (_logprobs, _completion_only):
        found = check(parsed, chat)
        if found is not None:
            return found
    if not chat and parsed.response_format is not None:
        return Refusal("response_format", "`response_format` is a chat field: send the request to /v1/chat/completions")
    if chat and parsed.response_format is not None and parsed.response_format.type != "text" and not full:
        return Refusal(
            "response_format",
            f"`response_format` {parsed.response_format.type!r} is not served by {where}: it has no constrained "
            "decoding; an sglang pool serves it",
        )
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(parsed, name) not in (None, 0.0) and not full:
            return Refusal(name, f"`{name}` is not served by {where}; send 0 or leave it out")
    if parsed.logit_bias and not full:
        return Refusal("logit_bias", f"`logit_bias` is not served by {where}; leave it out")
    if chat:
        return _tools(parsed, where, full)
    return None


def _logprobs(parsed, chat: bool) -> Refusal | None:
    asked = (parsed.logprobs is True or (parsed.top_logprobs or 0) > 0) if chat else parsed.logprobs is not None
    if asked:
        param = "top_logprobs" if chat and parsed.logprobs is not True else "logprobs"
        return Refusal(param, "log-probabilities are not returned by this server; leave `logprobs` out")
    return None


def _completion_only(parsed, chat: bool) -> Refusal | None:
    if chat:
        return None
    if parsed.echo:
        return Refusal("echo", "`echo` is not served; the answer holds the completion only")
    if (parsed.best_of or 1) > 1:
        return Refusal("best_of", "`best_of` above 1 is not served; one completion is generated per request")
    if parsed.suffix:
        return Refusal("suffix", "`suffix` (insertion) is not served; send the text before the gap as the prompt")
    return None


def _tools(parsed: ChatCompletionRequest, where: str, full: bool) -> Refusal | None:
    if parsed.tools and not full:
        return Refusal(
            "tools",
            f"`tools` is not supported by {where}: it has no tool-call parser; send the conversation "
            "without `tools` (tool results as `tool` messages are fine)",
        )
    choice = parsed.tool_choice
    if choice is None or choice in ("none", "auto"):
        return None
    named = _named_function(choice)
    if choice != "required" and named is None:
        return Refusal(
            "tool_choice",
            'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
            code="invalid_value",
        )
    if not parsed.tools:
        return Refusal("tool_choice", "tool_choice asks for a tool call but the request has no `tools`", code="invalid_value")
    names = {tool.function.name for tool in parsed.tools}
    if named is not None and named not in names:
        return Refusal(
            "tool_choice", f"tool_choice names {named!r}, which is not among the request's tools", code="invalid_value"
        )
    return None


def _named_function(choice) -> str | None:
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if isinstance(name, str) and name:
            return name
    return None
