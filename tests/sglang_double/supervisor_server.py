"""A tiny stand-in SGLang server for the supervisor tests: a real process, a few endpoints, a few faults.

    python tests/sglang_double/supervisor_server.py --port P [--speculative-algorithm X] [other flags, ignored]

Serves on 127.0.0.1: GET /health (200), /health_generate (200), /v1/loads (one idle DP rank), /server_info
(the resolved --max-running-requests and --max-mamba-cache-size it was given, and max_total_num_tokens from
SUPERVISOR_SERVER_KV_TOKENS, default 1000), /metrics (404); POST /v1/completions and /v1/chat/completions answer as an SSE stream: one content event with
`max_tokens` words, then (drafter launch and `return_spec_tokens_details`) a `choices: []` event with
`sglext.spec_tokens_details`, then the usage event and `data: [DONE]`; POST /abort_request (200).
Environment knobs:
  SUPERVISOR_SERVER_SPEC_VERIFY_CT  spec_verify_ct reported on drafter launches (default 4, acceptance
                                    max_tokens / 4); "none" sends no sglext at all, as SGLang does when
                                    the scheduler reports no speculative metrics.
  SUPERVISOR_SERVER_CHILD_PIDS      fork one child at start-up (same process group, sleeps forever) and
                                    append its pid to this file; with SUPERVISOR_SERVER_CHILD_IGNORES_TERM=1
                                    it ignores SIGTERM, as a busy scheduler may.
  SUPERVISOR_SERVER_HANG_ONCE       a file path: the first launch (file absent: created) never answers
                                    /health_generate; later launches answer.
  SUPERVISOR_SERVER_EXIT_ONCE       a file path: the first launch exits with code 1 (leaving its child)
                                    SUPERVISOR_SERVER_EXIT_AFTER_S seconds after its port opened.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FOREVER_S = 3600.0


def first_time(marker: str | None) -> bool:
    """True once per marker file: the first process to create it."""
    if not marker:
        return False
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def fork_child(pids_file: str, ignore_term: bool) -> None:
    pid = os.fork()
    if pid == 0:  # the child: same process group as the server
        if ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(pids_file, "a") as sink:
            sink.write(f"{os.getpid()}\n")
        while True:
            time.sleep(FOREVER_S)


class Handler(BaseHTTPRequestHandler):
    drafter = False
    hang = False
    sizes: dict = {}

    def log_message(self, *args) -> None:
        pass

    def _json(self, status: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            return self._json(200, {})
        if path == "/health_generate":
            if self.hang:
                time.sleep(FOREVER_S)
            return self._json(200, {})
        if path == "/server_info":
            return self._json(200, {"max_total_num_tokens": int(os.environ.get("SUPERVISOR_SERVER_KV_TOKENS", "1000")),
                                    **self.sizes})  # fmt: skip
        if path == "/v1/loads":
            rank = {"num_running_reqs": 0, "num_waiting_reqs": 0, "num_used_tokens": 0, "max_total_num_tokens": 1000,
                    "max_running_requests": 4}
            return self._json(200, {"timestamp": 0, "version": "0.5.23", "dp_rank_count": 1, "loads": [rank]})
        return self._json(404, {"object": "error", "message": "Not Found", "code": 404})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/abort_request":
            return self._json(200, {})
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._json(404, {"object": "error", "message": "Not Found", "code": 404})
        chat, n = self.path.endswith("chat/completions"), int(body.get("max_tokens") or 1)
        words = "".join(f"w{i} " for i in range(n))
        choice = {"index": 0, "delta": {"content": words}} if chat else {"index": 0, "text": words}
        usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
        events = [{"id": "x", "choices": [{**choice, "finish_reason": "length"}], "usage": usage}]
        verify = os.environ.get("SUPERVISOR_SERVER_SPEC_VERIFY_CT", "4")
        if self.drafter and body.get("return_spec_tokens_details") and verify != "none":
            steps = int(verify)
            spec = {"spec_verify_ct": steps, "spec_accept_length": n / steps if steps else 0.0}
            events.append({"id": "x", "choices": [], "sglext": {"spec_tokens_details": spec}})
        events.append({"id": "x", "choices": [], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="supervisor_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--speculative-algorithm")
    parser.add_argument("--max-running-requests", type=int)
    parser.add_argument("--max-mamba-cache-size", type=int)
    args, _ignored = parser.parse_known_args(argv)
    Handler.sizes = {"max_running_requests": args.max_running_requests, "max_mamba_cache_size": args.max_mamba_cache_size}
    if os.environ.get("SUPERVISOR_SERVER_CHILD_PIDS"):
        fork_child(os.environ["SUPERVISOR_SERVER_CHILD_PIDS"],
                   os.environ.get("SUPERVISOR_SERVER_CHILD_IGNORES_TERM") == "1")  # fmt: skip
    Handler.drafter = args.speculative_algorithm is not None
    Handler.hang = first_time(os.environ.get("SUPERVISOR_SERVER_HANG_ONCE"))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"supervisor_server pid {os.getpid()} on port {args.port}, drafter {Handler.drafter}", flush=True)
    if first_time(os.environ.get("SUPERVISOR_SERVER_EXIT_ONCE")):
        delay_s = float(os.environ.get("SUPERVISOR_SERVER_EXIT_AFTER_S", "0.5"))
        threading.Timer(delay_s, lambda: os._exit(1)).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
