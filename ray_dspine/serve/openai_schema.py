"""The subset of OpenAI's request bodies the ingress accepts, validated with pydantic.

Unknown fields are ignored (clients send many); known fields are type- and range-checked so a bad
value is answered with a 400 that names it. Known fields a pool does not serve (log-probabilities,
sampling penalties, structured output, tools on CPU pools) are refused by `request_features.py` when
their value asks for something.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False
    continuous_usage_stats: bool = Field(
        default=False, description="Also put running token counts on every chunk (vLLM and SGLang's option)."
    )


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class ResponseFormat(BaseModel):
    """OpenAI's `response_format`; the schema itself is the engine's to check (SGLang compiles it)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: dict | None = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and not self.json_schema:
            raise ValueError('type "json_schema" needs a `json_schema` object ({"name": ..., "schema": {...}})')
        return self


class InMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[dict] | None = None

    def text(self) -> str | None:
        if isinstance(self.content, list):
            parts = [part.text for part in self.content if part.type == "text" and part.text is not None]
            if len(parts) != len(self.content):
                raise ValueError("only text content parts are supported")
            return "".join(parts)
        return self.content

    def tool_fields(self) -> dict:
        """The tool-call fields of a conversation turn, as SGLang's chat template reads them."""
        extra = self.model_extra or {}
        fields = {"tool_calls": self.tool_calls} if self.tool_calls else {}
        fields.update({key: extra[key] for key in ("tool_call_id", "name") if isinstance(extra.get(key), str)})
        return fields


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=1, description="Only one choice per request is served.")
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value):
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _bias_range(cls, value):
        for token, bias in (value or {}).items():
            if not token.isdigit() or not -100.0 <= bias <= 100.0:
                raise ValueError("maps token ids (digit strings) to biases from -100 to 100")
        return value

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class ChatCompletionRequest(_Sampling):
    messages: list[InMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    reasoning_effort: str | None = None
    reasoning: dict | None = None
    chat_template_kwargs: dict | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


class CompletionRequest(_Sampling):
    prompt: str | list[str]
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool | None = None
    best_of: int | None = Field(default=None, ge=1)
    suffix: str | None = None
    response_format: dict | None = Field(default=None, description="Not part of the completions API; refused.")

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value):
        if isinstance(value, list):
            if len(value) != 1:
                raise ValueError("exactly one prompt per request is served")
            value = value[0]
        if not value:
            raise ValueError("prompt must not be empty")
        return value
