"""Streaming OpenAI-compatible client that times every request of a replay (Anthropic's Messages API and OpenAI's
Responses API too: messages_api.py and responses_api.py read their events into the same record).

Measurement rule: t0 = clock() just before the POST; each SSE `data:` event whose first choice carries
text (`delta.content`, `delta.reasoning_content`, `delta.tool_calls`, or `text` on /v1/completions)
is a content chunk arriving at `clock() - t0`; TTFT is the first such arrival; ITL entries are the gaps
between consecutive content chunks; E2E is the time the stream ended. A chunk's token count is the
growth of `usage.completion_tokens` when the server streams cumulative usage on every chunk, else 1.
An answer's calls (`answer_calls`): per call `index`, the first function name its deltas carry, by index, of
the calls whose arguments (its deltas' `arguments` joined) parse as JSON: a call the answer's end cut off
mid-arguments is not a call.
The final chunk (`choices: []` + `usage`) supplies prompt/output tokens and acceptance
(`accept_length`, `verify_steps`, `accept_histogram`, `path`). A stream without `data: [DONE]` is
"incomplete_stream"; a dropped connection is "stream_cut"; an HTTP status >= 400 is "http_error";
an answer the parser cannot follow is "bad_response". Each failure is recorded and the replay goes on.
Complexity: O(chunks) per request.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ..serve.server_timing import HEADER as SERVER_TIMING, parse_server_timing
from . import responses_api
from .endpoint import auth_headers, error_message
from .messages_api import MessagesEvents, body_parts
from .records import ErrorKind, RequestRecord
from .traces.model import TraceMessage, TraceRequest
from .traces.synthetic import render_synthetic


class ClientSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint: str = Field(description="Base URL, e.g. http://127.0.0.1:8000.")
    model: str = Field(description="Model name sent in every request.")
    api: Literal["chat", "completions", "messages", "responses"] = Field(
        default="chat",
        description="Which route to call: OpenAI's chat, completions or responses, or Anthropic's messages.",
    )
    pool: str | None = Field(default=None, description="Force this pool (x-dspine-pool request header).")
    api_key: str | None = Field(default=None, description="Bearer token; None sends no Authorization header.")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens_cap: int | None = Field(default=None, ge=1, description="Upper bound on max_tokens sent.")
    timeout_s: float = Field(default=600.0, gt=0.0, description="Whole-request deadline.")
    keep_text: bool = Field(default=False, description="Store generated text in the records.")


def build_body(request: TraceRequest, settings: ClientSettings) -> dict[str, JsonValue]:
    """The JSON body for one trace request (synthetic prompts rendered here, lazily)."""
    max_tokens = request.max_tokens
    if settings.max_tokens_cap is not None:
        max_tokens = min(max_tokens, settings.max_tokens_cap)
    body: dict[str, JsonValue] = {
        "model": settings.model,
        "max_tokens": max_tokens,
        "temperature": settings.temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    text = render_synthetic(request.synthetic_prompt) if request.synthetic_prompt is not None else request.prompt
    if settings.api == "messages":  # messages_api.py rule `body`
        del body["stream_options"]
        messages = request.messages or [TraceMessage(role="user", content=text)]
        return {**body, **body_parts(messages, request.tools)}
    if settings.api == "completions":
        if text is None:
            raise ValueError(f"{request.request_id}: a chat trace cannot be sent to /v1/completions")
        body["prompt"] = text
    elif request.messages is not None:
        body["messages"] = [m.model_dump(exclude_none=True) for m in request.messages]
    else:
        body["messages"] = [{"role": "user", "content": text}]
    if request.tools and settings.api != "completions":
        body["tools"] = request.tools
    if settings.api == "responses":  # responses_api.py rule `body`
        return responses_api.body(body)
    return body


ROUTES = {"completions": "/v1/completions", "messages": "/v1/messages", "responses": "/v1/responses"}
READERS = {"messages": MessagesEvents, "responses": responses_api.ResponsesEvents}  # another API's events
ENDS = {"messages": "message_stop", "responses": responses_api.END}  # what a stream that stopped early lacks


class _Stream:
    """What one response stream has shown so far (an Anthropic one read by messages_api.py's rule `events`, an
    OpenAI Responses one by responses_api.py's)."""

    def __init__(self, api: str = "chat") -> None:
        self.events = READERS[api]() if api in READERS else None
        self.offsets: list[float] = []
        self.tokens: list[int] = []
        self.cumulative = 0
        self.usage: dict[str, JsonValue] = {}
        self.finish_reason: str | None = None
        self.done = False
        self.text: list[str] = []
        self.calls: dict[int, list[str]] = {}  # a tool call's index -> [its function's name, its arguments so far]

    def feed(self, data: str, offset_s: float) -> tuple[ErrorKind, str] | None:
        if data.strip() == "[DONE]":
            self.done = True
            return None
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            return "bad_response", f"unparseable SSE data: {data[:120]!r}"
        if not isinstance(event, dict):
            return "bad_response", f"unexpected SSE data: {data[:120]!r}"
        if self.events is not None:
            return self._feed_api_event(event, offset_s)
        if event.get("error"):
            err = event["error"]
            return "stream_error", str(err.get("message", err) if isinstance(err, dict) else err)
        usage = event.get("usage") if isinstance(event.get("usage"), dict) else None
        choices = event.get("choices") or []
        if not choices:
            if usage:
                self.usage = usage
            return None
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        piece = choice.get("text") or delta.get("content") or delta.get("reasoning_content") or ""
        self._content(piece, delta.get("tool_calls") or [], offset_s, usage)
        if usage:
            self.usage = usage
        return None

    def _content(self, piece: str, calls: list[dict], offset_s: float, usage: dict | None) -> None:
        """A content chunk (text, or tool-call deltas), if the event carries one."""
        for call in calls:
            function = call.get("function") or {}
            name_and_arguments = self.calls.setdefault(call.get("index", 0), ["", ""])
            name_and_arguments[0] = name_and_arguments[0] or function.get("name") or ""
            name_and_arguments[1] += function.get("arguments") or ""
        if piece or calls:
            count = 1
            if usage and isinstance(usage.get("completion_tokens"), int):
                count = max(1, usage["completion_tokens"] - self.cumulative)
                self.cumulative = usage["completion_tokens"]
            self.offsets.append(offset_s)
            self.tokens.append(count)
            self.text.append(piece)

    def _feed_api_event(self, event: dict, offset_s: float) -> tuple[ErrorKind, str] | None:
        piece, call, error = self.events.feed(event)
        if error is not None:
            return "stream_error", error
        self._content(piece or "", [call] if call else [], offset_s, None)
        self.usage, self.finish_reason, self.done = self.events.usage, self.events.finish_reason, self.events.done
        return None

    def complete_calls(self) -> list[str]:
        """`answer_calls` (the rule above)."""
        names = []
        for index in sorted(self.calls):
            name, arguments = self.calls[index]
            try:
                json.loads(arguments)
            except ValueError:
                continue
            if name:
                names.append(name)
        return names


class StreamingClient:
    """Sends trace requests over one injected `httpx.AsyncClient` and returns `RequestRecord`s."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        settings: ClientSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ):
        self.http = http
        self.settings = settings
        self.clock = clock
        self.wall_clock = wall_clock

    def _headers(self, request: TraceRequest, session_id: str, pool: str | None = None) -> dict[str, str]:
        headers = {"x-session-id": session_id, "accept": "text/event-stream", **auth_headers(self.settings.api_key)}
        if pool or self.settings.pool:
            headers["x-dspine-pool"] = pool or self.settings.pool
        return headers

    async def send(
        self,
        request: TraceRequest,
        *,
        repetition: int = 0,
        run_start_s: float = 0.0,
        deliver: Callable[[RequestRecord], None] | None = None,
        pool: str | None = None,
    ) -> RequestRecord:
        """Send one request (to `pool` when given: a copy of its conversation of its own, session id
        `<session>@<pool>`); the record goes to `deliver` too, even when the task is cancelled."""
        settings = self.settings
        route = ROUTES.get(settings.api, "/v1/chat/completions")
        url = settings.endpoint.rstrip("/") + route
        body = build_body(request, settings)
        session_id = request.session_id if repetition == 0 else f"{request.session_id}-r{repetition}"
        if pool:
            session_id = f"{session_id}@{pool}"
        stream = _Stream(settings.api)
        status: int | None = None
        headers: httpx.Headers = httpx.Headers()
        failure: tuple[ErrorKind, str] | None = None
        wall0 = self.wall_clock()
        t0 = self.clock()
        end = t0
        try:
            async with asyncio.timeout(settings.timeout_s):
                headers_out = self._headers(request, session_id, pool)
                async with self.http.stream("POST", url, json=body, headers=headers_out) as resp:
                    status, headers = resp.status_code, resp.headers
                    if status >= 400:
                        failure = ("http_error", error_message(status, await resp.aread()))
                    else:
                        async for line in resp.aiter_lines():
                            if line.startswith("data:"):
                                failure = stream.feed(line[5:].strip(), self.clock() - t0)
                                if failure or stream.done:
                                    break
                        if failure is None and not stream.done:
                            end = ENDS.get(settings.api, "data: [DONE]")
                            failure = ("incomplete_stream", f"stream ended without {end}")
        except TimeoutError:
            failure = ("timeout", f"no complete answer within {settings.timeout_s:g} s")
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            failure = ("connect", f"cannot connect to {settings.endpoint}: {exc}")
        except httpx.TimeoutException as exc:
            failure = ("timeout", f"{type(exc).__name__} within {settings.timeout_s:g} s")
        except httpx.HTTPError as exc:  # protocol, read and write errors: the connection broke
            failure = ("stream_cut" if status is not None else "connect", f"{type(exc).__name__}: {exc}")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a malformed answer
            failure = ("bad_response", f"{type(exc).__name__}: {exc}")
        except asyncio.CancelledError:
            failure = ("cancelled", "interrupted while in flight")
            now = self.clock()
            record = self._record(
                request, repetition, run_start_s, t0, wall0, now, status, headers, stream, failure, pool
            )
            if deliver is not None:
                deliver(record)
            raise
        end = self.clock()
        record = self._record(
            request, repetition, run_start_s, t0, wall0, end, status, headers, stream, failure, pool
        )
        if deliver is not None:
            deliver(record)
        return record

    def _record(
        self,
        request: TraceRequest,
        repetition: int,
        run_start_s: float,
        t0: float,
        wall0: float,
        end: float,
        status: int | None,
        headers: httpx.Headers,
        stream: _Stream,
        failure: tuple[ErrorKind, str] | None,
        pool: str | None = None,
    ) -> RequestRecord:
        usage = stream.usage
        completion = usage.get("completion_tokens")
        output_tokens = completion if isinstance(completion, int) else sum(stream.tokens)
        prompt = usage.get("prompt_tokens")
        details = usage.get("prompt_tokens_details") or {}
        cached = usage.get("cached_prompt_tokens", details.get("cached_tokens") if isinstance(details, dict) else None)
        accept = usage.get("accept_length")
        timing = parse_server_timing(headers.get(SERVER_TIMING))
        return RequestRecord(
            request_id=f"{request.request_id}-r{repetition}" + (f"@{pool}" if pool else ""),
            trace_request_id=request.request_id,
            session_id=request.session_id,
            turn_index=request.turn_index,
            workload_class=request.workload_class,
            repetition=repetition,
            api=self.settings.api,
            arm=headers.get("x-dspine-arm", "") or (pool or ""),  # a forced copy is its pool's arm, refused or not
            pool=headers.get("x-dspine-pool", "") or (pool or ""),
            replica=headers.get("x-dspine-replica", ""),
            path=headers.get("x-dspine-path", "") or str(usage.get("path") or ""),
            server_replica_s=timing.get("replica"),
            server_ingress_s=timing.get("ingress"),
            http_status=status,
            prompt_tokens=prompt if isinstance(prompt, int) else request.prompt_tokens,
            trace_prompt_tokens=request.prompt_tokens,
            max_tokens=min(request.max_tokens, self.settings.max_tokens_cap or request.max_tokens),
            output_tokens=output_tokens,
            cached_prompt_tokens=cached if isinstance(cached, int) else None,
            ttft_s=stream.offsets[0] if stream.offsets else None,
            e2e_s=max(0.0, end - t0),
            itl_s=[b - a for a, b in zip(stream.offsets, stream.offsets[1:])],
            chunk_offsets_s=stream.offsets,
            chunk_tokens=stream.tokens,
            accept_length=float(accept) if isinstance(accept, (int, float)) else None,
            verify_steps=usage.get("verify_steps") if isinstance(usage.get("verify_steps"), int) else None,
            accept_histogram=[int(x) for x in usage.get("accept_histogram") or []],
            finish_reason=stream.finish_reason,
            error_kind=failure[0] if failure else None,
            error=failure[1] if failure else None,
            start_offset_s=max(0.0, t0 - run_start_s),
            start_unix_s=wall0,
            end_unix_s=wall0 + max(0.0, end - t0),
            output_text="".join(stream.text) if self.settings.keep_text else None,
            num_tools=len(request.tools or []) if self.settings.api != "completions" else 0,
            recorded_calls=request.recorded_calls,
            answer_calls=stream.complete_calls(),
        )
