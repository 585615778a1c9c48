"""The one request shape every trace parser produces.

A trace is a list of `TraceRequest`s. Each belongs to a session (a conversation: its turns are
replayed one after another) and carries either chat `messages`, a plain `prompt`, or a
`synthetic_prompt` (token-count traces: text is rendered from block ids only when the request is sent,
so a 12,000-request trace does not hold gigabytes of text in memory).

Lengths are in tokens. `prompt_tokens` is the trace's recorded input length (or, for text traces, an
estimate at ~4 characters per token) after any `max_prompt_tokens` clamp; `recorded_prompt_tokens` is
the length before the clamp. `max_tokens` is the recorded output length.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

WorkloadClass = Literal["agent", "chat", "code"]
ToolCallMode = Literal["native", "flatten"]
ToolsMode = Literal["none", "from-trace"]  # which tools requests are sent with (tools.py)


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Tool name the assistant called.")
    arguments: str = Field(default="", description="JSON-encoded arguments, as OpenAI stores them.")


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Call id that the tool result refers back to.")
    type: Literal["function"] = "function"
    function: ToolFunction


class TraceMessage(BaseModel):
    """One OpenAI-format chat message, tool calls and tool results included."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | None = Field(default=None, description="Text; None on a pure tool-call turn.")
    tool_calls: list[ToolCall] | None = Field(default=None, description="Calls made by an assistant turn.")
    tool_call_id: str | None = Field(default=None, description="On a tool result: the call it answers.")
    name: str | None = Field(default=None, description="On a tool result: the tool's name.")


class SyntheticPrompt(BaseModel):
    """Recipe for deterministic filler text: one text block per block id, cut to `num_tokens`."""

    model_config = ConfigDict(extra="forbid")

    namespace: str = Field(description="Blocks with equal (namespace, id) render to equal text.")
    block_ids: list[int] = Field(min_length=1, description="Ids of the 512-token blocks, in order.")
    num_tokens: int = Field(ge=1, description="Tokens to render; the last block is cut to fit.")


class TraceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(description="Unique within the trace, e.g. 'mooncake-000042'.")
    session_id: str = Field(description="Conversation key; sent as the x-session-id header.")
    turn_index: int = Field(ge=0, description="Position of this request inside its session, from 0.")
    arrival_s: float = Field(ge=0.0, description="Recorded arrival time, seconds from the trace start.")
    workload_class: WorkloadClass = Field(description="What kind of traffic this is.")
    messages: list[TraceMessage] | None = Field(default=None, description="Chat history up to this turn.")
    prompt: str | None = Field(default=None, description="Plain completion prompt.")
    synthetic_prompt: SyntheticPrompt | None = Field(default=None, description="Filler text recipe.")
    prompt_tokens: int = Field(ge=0, description="Input length after the clamp (recorded or estimated).")
    recorded_prompt_tokens: int = Field(ge=0, description="Input length before any clamp.")
    max_tokens: int = Field(ge=1, description="Recorded output length, used as the request's max_tokens.")
    prefix_block_ids: list[int] = Field(
        default_factory=list, description="Trace's 512-token prefix block ids (Mooncake hash_ids); empty if none."
    )
    recorded_calls: list[str] = Field(
        default_factory=list, description="Functions the recorded reply called, in order; empty for a text reply."
    )
    tools: list[dict] | None = Field(default=None, description="OpenAI tool schemas sent with the request (tools.py).")
    source: str = Field(description="Trace name this request came from.")

    @model_validator(mode="after")
    def _one_input(self) -> TraceRequest:
        given = [x is not None for x in (self.messages, self.prompt, self.synthetic_prompt)]
        if sum(given) != 1:
            raise ValueError("exactly one of messages, prompt, synthetic_prompt must be set")
        return self

    @property
    def clamped(self) -> bool:
        return self.prompt_tokens < self.recorded_prompt_tokens


class Trace(BaseModel):
    """A loaded trace and how it was loaded (for the receipt)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Trace name ('mooncake', 'tau-bench', ...) or the file's stem.")
    path: Path = Field(description="File the requests were read from.")
    sha256: str = Field(description="Hex sha256 of that file.")
    format: Literal["mooncake", "azure", "tau-bench", "openai-log"]
    seed: int = Field(description="Seed used for arrival spreading and session start times.")
    max_prompt_tokens: int | None = Field(default=None, description="Clamp applied to prompts, if any.")
    tool_calls: ToolCallMode = Field(description="Whether tool calls were kept native or flattened to text.")
    tools: ToolsMode = Field(default="none", description="Which tools the requests carry.")
    num_tools: int = Field(default=0, ge=0, description="Tools each request carries.")
    num_clamped: int = Field(ge=0, description="Requests whose prompt the clamp shortened.")
    requests: list[TraceRequest]

    @property
    def num_sessions(self) -> int:
        return len({r.session_id for r in self.requests})
