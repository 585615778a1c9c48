"""The Ray adapter's pure parts, without a cluster: config parsing, stats -> ReplicaView, YAML schema."""

import math

import pytest

pytest.importorskip("ray")
from ray.serve.config import RequestRouterConfig  # noqa: E402
from ray.serve.schema import ServeDeploySchema  # noqa: E402

from ray_dspine.engines.protocol import LoadSnapshot  # noqa: E402
from ray_dspine.routing.baselines.cache_aware import CacheAwarePolicy  # noqa: E402
from ray_dspine.routing.pipeline import RoutingPipeline  # noqa: E402
from ray_dspine.routing.ray_router import (  # noqa: E402
    CacheAwareRequestRouter,
    DSpineRequestRouter,
    HeadroomRequestRouter,
    replica_view,
)


def bare(cls):
    return object.__new__(cls)  # initialize_state needs none of RequestRouter's runtime state


def test_initialize_state_validates_router_kwargs():
    router = bare(HeadroomRequestRouter)
    router.initialize_state(weights={"queue": 3.0}, stale_after_s=2.0)
    assert isinstance(router._policy, RoutingPipeline) and router._config.weights.queue == 3.0
    with pytest.raises(ValueError):
        bare(HeadroomRequestRouter).initialize_state(no_such_key=1)
    with pytest.raises(ValueError, match="runs policy 'cache_aware'"):
        bare(CacheAwareRequestRouter).initialize_state(policy="least_load")
    cache_aware = bare(DSpineRequestRouter)
    cache_aware.initialize_state(policy="cache_aware")
    assert isinstance(cache_aware._policy, CacheAwarePolicy)
    with pytest.raises(ValueError, match="pow2"):
        bare(DSpineRequestRouter).initialize_state(policy="pow2")


def test_rule_stats_age_from_reported_at_else_assumed():
    stats = {**LoadSnapshot(free_kv_tokens=5).model_dump(), "reported_at_s": 98.5}
    assert replica_view("r", stats, now_s=100.0, assumed_age_s=1.0).stats_age_s == 1.5  # 100 - 98.5
    assert replica_view("r", {**stats, "reported_at_s": 101.0}, 100.0, 1.0).stats_age_s == 0.0  # clock skew -> 0
    no_time = LoadSnapshot(free_kv_tokens=5).model_dump()
    view = replica_view("r", no_time, now_s=100.0, assumed_age_s=0.7)
    assert view.stats_age_s == 0.7 and view.load.free_kv_tokens == 5


def test_rule_empty_or_invalid_stats_count_as_unreported():
    assert math.isinf(replica_view("r", {}, 0.0, 1.0).stats_age_s)
    assert math.isinf(replica_view("r", None, 0.0, 1.0).stats_age_s)
    assert math.isinf(replica_view("r", {"free_kv_tokens": "lots"}, 0.0, 1.0).stats_age_s)


def test_yaml_request_router_config_is_accepted_by_ray():
    deploy = {
        "applications": [
            {
                "name": "pools",
                "import_path": "some.module:app",
                "deployments": [
                    {
                        "name": "DSpinePool",
                        "request_router_config": {
                            "request_router_class": "ray_dspine.routing.ray_router:HeadroomRequestRouter",
                            "request_router_kwargs": {"weights": {"prefix_match": 2.0}, "assumed_stats_age_s": 1.0},
                            "request_routing_stats_period_s": 1.0,
                            "request_routing_stats_timeout_s": 5.0,
                            "initial_backoff_s": 0.025,
                            "backoff_multiplier": 2.0,
                            "max_backoff_s": 0.5,
                        },
                    }
                ],
            }
        ]
    }
    schema = ServeDeploySchema.model_validate(deploy)
    cfg = schema.applications[0].deployments[0].request_router_config
    config = cfg if isinstance(cfg, RequestRouterConfig) else RequestRouterConfig(**cfg)
    assert config.request_routing_stats_period_s == 1.0
    assert config.request_router_kwargs["weights"] == {"prefix_match": 2.0}
