"""A real local Ray Serve app with the embedded engine, started once for the serve tests."""

import pytest

from ray_dspine.config import AppConfig

APP_NAME = "dspine-test"


def embedded_pool(name: str, speculative: bool, **engine) -> dict:
    return {
        "name": name,
        "gpu_hour_usd": 0.1,
        "engine": {
            "kind": "embedded", "dtype": "fp32", "speculative": speculative, "num_draft_tokens": 8,
            "context_length_tokens": 1024, "kv_budget_tokens": 2048, "max_running_requests": 2,
            "max_queued_requests": 0, "num_threads": 1, **engine,
        },
        "deployment": {
            "num_replicas": 1, "num_cpus": 0.5, "max_ongoing_requests": 8, "max_queued_requests": 2,
            "router": {"policy": "headroom"},
        },  # fmt: skip
    }


def app_config() -> AppConfig:
    return AppConfig.model_validate(
        {
            "server": {"served_model_name": "smollm2-135m-instruct", "api_key_env": "DSPINE_TEST_API_KEY"},
            "pools": [embedded_pool("spec", True), embedded_pool("ar", False)],
            "traffic": {
                "default_reasoning_level": "none",
                "rules": [
                    {"reasoning_levels": ["none", "low", "medium"], "pool": "spec", "control_arm": "speculative",
                     "arms": [{"name": "autoregressive", "pool": "ar", "share": 0.5}]},
                    {"reasoning_levels": ["high", "xhigh"], "pool": "ar", "control_arm": "autoregressive"},
                ],
            },
        }
    )


@pytest.fixture(scope="module")
def serve_url(local_serve_app):
    from ray_dspine.serve.app import build_app

    return local_serve_app(build_app(app_config()), APP_NAME)


@pytest.fixture
def pool_load(serve_url):
    """pool_load(name) -> the pool replica's load snapshot (dict), through a deployment handle."""
    from ray import serve

    def load(pool: str) -> dict:
        return serve.get_deployment_handle(f"pool-{pool}", app_name=APP_NAME).load.remote().result()

    return load
