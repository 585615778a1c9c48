"""The subset of OpenAI's request bodies the ingress accepts, validated strictly with pydantic.

Rules:
  types      strict, as OpenAI's own types: no string-to-number, number-to-string or bool-to-number
             coercion (`"max_tokens": "4"`, `"max_tokens": true`, `"stream": "yes"` are 400s); an integer
             is accepted where a number is.
  ranges     integers are bounded: `seed` in [-2^63, 2^63 - 1], token counts in [1, 2^31 - 1], token ids
             in [0, 2^31 - 1]; a value outside is a 400 naming the field.
  messages   a tagged union on `role`: system/developer/user/tool need `content` (a string or text parts;
             user parts may also be image/audio/file parts, which are refused as not served); `tool` needs
             `tool_call_id`; `assistant` needs `content` or `tool_calls`, and a call's `function.arguments`
             must hold a JSON object, as SGLang 0.5.23's chat serving requires of the conversation's calls
             (`normalize_assistant_tool_call_arguments`; NaN and Infinity are not JSON there either).
  prompt     a string (empty allowed), a list of one string, a list of token ids, or a list of one list of
             token ids; an empty list or more than one prompt is a 400.
  sglang     SGLang's own sampling fields, with SGLang 0.5.23's ranges (`SamplingParams.verify`): `top_k`
             -1 (off) or at least 1, `min_p` in [0, 1], `repetition_penalty` in (0, 2], `min_tokens` from 0
             (not above the max tokens asked for: `request_features.py`), `ignore_eos`, `stop_token_ids`
             (token ids), `stop_regex` (at most 32 Python patterns of at most 256 bytes each, which must
             compile), `no_stop_trim`, `skip_special_tokens`, chat's `continue_final_message`, `regex` and
             `ebnf`.
  unknown    unknown top-level and message fields are ignored (clients send many); known fields a pool
             does not serve, and SGLang's fields this server does not carry, are refused by
             `request_features.py` when their value asks for something.
  omitted    sampling fields left out stay None: the engine applies its defaults (an SGLang chat request
             takes the model's generation_config, as SGLang's `--sampling-defaults model` does).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MAX = 2**31 - 1
MAX_STOP_REGEX_COUNT, MAX_STOP_REGEX_BYTES = 32, 256  # SGLang 0.5.23's sampling_params.py
STRICT = ConfigDict(extra="ignore", strict=True)

TokenCount = Annotated[int, Field(ge=1, le=INT32_MAX)]


class StreamOptions(BaseModel):
    model_config = STRICT
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = Field(
        default=False, description="Also put running token counts on every chunk (vLLM and SGLang's option)."
    )


class TextPart(BaseModel):
    model_config = STRICT
    type: Literal["text"]
    text: str


class RefusalPart(BaseModel):
    model_config = STRICT
    type: Literal["refusal"]
    refusal: str


class MediaPart(BaseModel):
    """An image, audio or file part: a valid OpenAI part that no pool here serves (refused on use)."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["image_url", "input_audio", "file"]


UserPart = Annotated[Union[TextPart, MediaPart], Field(discriminator="type")]
AssistantPart = Annotated[Union[TextPart, RefusalPart], Field(discriminator="type")]


class FunctionCall(BaseModel):
    model_config = STRICT
    name: str
    arguments: str

    @field_validator("arguments")
    @classmethod
    def _a_json_object(cls, value: str) -> str:
        try:
            parsed = json.loads(value, parse_constant=_no_constant)
        except ValueError:
            raise ValueError("must be a JSON object in a string, such as '{\"path\": \"a.py\"}'") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"must be a JSON object in a string, not a JSON {type(parsed).__name__}")
        return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


class ToolCall(BaseModel):
    model_config = STRICT
    id: str
    type: Literal["function"]
    function: FunctionCall


class _Message(BaseModel):
    model_config = STRICT
    name: str | None = None

    def text(self) -> str | None:
        content = self.content
        if not isinstance(content, list):
            return content
        if any(isinstance(part, MediaPart) for part in content):
            raise ValueError("only text content parts are served")
        return "".join(part.text if isinstance(part, TextPart) else part.refusal for part in content)

    def tool_fields(self) -> dict:
        """The tool-call fields of a conversation turn, as SGLang's chat template reads them."""
        fields = {}
        calls = getattr(self, "tool_calls", None)
        if calls:
            fields["tool_calls"] = [call.model_dump() for call in calls]
        for key in ("tool_call_id", "name"):
            if getattr(self, key, None) is not None:
                fields[key] = getattr(self, key)
        return fields


class SystemMessage(_Message):
    role: Literal["system"]
    content: str | list[TextPart]


class DeveloperMessage(_Message):
    role: Literal["developer"]
    content: str | list[TextPart]


class UserMessage(_Message):
    role: Literal["user"]
    content: str | list[UserPart]


class AssistantMessage(_Message):
    role: Literal["assistant"]
    content: str | list[AssistantPart] | None = None
    tool_calls: list[ToolCall] | None = None
    refusal: str | None = None

    @model_validator(mode="after")
    def _says_something(self):
        if self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs `content` or `tool_calls`")
        return self


class ToolMessage(_Message):
    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: str


InMessage = Annotated[
    Union[SystemMessage, DeveloperMessage, UserMessage, AssistantMessage, ToolMessage], Field(discriminator="role")
]


class ResponseFormat(BaseModel):
    """OpenAI's `response_format`; the schema itself is the engine's to check (SGLang compiles it)."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: dict | None = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and not self.json_schema:
            raise ValueError('type "json_schema" needs a `json_schema` object ({"name": ..., "schema": {...}})')
        return self


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["function"]
    function: FunctionSpec


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)  # extra top-level keys: `model_extra` (rule `unknown`)

    model: str = Field(min_length=1)
    max_tokens: TokenCount | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int | None = Field(default=1, ge=1, le=1, description="Only one choice per request is served.")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    user: str | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    # SGLang's own fields (rule `sglang`)
    top_k: int | None = Field(default=None, description="-1: off; k >= 1: sample among the k likeliest tokens.")
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=2.0)
    min_tokens: int = Field(default=0, ge=0, le=INT32_MAX, description="Stop tokens are masked until this many.")
    ignore_eos: bool = False
    stop_token_ids: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] | None = None
    stop_regex: str | list[str] | None = None
    no_stop_trim: bool = False
    skip_special_tokens: bool = True
    regex: str | None = None
    ebnf: str | None = None

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, value):
        if value is not None and value != -1 and value < 1:
            raise ValueError("must be -1 (off) or at least 1")
        return value

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value):
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences")
        return value

    @field_validator("stop_regex")
    @classmethod
    def _stop_patterns(cls, value):
        patterns = [value] if isinstance(value, str) else value or []
        if len(patterns) > MAX_STOP_REGEX_COUNT:
            raise ValueError(f"at most {MAX_STOP_REGEX_COUNT} patterns, as SGLang allows")
        for pattern in patterns:
            size = len(pattern.encode("utf-8"))
            if size > MAX_STOP_REGEX_BYTES:
                raise ValueError(f"a pattern of {size} bytes; SGLang takes at most {MAX_STOP_REGEX_BYTES}")
            try:
                re.compile(pattern)
            except (re.error, RecursionError, OverflowError) as exc:
                raise ValueError(f"`{pattern}` is not a Python regular expression ({exc})") from None
        return value

    @field_validator("logit_bias")
    @classmethod
    def _bias_range(cls, value):
        for token, bias in (value or {}).items():
            if not token.isascii() or not token.isdigit() or not -100.0 <= bias <= 100.0:
                raise ValueError("maps token ids (digit strings) to biases from -100 to 100")
        return value

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def stop_regex_list(self) -> list[str]:
        if self.stop_regex is None:
            return []
        return [self.stop_regex] if isinstance(self.stop_regex, str) else list(self.stop_regex)


class ChatCompletionRequest(_Sampling):
    messages: list[InMessage] = Field(min_length=1)
    max_completion_tokens: TokenCount | None = None
    reasoning_effort: str | None = None
    reasoning: dict | None = None
    chat_template_kwargs: dict | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    continue_final_message: bool = Field(default=False, description="Continue a last assistant message (SGLang).")

    def tool_dicts(self) -> list[dict] | None:
        return [tool.model_dump(exclude_none=True) for tool in self.tools] if self.tools else None


class CompletionRequest(_Sampling):
    prompt: str | list[int] = Field(description="Text, or token ids; a one-element list is unwrapped.")
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool | None = None
    best_of: int | None = Field(default=None, ge=1, le=INT32_MAX)
    suffix: str | None = None
    response_format: dict | None = Field(default=None, description="Not part of the completions API; refused.")

    @field_validator("prompt", mode="plain")
    @classmethod
    def _one_prompt(cls, value):
        """str | [str] | [int, ...] | [[int, ...]] -> str or token ids (the rule `prompt` above)."""
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise ValueError("must be a string, a list of one string, or a list of token ids")
        if not value:
            raise ValueError("must not be an empty list")
        if all(isinstance(item, (str, list)) for item in value):
            if len(value) != 1:
                raise ValueError("exactly one prompt per request is served")
            value = value[0]
            if isinstance(value, str):
                return value
        return _token_ids(value)

    def prompt_text(self) -> str | None:
        """The prompt as text; None for a token-id prompt."""
        return self.prompt if isinstance(self.prompt, str) else None

    def prompt_token_ids(self) -> list[int] | None:
        return None if isinstance(self.prompt, str) else list(self.prompt)


def _token_ids(value: list) -> list[int]:
    if not value:
        raise ValueError("a token-id prompt must hold at least one token id")
    for index, token in enumerate(value):
        if type(token) is not int or not 0 <= token <= INT32_MAX:
            raise ValueError(f"prompt[{index}] is {token!r}: token ids are integers from 0 to {INT32_MAX}")
    return value
