"""Ray's `RequestRouterConfig` for a pool, from its `RouterConfig` (None keeps Ray's default router)."""

from __future__ import annotations

from ..config import DeploymentOptions

ROUTER_CLASSES = {
    "headroom": "ray_dspine.routing.ray_router:HeadroomRequestRouter",
    "cache_aware": "ray_dspine.routing.ray_router:CacheAwareRequestRouter",
    "least_load": "ray_dspine.routing.ray_router:LeastLoadRequestRouter",
}


def request_router_config(options: DeploymentOptions):
    from ray.serve.config import RequestRouterConfig

    policy = options.router.policy
    if policy == "pow2":
        return None
    # A report that carries no timestamp is taken to be one period old.
    reports = options.router.reports.model_copy(update={"assumed_stats_age_s": options.routing_stats_period_s})
    router = options.router.model_copy(update={"reports": reports})
    return RequestRouterConfig(
        request_router_class=ROUTER_CLASSES[policy],
        request_router_kwargs=router.model_dump(),
        request_routing_stats_period_s=options.routing_stats_period_s,
    )
