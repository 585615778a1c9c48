"""The server double's HTTP app: SGLang's own routes and OpenAI serving layer around TokenizerManagerDouble.

Rules:
  routes    the route objects of SGLang's `sglang.srt.entrypoints.http_server.app` for GET /health,
            /health_generate, /v1/models, /v1/loads (SGLang's v1_loads router: LoadSnapshot.to_dict and its
            envelope), POST /abort_request, /v1/completions, /v1/chat/completions, /v1/responses, with that
            app's exception handlers and JSON route class; the OpenAI routes call SGLang's OpenAIServingChat /
            OpenAIServingCompletion / OpenAIServingResponses (`app.state`), built as SGLang's lifespan builds
            them (the Responses one with enable_prompt_tokens_details=True and no tool server: no --tool-server
            and no EXA_API_KEY), over TokenizerManagerDouble and SGLang's TemplateManager
            (`initialize_templates` from --model-path, --chat-template, --completion-template), and POST
            /v1/messages/count_tokens, which calls SGLang's AnthropicServing over that OpenAIServingChat.
            SGLang's lifespan itself is not run: it also builds the embedding, rerank, transcription and Ollama
            handlers and a warm-up request. Of the Responses routes only POST /v1/responses is served (GET
            /v1/responses/{id} and its cancel need --enable-response-store, which the engine never sets).
  metrics   with --enable-metrics: SGLang's `add_prometheus_middleware` (Prometheus multiprocess registry
            under PROMETHEUS_MULTIPROC_DIR, set by SGLang's `set_prometheus_multiproc_dir`) serves /metrics;
            SGLang's SchedulerMetricsCollector, with the labels its `init_new` gives rank 0 of a single-GPU
            server, is told `emit_constants` once and `log_stats(SchedulerDouble.stats())` after every step.
  requests  every POST to the three OpenAI routes is recorded as a `request` event (rid, or a Responses
            body's request_id, and the body's keys, never its values) before SGLang sees it.
"""

from __future__ import annotations

import json

from fastapi import FastAPI

from double_runtime import event

OPENAI_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
SGLANG_ROUTES = ("/health", "/health_generate", "/v1/models", "/v1/loads", "/abort_request", *OPENAI_PATHS,
                 "/v1/messages/count_tokens")


class RecordRequests:
    """ASGI middleware for rule `requests`: reads the body, records its keys, replays it unchanged."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in OPENAI_PATHS:
            return await self.app(scope, receive, send)
        messages, body = [], b""
        while True:
            message = await receive()
            messages.append(message)
            body += message.get("body", b"")
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        try:
            parsed = json.loads(body or b"{}")
        except ValueError:
            parsed = {}
        if isinstance(parsed, dict):
            event(event="request", rid=parsed.get("rid", parsed.get("request_id")), keys=sorted(parsed))

        async def replay():
            return messages.pop(0) if messages else await receive()

        return await self.app(scope, replay, send)


def scheduler_metrics(server_args, tokenizer_manager):
    """Rule `metrics`: SGLang's SchedulerMetricsCollector fed by the scheduler double."""
    from sglang.srt.observability.metrics_collector import SchedulerMetricsCollector

    labels = {"model_name": tokenizer_manager.served_model_name, "engine_type": "unified", "tp_rank": 0,
              "pp_rank": 0, "moe_ep_rank": 0}  # fmt: skip
    collector = SchedulerMetricsCollector(labels=labels, server_args=server_args)
    scheduler = tokenizer_manager.scheduler
    collector.emit_constants(
        max_total_num_tokens=scheduler.kv_total, max_total_num_tokens_swa=None, weight_memory_usage_gb=50.1,
        kv_cache_memory_usage_gb=60.0, graph_memory_usage_gb={"decode": 2.5}, max_running_requests_under_SLO=None,
        page_size=1, num_pages=scheduler.kv_total, context_len=tokenizer_manager.context_len,
        startup_available_gpu_memory_gb=120.0,
    )  # fmt: skip
    scheduler.on_step = lambda: collector.log_stats(scheduler.stats())
    scheduler.on_step()
    return collector


def build_app(server_args, tokenizer_manager) -> FastAPI:
    from sglang.srt.entrypoints import http_server, v1_loads
    from sglang.srt.entrypoints.anthropic.serving import AnthropicServing
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion
    from sglang.srt.entrypoints.openai.serving_responses import OpenAIServingResponses
    from sglang.srt.parser.template_manager import TemplateManager
    from sglang.srt.runtime_context import get_observability, get_serving
    from sglang.srt.utils.common import add_prometheus_middleware

    template_manager = TemplateManager()
    template_manager.initialize_templates(
        tokenizer_manager=tokenizer_manager, model_path=tokenizer_manager.model_path,
        chat_template=get_serving().chat_template, completion_template=get_serving().completion_template,
    )  # fmt: skip
    http_server.set_global_state(http_server._GlobalState(
        tokenizer_manager=tokenizer_manager, template_manager=template_manager, scheduler_info={}))
    app = FastAPI()
    app.router.route_class = http_server.ORJSONRoute
    for exc, handler in http_server.app.exception_handlers.items():
        app.add_exception_handler(exc, handler)
    routes = [route for route in http_server.app.routes if getattr(route, "path", None) in SGLANG_ROUTES]
    app.router.routes.extend(routes)
    app.include_router(v1_loads.router)
    assert {route.path for route in routes} | {"/v1/loads"} == set(SGLANG_ROUTES), routes
    app.state.openai_serving_chat = tokenizer_manager.serving_chat_class(tokenizer_manager, template_manager)
    app.state.openai_serving_completion = OpenAIServingCompletion(tokenizer_manager, template_manager)
    assert isinstance(app.state.openai_serving_chat, OpenAIServingChat)
    app.state.anthropic_serving = AnthropicServing(app.state.openai_serving_chat)
    # as SGLang's lifespan builds it (its tool_server is None without --tool-server or EXA_API_KEY)
    app.state.openai_serving_responses = OpenAIServingResponses(
        tokenizer_manager, template_manager, enable_prompt_tokens_details=True, tool_server=None)
    if get_observability().enable_metrics:
        scheduler_metrics(server_args, tokenizer_manager)
        add_prometheus_middleware(app)
    app.add_middleware(RecordRequests)
    return app
