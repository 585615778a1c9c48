"""A test double of the OpenAI-compatible server, on 127.0.0.1, with scripted answers per pool.

Greedy answers come from `GREEDY[(pool, prompt)]`; sampled answers from `SAMPLED[(pool, prompt)]`,
handed out in order of arrival (a per-(pool, prompt) counter), so the counts are known whatever the
request interleaving. The pool is the `x-dspine-pool` request header; "fail" answers HTTP 500.
`GET /v1/models` lists one model; with `required_key` set it answers 401 to any other bearer token.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

GREEDY = {
    ("spec", "same"): "The answer is 42.",
    ("ar", "same"): "The answer is 42.",
    ("spec", "diverge"): "def f(x):\n    return x + 2\n",
    ("ar", "diverge"): "def f(x):\n    return x + 1\n",
    ("spec", "prefix"): "abc",
    ("ar", "prefix"): "abcdef",
    ("spec", "plain"): " red, green and blue.",
    ("ar", "plain"): " red, green and blue.",
}
# 40 samples per side: "skewed" gives spec 30 yes / 10 no and ar 20 yes / 20 no; "even" 20/20 on both.
SAMPLED = {
    ("spec", "skewed"): ["yes indeed"] * 30 + ["no way"] * 10,
    ("ar", "skewed"): ["yes sir"] * 20 + ["no way"] * 20,
    ("spec", "even"): ["yes"] * 20 + ["no"] * 20,
    ("ar", "even"): ["no"] * 20 + ["yes"] * 20,
}


class FakeOpenAIServer:
    """Test double: records every request body and header it receives."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict, dict]] = []
        self._counters: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.required_key: str | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def answer(self, pool: str, prompt: str, temperature: float) -> str:
        if temperature == 0:
            return GREEDY[(pool, prompt)]
        with self._lock:
            index = self._counters.get((pool, prompt), 0)
            self._counters[(pool, prompt)] = index + 1
        return SAMPLED[(pool, prompt)][index]

    def start(self) -> None:
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                if self.path != "/v1/models":
                    self._send(404, {"error": {"message": "not found"}}, {})
                elif double.required_key and self.headers.get("authorization") != f"Bearer {double.required_key}":
                    self._send(401, {"error": {"message": "invalid API key"}}, {})
                else:
                    self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}, {})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                pool = self.headers.get("x-dspine-pool", "")
                with double._lock:
                    double.requests.append((body, {k.lower(): v for k, v in self.headers.items()}))
                if pool == "fail":
                    self._send(500, {"error": {"message": "engine crashed"}}, {})
                    return
                chat = self.path == "/v1/chat/completions"
                prompt = body["messages"][-1]["content"] if chat else body["prompt"]
                text = double.answer(pool, prompt, body.get("temperature", 1.0))
                choice = {"index": 0, "finish_reason": "length"}
                choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
                path = "speculative" if pool == "spec" else "autoregressive"
                usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12, "path": path}
                self._send(200, {"choices": [choice], "usage": usage},
                           {"x-dspine-pool": pool, "x-dspine-path": path})

            def _send(self, status, payload, headers):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@pytest.fixture
def fake_server():
    server = FakeOpenAIServer()
    server.start()
    yield server
    server.stop()
