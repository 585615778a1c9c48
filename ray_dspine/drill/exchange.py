"""One HTTP exchange of the drill, timed and classified; the only place the drill talks HTTP for requests.

Rules:
  timing    t0 = clock() just before the request; `ttft_s` is the arrival of the first SSE `data:` event
            whose first choice carries text (`delta.content` or `text`), `e2e_s` the end of the exchange
            (whole body read, stream ended, or given up), both measured from t0 (the bench client's rule).
  bound     every exchange runs under `timeout_s` for the whole of it; past it the exchange is `hung`.
  kind      exactly one per exchange, first match wins:
              hung        no complete answer within timeout_s;
              connect     no response status (refused, reset before the status line);
              http_<N>    status N >= 400 (the body was read whole);
              lost        status < 400 but the stream ended without `data: [DONE]` or the connection broke
                          mid-body (after an error event too: the event does not excuse a missing [DONE]);
              stream_error a stream that carried an error event and then `data: [DONE]`;
              bad_response a 2xx body that is not the JSON / SSE the API promises;
              closed      the drill itself closed the stream after the first chunk (disconnect scenario);
              ok          anything else: a 2xx answered whole (JSON body, or SSE ending in [DONE]).
  error shape  a 4xx/5xx body is "OpenAI-shaped" when it is a JSON object whose `error` is an object with a
            string `message` and a string `type`.
Nothing here stores or logs request or response text: only sizes, statuses, flags and times.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

RETRY_AFTER = "retry-after"


@dataclass
class Exchange:
    kind: str = "hung"
    status: int | None = None
    openai_error: bool = False
    json_body: bool = False
    retry_after: str | None = None
    ttft_s: float | None = None
    e2e_s: float = 0.0
    num_content_chunks: int = 0
    content_chars: int = 0
    error_events: int = 0
    finish_reasons: list[str] = field(default_factory=list)
    done: bool = False
    end_clock_s: float | None = None  # clock() at the end, for scenarios that time from another event

    @property
    def answered(self) -> bool:
        """A whole answer came: a status and a complete body (hung, connect and lost are not answers)."""
        return self.kind not in ("hung", "connect", "lost", "closed")


def is_openai_error(data: object) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("error"), dict):
        return False
    err = data["error"]
    return isinstance(err.get("message"), str) and isinstance(err.get("type"), str)


def _read_event(ex: Exchange, data: str, offset_s: float) -> bool:
    """Feed one SSE `data:` payload; True once [DONE] arrived."""
    if data.strip() == "[DONE]":
        ex.done = True
        return True
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        ex.kind = "bad_response"
        return False
    if not isinstance(event, dict):
        ex.kind = "bad_response"
        return False
    if event.get("error") is not None:
        ex.error_events += 1
    choices = event.get("choices") or []
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    if choice.get("finish_reason"):
        ex.finish_reasons.append(str(choice["finish_reason"]))
    delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
    piece = choice.get("text") or delta.get("content") or delta.get("reasoning_content") or ""
    if isinstance(piece, str) and piece:
        if ex.ttft_s is None:
            ex.ttft_s = offset_s
        ex.num_content_chunks += 1
        ex.content_chars += len(piece)
    return False


def _classify_stream_end(ex: Exchange) -> None:
    if ex.kind == "bad_response":
        return
    if not ex.done:
        ex.kind = "lost"
    elif ex.error_events:
        ex.kind = "stream_error"
    else:
        ex.kind = "ok"


async def send(
    http: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    close_after_first_chunk: bool = False,
    on_first_chunk: Callable[[], None] | None = None,
) -> Exchange:
    """Send one request and classify the answer (rules above); never raises for what the server does."""
    ex = Exchange()
    t0 = clock()
    try:
        async with asyncio.timeout(timeout_s):
            async with http.stream(method, url, content=body, headers=headers or {}) as resp:
                ex.status = resp.status_code
                ex.retry_after = resp.headers.get(RETRY_AFTER)
                sse = resp.headers.get("content-type", "").startswith("text/event-stream")
                if resp.status_code >= 400 or not sse:
                    raw = await resp.aread()
                    try:
                        data = json.loads(raw)
                        ex.json_body = True
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        data = None
                    ex.openai_error = is_openai_error(data)
                    if resp.status_code >= 400:
                        ex.kind = f"http_{resp.status_code}"
                    else:
                        ex.kind = "ok" if ex.json_body else "bad_response"
                        _read_json_answer(ex, data, clock() - t0)
                else:
                    async for line in resp.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        finished = _read_event(ex, line[5:].strip(), clock() - t0)
                        if ex.ttft_s is not None and on_first_chunk is not None:
                            on_first_chunk()
                            on_first_chunk = None
                        if close_after_first_chunk and ex.ttft_s is not None:
                            ex.kind = "closed"
                            break
                        if finished or ex.kind == "bad_response":
                            break
                    if ex.kind != "closed":
                        _classify_stream_end(ex)
    except TimeoutError:
        ex.kind = "hung"
    except (httpx.HTTPError, OSError):  # refused, reset, broken mid-body
        ex.kind = "connect" if ex.status is None else "lost"
    ex.end_clock_s = clock()
    ex.e2e_s = ex.end_clock_s - t0
    return ex


def _read_json_answer(ex: Exchange, data: object, offset_s: float) -> None:
    """A non-streamed 2xx completion: its first choice's text counts as one content chunk."""
    if not isinstance(data, dict):
        return
    choices = data.get("choices") or []
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    text = choice.get("text") or message.get("content") or ""
    if choice.get("finish_reason"):
        ex.finish_reasons.append(str(choice["finish_reason"]))
    if isinstance(text, str) and text:
        ex.ttft_s = offset_s
        ex.num_content_chunks = 1
        ex.content_chars = len(text)
