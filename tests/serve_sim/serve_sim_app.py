"""clusters/sim.yaml's app on a private local Ray cluster, run as its own process by the serve_sim tests.

    python serve_sim_app.py HTTP_PORT

Token auth is off (RAY_AUTH_MODE=disabled; the cluster is private and listens on 127.0.0.1). The pools
are sim.yaml's, with 3 `dspine` replicas, 1 `dflash2` replica and time_scale 0.02 (50x a GPU's speed)
so the tests run fast. Prints READY once every replica has reported its load; shuts down on SIGTERM.
"""

import os
import signal
import sys
import time
from pathlib import Path

os.environ["RAY_AUTH_MODE"] = "disabled"

SIM_YAML = Path(__file__).resolve().parents[2] / "clusters" / "sim.yaml"
TIME_SCALE = 0.02
NUM_DSPINE_REPLICAS = 3


def app_config():
    from ray_dspine.config_io import load_app_configs

    (_name, config), = load_app_configs(SIM_YAML)
    pools = []
    for pool in config.pools:
        engine = pool.engine.model_copy(update={"time_scale": TIME_SCALE})
        replicas = NUM_DSPINE_REPLICAS if pool.name == "dspine" else 1
        deployment = pool.deployment.model_copy(update={"num_replicas": replicas})
        pools.append(pool.model_copy(update={"engine": engine, "deployment": deployment}))
    server = config.server.model_copy(update={"api_key_env": None})
    return config.model_copy(update={"pools": pools, "server": server})


def main() -> None:
    http_port = int(sys.argv[1])
    import ray
    from ray import serve

    from ray_dspine.serve.app import build_app

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never join another cluster
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # after ray.init, which installs its own handler
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": http_port})
        serve.run(build_app(app_config()), name="sim", route_prefix="/")
        time.sleep(1.5)  # every replica reports its load (routing_stats_period_s 0.5) before traffic
        print("READY", flush=True)
        while True:
            time.sleep(1.0)
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
