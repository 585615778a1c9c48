"""Readiness from a snapshot of the pools' replica states, so a probe never waits behind generation.

Rules:
  source     every REFRESH_S the ingress asks the Serve controller (serve.status(), in a worker thread, never on
             the request path) how many replicas of each pool deployment `pool-<name>` of its application are
             RUNNING; Serve counts a replica RUNNING only while its health checks (EngineReplica.check_health)
             pass, and replaces one that fails them. No call reaches a pool replica.
  snapshot   the last answer and the monotonic time it arrived; a failed refresh keeps the previous snapshot.
             Each new snapshot is also handed to `on_snapshot` (the ingress's admission reads pool outages
             from it: admission.py, rule outage).
  ready      200 when the snapshot is at most STALE_AFTER_S old and every configured pool has at least one
             RUNNING replica; 503 otherwise, naming the pools without one (all of them before the first
             snapshot, or when the snapshot is stale) in `unready_pools`, with an OpenAI-style `error` object
             (type service_unavailable, code `pool_unavailable`, or `health_unknown` when stale / not yet known).
             It flips back to 200 on the first snapshot in which every pool has a RUNNING replica again.
  live       liveness (access.LIVENESS_PATH) consults nothing: the ingress answering HTTP is the whole answer.
Answering reads memory only, so it takes microseconds under any load.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

log = logging.getLogger("ray_dspine.health")

REFRESH_S = 1.0
STALE_AFTER_S = 10.0
RUNNING = "RUNNING"


def readiness(pools: list[str], running: dict[str, int] | None, age_s: float | None,
              stale_after_s: float = STALE_AFTER_S) -> tuple[int, dict]:
    """(status, body) of the readiness probe for the pools' RUNNING replica counts seen age_s ago (the `ready` rule)."""
    if running is None or age_s is None or age_s > stale_after_s:
        known = running is not None and age_s is not None
        message = (f"replica states are {age_s:.1f} s old (limit {stale_after_s:.0f} s)" if known
                   else "replica states not known yet")
        body = {"status": "starting" if not known else "stale", "unready_pools": list(pools),
                "pools": {name: {"healthy_replicas": None} for name in pools}}
        body["error"] = _error(message, "health_unknown")
        return 503, body
    counts = {name: int(running.get(name, 0)) for name in pools}
    unready = [name for name in pools if counts[name] < 1]
    body = {"status": "ok" if not unready else "unavailable", "unready_pools": unready,
            "pools": {name: {"healthy_replicas": counts[name]} for name in pools}}
    if not unready:
        return 200, body
    body["error"] = _error(f"no healthy replica in pool(s): {', '.join(unready)}", "pool_unavailable")
    return 503, body


def _error(message: str, code: str) -> dict:
    return {"message": message, "type": "service_unavailable", "param": None, "code": code}


def running_replicas_from_status(status, app_name: str, pools: list[str]) -> dict[str, int]:
    """RUNNING replicas per pool of `app_name` in a serve.status() answer (a missing deployment counts 0)."""
    app = status.applications.get(app_name)
    deployments = app.deployments if app is not None else {}
    counts = {}
    for name in pools:
        deployment = deployments.get(f"pool-{name}")
        states = deployment.replica_states if deployment is not None else {}
        counts[name] = sum(n for state, n in states.items() if str(getattr(state, "value", state)) == RUNNING)
    return counts


def serve_status_source(app_name: str, pools: list[str]) -> Callable[[], dict[str, int]]:
    """A blocking source of RUNNING counts read from the Serve controller (call it in a worker thread)."""

    def read() -> dict[str, int]:
        from ray import serve

        return running_replicas_from_status(serve.status(), app_name, pools)

    return read


class HealthMonitor:
    """Holds the snapshot (the `snapshot` rule) and refreshes it from `source` every `refresh_s`."""

    def __init__(self, pools: list[str], source: Callable[[], dict[str, int]], *, refresh_s: float = REFRESH_S,
                 stale_after_s: float = STALE_AFTER_S, clock: Callable[[], float] = time.monotonic,
                 on_snapshot: Callable[[dict[str, int]], None] | None = None):
        self.pools = list(pools)
        self.source = source
        self.refresh_s = refresh_s
        self.stale_after_s = stale_after_s
        self.clock = clock
        self.on_snapshot = on_snapshot
        self.running: dict[str, int] | None = None
        self.updated_at: float | None = None
        self._task: asyncio.Task | None = None

    async def refresh(self) -> None:
        try:
            running = await asyncio.to_thread(self.source)
        except Exception as exc:  # the controller is briefly unreachable: keep the last snapshot
            log.warning("replica states not refreshed: %s", type(exc).__name__)
            return
        self.running, self.updated_at = dict(running), self.clock()
        if self.on_snapshot is not None:
            self.on_snapshot(dict(running))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.refresh_s)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def readiness(self) -> tuple[int, dict]:
        age = None if self.updated_at is None else self.clock() - self.updated_at
        return readiness(self.pools, self.running, age, self.stale_after_s)
