"""SGLangServerDouble: a test double of an SGLang 0.5.x server, launched exactly like `sglang.launch_server`.

    python tests/sglang_double/sglang_double.py --model-path DIR --host 127.0.0.1 --port P [same flags]

It parses the launch_server flags the engine renders (an unknown flag exits 2, as argparse does in
SGLang), needs --model-path (and --speculative-draft-model-path) to exist, and serves on 127.0.0.1 with
the formats SGLang documents: GET /health, /health_generate, /v1/models, /v1/loads?include=...,
/metrics (Prometheus text, only with --enable-metrics, `sglang:` names); POST /v1/chat/completions and
/v1/completions (SSE: content chunks with continuous usage, then a `choices: []` chunk with
`sglext.spec_tokens_details` when a drafter runs and `return_spec_tokens_details` is set, then the usage
chunk and `data: [DONE]`), and POST /abort_request {"rid"}. No model: the output is "t0 t1 t2 ...", one
word per token, `accept` tokens per verify step with a drafter (1 without). A chat request with `tools`
(tool_choice not "none") on a server launched with --tool-call-parser answers with one call instead, in
SGLang's streaming tool-call format: the function named by tool_choice, else the first tool, with
arguments `{"count": max_tokens}` spread over the steps (the first delta carries the call's id and name,
later ones null id and name), and finish_reason "tool_calls".

Behaviour from the environment (the engine passes `env` through): SGLANG_DOUBLE_REFUSE_DRAFTER=1 exits 1
with a draft-load error when drafter flags are given; SGLANG_DOUBLE_CRASH_AFTER=N dies (exit 134) when
request N+1 arrives, and SGLANG_DOUBLE_CRASH_WITH_DRAFTER_ONLY=1 limits that to drafter launches;
SGLANG_DOUBLE_STARTUP_S (before the port opens), SGLANG_DOUBLE_PREFILL_S (before a request's first chunk,
as its prefill), SGLANG_DOUBLE_STEP_S (between chunks),
SGLANG_DOUBLE_ACCEPT (tokens per verify step, default 3), SGLANG_DOUBLE_KV_TOKENS (default 100000),
SGLANG_DOUBLE_KV_EVICTABLE, SGLANG_DOUBLE_MAMBA_EVICTABLE (default 0); SGLANG_DOUBLE_EVENTS=path appends
one JSON line per launch, request, abort and disconnect.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

VALID_SECTIONS = {"core", "memory", "spec", "lora", "disagg", "queues", "all"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sglang_double")
    for flag in ("--model-path", "--served-model-name", "--host", "--dtype", "--attention-backend",
                 "--linear-attn-backend", "--reasoning-parser", "--tool-call-parser", "--mem-fraction-static",
                 "--mamba-full-memory-ratio", "--mamba-scheduler-strategy", "--mamba-ssm-dtype", "--kv-cache-dtype",
                 "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-draft-attention-backend"):
        p.add_argument(flag)
    for flag in ("--port", "--tp-size", "--context-length", "--max-running-requests", "--max-mamba-cache-size",
                 "--speculative-num-draft-tokens", "--speculative-num-steps", "--speculative-eagle-topk",
                 "--speculative-draft-window-size"):
        p.add_argument(flag, type=int)
    for flag in ("--enable-metrics", "--enable-cache-report", "--disable-radix-cache", "--disable-overlap-schedule",
                 "--enable-linear-replayssm-spec"):
        p.add_argument(flag, action="store_true")
    return p.parse_args(argv)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


class Double:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.drafter = args.speculative_algorithm is not None
        self.accept = env_int("SGLANG_DOUBLE_ACCEPT", 3) if self.drafter else 1
        self.num_draft = args.speculative_num_draft_tokens or 0
        self.kv_total = env_int("SGLANG_DOUBLE_KV_TOKENS", 100_000)
        self.mamba_total = args.max_mamba_cache_size or 64
        self.lock = threading.Lock()
        self.num_requests = 0
        self.running: dict[str, int] = {}  # rid -> KV tokens held
        self.aborted: set[str] = set()
        self.accept_lengths: list[float] = []

    def event(self, **fields) -> None:
        path = os.environ.get("SGLANG_DOUBLE_EVENTS")
        if path:
            with self.lock, open(path, "a") as sink:
                sink.write(json.dumps({"pid": os.getpid(), **fields}) + "\n")

    def loads(self, include: set[str]) -> dict:
        with self.lock:
            used = sum(self.running.values())
            entry = {"dp_rank": 0, "timestamp": time.time(), "num_running_reqs": len(self.running),
                     "num_waiting_reqs": 0, "num_used_tokens": used, "num_total_tokens": used,
                     "max_total_num_tokens": self.kv_total, "token_usage": round(used / self.kv_total, 4),
                     "gen_throughput": 0.0, "cache_hit_rate": 0.0, "utilization": 0.0,
                     "max_running_requests": self.args.max_running_requests or 0}
            accept = sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0
        if include & {"memory", "all"}:
            entry["memory"] = {"weight_gb": 50.1, "kv_cache_gb": 60.0, "graph_gb": 2.5, "token_capacity": self.kv_total}
        if include & {"spec", "all"} and self.drafter:
            entry["speculative"] = {"accept_length": accept, "accept_rate": 0.0}
        return {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()), "version": "0.5.23-double",
                "dp_rank_count": 1, "loads": [entry]}

    def metrics(self) -> str:
        with self.lock:
            running, used = len(self.running), sum(self.running.values())
        kv_evictable = env_int("SGLANG_DOUBLE_KV_EVICTABLE", 0)
        mamba_evictable = env_int("SGLANG_DOUBLE_MAMBA_EVICTABLE", 0)
        labels = '{model_name="%s",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"}' % (
            self.args.served_model_name or "default")
        gauges = {"num_running_reqs": running, "num_queue_reqs": 0, "max_total_num_tokens": self.kv_total,
                  "kv_available_tokens": self.kv_total - used - kv_evictable, "kv_evictable_tokens": kv_evictable,
                  "kv_used_tokens": used, "mamba_available_tokens": self.mamba_total - running - mamba_evictable,
                  "mamba_evictable_tokens": mamba_evictable, "mamba_used_tokens": running,
                  "mamba_usage": round((running + mamba_evictable) / self.mamba_total, 4)}
        lines = []
        for name, value in gauges.items():
            lines += [f"# HELP sglang:{name} {name}", f"# TYPE sglang:{name} gauge", f"sglang:{name}{labels} {value}"]
        return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    double: Double

    def log_message(self, *args) -> None:  # no access log: requests never reach the log
        pass

    def _json(self, status: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"object": "error", "message": message, "type": "BadRequest", "code": status})

    def do_GET(self) -> None:
        url, d = urlsplit(self.path), self.double
        if url.path in ("/health", "/health_generate"):
            return self._json(200, {})
        if url.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [{"id": d.args.served_model_name or d.args.model_path,
                                    "object": "model", "created": 0, "owned_by": "sglang",
                                    "root": d.args.model_path, "max_model_len": d.args.context_length}]})
        if url.path == "/v1/loads":
            include = {part for value in parse_qs(url.query).get("include", ["all"]) for part in value.split(",")}
            if include - VALID_SECTIONS:
                return self._error(400, f"Invalid include sections: {include - VALID_SECTIONS}")
            return self._json(200, d.loads(include))
        if url.path == "/metrics" and d.args.enable_metrics:
            raw = d.metrics().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return None
        return self._error(404, "Not Found")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        path, d = urlsplit(self.path).path, self.double
        if path == "/abort_request":
            d.aborted.add(str(body.get("rid")))
            d.event(event="abort", rid=body.get("rid"))
            return self._json(200, {})
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return self._error(404, "Not Found")
        with d.lock:
            d.num_requests += 1
            number = d.num_requests
        crash_after = os.environ.get("SGLANG_DOUBLE_CRASH_AFTER")
        drafter_only = os.environ.get("SGLANG_DOUBLE_CRASH_WITH_DRAFTER_ONLY") == "1"
        if crash_after is not None and number > int(crash_after) and (d.drafter or not drafter_only):
            d.event(event="crash", request=number)
            sys.stderr.write("Fatal Python error: scheduler process died (double)\n")
            os._exit(134)
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            return self._error(400, "max_tokens must be a positive integer")
        self._generate(body, chat=path.endswith("chat/completions"))
        return None

    def _generate(self, body: dict, chat: bool) -> None:
        d, rid = self.double, str(body.get("rid") or f"rid-{time.time_ns()}")
        texts = [m.get("content") or "" for m in body.get("messages", [])] if chat else [body.get("prompt", "")]
        prompt_tokens = sum(len(text.split()) for text in texts)
        n, step_s = body["max_tokens"], float(os.environ.get("SGLANG_DOUBLE_STEP_S", "0"))
        think = chat and d.args.reasoning_parser and "reasoning_effort" in body
        d.event(event="request", rid=rid, keys=sorted(body))
        with d.lock:
            d.running[rid] = prompt_tokens
        base = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": 0,
                "model": body.get("model")}
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent, steps, histogram, finish = 0, 0, [0] * (d.num_draft + 1 if d.drafter else 1), "length"
        call = tool_call_plan(body, n, d.accept) if chat and d.args.tool_call_parser else None
        try:
            time.sleep(float(os.environ.get("SGLANG_DOUBLE_PREFILL_S", "0")))
            while sent < n:
                if rid in d.aborted:
                    finish = "abort"
                    break
                k = min(d.accept, n - sent)
                words = "".join(f"t{i} " for i in range(sent, sent + k))
                sent, steps = sent + k, steps + 1
                histogram[min(k - 1, len(histogram) - 1)] += 1
                with d.lock:
                    d.running[rid] = prompt_tokens + sent
                part = ({"reasoning_content": words} if think and steps == 1 else {"content": words}) if chat else None
                if call is not None:
                    part = {"tool_calls": [call[steps - 1]]}
                choice = {"index": 0, "delta": part} if chat else {"index": 0, "text": words}
                choice["finish_reason"] = ("tool_calls" if call is not None else "length") if sent == n else None
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": sent, "total_tokens": prompt_tokens + sent}
                self._sse({**base, "choices": [choice], "usage": usage})
                time.sleep(step_s)
            if d.drafter and body.get("return_spec_tokens_details") and steps:
                spec = {"spec_verify_ct": steps, "spec_accept_length": sent / steps,
                        "spec_num_correct_drafts": sent - steps, "spec_num_proposed_drafts": steps * d.num_draft,
                        "spec_accept_rate": (sent - steps) / max(1, steps * d.num_draft),
                        "spec_correct_drafts_histogram": histogram}
                self._sse({**base, "choices": [], "sglext": {"spec_tokens_details": spec}})
                with d.lock:
                    d.accept_lengths.append(sent / steps)
            if finish == "abort":
                self._sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]})
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": sent, "total_tokens": prompt_tokens + sent}
            if d.args.enable_cache_report:
                usage["prompt_tokens_details"] = {"cached_tokens": 0}
            self._sse({**base, "choices": [], "usage": usage})
            self._write(b"data: [DONE]\n\n")
            self._write(b"")
        except (BrokenPipeError, ConnectionResetError):
            d.event(event="disconnect", rid=rid, sent=sent)
        finally:
            with d.lock:
                d.running.pop(rid, None)

    def _sse(self, event: dict) -> None:
        self._write(f"data: {json.dumps(event)}\n\n".encode())

    def _write(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def tool_call_plan(body: dict, max_tokens: int, accept: int) -> list[dict] | None:
    """One tool-call delta per step (see the module docstring), or None when the request calls no tool."""
    tools, choice = body.get("tools") or [], body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return None
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    name = named or tools[0]["function"]["name"]
    arguments = json.dumps({"count": max_tokens})
    steps = -(-max_tokens // accept)
    cuts = [round(i * len(arguments) / steps) for i in range(steps + 1)]
    return [
        {"id": f"call_{i}" if i == 0 else None, "index": 0, "type": "function",
         "function": {"name": name if i == 0 else None, "arguments": arguments[cuts[i]:cuts[i + 1]]}}
        for i in range(steps)
    ]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    double = Double(args)
    for label, path in (("model", args.model_path), ("draft model", args.speculative_draft_model_path)):
        if path is not None and not os.path.isdir(path):
            sys.stderr.write(f"OSError: {label} path {path} does not exist\n")
            return 1
    if double.drafter and os.environ.get("SGLANG_DOUBLE_REFUSE_DRAFTER") == "1":
        double.event(event="refuse_drafter")
        sys.stderr.write(f"RuntimeError: failed to load draft model for {args.speculative_algorithm} (double)\n")
        return 1
    time.sleep(float(os.environ.get("SGLANG_DOUBLE_STARTUP_S", "0")))
    Handler.double = double
    server = ThreadingHTTPServer((args.host or "127.0.0.1", args.port or 30000), Handler)
    server.daemon_threads = True
    double.event(event="launch", drafter=double.drafter, argv=argv)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
