"""SGLangServerDouble: an SGLang 0.5.23 server without a GPU or a model, launched exactly like `sglang.launch_server`.

    python tests/sglang_double/sglang_double.py --model-path DIR --host 127.0.0.1 --port P [launch_server flags]

What is SGLang's own code (the installed 0.5.23 package, run unchanged):
  - the command line: `prepare_server_args` (an unknown flag or a bad value exits 2 with SGLang's message);
  - the HTTP routes /health, /health_generate, /v1/models, /v1/loads, /abort_request, /v1/completions,
    /v1/chat/completions, POST /v1/responses and /v1/messages/count_tokens, their request classes
    (`ChatCompletionRequest`, `CompletionRequest`, `ResponsesRequest`) and errors;
  - the OpenAI layer: OpenAIServingChat / OpenAIServingCompletion (chat template rendering through
    TemplateManager, the --reasoning-parser and --tool-call-parser stream parsers, SSE framing, continuous
    usage, the `sglext.spec_tokens_details` chunk, the usage chunk, `data: [DONE]`), OpenAIServingResponses
    (input items to chat messages, output items, its Responses event stream) and AnthropicServing's count;
  - the TokenizerManager request path (request state, length checks, SamplingParams, meta_info and the
    speculative metrics built from the scheduler's output, aborts, `get_loads`);
  - /v1/loads bodies from `LoadSnapshot`, /metrics from `SchedulerMetricsCollector` and Prometheus'
    multiprocess registry, exactly as the server wires them.
What is a double, and why (each file says more):
  - double_scheduler.py: SchedulerDouble stands in for the scheduler, model runner and detokenizer (GPU work):
    it answers each dispatched request with SGLang's `BatchStrOutput` per verify step;
  - double_model.py: the generated text (no weights): "t0 t1 t2 ..." one word per token, a `</think>` after three
    words when the prompt opens thinking, one qwen3_coder tool call when the prompt lists tools;
  - double_tokenizer.py: a word-level tokenizer with a Qwen3-style chat template, and the model config (the
    tests' model folders hold placeholder weights, no tokenizer and no config.json);
  - double_tokenizer_manager.py: SGLang's TokenizerManager with its ZMQ and shared-memory plumbing replaced by
    direct calls to the scheduler double;
  - double_runtime.py: torchvision and sgl_kernel as inert modules (no CPU build / CUDA-only); the config
    bags projected from the parsed arguments without the resolution pipeline (it reads config.json and the GPU);
    an algorithm no installed plugin provides (DSPINE here) registered by name so SGLang's config code knows it.
It needs --model-path (and --speculative-draft-model-path) to be existing folders.

Behaviour from the environment (the engine passes `env` through):
  SGLANG_DOUBLE_REFUSE_DRAFTER=1   exit 1 with a draft-load error when --speculative-algorithm is given;
  SGLANG_DOUBLE_CRASH_AFTER=N      die (exit 134) when request N+1 arrives (health checks not counted);
  SGLANG_DOUBLE_CRASH_WITH_DRAFTER_ONLY=1   only on a launch with a drafter;
  SGLANG_DOUBLE_STARTUP_S          seconds before the port opens;
  SGLANG_DOUBLE_PREFILL_S          seconds before a request's first step (its prefill);
  SGLANG_DOUBLE_STEP_S             seconds after each verify step;
  SGLANG_DOUBLE_ACCEPT             tokens per verify step with a drafter (default 3; 1 without);
  SGLANG_DOUBLE_KV_TOKENS          KV pool tokens (default 100000);
  SGLANG_DOUBLE_KV_EVICTABLE, SGLANG_DOUBLE_MAMBA_EVICTABLE   evictable KV tokens / Mamba slots (default 0);
  SGLANG_DOUBLE_EVENTS=path        one JSON line per launch, refused drafter, request (rid and body keys),
                                   abort, disconnect and crash. Prompt text is never written anywhere.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from double_runtime import env_float, event, install_module_doubles, parse, publish, register_algorithm  # noqa: E402


def main(argv: list[str]) -> int:
    install_module_doubles()
    args = parse(argv)
    for label, path in (("model", args.model_path), ("draft model", args.speculative_draft_model_path)):
        if path is not None and not os.path.isdir(path):
            sys.stderr.write(f"OSError: {label} path {path} does not exist\n")
            return 1
    drafter = args.speculative_algorithm is not None
    if drafter and os.environ.get("SGLANG_DOUBLE_REFUSE_DRAFTER") == "1":
        event(event="refuse_drafter")
        sys.stderr.write(f"RuntimeError: failed to load draft model for {args.speculative_algorithm} (double)\n")
        return 1
    time.sleep(env_float("SGLANG_DOUBLE_STARTUP_S", 0.0))
    if args.enable_metrics:
        from sglang.srt.utils.common import set_prometheus_multiproc_dir

        set_prometheus_multiproc_dir()  # before prometheus_client is imported, as the server does
    import uvicorn

    from double_app import build_app
    from double_tokenizer_manager import TokenizerManagerDouble

    registered = register_algorithm(args)
    publish(args)
    tokenizer_manager = TokenizerManagerDouble(args)
    app = build_app(args, tokenizer_manager)
    tokenizer_manager.mark_up()
    event(event="launch", drafter=drafter, argv=argv, registered_algorithm=registered)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
