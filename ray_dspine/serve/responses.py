"""Turn a pool's chunk stream into OpenAI response bodies (SSE events or one JSON object).

Endings, for a stream that has started (its first chunk reached the ingress):
  normal     the chunks' events, the usage event when asked for, then `data: [DONE]`. With continuous usage
             (stream_options.continuous_usage_stats) every event carries the usage so far, as SGLang's does:
             prompt_tokens (from the first chunk that carries the prompt's counts, else from a usage), the
             completion tokens sent, their total and prompt_tokens_details.cached_tokens; before any chunk
             has named the prompt, completion_tokens alone. A chat stream's first event names the role
             (`"role": "assistant"` in its delta) and later deltas do not, as OpenAI's API and SGLang's serving
             layer send them. The choice that carries the finish reason carries
             `matched_stop` too (SGLang's field: the stop string, stop_regex pattern or end token id that
             ended the request; null when none did). With the request's logprobs, every event that carries a
             choice carries the log-probabilities of the tokens its replica sent since the last such event
             (a chunk whose text is all held back has its tokens' scores sent with the next), so the events' entries
             add up to one per completion token; without, `logprobs` is null (logprobs_wire.py).
  error      whatever stops the stream early ends it with three events, never a silent cut:
             `data: {"error": {...}}` naming the cause, a terminal chunk whose finish_reason is "error",
             then `data: [DONE]`. Causes: an error chunk from the replica (its status); the request's
             end-to-end deadline (504 `timeout`); the replica stopping (Ray's RayActorError family:
             ActorDiedError, ActorUnavailableError; a crashed worker or node), a replica call cancelled on
             Ray's side (RequestCancelledError, or the CancelledError Ray turns it into while this task itself
             was not cancelled), the stream ending without a finish reason, or any other exception
             (502 `replica_failed`, the message naming the exception type and the tokens already sent).
  client     a client that goes away cancels the replica's work; nothing more is sent.
A non-streaming request that fails the same ways is answered with the same status and code as JSON.
Ray's BackPressureError (the pool's queue is full) and DeploymentUnavailableError are 503s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from ..engines.protocol import Chunk, GenerateRequest, Usage
from .errors import ApiError, error_body
from .logprobs_wire import CompletionLogprobs, chat_logprobs
from .metrics import RequestTimer
from .tool_calls import merge_tool_calls

log = logging.getLogger("ray_dspine.ingress")

REPLICA_FAILED_STATUS = 502  # the upstream (the replica) failed; the ingress itself is fine
REPLICA_FAILED_CODE = "replica_failed"


class DeadlineExceeded(TimeoutError):
    """The request's end-to-end deadline passed while the ingress waited for its next chunk."""


class StreamEndedEarly(Exception):
    """The replica's stream ended without a finish reason."""


def replica_stopped(exc: BaseException) -> bool:
    """Whether `exc` says the replica's process (or its worker or node) stopped: work there is lost."""
    from ray.exceptions import NodeDiedError, RayActorError, RayTaskError, WorkerCrashedError

    if isinstance(exc, (RayActorError, WorkerCrashedError, NodeDiedError)):
        return True
    return isinstance(exc, RayTaskError) and isinstance(getattr(exc, "cause", None), RayActorError)


def cancelled_by_stream() -> bool:
    """Whether a CancelledError just caught came from the replica's stream, not from this task being cancelled
    (the client leaving): Ray turns a replica call cancelled on its side into asyncio.CancelledError."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() == 0


def failure_message(exc: BaseException, tokens_sent: int) -> str:
    """The client-facing cause of a replica failure: the exception type only, never its text."""
    name = type(exc).__name__
    if isinstance(exc, StreamEndedEarly):
        return f"the replica ended the stream without a finish reason; {tokens_sent} tokens were sent before it ended"
    if replica_stopped(exc):
        if isinstance(getattr(exc, "cause", None), BaseException):  # a RayTaskError: name what it wraps
            name = type(exc.cause).__name__
        return f"the replica serving this request stopped ({name}); {tokens_sent} tokens were sent before it stopped"
    return f"the replica serving this request failed ({name}); {tokens_sent} tokens were sent before it failed"


def replica_failed(exc: BaseException, tokens_sent: int = 0) -> ApiError:
    return ApiError(REPLICA_FAILED_STATUS, failure_message(exc, tokens_sent), code=REPLICA_FAILED_CODE)


def handle_error(exc: Exception, retry_after_s: int | None = None) -> ApiError:
    """Map a failure before the first chunk to an HTTP error; `retry_after_s` goes with the 503s."""
    from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

    if isinstance(exc, BackPressureError):
        return ApiError(503, "all replicas of the pool are busy and its queue is full; retry later", code="overloaded",
                        retry_after_s=retry_after_s)  # fmt: skip
    if isinstance(exc, DeploymentUnavailableError):
        return ApiError(503, "the pool has no replica ready yet; retry later", code="unavailable",
                        retry_after_s=retry_after_s)  # fmt: skip
    if replica_stopped(exc):
        log.warning("a replica stopped before the first chunk: %s", type(exc).__name__)
    else:
        log.error("request to the pool failed: %s", type(exc).__name__, exc_info=exc)
    return replica_failed(exc, 0)


async def next_chunk(stream, deadline: float) -> Chunk:
    """The stream's next chunk, or DeadlineExceeded once the request's end-to-end deadline passes.

    A StopAsyncIteration (the stream ended) and any exception of the stream itself pass through, a
    TimeoutError of the stream's own (Ray's GetTimeoutError) included: only a chunk not there by the
    deadline is DeadlineExceeded, told apart by whether the wait ended with the chunk's future unfinished
    (never by comparing clocks, which the event loop's timer may fire a hair before)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlineExceeded
    pending = asyncio.ensure_future(stream.__anext__())
    try:
        done, _ = await asyncio.wait({pending}, timeout=remaining)
    except asyncio.CancelledError:
        pending.cancel()
        raise
    if not done:
        pending.cancel()
        raise DeadlineExceeded
    return pending.result()


def timeout_message(request: GenerateRequest) -> str:
    return f"request {request.request_id} exceeded the server's request_timeout_s and was stopped"


def usage_dict(usage: Usage | None) -> dict | None:
    """The usage block: OpenAI's fields (cached prompt tokens under prompt_tokens_details; reasoning tokens under
    completion_tokens_details when there are some, as SGLang sets it), then ours."""
    if usage is None:
        return None
    out = {**usage.model_dump(exclude={"reasoning_tokens"}),
           "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens}}  # fmt: skip
    if usage.reasoning_tokens:
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return out


def running_usage(prompt: tuple[int, int] | None, completion_tokens: int) -> dict:
    """A stream event's continuous usage: `prompt` is (prompt tokens, those read from the cache), None unknown."""
    if prompt is None:
        return {"completion_tokens": completion_tokens}
    tokens, cached = prompt
    return {"prompt_tokens": tokens, "completion_tokens": completion_tokens, "total_tokens": tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip


def prompt_counts(chunk: Chunk) -> tuple[int, int] | None:
    """(prompt tokens, cached prompt tokens) as `chunk` names them: its prompt counts, else its usage's."""
    if chunk.prompt_tokens is not None:
        return chunk.prompt_tokens, chunk.cached_prompt_tokens or 0
    if chunk.usage is not None:
        return chunk.usage.prompt_tokens, chunk.usage.cached_prompt_tokens
    return None


def _choice(
    chat: bool, text: str, finish: str | None, stream: bool, tool_calls: list[dict] | None = None, reasoning: str = "",
    role: bool = True, matched_stop: int | str | None = None, logprobs: dict | None = None,
) -> dict:
    """One choice; a finishing one names its `matched_stop` too (null unless a stop ended it), as SGLang's does."""
    ending = {} if finish is None else {"matched_stop": matched_stop}
    if chat:
        key = "delta" if stream else "message"
        # A turn (or delta) that only reasons or calls tools has no content: null, as OpenAI-style servers send it.
        body: dict = {"role": "assistant"} if role else {}  # a stream names the role in its first delta only
        body["content"] = None if (tool_calls or reasoning) and not text else text
        if reasoning:
            body["reasoning_content"] = reasoning  # SGLang's and vLLM's field for a reasoning parser's output
        if tool_calls:
            body["tool_calls"] = tool_calls
        return {"index": 0, key: body, "finish_reason": finish, **ending, "logprobs": logprobs}
    return {"index": 0, "text": text, "finish_reason": finish, **ending, "logprobs": logprobs}


class _Scores:
    """The log-probabilities of one choice (logprobs_wire.py), when its request asks for them."""

    def __init__(self, request: GenerateRequest, chat: bool):
        self.wanted = request.logprobs
        self._completion = None if chat else CompletionLogprobs(request.top_logprobs > 0)
        self._pending: list = []

    def add(self, chunk: Chunk) -> None:
        self._pending.extend(chunk.logprobs or [])

    def take(self) -> dict | None:
        """The wire shape of what was added since the last take; None when the request did not ask."""
        if not self.wanted:
            return None
        entries, self._pending = self._pending, []
        return chat_logprobs(entries) if self._completion is None else self._completion.wire(entries)


def _object(chat: bool, stream: bool) -> str:
    if chat:
        return "chat.completion.chunk" if stream else "chat.completion"
    return "text_completion"


def _openai_finish(reason: str | None) -> str | None:
    return "stop" if reason == "abort" else reason


def _error_ending(
    base: dict, chat: bool, role: bool, status: int, message: str, code: str | None, param: str | None = None
):
    """The three events of rule error (`role`: no delta has named the role yet)."""
    yield f"data: {json.dumps(error_body(status, message, param, code))}\n\n"
    yield f"data: {json.dumps({**base, 'choices': [_choice(chat, '', 'error', True, role=role)]})}\n\n"
    yield "data: [DONE]\n\n"


async def sse_events(
    stream, first: Chunk, request: GenerateRequest, model: str, chat: bool, include_usage: bool, continuous: bool,
    timer: RequestTimer, deadline: float,
):
    created = int(time.time())
    base = {"id": request.request_id, "object": _object(chat, True), "created": created, "model": model}
    chunk = first
    finished = False
    completion_tokens = 0
    prompt: tuple[int, int] | None = None
    role_named = False
    scores = _Scores(request, chat)
    ending: tuple | None = None  # (status, message, code, param) of an error ending
    try:
        try:
            while True:
                if chunk.error is not None:
                    code = getattr(chunk, "error_code", None)
                    ending = (chunk.error_status or 500, chunk.error, code, chunk.error_param)
                    break
                timer.tokens(chunk.num_tokens)
                completion_tokens += chunk.num_tokens
                prompt = prompt or prompt_counts(chunk)
                finish = _openai_finish(chunk.finish_reason)
                scores.add(chunk)
                if chunk.text or chunk.reasoning or chunk.tool_calls or finish is not None:
                    choice = _choice(chat, chunk.text, finish, True, chunk.tool_calls, chunk.reasoning, not role_named,
                                     chunk.matched_stop, scores.take())
                    role_named = True
                    event = {**base, "choices": [choice]}
                    if continuous:
                        event["usage"] = running_usage(prompt, completion_tokens)
                    yield f"data: {json.dumps(event)}\n\n"
                if chunk.finish_reason is not None:
                    if include_usage:
                        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage_dict(chunk.usage)})}\n\n"
                    timer.finish(chunk.finish_reason, chunk.usage)
                    finished = True
                    yield "data: [DONE]\n\n"
                    return
                chunk = await next_chunk(stream, deadline)
        except DeadlineExceeded:
            stream.cancel()
            ending = (504, timeout_message(request), "timeout", None)
        except StopAsyncIteration:
            failure = replica_failed(StreamEndedEarly(), completion_tokens)
            ending = (failure.status, failure.message, failure.code, None)
        except asyncio.CancelledError as exc:
            if not cancelled_by_stream():
                raise  # the client left: rule client
            _cancel_quietly(stream)
            failure = replica_failed(exc, completion_tokens)
            ending = (failure.status, failure.message, failure.code, None)
        except Exception as exc:  # the replica stopped, a cancelled call, or anything unexpected: never a silent cut
            if replica_stopped(exc):
                log.warning("request %s: its replica stopped mid-stream (%s)", request.request_id, type(exc).__name__)
            else:
                log.error("request %s: its stream failed (%s)", request.request_id, type(exc).__name__, exc_info=exc)
            _cancel_quietly(stream)
            failure = replica_failed(exc, completion_tokens)
            ending = (failure.status, failure.message, failure.code, None)
        timer.finish("error", None)
        finished = True
        for event in _error_ending(base, chat, not role_named, *ending):
            yield event
    finally:
        if not finished:  # client went away: stop the replica's work and free its budget
            _cancel_quietly(stream)
            timer.finish("abort", None)


def _cancel_quietly(stream) -> None:
    """Cancel the replica call; a call whose replica is gone may refuse, which changes nothing."""
    try:
        stream.cancel()
    except Exception:  # noqa: BLE001 - nothing left to stop
        log.debug("cancelling a finished replica call failed", exc_info=True)


async def collect(
    stream, first: Chunk, request: GenerateRequest, model: str, chat: bool, timer: RequestTimer, deadline: float
) -> dict:
    parts: list[str] = []
    thoughts: list[str] = []
    tool_deltas: list[dict] = []
    scores = _Scores(request, chat)
    tokens_sent = 0
    chunk = first
    try:
        while True:
            if chunk.error is not None:
                timer.finish("error", None)
                raise ApiError(chunk.error_status or 500, chunk.error, param=chunk.error_param)
            timer.tokens(chunk.num_tokens)
            tokens_sent += chunk.num_tokens
            parts.append(chunk.text)
            thoughts.append(chunk.reasoning)
            tool_deltas.extend(chunk.tool_calls or [])
            scores.add(chunk)
            if chunk.finish_reason is not None:
                break
            chunk = await next_chunk(stream, deadline)
    except DeadlineExceeded as exc:
        stream.cancel()
        timer.finish("error", None)
        raise ApiError(504, timeout_message(request), code="timeout") from exc
    except asyncio.CancelledError as exc:
        _cancel_quietly(stream)
        if not cancelled_by_stream():
            timer.finish("abort", None)
            raise
        timer.finish("error", None)
        raise replica_failed(exc, tokens_sent) from exc
    except StopAsyncIteration as exc:
        timer.finish("error", None)
        raise replica_failed(StreamEndedEarly(), tokens_sent) from exc
    except ApiError:
        raise
    except Exception as exc:  # rule error, as JSON
        if not replica_stopped(exc):
            log.error("request %s: its stream failed (%s)", request.request_id, type(exc).__name__, exc_info=exc)
        _cancel_quietly(stream)
        timer.finish("error", None)
        raise replica_failed(exc, tokens_sent) from exc
    timer.finish(chunk.finish_reason, chunk.usage)
    calls = merge_tool_calls(tool_deltas) or None
    return {
        "id": request.request_id,
        "object": _object(chat, False),
        "created": int(time.time()),
        "model": model,
        "choices": [_choice(chat, "".join(parts), _openai_finish(chunk.finish_reason), False, calls, "".join(thoughts),
                            matched_stop=chunk.matched_stop, logprobs=scores.take())],
        "usage": usage_dict(chunk.usage),
    }
