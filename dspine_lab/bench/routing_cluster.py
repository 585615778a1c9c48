"""Ray glue of `bench routing`: a local cluster, one app per router, and the replicas' counters.

A fresh local Ray cluster is started with token auth off (`RAY_AUTH_MODE=disabled`: it is private to
this process and listens on 127.0.0.1). Each router gets a fresh app (`serve.run`), so every router
starts from empty replicas and empty prefix caches; `serve.delete` removes it before the next one.
Replica counters, and the CPU seconds of the proxy, the ingress and each replica, are read inside each
actor with Ray's `__ray_call__` (a developer API that runs a function on the actor instance), because a
deployment handle cannot address one replica.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import httpx

from ray_dspine.config import AppConfig

APP_NAME = "routing-bench"
REPLICA_PREFIX = "SERVE_REPLICA::"
PROXY_PREFIX = "SERVE_PROXY_ACTOR"
INGRESS_DEPLOYMENT = "ingress"
SERVE_NAMESPACE = "serve"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(num_cpus: int) -> str:
    """Start a private local Ray cluster and Serve's HTTP proxy; returns the endpoint URL."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray import serve

    for name in ("ray", "ray.serve"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # address="local": always a new cluster, even when `ray start` left one for this user to join.
    ray.init(
        address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
    )
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return f"http://127.0.0.1:{port}"


def stop_cluster() -> None:
    import ray
    from ray import serve

    try:
        serve.shutdown()
    finally:
        ray.shutdown()


def deploy(config: AppConfig, endpoint: str, *, timeout_s: float = 180.0) -> None:
    """Run the app and wait until its /health answers and every replica has reported its load."""
    from ray import serve

    from ray_dspine.serve.app import build_app

    # The ingress takes its concurrency from config.server.max_ongoing_requests.
    serve.run(build_app(config), name=APP_NAME, route_prefix="/", blocking=False)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{endpoint}/health", timeout=2.0).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        raise RuntimeError(f"the app did not answer /health within {timeout_s:.0f} s")
    pool = config.pools[0]
    expected = pool.deployment.num_replicas
    while time.monotonic() < deadline:
        if len(replica_actor_names(pool.name)) >= expected:
            break
        time.sleep(0.5)
    # Let every replica report routing stats at least twice before traffic starts.
    time.sleep(2.0 * pool.deployment.routing_stats_period_s + 0.5)


def undeploy() -> None:
    from ray import serve

    serve.delete(APP_NAME)


def replica_actor_names(pool_name: str) -> list[str]:
    return _actor_names(f"{REPLICA_PREFIX}{APP_NAME}#pool-{pool_name}#")


def _actor_names(prefix: str) -> list[str]:
    import ray

    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)]
    return sorted(names)


def _process_cpu_s(_actor) -> float:
    """Runs inside an actor: its process's CPU seconds so far, all threads."""
    return time.process_time()


def read_serving_cpu(pool_name: str, *, timeout_s: float = 30.0) -> dict[str, float | None]:
    """CPU seconds so far of this process (the client), Serve's proxy, the ingress and the pool's replicas
    (summed), as routing_serving_cpu.py reads them; a part that cannot be read is None."""
    import ray

    groups = {
        "proxy": _actor_names(PROXY_PREFIX),
        "ingress": _actor_names(f"{REPLICA_PREFIX}{APP_NAME}#{INGRESS_DEPLOYMENT}#"),
        "replicas": replica_actor_names(pool_name),
    }
    readings: dict[str, float | None] = {"client": time.process_time()}
    for part, names in groups.items():
        try:
            refs = [ray.get_actor(n, namespace=SERVE_NAMESPACE).__ray_call__.remote(_process_cpu_s) for n in names]
            values = ray.get(refs, timeout=timeout_s)
            readings[part] = float(sum(values)) if values else None
        except Exception:  # an actor gone or not answering: that part is unknown, the replay goes on
            readings[part] = None
    return readings


def _engine_counters(actor) -> dict:
    """Runs inside a replica actor (Ray 2.60's ReplicaActor -> our EngineReplica): engine counters and replica id."""
    replica = actor._replica_impl._user_callable_wrapper.user_callable
    described = replica.engine.describe()
    return {"replica": replica.replica_id, "counters": described.get("counters") or {}}


def read_replica_counters(pool_name: str, *, timeout_s: float = 30.0) -> list[dict]:
    """[{replica, counters}] for every replica of the pool (SimCounters as dicts)."""
    import ray

    refs = []
    for name in replica_actor_names(pool_name):
        actor = ray.get_actor(name, namespace=SERVE_NAMESPACE)
        refs.append(actor.__ray_call__.remote(_engine_counters))
    return sorted(ray.get(refs, timeout=timeout_s), key=lambda c: c["replica"])
