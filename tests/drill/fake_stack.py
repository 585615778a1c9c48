"""A small OpenAI-compatible stack for the drill's tests: well-behaved by default, misbehaving on request.

It is a raw ASGI app served by uvicorn on 127.0.0.1 (a port the OS picks) in a background thread.
  corpus     a request that is a case of corpus(MODEL, LIMIT) (same method, path, content-type and body)
             gets the case's status: 200 with a small JSON completion, else an OpenAI error object. `misbehave` maps a
             case name to "500_text" (500, text/plain) or "hang" (no answer until the server stops).
  normal     any other POST is a normal chat request: non-streamed -> a JSON completion; streamed -> `tokens`
             content chunks `chunk_delay_s` apart (max_tokens bounds them), a finish chunk, [DONE]. A stream
             runs to its end even when the client hung up; while any runs, a non-streamed answer waits
             `busy_delay_s` first (a stack that does not stop abandoned work).
             `cut_streams` holds the 1-based numbers of streamed requests to end after their first chunk
             without [DONE]; `held_streams` those that never answer (queued until the server stops). Each
             stream's x-dspine-deadline-ms header (or None) is kept in `stream_deadline_headers`. `burst_plan`, when set, answers the non-streamed requests carrying the deadline
             header by arrival number: "200", "429" (with Retry-After: 1) or "503" (without it).
  kill       `kill()` ends every stream open at that moment with an error event (finish_reason "error") and
             [DONE], except the streams numbered in `cut_on_kill`, which break off. After it, /health/ready answers 503 and
             pool-forced requests answer 503 for `down_s`; then 200 again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time

import uvicorn

from ray_dspine.drill.corpus import corpus

MODEL = "fake-model"
LIMIT = 2048


def _key(method: str, path: str, content_type: str | None, body: bytes) -> tuple:
    return method, path, content_type, hashlib.sha256(body).hexdigest()


class FakeStack:
    def __init__(self, *, misbehave: dict[str, str] | None = None, cut_streams: set[int] = frozenset(),
                 chunk_delay_s: float = 0.01, burst_plan: list[str] | None = None,
                 cut_on_kill: set[int] = frozenset(), down_s: float = 0.6, busy_delay_s: float = 0.0,
                 held_streams: set[int] = frozenset()):
        cases = corpus(MODEL, LIMIT)
        self.cases = {_key(c.method, c.path, c.headers.get("content-type"), c.body): c for c in cases}
        self.misbehave = misbehave or {}
        self.cut_streams = set(cut_streams)
        self.held_streams = set(held_streams)
        self.stream_deadline_headers: list[str | None] = []
        self.chunk_delay_s = chunk_delay_s
        self.burst_plan = burst_plan
        self.cut_on_kill = set(cut_on_kill)
        self.down_s = down_s
        self.busy_delay_s = busy_delay_s
        self.live_streams = 0
        self.num_streams = 0
        self.num_burst = 0
        self.deadline_headers: list[str] = []
        self.killed_at: float | None = None
        self.num_kills = 0
        self.stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> FakeStack:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self, log_level="error", lifespan="off", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        ready = threading.Event()

        def serve():
            async def main():
                self._loop = asyncio.get_running_loop()
                self.stopping = asyncio.Event()
                ready.set()
                await self._server.serve(sockets=[sock])
            asyncio.run(main())

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._loop is not None and self.stopping is not None:
            self._loop.call_soon_threadsafe(self.stopping.set)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)

    def kill(self) -> None:
        self.killed_at = time.monotonic()
        self._loop.call_soon_threadsafe(self._count_kill)

    def _count_kill(self) -> None:
        self.num_kills += 1

    def down(self) -> bool:
        return self.killed_at is not None and time.monotonic() - self.killed_at < self.down_s

    # --- ASGI ------------------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        path = scope.get("raw_path", scope["path"].encode()).decode()
        case = self.cases.get(_key(scope["method"], path, headers.get("content-type"), body))
        if case is not None:
            return await self._corpus(case, send)
        if scope["method"] == "GET" and path == "/v1/models":
            return await _json(send, 200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        if scope["method"] == "GET" and path == "/health/ready":
            return await _json(send, 503 if self.down() else 200, {"status": "down" if self.down() else "ok"})
        if scope["method"] != "POST":
            return await _json(send, 404, _error("not found"))
        request = json.loads(body)
        if "x-dspine-pool" in headers and self.down():
            return await _json(send, 503, _error("pool down"), {"retry-after": "1"})
        if "x-dspine-deadline-ms" in headers and self.burst_plan is not None:
            self.deadline_headers.append(headers["x-dspine-deadline-ms"])
            self.num_burst += 1
            plan = self.burst_plan[self.num_burst - 1]
            if plan != "200":
                extra = {"retry-after": "1"} if plan == "429" else {}
                return await _json(send, int(plan), _error("busy"), extra)
        if not request.get("stream"):
            if self.live_streams and self.busy_delay_s:
                await asyncio.sleep(self.busy_delay_s)
            return await _json(send, 200, _completion())
        self.num_streams += 1
        self.stream_deadline_headers.append(headers.get("x-dspine-deadline-ms"))
        if self.num_streams in self.held_streams:
            await self.stopping.wait()
            return
        self.live_streams += 1
        try:
            await self._stream(send, self.num_streams, int(request["max_tokens"]))
        finally:
            self.live_streams -= 1

    async def _corpus(self, case, send):
        how = self.misbehave.get(case.name)
        if how == "hang":
            await self.stopping.wait()
            return
        if how == "500_text":
            return await _raw(send, 500, b"Internal Server Error", "text/plain")
        if case.status == 200:
            return await _json(send, 200, _completion())
        return await _json(send, case.status, _error("bad request", case.param))

    async def _stream(self, send, number: int, max_tokens: int):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        kills_at_start = self.num_kills

        async def event(payload):
            text = payload if isinstance(payload, str) else json.dumps(payload)
            await send({"type": "http.response.body", "body": f"data: {text}\n\n".encode(), "more_body": True})

        for i in range(max_tokens):
            await event({"choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}]})
            if number in self.cut_streams:
                await send({"type": "http.response.body", "body": b"", "more_body": False})  # no [DONE]
                return
            await asyncio.sleep(self.chunk_delay_s)
            if self.stopping.is_set():
                return
            if self.num_kills == kills_at_start:
                continue
            if number in self.cut_on_kill:
                raise RuntimeError("replica gone")  # uvicorn drops the connection mid-body
            await event({"error": {"message": "replica died", "type": "server_error"},
                         "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}]})
            break
        else:
            await event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        await event("[DONE]")
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _error(message: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}


def _completion() -> dict:
    return {"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                                      "finish_reason": "stop"}]}


async def _json(send, status: int, payload: dict, headers: dict | None = None):
    await _raw(send, status, json.dumps(payload).encode(), "application/json", headers)


async def _raw(send, status: int, data: bytes, content_type: str, headers: dict | None = None):
    pairs = [(b"content-type", content_type.encode()), (b"content-length", str(len(data)).encode())]
    pairs += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": pairs})
    await send({"type": "http.response.body", "body": data})
