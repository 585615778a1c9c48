"""A test double of our own OpenAI-compatible server (the Ray Serve ingress), for replay tests.

It is a real HTTP/1.1 server on 127.0.0.1 (a port the OS picks), in a background thread. It speaks
the contract the replay client relies on: `GET /v1/models`, `GET /v1/dspine/engine`, and streaming
`POST /v1/chat/completions` / `/v1/completions` with chunked SSE, cumulative `usage` on each content
chunk, a final `choices: []` usage chunk carrying `accept_length`, `verify_steps`, `accept_histogram`
and `path`, then `data: [DONE]`; and the `x-dspine-pool/arm/replica/path` and `server-timing` response headers.

Behaviour is chosen by markers in the prompt's last message:
- "FAIL429": answer 429 with an OpenAI error body;
- "CUTOFF": stream two content chunks, then drop the connection mid-body;
- "SLOW": wait `slow_s` before the first chunk;
- "NODONE": end the body cleanly after the content chunks, with no usage chunk and no [DONE];
- "CALL <name>", with <name> among the request's `tools`: answer with that call, as SGLang streams one (a
  delta with its id and name, then one with its arguments "{}"), finish reason "tool_calls", 2 tokens.
Otherwise it streams min(max_tokens, max_output_tokens) tokens, two per chunk (the last may hold one),
`chunk_delay_s` apart: n tokens -> ceil(n/2) verify steps, histogram [n % 2, n // 2].
Arm: "dflash2" when the session id contains "dflash", else "dspine".
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ENGINE_INFO = {  # keyed by pool, as the ingress's describe_engines answers
    name: {
        "engine": "fake",
        "speculative_algorithm": "DSPINE",
        "speculative_num_draft_tokens": 16,
        "model_sha256": "0" * 64,
        "draft_sha256": "1" * 64,
    }
    for name in ("agent-xhigh", "code-low")
}


class _QuietServer(ThreadingHTTPServer):
    request_queue_size = 256  # the default 5 resets bursts of open-loop connections
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:  # clients that hang up are fine
        pass


class FakeDSpineServer:
    def __init__(self, *, chunk_delay_s: float = 0.002, slow_s: float = 0.5, max_output_tokens: int = 6,
                 engine_info: bool = True):
        self.chunk_delay_s = chunk_delay_s
        self.slow_s = slow_s
        self.max_output_tokens = max_output_tokens
        self.engine_info = engine_info
        self.received: list[dict] = []  # {"path", "headers", "body"} per POST
        self.num_in_flight = 0
        self.max_in_flight = 0  # most POSTs served at once
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeDSpineServer:
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def record(self, path: str, headers: dict, body: dict) -> None:
        with self._lock:
            self.received.append({"path": path, "headers": headers, "body": body})

    def enter(self, delta: int) -> None:
        with self._lock:
            self.num_in_flight += delta
            self.max_in_flight = max(self.max_in_flight, self.num_in_flight)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_owner: FakeDSpineServer

    def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
        pass

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "fake-qwen", "object": "model"}]})
        elif self.path == "/v1/dspine/engine" and self.server_owner.engine_info:
            self._json(200, ENGINE_INFO)
        else:
            self._json(404, {"error": {"message": "not found"}})

    def _chunk(self, payload: dict | str) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        data = f"data: {text}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:  # noqa: N802
        self.server_owner.enter(+1)
        try:
            self._answer()
        finally:
            self.server_owner.enter(-1)

    def _answer(self) -> None:
        owner = self.server_owner
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        headers = {k.lower(): v for k, v in self.headers.items()}
        owner.record(self.path, headers, body)
        chat = self.path == "/v1/chat/completions"
        text = (body["messages"][-1].get("content") or "") if chat else body["prompt"]
        if "FAIL429" in text:
            self._json(429, {"error": {"message": "too many requests", "type": "rate_limit", "code": 429}})
            return
        session = headers.get("x-session-id", "")
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-dspine-pool", headers.get("x-dspine-pool", "agent-xhigh"))
        forced = headers.get("x-dspine-pool")  # the ingress: a forced pool is its own arm
        self.send_header("x-dspine-arm", forced or ("dflash2" if "dflash" in session else "dspine"))
        self.send_header("x-dspine-replica", "replica-0")
        self.send_header("x-dspine-path", "speculative")
        self.send_header("server-timing", "parse;dur=1.5, replica;dur=20.0, ingress;dur=25.0")
        self.end_headers()
        if "SLOW" in text:
            time.sleep(owner.slow_s)
        tools = {tool["function"]["name"] for tool in body.get("tools") or []}
        called = text.split("CALL ", 1)[1].split()[0] if chat and "CALL " in text else None
        if called in tools:
            first = {"index": 0, "id": "call_0", "type": "function", "function": {"name": called, "arguments": ""}}
            rest = {"index": 0, "function": {"arguments": "{}"}}
            for sent, call in enumerate((first, rest), start=1):
                choice = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}
                self._chunk({"object": "chunk", "choices": [choice], "usage": {"completion_tokens": sent}})
            self._chunk({"object": "chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            self._chunk({"object": "chunk", "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 2}})
            self._chunk("[DONE]")
            return
        num_tokens = min(int(body["max_tokens"]), owner.max_output_tokens)
        sent = 0
        while sent < num_tokens:
            step = min(2, num_tokens - sent)
            sent += step
            piece = "tok " * step
            choice = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
            if not chat:
                choice = {"index": 0, "text": piece, "finish_reason": None}
            self._chunk({"object": "chunk", "choices": [choice], "usage": {"completion_tokens": sent}})
            time.sleep(owner.chunk_delay_s)
            if "CUTOFF" in text and sent >= 4:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)  # drop mid-body: no terminating chunk
                self.close_connection = True
                return
        if "NODONE" in text:
            self.wfile.write(b"0\r\n\r\n")
            return
        finish = "length" if num_tokens == int(body["max_tokens"]) else "stop"
        self._chunk({"object": "chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        steps = -(-num_tokens // 2)
        usage = {
            "prompt_tokens": 100,
            "completion_tokens": num_tokens,
            "total_tokens": 100 + num_tokens,
            "accept_length": num_tokens / steps if steps else 0.0,
            "verify_steps": steps,
            "accept_histogram": [num_tokens % 2, num_tokens // 2],
            "path": "speculative",
        }
        self._chunk({"object": "chunk", "choices": [], "usage": usage})
        self._chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
