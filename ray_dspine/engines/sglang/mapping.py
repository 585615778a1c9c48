"""Translate between the engine protocol and SGLang's OpenAI-compatible HTTP API.

Request: chat requests go to `/v1/chat/completions`, prompt requests to `/v1/completions`, always with
`stream: true`, `stream_options: {include_usage: true, continuous_usage_stats: true}`, `rid` = request_id
(so `/abort_request` can find it) and `return_spec_tokens_details: true`. Reasoning level "none" sends
`chat_template_kwargs: {enable_thinking: false}`; other levels send `reasoning_effort: <level>`, which SGLang
turns into `chat_template_kwargs` thinking = enable_thinking = true and also hands to the chat template.
`temperature`, `top_p`, `top_k`, `min_p` and `repetition_penalty` go only when the client gave them: left out,
SGLang picks them (a chat request takes the model's generation_config under SGLang's default
`--sampling-defaults model`; a completion request OpenAI's defaults). `frequency_penalty`, `presence_penalty`
(when non-zero), `logit_bias`, `stop_token_ids`, `stop_regex`, `regex`, `ebnf` (when set), `min_tokens` (when
above 0), `ignore_eos` and `no_stop_trim` (when true) and `skip_special_tokens` (when false) go to both
endpoints; `tools` with `tool_choice` and `parallel_tool_calls` (when set), `response_format` and
`continue_final_message` (when true), to chat only. A request's log-probabilities go as each endpoint asks for them:
chat `logprobs: true` with `top_logprobs` (when above 0), completions `logprobs: <top_logprobs>`.

Facts this rests on (SGLang 0.5.23's installed `sglang/srt/entrypoints/openai/`, checked by
tests/sglang_contract/test_wire_requests.py): every key sent is a field of ChatCompletionRequest /
CompletionRequest (their model_config does not forbid extra keys, so anything else would be dropped
silently); a streaming request may not set `return_meta_info`; with `return_spec_tokens_details: true` the
stream carries `sglext.spec_tokens_details` = {spec_verify_ct, spec_accept_length, spec_accept_rate,
spec_num_correct_drafts, spec_num_proposed_drafts, spec_correct_drafts_histogram, ...} built from the final
meta_info (utils.spec_tokens_details_from_meta_info) in its own `choices: []` chunk after the finish-reason
chunk and before the usage chunk; the histogram is as long as the largest accepted-draft count seen plus one.
Older meta_info spells the histogram `spec_accept_histogram`; both are read. Without a drafter there are no
spec keys and no sglext chunk.

Rules:
  fields         a message keeps only the keys SGLang's class for its role declares (USER_MESSAGE_FIELDS
                 for "user": ChatCompletionMessageUserParam; MESSAGE_FIELDS otherwise:
                 ChatCompletionMessageGenericParam), its tool calls only ToolCall's / FunctionResponse's, and
                 a tool only Tool's / Function's; other keys (an OpenAI user message's `name`, say) are not
                 sent, since SGLang would drop them.
  num_tokens     per content chunk = delta of the cumulative `usage.completion_tokens` (continuous usage
                 stats); a content chunk without usage counts 1. The final chunk carries the tokens no
                 content chunk carried (eos, text a stream parser held back or dropped, such as a tool
                 call's closing tags), so the chunks' num_tokens sum to usage.completion_tokens.
  prompt         the first chunk yielded from an event with usage carries its prompt_tokens and
                 prompt_tokens_details.cached_tokens (SGLang sends them on every event with continuous usage
                 stats; cached tokens under --enable-cache-report).
  verify steps   spec_verify_ct when spec details arrive with spec_verify_ct > 0 (path "speculative");
                 otherwise completion_tokens (one token per target forward, path "autoregressive").
  accept length  completion_tokens / verify_steps (SGLang's own identity for spec_accept_length).
  histogram      accept_histogram[k] = spec_correct_drafts_histogram[k]: verify steps with k accepted draft
                 tokens, i.e. k + 1 produced tokens; autoregressive: [completion_tokens].
  finish         stop -> "stop", tool_calls -> "tool_calls", length -> "length", abort -> "abort"; an error
                 event -> "error"; any other reason -> "stop". The finishing choice's `matched_stop` (the
                 stop string, stop_regex pattern or end token id SGLang ended on) goes out unchanged.
  reasoning      SGLang's `reasoning_content` deltas (from --reasoning-parser) go out as `Chunk.reasoning`,
                 `content` deltas as `Chunk.text`; neither is rewritten. The usage's `reasoning_tokens` (SGLang's
                 count of the completion tokens up to the reasoning's end) is Usage.reasoning_tokens.
  tool calls     `delta.tool_calls` (from --tool-call-parser: a call's first delta has its id and function
                 name, later ones null id and name and more `arguments` text) go out as `Chunk.tool_calls`
                 unchanged; a chunk with tool calls and no text is still yielded.
  logprobs       an event's `choices[0].logprobs` goes out as `Chunk.logprobs`, one entry per token: chat's
                 `content` entries as they are; completions' parallel lists as entries whose token and
                 alternatives are SGLang's token strings, bytes their UTF-8 (that shape has no bytes). A chunk
                 with log-probabilities and no text is still yielded.
  count          a Messages request's count (`/v1/messages/count_tokens`, SGLang's own Anthropic layer): the
                 client's body as serve/anthropic.py's count_body leaves it, with the served model's name and the
                 reasoning level the generation would get: "none" is `thinking` disabled, any other level
                 `output_config.effort` (SGLang turns it into reasoning_effort, as for a chat request).
Complexity: O(1) per event.
"""

from __future__ import annotations

from typing import Any

from ..protocol import Chunk, GenerateRequest, TokenLogprob, TopLogprob, Usage


def endpoint_for(request: GenerateRequest) -> str:
    return "/v1/chat/completions" if request.messages is not None else "/v1/completions"


# The fields SGLang 0.5.23 declares (sglang.srt.entrypoints.openai.protocol); rule `fields`.
USER_MESSAGE_FIELDS = ("role", "content")
MESSAGE_FIELDS = ("role", "content", "tool_call_id", "name", "phase", "reasoning_content", "tool_calls", "tools",
                  "prefix")  # fmt: skip
TOOL_CALL_FIELDS = ("id", "index", "type", "function")
FUNCTION_CALL_FIELDS = ("name", "arguments")
TOOL_FIELDS = ("type", "function", "defer_loading")
FUNCTION_FIELDS = ("description", "name", "parameters", "strict", "defer_loading", "key_order")


def _keep(value: Any, fields: tuple[str, ...], nested: dict[str, tuple[str, ...]] | None = None) -> Any:
    """`value` with only `fields` (and, one level down, the `nested` field's own fields); non-dicts unchanged."""
    if not isinstance(value, dict):
        return value
    kept = {key: item for key, item in value.items() if key in fields}
    for key, inner in (nested or {}).items():
        if key in kept:
            kept[key] = _keep(kept[key], inner)
    return kept


def _tool(tool: Any) -> Any:
    return _keep(tool, TOOL_FIELDS, {"function": FUNCTION_FIELDS})


def _message(message: Any) -> dict[str, Any]:
    body = message.model_dump(exclude_none=True)
    if body.get("role") == "user":
        return _keep(body, USER_MESSAGE_FIELDS)
    body = _keep(body, MESSAGE_FIELDS)
    if isinstance(body.get("tool_calls"), list):
        body["tool_calls"] = [_keep(call, TOOL_CALL_FIELDS, {"function": FUNCTION_CALL_FIELDS})
                              for call in body["tool_calls"]]  # fmt: skip
    if isinstance(body.get("tools"), list):
        body["tools"] = [_tool(tool) for tool in body["tools"]]
    return body


def build_payload(request: GenerateRequest, model: str) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_spec_tokens_details": True,
        "rid": request.request_id,
    }
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
        if getattr(request, name) is not None:
            payload[name] = getattr(request, name)
    if request.seed is not None:
        payload["seed"] = request.seed
    if request.stop:
        payload["stop"] = list(request.stop)
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(request, name):
            payload[name] = getattr(request, name)
    if request.logit_bias:
        payload["logit_bias"] = dict(request.logit_bias)
    for name in ("min_tokens", "ignore_eos", "stop_token_ids", "stop_regex", "no_stop_trim", "regex", "ebnf"):
        if getattr(request, name):
            payload[name] = getattr(request, name)
    if not request.skip_special_tokens:
        payload["skip_special_tokens"] = False
    if request.messages is None:
        payload["prompt"] = request.prompt or ""
        if request.logprobs:
            payload["logprobs"] = request.top_logprobs
        return payload
    if request.logprobs:
        payload["logprobs"] = True
        if request.top_logprobs:
            payload["top_logprobs"] = request.top_logprobs
    payload["messages"] = [_message(message) for message in request.messages]
    if request.continue_final_message:
        payload["continue_final_message"] = True
    if request.tools:
        payload["tools"] = [_tool(tool) for tool in request.tools]
        if request.tool_choice is not None:
            payload["tool_choice"] = request.tool_choice
        if request.parallel_tool_calls is not None:
            payload["parallel_tool_calls"] = request.parallel_tool_calls
    if request.response_format:
        payload["response_format"] = request.response_format
    if request.reasoning_level == "none":
        payload["chat_template_kwargs"] = {"enable_thinking": False}
    else:
        payload["reasoning_effort"] = request.reasoning_level
    return payload


def count_payload(anthropic_body: dict, request: GenerateRequest, model: str) -> dict:
    """Rule `count`: the count_tokens body for SGLang, at the request's reasoning level."""
    payload = {**anthropic_body, "model": model}
    config = dict(payload.pop("output_config", None) or {})
    payload.pop("thinking", None)
    if request.reasoning_level == "none":
        payload["thinking"] = {"type": "disabled"}
        config.pop("effort", None)
    else:
        config["effort"] = request.reasoning_level
    if config:
        payload["output_config"] = config
    return payload


def usage_from(
    completion_tokens: int, prompt_tokens: int, cached_tokens: int, spec: dict | None, reasoning_tokens: int = 0
) -> Usage:
    """Final usage of one request, by the rules above."""
    verify = int(spec.get("spec_verify_ct") or 0) if spec else 0
    if verify > 0:
        histogram = spec.get("spec_correct_drafts_histogram") or spec.get("spec_accept_histogram") or []
        steps, path, histogram = verify, "speculative", [int(count) for count in histogram]
    else:
        steps, path, histogram = completion_tokens, "autoregressive", ([completion_tokens] if completion_tokens else [])
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        verify_steps=steps,
        accept_length=round(completion_tokens / steps, 4) if steps else 0.0,
        accept_histogram=histogram,
        path=path,
        cached_prompt_tokens=cached_tokens,
        reasoning_tokens=reasoning_tokens,
    )


def logprobs_from(body: Any) -> list[TokenLogprob] | None:
    """Rule `logprobs`: the entries of one event's choice logprobs (chat's or completions' shape); None if none."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("content"), list):
        return [TokenLogprob.model_validate(entry) for entry in body["content"]] or None
    tokens = body.get("tokens") or []
    tops = body.get("top_logprobs") or [None] * len(tokens)
    entries = []
    for token, value, top in zip(tokens, body.get("token_logprobs") or [], tops):
        alternatives = [TopLogprob(token=t, bytes=list(t.encode("utf-8")), logprob=v) for t, v in (top or {}).items()]
        entries.append(TokenLogprob(token=token, bytes=list(token.encode("utf-8")), logprob=value,
                                    top_logprobs=alternatives))  # fmt: skip
    return entries or None


_FINISH = {"stop": "stop", "tool_calls": "tool_calls", "length": "length", "abort": "abort"}


class StreamMapper:
    """Feed it SGLang's SSE events (decoded JSON) in order; it returns the Chunks to yield."""

    def __init__(self) -> None:
        self.completion_tokens = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.reasoning_tokens = 0
        self.spec: dict | None = None
        self.finish_reason: str | None = None
        self.matched_stop: int | str | None = None
        self.error: Chunk | None = None
        self.yielded_tokens = 0
        self.sent_prompt = False

    def feed(self, event: dict[str, Any]) -> list[Chunk]:
        if "error" in event and not event.get("choices"):
            return [self._error_chunk(event["error"])]
        if event.get("object") == "error":
            return [self._error_chunk(event)]
        sglext = event.get("sglext") or {}
        if isinstance(sglext.get("spec_tokens_details"), dict):
            self.spec = sglext["spec_tokens_details"]
        usage = event.get("usage") or None
        previous = self.completion_tokens
        if usage:
            self.completion_tokens = int(usage.get("completion_tokens") or 0)
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            details = usage.get("prompt_tokens_details") or {}
            self.cached_tokens = int(details.get("cached_tokens") or 0)
            self.reasoning_tokens = int(usage.get("reasoning_tokens") or 0)
        choices = event.get("choices") or []
        if not choices:
            return []
        choice = choices[0]
        if "delta" in choice:
            delta = choice["delta"] or {}
            text, reasoning = delta.get("content") or "", delta.get("reasoning_content") or ""
            tool_calls = delta.get("tool_calls") or None
        else:
            text, reasoning, tool_calls = choice.get("text") or "", "", None
        if choice.get("finish_reason"):
            self.finish_reason = _FINISH.get(choice["finish_reason"], "stop")
            self.matched_stop = choice.get("matched_stop")
        scored = logprobs_from(choice.get("logprobs"))
        produced = bool(text or reasoning or tool_calls or scored)
        num_tokens = self.completion_tokens - previous if usage else (1 if produced else 0)
        if not produced and num_tokens <= 0:
            return []
        self.yielded_tokens += max(0, num_tokens)
        chunk = Chunk(text=text, reasoning=reasoning, tool_calls=tool_calls, num_tokens=max(0, num_tokens),
                      logprobs=scored)  # fmt: skip
        if usage and not self.sent_prompt:  # rule `prompt`
            chunk.prompt_tokens, chunk.cached_prompt_tokens = self.prompt_tokens, self.cached_tokens
            self.sent_prompt = True
        return [chunk]

    def finish(self) -> Chunk:
        """The last chunk: finish reason and usage (call after the stream ends with [DONE])."""
        if self.error is not None:
            return self.error
        usage = usage_from(self.completion_tokens, self.prompt_tokens, self.cached_tokens, self.spec,
                           self.reasoning_tokens)  # fmt: skip
        rest = max(0, self.completion_tokens - self.yielded_tokens)
        return Chunk(finish_reason=self.finish_reason or "stop", matched_stop=self.matched_stop, usage=usage,
                     num_tokens=rest)

    def _error_chunk(self, body: Any) -> Chunk:
        message = body.get("message", str(body)) if isinstance(body, dict) else str(body)
        code = body.get("code") if isinstance(body, dict) else None
        status = code if isinstance(code, int) and 400 <= code <= 599 else 500
        self.error = Chunk(finish_reason="error", error=f"SGLang: {message}", error_status=status)
        return self.error
