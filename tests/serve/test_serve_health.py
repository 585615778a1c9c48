"""Liveness and readiness: the rules of health.py with a fake replica-state source, then over HTTP under load."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from types import SimpleNamespace

import httpx
import pytest

from ray_dspine.serve.health import HealthMonitor, readiness, running_replicas_from_status

MODEL = "smollm2-135m-instruct"
APP_NAME = "dspine-test"  # conftest.py's


# -- the rules, no cluster -------------------------------------------------------------------------
def test_ready_when_every_pool_has_a_running_replica():
    status, body = readiness(["spec", "ar"], {"spec": 2, "ar": 1}, age_s=0.5)
    assert status == 200
    assert body == {"status": "ok", "unready_pools": [],
                    "pools": {"spec": {"healthy_replicas": 2}, "ar": {"healthy_replicas": 1}}}


def test_not_ready_names_the_pools_without_a_replica():
    status, body = readiness(["spec", "ar", "big"], {"spec": 1, "ar": 0}, age_s=0.5)  # "big" absent: 0
    assert status == 503
    assert body["status"] == "unavailable" and body["unready_pools"] == ["ar", "big"]
    assert body["pools"]["spec"] == {"healthy_replicas": 1} and body["pools"]["big"] == {"healthy_replicas": 0}
    assert body["error"] == {"message": "no healthy replica in pool(s): ar, big", "type": "service_unavailable",
                             "param": None, "code": "pool_unavailable"}


def test_unknown_or_stale_snapshot_is_not_ready():
    status, body = readiness(["spec"], None, None)
    assert status == 503 and body["status"] == "starting" and body["unready_pools"] == ["spec"]
    assert body["error"]["code"] == "health_unknown"
    status, body = readiness(["spec"], {"spec": 1}, age_s=10.5, stale_after_s=10.0)
    assert status == 503 and body["status"] == "stale"
    assert body["error"]["message"] == "replica states are 10.5 s old (limit 10 s)"
    assert readiness(["spec"], {"spec": 1}, age_s=10.0, stale_after_s=10.0)[0] == 200  # the limit itself is fresh


def test_running_counts_read_from_serve_status():
    status = SimpleNamespace(applications={"app": SimpleNamespace(deployments={
        "pool-spec": SimpleNamespace(replica_states={"RUNNING": 2, "STARTING": 1}),
        "pool-ar": SimpleNamespace(replica_states={"STARTING": 1}),
        "ingress": SimpleNamespace(replica_states={"RUNNING": 1}),
    })})
    assert running_replicas_from_status(status, "app", ["spec", "ar", "big"]) == {"spec": 2, "ar": 0, "big": 0}
    assert running_replicas_from_status(status, "other", ["spec"]) == {"spec": 0}


def test_monitor_flips_with_the_source_and_keeps_the_last_snapshot_on_failure():
    now = [100.0]
    states = [{"spec": 1, "ar": 1}]

    def source():
        if states[0] is None:
            raise ConnectionError("controller unreachable")
        return states[0]

    monitor = HealthMonitor(["spec", "ar"], source, stale_after_s=10.0, clock=lambda: now[0])

    async def run():
        assert monitor.readiness()[0] == 503  # nothing read yet
        await monitor.refresh()
        assert monitor.readiness()[0] == 200
        states[0] = {"spec": 1, "ar": 0}  # the ar replica failed its health checks
        await monitor.refresh()
        assert monitor.readiness() == (503, readiness(["spec", "ar"], {"spec": 1, "ar": 0}, 0.0)[1])
        states[0] = {"spec": 1, "ar": 1}  # a replacement is RUNNING
        await monitor.refresh()
        assert monitor.readiness()[0] == 200
        states[0] = None  # a failed refresh keeps the snapshot until it is stale
        now[0] += 5.0
        await monitor.refresh()
        assert monitor.readiness()[0] == 200
        now[0] += 6.0
        assert monitor.readiness()[1]["status"] == "stale"

    asyncio.run(run())


# -- over HTTP, a real app ---------------------------------------------------------------------------
@pytest.mark.serve
def test_probes_answer_fast_while_a_pool_is_saturated(serve_url):
    live = httpx.get(f"{serve_url}/health/live", timeout=5)
    assert live.status_code == 200 and live.json() == {"status": "alive"}
    ready = httpx.get(f"{serve_url}/health/ready", timeout=5)
    assert ready.status_code == 200 and ready.json()["unready_pools"] == []
    # Saturate pool `ar` (2 running + more waiting) with long generations, then probe while they run.
    done = []

    def generate():
        # a counting prompt keeps the small model going to max_tokens rather than stopping early
        body = {"model": MODEL, "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "max_tokens": 160, "temperature": 0}
        try:
            for _ in range(40):  # a pool still holding an earlier test's work refuses with 429/503: ask again
                response = httpx.post(f"{serve_url}/v1/completions", json=body, timeout=300,
                                      headers={"x-dspine-pool": "ar"})
                if response.status_code not in (429, 503):
                    break
                time.sleep(0.25)
            done.append(response.status_code)
        except httpx.HTTPError as exc:
            done.append(type(exc).__name__)

    workers = [threading.Thread(target=generate) for _ in range(3)]  # the engine runs 2 at a time
    for worker in workers:
        worker.start()
    time.sleep(2)  # the replica is generating
    latencies, statuses, busy = [], [], 0
    with httpx.Client(timeout=5) as client:
        for _ in range(30):
            running = len(workers) - len(done)
            if running == 0:
                break
            for path in ("/health", "/health/live"):
                started = time.perf_counter()
                statuses.append(client.get(f"{serve_url}{path}").status_code)
                latencies.append(time.perf_counter() - started)
            busy += running >= 2 and len(workers) - len(done) >= 2  # both engine slots held throughout this probe
            time.sleep(0.1)
    for worker in workers:
        worker.join(timeout=300)
    ms = sorted(round(s * 1000, 1) for s in latencies)
    print(f"\nprobe latency under load (ms): median {statistics.median(ms)}, max {ms[-1]}, n={len(ms)}; "
          f"probe pairs taken with both engine slots busy: {busy}; generation answers {sorted(map(str, done))}")
    assert busy >= 5, "the generations ended too soon: the pool was not saturated while probing"
    assert statuses and set(statuses) == {200}
    assert statistics.median(ms) <= 100.0
    assert ms[-1] <= 1000.0


@pytest.mark.serve
def test_readiness_names_a_pool_that_lost_its_replica_and_flips_back(serve_url):
    import ray

    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith(f"SERVE_REPLICA::{APP_NAME}#pool-ar#")]
    assert len(names) == 1
    ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
    seen = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        response = httpx.get(f"{serve_url}/health", timeout=5)
        seen.append(response.status_code)
        if response.status_code == 503:
            body = response.json()
            assert body["unready_pools"] == ["ar"] and body["pools"]["spec"]["healthy_replicas"] == 1
            assert body["error"]["code"] == "pool_unavailable"
        if response.status_code == 200 and 503 in seen:
            break
        time.sleep(0.5)
    print(f"\nreadiness after killing the ar replica: {seen.count(200)} x 200, {seen.count(503)} x 503, "
          f"back after {len(seen)} probes")
    assert 503 in seen and seen[-1] == 200
