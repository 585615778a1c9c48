"""Turn a pool's chunk stream into OpenAI response bodies (SSE events or one JSON object)."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from ..engines.protocol import Chunk, GenerateRequest, Usage
from .errors import ApiError, error_body
from .metrics import RequestTimer
from .tool_calls import merge_tool_calls

log = logging.getLogger("ray_dspine.ingress")


def handle_error(exc: Exception) -> ApiError:
    """Map a failure to reach a replica to an HTTP error."""
    from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

    if isinstance(exc, BackPressureError):
        return ApiError(503, "all replicas of the pool are busy and its queue is full; retry later", code="overloaded")
    if isinstance(exc, DeploymentUnavailableError):
        return ApiError(503, "the pool has no replica ready yet; retry later", code="unavailable")
    log.exception("request to the pool failed")
    return ApiError(500, f"the replica failed: {type(exc).__name__}", code="replica_error")


async def next_chunk(stream, deadline: float) -> Chunk:
    """The stream's next chunk, or TimeoutError once the request's end-to-end deadline passes."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    return await asyncio.wait_for(stream.__anext__(), remaining)


def timeout_message(request: GenerateRequest) -> str:
    return f"request {request.request_id} exceeded the server's request_timeout_s and was stopped"


def usage_dict(usage: Usage | None) -> dict | None:
    """The usage block: OpenAI's fields (cached prompt tokens under prompt_tokens_details), then ours."""
    if usage is None:
        return None
    return {**usage.model_dump(), "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens}}


def _choice(
    chat: bool, text: str, finish: str | None, stream: bool, tool_calls: list[dict] | None = None, reasoning: str = ""
) -> dict:
    if chat:
        key = "delta" if stream else "message"
        # A turn (or delta) that only reasons or calls tools has no content: null, as OpenAI-style servers send it.
        body: dict = {"role": "assistant", "content": None if (tool_calls or reasoning) and not text else text}
        if reasoning:
            body["reasoning_content"] = reasoning  # SGLang's and vLLM's field for a reasoning parser's output
        if tool_calls:
            body["tool_calls"] = tool_calls
        return {"index": 0, key: body, "finish_reason": finish, "logprobs": None}
    return {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}


def _object(chat: bool, stream: bool) -> str:
    if chat:
        return "chat.completion.chunk" if stream else "chat.completion"
    return "text_completion"


def _openai_finish(reason: str | None) -> str | None:
    return "stop" if reason == "abort" else reason


async def sse_events(
    stream, first: Chunk, request: GenerateRequest, model: str, chat: bool, include_usage: bool, continuous: bool,
    timer: RequestTimer, deadline: float,
):
    created = int(time.time())
    base = {"id": request.request_id, "object": _object(chat, True), "created": created, "model": model}
    chunk = first
    finished = False
    completion_tokens = 0
    try:
        while True:
            if chunk.error is not None:
                yield f"data: {json.dumps(error_body(chunk.error_status or 500, chunk.error))}\n\n"
                timer.finish("error", None)
                finished = True
                break
            timer.tokens(chunk.num_tokens)
            completion_tokens += chunk.num_tokens
            finish = _openai_finish(chunk.finish_reason)
            if chunk.text or chunk.reasoning or chunk.tool_calls or finish is not None:
                choice = _choice(chat, chunk.text, finish, True, chunk.tool_calls, chunk.reasoning)
                event = {**base, "choices": [choice]}
                if continuous:
                    event["usage"] = {"completion_tokens": completion_tokens}
                yield f"data: {json.dumps(event)}\n\n"
            if chunk.finish_reason is not None:
                if include_usage:
                    yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage_dict(chunk.usage)})}\n\n"
                timer.finish(chunk.finish_reason, chunk.usage)
                finished = True
                break
            chunk = await next_chunk(stream, deadline)
        yield "data: [DONE]\n\n"
    except TimeoutError:
        stream.cancel()
        timer.finish("error", None)
        finished = True
        yield f"data: {json.dumps(error_body(504, timeout_message(request)))}\n\n"
    except StopAsyncIteration:
        timer.finish("error", None)
        finished = True
        yield f"data: {json.dumps(error_body(500, 'the replica ended the stream early'))}\n\n"
    finally:
        if not finished:  # client went away: stop the replica's work and free its budget
            stream.cancel()
            timer.finish("abort", None)


async def collect(
    stream, first: Chunk, request: GenerateRequest, model: str, chat: bool, timer: RequestTimer, deadline: float
) -> dict:
    parts: list[str] = []
    thoughts: list[str] = []
    tool_deltas: list[dict] = []
    chunk = first
    try:
        while True:
            if chunk.error is not None:
                timer.finish("error", None)
                raise ApiError(chunk.error_status or 500, chunk.error, param=chunk.error_param)
            timer.tokens(chunk.num_tokens)
            parts.append(chunk.text)
            thoughts.append(chunk.reasoning)
            tool_deltas.extend(chunk.tool_calls or [])
            if chunk.finish_reason is not None:
                break
            chunk = await next_chunk(stream, deadline)
    except TimeoutError as exc:
        stream.cancel()
        timer.finish("error", None)
        raise ApiError(504, timeout_message(request), code="timeout") from exc
    except asyncio.CancelledError:
        stream.cancel()
        timer.finish("abort", None)
        raise
    timer.finish(chunk.finish_reason, chunk.usage)
    calls = merge_tool_calls(tool_deltas) or None
    return {
        "id": request.request_id,
        "object": _object(chat, False),
        "created": int(time.time()),
        "model": model,
        "choices": [_choice(chat, "".join(parts), _openai_finish(chunk.finish_reason), False, calls, "".join(thoughts))],
        "usage": usage_dict(chunk.usage),
    }
