"""The one protocol every engine speaks (embedded, simulated, sglang).

A replica holds one engine. The engine takes a typed `GenerateRequest` and yields `Chunk`s: text
deltas, then one final chunk carrying `finish_reason` and `Usage` (speculation stats included).
`load()` returns a `LoadSnapshot`, the headroom the router and the autoscaler read.

Vocabulary: a *verify step* is one target forward that checks a drafted block (or, autoregressive,
produces one token); *acceptance length* is tokens produced per verify step (1.0 without a drafter);
`accept_histogram[k]` counts verify steps that produced k+1 tokens.
"""

from __future__ import annotations

from typing import AsyncIterator, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

ReasoningLevel = Literal["none", "low", "medium", "high", "xhigh"]
REASONING_LEVELS: tuple[ReasoningLevel, ...] = ("none", "low", "medium", "high", "xhigh")
DecodePath = Literal["speculative", "autoregressive"]
# What the x-dspine-path header says: the decode path, and "autoregressive-fallback" when a drafter pool
# serves without its drafter because it lost it (crashes, a failed drafter probe), not by choice.
ServedPath = Literal["speculative", "autoregressive", "autoregressive-fallback"]
FinishReason = Literal["stop", "length", "tool_calls", "abort", "error"]
SchedulePolicy = Literal["fcfs", "shortest-prefill-first"]  # SGLang's --schedule-policy values we model


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | None = Field(default=None, description="Message text (tool-call turns may have none).")


class GenerateRequest(BaseModel):
    """What the ingress hands a pool's replica through a deployment handle."""

    model_config = ConfigDict(extra="forbid")

    request_id: str
    messages: list[ChatMessage] | None = Field(default=None, description="Chat request; exclusive with prompt.")
    prompt: str | None = Field(default=None, description="Plain completion request; exclusive with messages.")
    max_tokens: int = Field(ge=1, description="Most tokens to generate.")
    temperature: float | None = Field(
        default=0.0, ge=0.0, le=2.0, description="None: the engine's default (the client left it out)."
    )
    top_p: float | None = Field(default=1.0, gt=0.0, le=1.0, description="None: the engine's default.")
    top_k: int | None = Field(default=None, ge=-1, description="-1: off; None: the engine's default (off).")
    min_p: float | None = Field(default=None, ge=0.0, le=1.0, description="None: the engine's default (0).")
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)
    reasoning_level: ReasoningLevel = "none"
    session_id: str | None = Field(default=None, description="Sticky session key (header, user, or fingerprint).")
    prefix_hashes: list[str] = Field(
        default_factory=list, description="Chained hashes of the prompt's leading blocks, for prefix affinity."
    )
    estimated_prompt_tokens: int = Field(default=0, ge=0, description="Ingress estimate, for admission.")
    pool: str = ""
    arm: str = ""
    clamp_max_tokens: bool = Field(
        default=False, description="max_tokens was not given: shorten it to fit the context instead of refusing."
    )
    tools: list[dict] | None = Field(default=None, description="OpenAI tool schemas, for engines that serve tools.")
    tool_choice: str | dict | None = Field(
        default=None, description="OpenAI tool_choice, with tools; None: the engine's default."
    )
    parallel_tool_calls: bool | None = Field(default=None, description="OpenAI parallel_tool_calls, with tools.")
    stream: bool = Field(
        default=False, description="The client reads the answer as it comes: tool calls stream as they are written."
    )
    response_format: dict | None = Field(
        default=None,
        description="OpenAI response_format (json_object, json_schema), for engines with constrained decoding.",
    )
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = Field(default=None, description="Token id (as a string) -> bias, -100..100.")
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=2.0, description="None: the engine's default.")
    min_tokens: int = Field(default=0, ge=0, description="Stop tokens (EOS, stop_token_ids) are masked until this many.")
    ignore_eos: bool = Field(default=False, description="No token ends the request (EOS nor stop_token_ids), as SGLang.")
    stop_token_ids: list[int] = Field(default_factory=list, description="Token ids that end the request, as EOS does.")
    stop_regex: list[str] = Field(
        default_factory=list, description="Patterns that end the request once the output matches one (SGLang)."
    )
    no_stop_trim: bool = Field(default=False, description="Keep the matched stop string or stop token (SGLang).")
    skip_special_tokens: bool = Field(default=True, description="False: special tokens are text too (SGLang).")
    continue_final_message: bool = Field(
        default=False, description="Chat: the answer continues a last assistant message instead of a new turn (SGLang)."
    )
    regex: str | None = Field(default=None, description="A regular expression the output must match (SGLang).")
    ebnf: str | None = Field(default=None, description="An EBNF grammar the output must follow (SGLang).")
    logprobs: bool = Field(default=False, description="Return each output token's log-probability (OpenAI's logprobs).")
    top_logprobs: int = Field(
        default=0, ge=0, le=20, description="With logprobs: the likeliest alternatives at each output position."
    )
    pace: bool = Field(
        default=True,
        description="The router's permit: a replica that paces long prompts may pace this one "
        "(routing/pacing_permit.py); False: it is sent whole.",
    )


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    verify_steps: int = Field(default=0, description="Target forward passes that produced tokens.")
    accept_length: float = Field(default=0.0, description="completion_tokens / verify_steps.")
    accept_histogram: list[int] = Field(
        default_factory=list, description="Index k counts verify steps that produced k+1 tokens."
    )
    path: DecodePath = "autoregressive"
    cached_prompt_tokens: int = Field(default=0, description="Prompt tokens served from the prefix cache.")
    reasoning_tokens: int = Field(default=0, description="Completion tokens of the reasoning (SGLang's count on sglang "
                                  "pools; the embedded and simulated engines produce no reasoning).")  # fmt: skip


class TopLogprob(BaseModel):
    """One token and its log-probability, as OpenAI's chat logprobs spell it."""

    token: str = Field(description="The token's text, the token decoded alone.")
    bytes: list[int] = Field(description="The token's raw bytes (a piece of a multi-byte character included).")
    logprob: float


class TokenLogprob(TopLogprob):
    """An output token's log-probability and the likeliest alternatives at its position (OpenAI's
    ChatCompletionTokenLogprob)."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class Chunk(BaseModel):
    text: str = ""
    reasoning: str = Field(
        default="", description="Reasoning text (a thinking model's <think> part), kept apart from `text`."
    )
    tool_calls: list[dict] | None = Field(
        default=None,
        description="Tool-call deltas as OpenAI streams them ({index, id, type, function: {name, arguments}}): "
        "a call's first delta carries its id and name, later ones more argument text.",
    )
    num_tokens: int = Field(default=0, description="Tokens this chunk carries.")
    finish_reason: FinishReason | None = None
    matched_stop: int | str | None = Field(
        default=None,
        description="With finish_reason 'stop' (or 'tool_calls'): what ended the request, as SGLang's matched_stop: "
        "the stop string, the stop_regex pattern, or the end token's id (EOS or one of stop_token_ids).",
    )
    logprobs: list[TokenLogprob] | None = Field(
        default=None,
        description="With a request's logprobs: one entry per output token this chunk carries (num_tokens of them), "
        "the tokens whose text the chunk holds or holds back, a trimmed end token included.",
    )
    usage: Usage | None = None
    prompt_tokens: int | None = Field(
        default=None,
        description="Set on the first chunk by the engine: the prompt's tokens, so a stream reports them from its "
        "first event (continuous usage, the Messages API's message_start) rather than only at its end.",
    )
    cached_prompt_tokens: int | None = Field(
        default=None, description="Set beside prompt_tokens: how many of them were read from the prefix cache."
    )
    error: str | None = Field(default=None, description="Set on a refused or failed request.")
    error_status: int | None = Field(default=None, description="HTTP status for the error (4xx refused, 5xx failed).")
    error_param: str | None = Field(default=None, description="The request field the error is about.")
    replica: str | None = Field(default=None, description="Set on the first chunk by the replica that serves it.")
    path: ServedPath | None = Field(
        default=None, description="Set on the first chunk: how it is decoded (the x-dspine-path header)."
    )
    replica_s: float | None = Field(
        default=None,
        description="Set on the first chunk: seconds from the replica receiving the request to this chunk "
        "(queueing and prefill in its engine).",
    )


class LoadSnapshot(BaseModel):
    """A replica's headroom, reported through `record_routing_stats` (as a dict)."""

    healthy: bool = True
    total_kv_tokens: int = 0
    host_kv_tokens: int = Field(
        default=0,
        ge=0,
        description="KV tokens of the HiCache host tier (SGLang's --enable-hierarchical-cache, sized by "
        "--hicache-ratio or --hicache-size): prefixes evicted from the GPU there still hit; 0: none.",
    )
    free_kv_tokens: int = 0
    total_state_slots: int = 0
    free_state_slots: int = 0
    state_slots_per_request: int = Field(default=1, description="Slots one request takes (speculation adds).")
    num_running: int = 0
    num_queued: int = 0
    evictable_kv_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Of free_kv_tokens, those held by cached prefixes no running request uses (reclaimable by "
        "eviction); None: not reported.",
    )
    queued_kv_tokens: int = Field(
        default=0, ge=0, description="KV tokens the queued requests will take once admitted (ahead of a newcomer)."
    )
    pending_prefill_tokens: int = Field(
        default=0, ge=0, description="Uncached prompt tokens of queued and not yet prefilled requests."
    )
    yielding_prefill_tokens: int = Field(
        default=0,
        ge=0,
        description="Of pending_prefill_tokens, those a newcomer with at most yield_budget_tokens uncached "
        "tokens goes ahead of: a paced prompt's unsent part and the requests held behind it "
        "(the \"prefill_pacing\" engine wrapper); 0: nothing paced.",
    )
    pacing_min_uncached_tokens: int = Field(
        default=0,
        ge=0,
        description="The replica paces prompts with at least this many uncached tokens "
        "(the \"prefill_pacing\" engine wrapper); 0: it does not pace.",
    )
    yield_budget_tokens: int = Field(
        default=0,
        ge=0,
        description="Uncached prompt tokens of others' prefill the paced prompt still lets ahead of it; a larger "
        "newcomer waits behind it.",
    )
    pacing_yield_fraction: float = Field(
        default=0.0,
        ge=0.0,
        description="A prompt the replica starts pacing lets this share of its own uncached tokens of others' "
        "prefill go ahead of it (its first yield_budget_tokens); 0 when it does not pace.",
    )
    prefill_tokens_per_s: float = Field(
        default=0.0,
        ge=0.0,
        description="Prefill rate of one replica, tokens per wall-clock second (0: not known to the engine).",
    )
    decode_step_ms: float = Field(
        default=0.0,
        ge=0.0,
        description="One decode step with one more running request, wall-clock ms (0: not known).",
    )
    cache_generation: int = Field(
        default=0,
        ge=0,
        description="Changes when the engine's prefix cache starts empty again (a server relaunch); a router "
        "then forgets what it believed the replica cached.",
    )
    accept_length_ema: float = 1.0
    spec_accept_length: float | None = Field(
        default=None,
        description="The engine's own mean acceptance length over its recent verify steps (tokens per step, "
        "SGLang's sglang:spec_accept_length; 0 there until a verify step is measured); None: not reported.",
    )
    kv_token_usage: float | None = Field(
        default=None,
        description="Share in [0, 1] of the KV-cache token pool held by running requests, as the engine reports "
        "it (SGLang's sglang:full_token_usage); None: not reported. Not bounded here: a poll never fails on it.",
    )
    mamba_usage: float | None = Field(
        default=None,
        description="Share in [0, 1] of the Mamba-state pool held by running requests, as the engine reports it "
        "(SGLang's sglang:mamba_usage); None: not reported. Not bounded here: a poll never fails on it.",
    )
    drafter_active: bool = False
    draft_vram_gb: float = Field(default=0.0, description="VRAM the drafter holds (weights + its KV).")
    engine: str = ""


@runtime_checkable
class Engine(Protocol):
    """Engines are constructed cheaply; `start()` loads weights or spawns a server."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def generate(self, request: GenerateRequest) -> AsyncIterator[Chunk]: ...

    def load(self) -> LoadSnapshot: ...

    def describe(self) -> dict:
        """Engine arguments and model/draft file hashes, for benchmark receipts."""
        ...

    def set_drafter_enabled(self, enabled: bool) -> None: ...

    async def count_prompt_tokens(self, request: GenerateRequest, anthropic_body: dict | None = None) -> int:
        """The tokens `request`'s prompt would be prefilled with (template, tools and reasoning level applied).
        `anthropic_body`: the same request as an Anthropic count_tokens body, for an engine whose server counts
        that itself. EngineError where the engine cannot count."""
        ...


class EngineError(Exception):
    """A request the engine refuses; `status` is the HTTP status the ingress should answer with."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code
