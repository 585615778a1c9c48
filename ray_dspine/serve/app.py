"""The application builder: `serve run clusters/local.yaml` calls `build_app(args)`.

The YAML's `args:` validate into `AppConfig`. Each pool becomes one `EngineReplica` deployment
named `pool-<name>` carrying its router; the `Ingress` deployment holds a handle per pool and a
HealthMonitor (health.py) answering readiness on `/health` and `/health/ready`; `/health/live` is liveness.
"""


from fastapi import Request
from fastapi.responses import JSONResponse
from ray import serve
from ray.serve import Application

from ..config import AppConfig, PoolConfig
from ..pools import sized
from .access import LIVENESS_PATH
from .health import HealthMonitor, serve_status_source
from .ingress import IngressCore, make_fastapi
from .replica import EngineReplica
from .router_options import request_router_config

fastapi_app = make_fastapi()


@serve.deployment(name="ingress", ray_actor_options={"num_cpus": 0})
@serve.ingress(fastapi_app)
class Ingress:
    async def __init__(self, config: AppConfig, handles: dict):
        self.core = IngressCore(config, handles)
        app_name = serve.get_replica_context().app_name
        monitor = HealthMonitor(list(handles), serve_status_source(app_name, list(handles)),
                                on_snapshot=self.core.replicas_running)  # fmt: skip
        await monitor.refresh()  # a first snapshot before the first probe
        monitor.start()
        self.core.health_monitor = monitor

    @fastapi_app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request):
        return await self.core.serve(request, chat=True)

    @fastapi_app.post("/v1/messages")
    async def messages(self, request: Request):
        return await self.core.serve_messages(request)

    @fastapi_app.post("/v1/messages/count_tokens")
    async def count_message_tokens(self, request: Request):
        return await self.core.count_message_tokens(request)

    @fastapi_app.post("/v1/responses")
    async def responses(self, request: Request):
        return await self.core.serve_responses(request)

    @fastapi_app.get("/v1/responses/{response_id}")
    async def response(self, response_id: str):
        return await self.core.retrieve_response(response_id)

    @fastapi_app.post("/v1/completions")
    async def completions(self, request: Request):
        return await self.core.serve(request, chat=False)

    @fastapi_app.get("/v1/models")
    async def models(self):
        return await self.core.list_models()

    @fastapi_app.get("/v1/models/{model:path}")
    async def model(self, model: str):
        return await self.core.retrieve_model(model)  # an unknown model: 404 through make_fastapi's handler

    @fastapi_app.get("/v1/dspine/engine")
    async def engines(self):
        return await self.core.describe_engines()

    @fastapi_app.get(LIVENESS_PATH)
    async def live(self):
        """Liveness: the ingress process serves HTTP (no key needed, no pool consulted)."""
        return {"status": "alive"}

    @fastapi_app.get("/health")
    @fastapi_app.get("/health/ready")
    async def health(self):
        """Readiness: 200 while every pool has a healthy replica, else 503 naming the others (health.py)."""
        status, body = await self.core.health()
        return JSONResponse(body, status_code=status)


def pool_deployment(pool: PoolConfig):
    options = pool.deployment
    kwargs = dict(
        name=f"pool-{pool.name}",
        num_replicas=options.num_replicas,
        max_ongoing_requests=options.max_ongoing_requests,
        max_queued_requests=options.max_queued_requests,
        ray_actor_options={"num_cpus": options.num_cpus, "num_gpus": options.num_gpus},
        health_check_period_s=options.health_check_period_s,
        health_check_timeout_s=options.health_check_timeout_s,
        graceful_shutdown_timeout_s=options.graceful_shutdown_timeout_s,
        user_config={"drafter_enabled": True},
    )
    router = request_router_config(options)
    if router is not None:
        kwargs["request_router_config"] = router
    return serve.deployment(EngineReplica).options(**kwargs).bind(pool)


def build_app(args: AppConfig) -> Application:
    config = sized(args)
    handles = {pool.name: pool_deployment(pool) for pool in config.pools}
    ingress = Ingress.options(
        max_ongoing_requests=config.server.max_ongoing_requests, num_replicas=config.server.num_ingress_replicas
    )
    return ingress.bind(config, handles)
