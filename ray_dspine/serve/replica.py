"""The engine-replica deployment: one engine per replica, called through a deployment handle.

Glue only: it starts the engine, forwards `generate`, stamps the first chunk with this replica's id,
served path and the seconds since the request reached it (the `replica` metric of Server-Timing),
turns engine refusals into error chunks (no exception crosses the handle), merges chunks over the
pool's `stream_batch_interval_ms` before they cross Ray (stream_batching.py), reports load to the router
(`record_routing_stats`) and lets an operator switch the drafter off live (`user_config:
{drafter_enabled: false}`).
Served path (the x-dspine-path header): the final usage's path when the first chunk carries it, else
"speculative" while the engine's drafter is active, else "autoregressive"; an "autoregressive" path of an
engine whose supervision reports a drafter fallback is "autoregressive-fallback". `record_routing_stats`
also refreshes the supervision gauges (supervision_metrics.py).
Logs go to Ray Serve's own logger ("ray.serve"), which writes a replica's log file and its console: at
start, one line naming the engine and, where its args carry them, its dtype and row_exact (`engine_summary`;
an embedded engine on `dtype: auto` shows what it chose); a live drafter switch; never a prompt.
Every method Ray calls is `async def`, so it runs on the replica's event loop, where the engine and
the stats window live: Ray Serve runs a plain `def` method in a worker thread
(RAY_SERVE_RUN_SYNC_IN_THREADPOOL, on by default), and an engine's `load()` advances its state and
wakes its streams (the simulated engine's asyncio queues), which from another thread can lose a
wake-up and leave a stream waiting forever.
"""

from __future__ import annotations

import logging
import os
import time

from ..config import PoolConfig
from ..engines.factory import make_engine
from ..engines.protocol import Chunk, EngineError, GenerateRequest
from ..autoscale.config import StatsWindowConfig
from ..autoscale.stats import ReplicaWindowStats
from .metrics import ReplicaMetrics, replica_usd_per_hour
from .supervision_metrics import SupervisionMetrics
from .stream_batching import batched
from .replica_prompt import error_chunk, prepared

log = logging.getLogger("ray.serve")


def engine_summary(description: dict) -> str:
    """"<engine>", then ", dtype <d>" and ", row_exact" where the description's args carry them."""
    args = description.get("args") or {}
    parts = [str(description.get("engine", "engine"))]
    if "dtype" in args:
        parts.append(f"dtype {args['dtype']}")
    if args.get("row_exact"):
        parts.append("row_exact")
    return ", ".join(parts)


class EngineReplica:
    clock = staticmethod(time.monotonic)  # seconds; tests replace it

    async def __init__(self, pool: PoolConfig):
        from ray import serve

        self.pool = pool
        try:
            self.replica_id = serve.get_replica_context().replica_id.unique_id
        except Exception:  # constructed outside a Serve replica (tests)
            self.replica_id = "local"
        self.engine = make_engine(pool.engine, pool.name)
        self.metrics = ReplicaMetrics(pool.name, replica_usd_per_hour(pool.gpu_hour_usd, pool.deployment.num_gpus))
        self.supervision_metrics = SupervisionMetrics(pool.name)
        self.window = ReplicaWindowStats(StatsWindowConfig(slo=pool.slo), time.monotonic, time.monotonic())
        await self.engine.start()
        log.info("pool %s replica %s: %s", pool.name, self.replica_id, engine_summary(self.engine.describe()))

    async def generate(self, request: GenerateRequest, prompt_token_ids: list[int] | None = None):
        """The request's chunks, merged over the pool's stream batching interval (stream_batching.py).

        A token-id or empty prompt is prepared for the engine first (replica_prompt.py)."""
        interval_s = self.pool.deployment.stream_batch_interval_ms / 1000.0
        try:
            request = prepared(self.engine, request, prompt_token_ids)
        except EngineError as exc:
            yield error_chunk(exc, self.replica_id)
            return
        async for chunk in batched(self._stamped(request), interval_s):
            yield chunk

    async def _stamped(self, request: GenerateRequest):
        """The engine's chunks, the first stamped with this replica, its decode path and replica seconds."""
        stream = self.engine.generate(request)
        first = True
        started = self.clock()
        first_token_at = None
        self.window.record_arrival()
        try:
            async for chunk in stream:
                now = self.clock()
                if first_token_at is None and chunk.num_tokens:
                    first_token_at = now
                if chunk.usage is not None and first_token_at is not None:
                    self.window.record_finished(first_token_at - started, now - first_token_at, chunk.usage)
                if first:
                    chunk.replica = self.replica_id
                    chunk.replica_s = now - started
                    chunk.path = self._served_path(chunk)
                    first = False
                yield chunk
        except EngineError as exc:
            yield error_chunk(exc, self.replica_id)
        finally:
            await stream.aclose()

    def _supervision(self):
        status = getattr(self.engine, "supervision_status", None)
        return status() if status is not None else None

    def _served_path(self, chunk: Chunk) -> str:
        """The x-dspine-path of a request whose first chunk is `chunk` (the rule in the module docstring)."""
        if chunk.usage is not None:
            path = chunk.usage.path
        else:
            path = "speculative" if self.engine.load().drafter_active else "autoregressive"
        status = self._supervision()
        if path == "autoregressive" and status is not None and status.drafter_fallback:
            return "autoregressive-fallback"
        return path

    async def count_tokens(self, request: GenerateRequest, anthropic_body: dict | None = None) -> dict:
        """{"input_tokens": n} of the request's prompt (the engine's count_prompt_tokens), or {"error", "status",
        "param"} where the engine cannot count it."""
        try:
            return {"input_tokens": await self.engine.count_prompt_tokens(request, anthropic_body)}
        except EngineError as exc:
            return {"error": str(exc), "status": exc.status, "param": exc.param}

    async def record_routing_stats(self) -> dict:
        load = self.engine.load()
        self.metrics.record(load)
        self.supervision_metrics.record(self._supervision())
        stats = load.model_dump()
        stats["reported_at_s"] = time.time()
        return stats

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Windowed throughput, latency-SLO misses, acceptance and memory pressure for the autoscaler."""
        return self.window.snapshot(self.engine.load())

    async def check_health(self) -> None:
        # An engine that supervises a server (sglang) knows when a restart is under way and raises
        # only once it has given up; others are healthy while their load says so.
        engine_check = getattr(self.engine, "check_health", None)
        if engine_check is not None:
            await engine_check()
        elif not self.engine.load().healthy:
            raise RuntimeError(f"engine of pool {self.pool.name} is unhealthy")

    async def reconfigure(self, user_config: dict) -> None:
        enabled = user_config.get("drafter_enabled", True)
        if not isinstance(enabled, bool):
            raise ValueError("user_config.drafter_enabled must be true or false")
        self.engine.set_drafter_enabled(enabled)
        log.info("pool %s replica %s: drafter %s", self.pool.name, self.replica_id, "on" if enabled else "off")

    async def describe(self) -> dict:
        """The engine's description, with this replica's id and its process id (for operators' fault drills)."""
        return {"pool": self.pool.name, "replica": self.replica_id, "process_id": os.getpid(), **self.engine.describe()}

    async def load(self) -> dict:
        return self.engine.load().model_dump()

    async def __del__(self):
        await self.engine.stop()
