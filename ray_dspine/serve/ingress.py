"""The OpenAI-compatible ingress: validate, apply the traffic policy, call a pool, stream back.

Anthropic's Messages API (`/v1/messages`) and OpenAI's Responses API (`/v1/responses`) take the same path: the
body becomes a chat body first, and the chat answer, stream or error becomes that API's (anthropic.py,
openai_responses.py).

Per request: authenticate; parse and validate the body (400 naming the field); pick the reasoning
level, the session, then (pool, arm) by the traffic policy; fingerprint the prompt's prefix; call
the pool's replica deployment through its handle with a typed `GenerateRequest`; answer with the
`x-dspine-pool`, `x-dspine-arm`, `x-dspine-replica` and `x-dspine-path` headers (the path the replica
stamped on the first chunk: speculative, autoregressive, or autoregressive-fallback when a drafter pool
serves without its drafter), and `Server-Timing`
(where the time to the first chunk went: server_timing.py). The first chunk is awaited before the
response starts, so a refusal from the engine still becomes a 4xx.
Before the call, admission.py decides by time: a request whose estimated completion would pass its deadline
(`request_timeout_s`, or the client's `x-dspine-deadline-ms`) is refused at once with 429 (503 while its pool
has no healthy replica) and a Retry-After from the same estimate; that deadline is also the request's
end-to-end deadline (504 past it). The health monitor's snapshots feed the pools' outage state
(`replicas_running`); when a pool's outage begins, every request of it still waiting for its first chunk is
judged again and, if it can no longer finish in time, answered that 503 at once.
Faults: a call whose replica stopped before its first chunk is made again on a live replica, at most
`retry_unstarted_attempts` more times, never once anything was sent; a stream cut later ends with an error
event, a terminal chunk with finish_reason "error" and `[DONE]` (responses.py), and a non-streaming request
gets 502 `replica_failed` naming the cause. Every such end counts as finish_reason "error" in the metrics;
refusals before any work (429 by admission, 503 by Ray) count in dspine_refused_requests by status.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from ..config import AppConfig
from ..engines.protocol import ChatMessage, Chunk, GenerateRequest
from ..routing.fingerprint import conversation_text, prefix_hashes
from ..routing.traffic import assign, reasoning_level_of, session_key
from . import anthropic, openai_responses, openai_responses_stream, responses
from .access import REFUSAL, ApiKeyGate, key_matches
from .admission import DEADLINE_HEADER, Admission, Ticket, parse_deadline_ms
from .body import parse_body
from .health import HealthMonitor, readiness
from .errors import ApiError, error_response, from_validation_error, install_error_handlers
from .metrics import RequestMetrics
from .openai_schema import ChatCompletionRequest, CompletionRequest
from .request_features import refusal
from .server_timing import HEADER, server_timing

log = logging.getLogger("ray_dspine.ingress")

CHARS_PER_TOKEN_ESTIMATE = 4  # the usual English/code average of BPE tokenizers
PREFIX_BLOCK_CHARS = 2048  # 512 tokens at that rate: the engines' prefix-cache block
HEALTH_TIMEOUT_S = 2.0


class IngressCore:
    """Framework-free request handling; `RayIngress` wraps it in a Serve deployment."""

    def __init__(
        self, config: AppConfig, handles: dict, metrics: RequestMetrics | None = None, admission: Admission | None = None
    ):
        self.config = config
        self.server = config.server
        self.handles = handles
        self.metrics = metrics or RequestMetrics()
        self.admission = admission or Admission.from_config(config, time.monotonic)  # the deadlines' clock
        self.started_at = int(time.time())
        self.health_monitor: HealthMonitor | None = None  # set by the Serve deployment (app.py)
        self._outage_waiters: dict[str, set[asyncio.Future]] = {name: set() for name in handles}  # woken when one begins

    def replicas_running(self, running: dict[str, int]) -> None:
        """A health snapshot's RUNNING replicas per pool: update the pools' outage state and wake the requests
        of a pool whose outage begins, so that they are judged again (first_chunk)."""
        for name, count in running.items():
            if name in self._outage_waiters and self.admission.pool(name).replicas_running(count):
                log.warning("pool %s has no healthy replica; waiting requests are judged again", name)
                waiters, self._outage_waiters[name] = self._outage_waiters[name], set()
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)

    # -- checks -----------------------------------------------------------------------------
    def authenticate(self, request: Request) -> None:
        env = self.server.api_key_env
        key = os.environ.get(env, "") if env else ""
        if not key:
            return
        if not key_matches(request.headers.get("authorization", ""), request.headers.get("x-api-key", ""), key):
            raise ApiError(401, REFUSAL, code="invalid_api_key")

    async def read_json(self, request: Request) -> dict:
        """The body as a JSON object, read no further than the size limit (body.py's rules)."""
        limit = self.server.max_request_bytes
        content_type = request.headers.get("content-type")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"request body is {declared} bytes; the limit is {limit}", code="request_too_large")
        parts, size = [], 0
        async for part in request.stream():
            parts.append(part)
            size += len(part)
            if size > limit:
                raise ApiError(413, f"request body is over {limit} bytes, the limit", code="request_too_large")
        return parse_body(b"".join(parts), content_type, limit)

    def check_model(self, model: str) -> None:
        if model != self.server.served_model_name:
            raise ApiError(
                404,
                f"The model `{model}` does not exist; this server serves `{self.server.served_model_name}`",
                param="model",
                code="model_not_found",
            )

    def route(self, request: Request, body: dict, messages: list[ChatMessage] | None):
        try:
            level = reasoning_level_of(body, default=self.config.traffic.default_reasoning_level)
        except ValueError as exc:
            raise ApiError(400, str(exc), param="reasoning_effort", code="invalid_value") from exc
        try:
            session = session_key(dict(request.headers), _session_fields(body, messages))
        except ValueError:  # nothing to derive a session from (an empty prompt): no affinity
            session = "req:" + uuid.uuid4().hex
        pool, arm = assign(self.config.traffic, level, session)
        forced = request.headers.get("x-dspine-pool")
        if forced and self.server.allow_pool_header:
            if forced not in self.handles:
                raise ApiError(
                    400, f"x-dspine-pool names unknown pool {forced!r}; pools: {sorted(self.handles)}",
                    param="x-dspine-pool",
                )
            pool, arm = forced, forced
        return level, session, pool, arm

    def check_features(self, pool: str, parsed) -> None:
        """Refuse what the pool's engine does not serve (request_features.py)."""
        found = refusal(parsed, pool, self.config.pool(pool).engine.kind)
        if found is not None:
            raise ApiError(400, found.message, param=found.param, code=found.code)

    # -- building the typed request -----------------------------------------------------------
    def build_request(self, body: dict, request: Request, *, chat: bool) -> tuple[GenerateRequest, object]:
        try:
            parsed = (ChatCompletionRequest if chat else CompletionRequest).model_validate(body)
        except ValidationError as exc:
            raise from_validation_error(exc, body) from exc
        self.check_model(parsed.model)
        messages = None
        token_ids = None
        if chat:
            messages = _engine_messages(parsed)
            text = conversation_text(messages)
        else:
            token_ids = parsed.prompt_token_ids()
            text = parsed.prompt_text() if token_ids is None else " ".join(map(str, token_ids))
        level, session, pool, arm = self.route(request, body, messages)
        self.check_features(pool, parsed)
        max_tokens = getattr(parsed, "max_completion_tokens", None) or parsed.max_tokens
        typed = GenerateRequest(
            request_id=("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24],
            messages=messages,
            prompt=None if chat else (parsed.prompt_text() or ""),
            max_tokens=max_tokens or self.server.default_max_tokens,
            clamp_max_tokens=max_tokens is None,
            temperature=parsed.temperature,  # None: the engine's default (openai_schema.py rule `omitted`)
            top_p=parsed.top_p,
            top_k=parsed.top_k,
            min_p=parsed.min_p,
            seed=parsed.seed,
            stop=parsed.stop_list(),
            reasoning_level=level,
            session_id=session,
            prefix_hashes=prefix_hashes(text, PREFIX_BLOCK_CHARS),
            estimated_prompt_tokens=len(token_ids) if token_ids else _estimate_tokens(text, parsed, chat),
            pool=pool,
            arm=arm,
            tools=parsed.tool_dicts() if chat else None,
            tool_choice=parsed.tool_choice if chat and parsed.tools else None,
            parallel_tool_calls=parsed.parallel_tool_calls if chat and parsed.tools else None,
            stream=parsed.stream is True,
            response_format=_response_format(parsed) if chat else None,
            frequency_penalty=parsed.frequency_penalty or 0.0,
            presence_penalty=parsed.presence_penalty or 0.0,
            logit_bias=parsed.logit_bias or None,
            repetition_penalty=parsed.repetition_penalty,
            min_tokens=parsed.min_tokens,
            ignore_eos=parsed.ignore_eos,
            stop_token_ids=parsed.stop_token_ids or [],
            stop_regex=parsed.stop_regex_list(),
            no_stop_trim=parsed.no_stop_trim,
            skip_special_tokens=parsed.skip_special_tokens,
            continue_final_message=chat and parsed.continue_final_message,
            regex=parsed.regex or None,
            ebnf=parsed.ebnf or None,
            logprobs=parsed.logprobs is True if chat else parsed.logprobs is not None,
            top_logprobs=(parsed.top_logprobs if chat else parsed.logprobs) or 0,
        )
        return typed, parsed

    # -- serving ------------------------------------------------------------------------------
    async def serve(self, request: Request, *, chat: bool, to_chat=None) -> Response:
        """One completion request (its body first made a chat body by `to_chat` when given); an unexpected
        failure is a logged 500 in OpenAI's shape, never a crash."""
        try:
            return await self._serve(request, chat=chat, to_chat=to_chat)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("unexpected %s while serving a request", type(exc).__name__, exc_info=True)
            failure = ApiError(500, f"internal error: {type(exc).__name__}", code="internal_error")
            return error_response(failure, path=request.url.path)

    def deadline_of(self, request: Request, arrived: float) -> float:
        """The request's end-to-end deadline (monotonic seconds): request_timeout_s after it arrived, or
        sooner by its x-dspine-deadline-ms header, less deadline_margin_ms (at most half) (admission.py)."""
        try:
            header_s = parse_deadline_ms(request.headers.get(DEADLINE_HEADER))
        except ValueError as exc:
            raise ApiError(400, str(exc), param=DEADLINE_HEADER, code="invalid_value") from exc
        timeout_s = self.server.request_timeout_s
        if header_s is not None:
            margin_s = min(self.server.deadline_margin_ms / 1000.0, header_s / 2)
            timeout_s = min(timeout_s, header_s - margin_s)
        return arrived + timeout_s

    async def first_chunk(self, typed: GenerateRequest, token_ids: list[int] | None, deadline: float):
        """(stream, first chunk) of the request's call to its pool.

        A call whose replica stopped before its first chunk arrived (nothing was sent to the client) is made
        again, at most `retry_unstarted_attempts` more times; Ray's router has dropped the dead replica by
        then, so the call goes to a live one. Any other failure, and the deadline, end the request."""
        attempts = 1 + self.server.retry_unstarted_attempts
        for attempt in range(attempts):
            handle = self.handles[typed.pool].options(stream=True, session_id=typed.session_id or "")
            stream = handle.generate.remote(typed) if token_ids is None else handle.generate.remote(typed, token_ids)
            try:
                return stream, await self._first_unless_refused(stream, typed.pool, deadline)
            except (responses.DeadlineExceeded, ApiError):
                stream.cancel()
                raise
            except StopAsyncIteration as exc:
                raise responses.replica_failed(responses.StreamEndedEarly()) from exc
            except asyncio.CancelledError as exc:
                if not responses.cancelled_by_stream():
                    stream.cancel()  # the client left: stop the replica's work
                    raise
                raise responses.replica_failed(exc) from exc
            except Exception as exc:
                if attempt + 1 >= attempts or not responses.replica_stopped(exc):
                    raise
                self._refuse_if_unmeetable(typed.pool, deadline)
                log.warning(
                    "request %s: its replica stopped before the first chunk (%s); trying again (%d of %d)",
                    typed.request_id, type(exc).__name__, attempt + 2, attempts,
                )  # fmt: skip
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _refuse_if_unmeetable(self, pool: str, deadline: float) -> None:
        """Raise the admission's refusal (an ApiError) for a request of `pool` that can no longer finish in time."""
        verdict = self.admission.pool(pool).decide(deadline - time.monotonic())
        if not verdict.admit:
            raise ApiError(verdict.status, verdict.message, code=verdict.code, retry_after_s=verdict.retry_after_s)

    async def _first_unless_refused(self, stream, pool: str, deadline: float) -> Chunk:
        """The stream's first chunk; each time an outage of the pool begins meanwhile, the request is judged
        again and the admission's refusal raised when it can no longer finish in time."""
        chunk = asyncio.ensure_future(responses.next_chunk(stream, deadline))
        try:
            while True:
                outage = asyncio.get_running_loop().create_future()
                self._outage_waiters[pool].add(outage)
                try:
                    await asyncio.wait({chunk, outage}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    outage.cancel()
                    self._outage_waiters[pool].discard(outage)
                if chunk.done():
                    return chunk.result()
                self._refuse_if_unmeetable(pool, deadline)
        finally:
            if not chunk.done():
                chunk.cancel()

    async def serve_messages(self, request: Request) -> Response:
        """POST /v1/messages: Anthropic's Messages API over the chat path (anthropic.py)."""
        stops: list[str] = []

        def to_chat(body: dict) -> dict:
            translated = _chat_body_of(anthropic.chat_body, body)
            stops.extend(translated.get("stop") or [])
            return translated

        response = await self.serve(request, chat=True, to_chat=to_chat)
        if response.status_code >= 400:
            return response  # already Anthropic's shape: errors.py shapes an error by the request's path
        headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")}
        if isinstance(response, StreamingResponse):
            translator = anthropic.MessageStream(self.server.served_model_name, stops)
            events = _translated(response.body_iterator, translator)
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
        return JSONResponse(anthropic.message(json.loads(response.body), stops), headers=headers)

    async def serve_responses(self, request: Request) -> Response:
        """POST /v1/responses: OpenAI's Responses API over the chat path (openai_responses.py); both kinds take the
        chat stream, and a request that did not ask to stream gets the final response."""
        asked: dict = {}

        def to_chat(body: dict) -> dict:
            translated = _chat_body_of(openai_responses.chat_body, body)
            asked.update(body)
            return translated

        response = await self.serve(request, chat=True, to_chat=to_chat)
        if response.status_code >= 400:
            return response
        headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")}
        reasoning = asked.get("reasoning")
        summary = isinstance(reasoning, dict) and reasoning.get("summary") is not None
        translator = openai_responses_stream.ResponseStream(openai_responses.echo(asked), summary=summary)
        events = _translated(response.body_iterator, translator)
        if asked.get("stream") is True:
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
        async for _ in events:
            pass
        if translator.error is not None:
            failure = ApiError(openai_responses_stream.status_of(translator.error), translator.error.get("message") or "",
                               param=translator.error.get("param"), code=translator.error.get("code"))  # fmt: skip
            return error_response(failure, self.server.retry_after_s)
        return JSONResponse(translator.response(), headers=headers)

    async def retrieve_response(self, response_id: str) -> Response:
        """GET /v1/responses/{id}: nothing is stored here (openai_responses.py rule `refused`)."""
        missing = ApiError(404, f"No response with id {response_id!r}: {openai_responses.NOTHING_STORED}",
                           param="response_id", code="not_found")  # fmt: skip
        return error_response(missing)

    async def count_message_tokens(self, request: Request) -> Response:
        """POST /v1/messages/count_tokens (anthropic.py rule `count`): routed as the request would be, counted by
        that pool's engine."""
        try:
            self.authenticate(request)
            body = {**await self.read_json(request), "max_tokens": 1}  # counting needs no max_tokens
            typed, _ = self.build_request(_chat_body_of(anthropic.chat_body, body), request, chat=True)
        except ApiError as exc:
            return error_response(exc, self.server.retry_after_s, path=anthropic.PATH)
        try:
            call = self.handles[typed.pool].count_tokens.remote(typed, anthropic.count_body(body))
            answer = await asyncio.wait_for(call, self.server.request_timeout_s)
        except asyncio.TimeoutError:
            late = ApiError(504, "counting the tokens took longer than request_timeout_s", code="timeout")
            return error_response(late, path=anthropic.PATH)
        except Exception as exc:  # backpressure, unavailable replicas, a replica that stopped
            failure = responses.handle_error(exc, self.admission.pool(typed.pool).busy_retry_after_s())
            return error_response(failure, self.server.retry_after_s, path=anthropic.PATH)
        if "error" in answer:
            refusal = ApiError(answer["status"], answer["error"], param=answer.get("param"))
            return error_response(refusal, self.server.retry_after_s, path=anthropic.PATH)
        return JSONResponse({"input_tokens": answer["input_tokens"]})

    async def _serve(self, request: Request, *, chat: bool, to_chat=None) -> Response:
        retry = self.server.retry_after_s
        refuse = functools.partial(error_response, path=request.url.path)  # errors.py: the shape by the route
        taken = time.monotonic()
        try:
            self.authenticate(request)
            deadline = self.deadline_of(request, taken)
            body = await self.read_json(request)
            if to_chat is not None:
                body = to_chat(body)
            typed, parsed = self.build_request(body, request, chat=chat)
        except ApiError as exc:
            return refuse(exc, retry)
        admission = self.admission.pool(typed.pool)
        verdict = admission.decide(deadline - time.monotonic())
        if not verdict.admit:
            self.metrics.record_refusal(typed, Chunk(error=verdict.message, error_status=verdict.status))
            return refuse(ApiError(verdict.status, verdict.message, code=verdict.code,
                                   retry_after_s=verdict.retry_after_s))  # fmt: skip
        ticket = admission.begin(deadline)
        started = time.monotonic()
        token_ids = None if chat else parsed.prompt_token_ids()
        try:
            stream, first = await self.first_chunk(typed, token_ids, deadline)
            first_at = time.monotonic()
        except asyncio.CancelledError:  # the client left before the first chunk
            ticket.end(completed=False)
            raise
        except responses.DeadlineExceeded:
            ticket.end(completed=False)
            self.metrics.start(typed, "", started).finish("error", None)
            return refuse(ApiError(504, responses.timeout_message(typed), code="timeout"), retry)
        except Exception as exc:  # backpressure, unavailable replicas, a replica that stopped
            ticket.end(completed=False)
            failure = exc if isinstance(exc, ApiError) else responses.handle_error(exc, admission.busy_retry_after_s())
            if failure.status == 503:  # refused before any work: not an error of the pool's
                self.metrics.record_refusal(typed, Chunk(error=failure.message, error_status=503))
            else:
                self.metrics.start(typed, "", started).finish("error", None)
            return refuse(failure, retry)
        if first.error is not None:
            ticket.end(completed=False)
            stream.cancel()
            self.metrics.record_refusal(typed, first)
            code = getattr(first, "error_code", None)
            return refuse(ApiError(first.error_status or 500, first.error, param=first.error_param, code=code), retry)
        headers = {
            "x-dspine-pool": typed.pool,
            "x-dspine-arm": typed.arm,
            "x-dspine-replica": first.replica or "",
            "x-dspine-path": first.path or "",
            HEADER: server_timing(started - taken, first.replica_s, first_at - taken),
        }
        if first.replica_s is not None:
            routing_s = max(0.0, first_at - started - first.replica_s)
            self.metrics.record_first_chunk(typed, first.path or "", first.replica_s, routing_s)
        timer = TicketedTimer(self.metrics.start(typed, first.path or "", started), ticket, first_at, first.replica_s)
        model = self.server.served_model_name
        if parsed.stream is True:
            options = parsed.stream_options
            include_usage = bool(options and options.include_usage)
            continuous = bool(options and options.continuous_usage_stats)
            events = responses.sse_events(stream, first, typed, model, chat, include_usage, continuous, timer, deadline)
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
        try:
            payload = await responses.collect(stream, first, typed, model, chat, timer, deadline)
        except ApiError as exc:
            return refuse(exc, retry)
        return JSONResponse(payload, headers=headers)

    async def list_models(self) -> dict:
        return {"object": "list", "data": [self._model_card()]}

    async def retrieve_model(self, model: str) -> dict:
        """GET /v1/models/{model}: the served model's card, or 404 naming the model."""
        self.check_model(model)
        return self._model_card()

    def _model_card(self) -> dict:
        return {"id": self.server.served_model_name, "object": "model", "created": self.started_at, "owned_by": "ray-dspine"}

    async def health(self) -> tuple[int, dict]:
        """Readiness (health.py's rules) from the monitor's snapshot: memory only, never a call to a pool.

        Without a monitor (an in-process core with fake handles) each pool's `load` is asked instead."""
        if self.health_monitor is not None:
            return self.health_monitor.readiness()
        running = {}
        for name, handle in self.handles.items():
            try:
                load = await asyncio.wait_for(handle.load.remote(), timeout=HEALTH_TIMEOUT_S)
                running[name] = 1 if load.get("healthy") else 0
            except Exception:  # no replica yet, or it is still loading its model
                running[name] = 0
        return readiness(list(self.handles), running, 0.0)

    async def describe_engines(self) -> dict:
        described = {}
        for name, handle in self.handles.items():
            described[name] = await handle.describe.remote()
        return described


class TicketedTimer:
    """A request's metrics timer that also ends its admission ticket: a normal finish is a completion, whose
    service time is its time on the replica (the first chunk's replica seconds plus the time since it)."""

    def __init__(self, timer, ticket: Ticket, first_at: float, replica_s: float | None, clock=time.monotonic):
        self._timer = timer
        self._ticket = ticket
        self._first_at = first_at
        self._replica_s = replica_s
        self._clock = clock

    def tokens(self, count: int) -> None:
        self._timer.tokens(count)

    def finish(self, reason: str, usage) -> None:
        service_s = None if self._replica_s is None else self._replica_s + (self._clock() - self._first_at)
        self._ticket.end(completed=reason not in ("error", "abort"), service_s=service_s)
        self._timer.finish(reason, usage)


def make_fastapi() -> FastAPI:
    app = FastAPI(title="ray-dspine", docs_url=None, redoc_url=None)

    install_error_handlers(app)
    app.add_middleware(ApiKeyGate)  # every route, docs and unknown paths included (access.py)
    return app


def _chat_body_of(translate, body: dict) -> dict:
    """The chat body `translate` (anthropic.chat_body, openai_responses.chat_body) makes of another API's request
    body, its refusals as 400s naming the field."""
    try:
        return translate(body)
    except ValidationError as exc:
        raise from_validation_error(exc, body) from exc
    except (anthropic.Refused, openai_responses.Refused) as exc:
        raise ApiError(400, str(exc), param=exc.param, code="invalid_value") from exc


async def _translated(chat_events, translator):
    """A translator's events for a chat stream's (anthropic.MessageStream, openai_responses_stream.ResponseStream);
    closing this closes the chat stream, which stops the replica's work."""
    try:
        async for event in chat_events:
            for out in translator.feed(event):
                yield out
            if translator.done:
                return
    finally:
        await chat_events.aclose()


def _engine_messages(parsed) -> list[ChatMessage]:
    """The conversation as the engines take it; a part no pool serves is a 400 naming it."""
    messages = []
    for index, message in enumerate(parsed.messages):
        try:
            text = message.text()
        except ValueError as exc:
            raise ApiError(400, f"messages[{index}].content: {exc}", param=f"messages[{index}].content",
                           code="unsupported_parameter") from exc
        messages.append(ChatMessage(role=message.role, content=text, **message.tool_fields()))
    return messages


def _estimate_tokens(text: str, parsed, chat: bool) -> int:
    """The prompt's tokens before any tokenizer sees it: its text's characters, and the tools' JSON where the
    template will render them (tool_choice "none" renders none, in SGLang's serving and the embedded engine's),
    at CHARS_PER_TOKEN_ESTIMATE characters a token."""
    tools = parsed.tool_dicts() if chat and parsed.tool_choice != "none" else None
    return (len(text) + (len(json.dumps(tools)) if tools else 0)) // CHARS_PER_TOKEN_ESTIMATE + 1


def _session_fields(body: dict, messages: list[ChatMessage] | None) -> dict:
    """What session_key reads, from the validated request: `user`, the messages as text, or the prompt."""
    fields = {"user": body.get("user")}
    if messages is not None:
        fields["messages"] = [{"role": m.role, "content": m.content or ""} for m in messages]
    elif isinstance(body.get("messages"), list) and body["messages"]:
        fields["messages"] = body["messages"]
    elif isinstance(body.get("prompt"), str):
        fields["prompt"] = body["prompt"]
    elif isinstance(body.get("prompt"), list) and body["prompt"] and isinstance(body["prompt"][0], str):
        fields["prompt"] = body["prompt"][0]
    elif body.get("prompt"):
        fields["prompt"] = json.dumps(body["prompt"])
    return fields


def _response_format(parsed) -> dict | None:
    """The chat request's response_format for the engine; "text" is the default and travels as None."""
    if parsed.response_format is None or parsed.response_format.type == "text":
        return None
    return parsed.response_format.model_dump(exclude_none=True)
