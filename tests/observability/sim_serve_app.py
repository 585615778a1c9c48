"""A local Ray Serve app on the simulated engine, run as its own process by the Prometheus test.

    python sim_serve_app.py METRICS_PORT HTTP_PORT

Starts a private Ray cluster (token auth off: RAY_AUTH_MODE=disabled, loopback only) whose metrics
are exported on METRICS_PORT, serves two simulated pools (a DSpine control arm behind our router, a
DFlash2 arm behind Ray's default one, half the sessions each) on 127.0.0.1:HTTP_PORT, prints READY,
and shuts everything down on SIGTERM.
"""

import os
import signal
import sys
import time

os.environ["RAY_AUTH_MODE"] = "disabled"


def pool(name: str, drafter: str, policy: str) -> dict:
    return {
        "name": name,
        "gpu_hour_usd": 3.5,
        "engine": {
            "kind": "simulated", "drafter": drafter, "time_scale": 0.01, "total_kv_tokens": 65_536,
            "num_state_slots": 64, "max_running_requests": 16,
        },
        "deployment": {"num_replicas": 1, "num_cpus": 0.1, "max_ongoing_requests": 16, "routing_stats_period_s": 1.0,
                       "router": {"policy": policy}},
    }  # fmt: skip


def app_config():
    from ray_dspine.config import AppConfig

    return AppConfig.model_validate(
        {
            "server": {"served_model_name": "sim", "api_key_env": None},
            "pools": [pool("sim-dspine", "dspine", "headroom"), pool("sim-dflash2", "dflash2", "pow2")],
            "traffic": {
                "default_reasoning_level": "none",
                "rules": [
                    {"reasoning_levels": ["none", "low", "medium", "high", "xhigh"], "pool": "sim-dspine",
                     "control_arm": "dspine", "arms": [{"name": "dflash2", "pool": "sim-dflash2", "share": 0.5}]},
                ],
            },
        }
    )  # fmt: skip


def main() -> None:
    metrics_port, http_port = int(sys.argv[1]), int(sys.argv[2])
    import ray
    from ray import serve

    from ray_dspine.serve.app import build_app

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _metrics_export_port=metrics_port)  # never join another cluster
    # After ray.init, which installs its own SIGTERM handler: exit through `finally` and shut down cleanly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": http_port})
        serve.run(build_app(app_config()), name="observability", route_prefix="/", blocking=False)
        print("READY", flush=True)
        while True:
            time.sleep(1)
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
