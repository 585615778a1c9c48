"""The kill scenario: SIGKILL a replica of one pool under open streams, and time what the stack does about it.

Rules:
  replicas   the live actors whose class name is `ServeReplica:<app>:pool-<pool>` (Ray 2.60's replica class
             name, ray/serve/_private/common.py), found with Ray's state API (or the GCS actor table when the
             cluster has no dashboard); the first is killed. Ray calls run in a daemon thread, RAY_CALL_TIMEOUT_S
             at most each.
  kill       with SIGKILL when the actor runs on this driver's node and its pid is here, else `ray.kill`.
  streams    K streams with `x-dspine-pool: <pool>`, long max_tokens and `x-dspine-deadline-ms` set to the client
             timeout (a client says how long it waits) are opened; the kill comes once all K
             stream (a first content chunk each), or once KILL_SETTLE_S pass with no new stream starting (the pool
             runs no more at once; the others wait in its queue), or after half the client timeout (so
             that all K are still within it). A stream is
             affected when it was streaming and had not ended at the kill. Its end is "error_event" when it
             carried an error event, a finish_reason "error" and then `data: [DONE]`; any other end of an
             affected stream is lost, and so is an unaffected stream whose answer broke off or never came
             before the client's timeout (hung). An unaffected stream may end in a whole answer or a refusal.
  readiness  GET /health/ready every 0.5 s from the kill: the first non-200 and the first 200 after it (the
             polling stops there, or at the first 200 once the pool serves again, or pool_serves_within_s).
  serving    a small request forced to the pool every 1 s from the kill (with the same deadline header): the
             first answered correctly.
  pass       every affected stream ended with an error event within kill_error_within_s of the kill, 0 lost,
             and the pool served within pool_serves_within_s. All times are seconds after the kill.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .context import DrillContext, normal_ok
from .exchange import Exchange
from .result import ScenarioResult, tally, verdict
from .settings import DEADLINE_HEADER, POOL_HEADER

READY_PATH = "/health/ready"
READY_EVERY_S = 0.5
PROBE_EVERY_S = 1.0
STREAM_POLL_S = 0.05
KILL_SETTLE_S = 5.0  # no new stream started for this long: kill with those that stream
RAY_CALL_TIMEOUT_S = 120.0  # connecting to Ray, listing actors, killing one


@dataclass(frozen=True)
class ReplicaActor:
    name: str
    namespace: str
    class_name: str
    pid: int
    node_id: str


class Killer(Protocol):
    def find(self, pool: str) -> list[ReplicaActor]: ...
    def kill(self, replica: ReplicaActor) -> str: ...


class RayKiller:
    """Ray glue: connects with ray.init(address=...) on first use (blocking: call it off the event loop).

    For a loopback address (the local stack) it follows ray_dspine/local_cluster.py: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    (else Ray rewrites 127.0.0.1 to the machine's address and finds no GCS there) and, when no token is set in
    the environment, Ray's token auth with the stack's token file, if that file exists.
    """

    def __init__(self, address: str, environ: dict | None = None):
        self.address = address
        self.environ = os.environ if environ is None else environ

    def _connect(self):
        host = self.address.removeprefix("ray://").rsplit(":", 1)[0]
        if host in ("127.0.0.1", "localhost", "::1", "[::1]"):
            from ..local_cluster import DEFAULT_TOKEN_FILE

            self.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            token_set = any(k in self.environ for k in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"))
            if not token_set and DEFAULT_TOKEN_FILE.exists():
                self.environ.setdefault("RAY_AUTH_MODE", "token")
                self.environ["RAY_AUTH_TOKEN_PATH"] = str(DEFAULT_TOKEN_FILE)
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, log_to_driver=False)
        return ray

    def find(self, pool: str) -> list[ReplicaActor]:
        """Live replicas of `pool-<pool>`: Ray's state API, or the GCS actor table where the cluster runs
        without the dashboard that the state API needs (as the local stack does)."""
        self._connect()
        suffix = f":pool-{pool}"
        try:
            from ray.util.state import list_actors

            rows = [(a.class_name, a.name or "", a.ray_namespace or "serve", int(a.pid or 0), a.node_id or "")
                    for a in list_actors(filters=[("state", "=", "ALIVE")], limit=10_000)]
        except Exception:  # noqa: BLE001 - no dashboard: read the GCS table instead
            from ray._private import state

            rows = [(a["ActorClassName"], a["Name"], "serve", int(a["Pid"] or 0), a["Address"]["NodeID"])
                    for a in state.actors(actor_state_name="ALIVE").values()]
        return [
            ReplicaActor(name=name, namespace=namespace, class_name=cls, pid=pid, node_id=node)
            for cls, name, namespace, pid, node in rows if cls.startswith("ServeReplica:") and cls.endswith(suffix)
        ]

    def kill(self, replica: ReplicaActor) -> str:
        ray = self._connect()
        here = ray.get_runtime_context().get_node_id()
        if replica.pid > 0 and replica.node_id == here and Path(f"/proc/{replica.pid}").exists():
            os.kill(replica.pid, signal.SIGKILL)
            return "SIGKILL"
        ray.kill(ray.get_actor(replica.name, namespace=replica.namespace), no_restart=False)
        return "ray.kill"


async def off_loop(fn, *args, timeout_s: float):
    """fn(*args) in a daemon thread, awaited for at most timeout_s: a Ray call that never returns can neither
    block the event loop nor keep the process from exiting (the default executor would)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def work():
        try:
            value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            loop.call_soon_threadsafe(lambda error=exc: future.done() or future.set_exception(error))
        else:
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(value))

    threading.Thread(target=work, daemon=True, name="drill-ray").start()
    try:
        return await asyncio.wait_for(future, timeout_s)
    except TimeoutError:
        raise TimeoutError(f"no answer within {timeout_s:g} s") from None


def ended_with_error_event(ex: Exchange) -> bool:
    return ex.error_events > 0 and "error" in ex.finish_reasons and ex.done


async def _watch_ready(ctx: DrillContext, killed_at: float, stop: asyncio.Event) -> dict:
    """Poll readiness until it went down and came back, or it answers 200 once the pool serves again."""
    went_down, back_up = None, None
    while ctx.clock() - killed_at < ctx.settings.pool_serves_within_s:
        ex = await ctx.get(READY_PATH, timeout_s=min(2.0, ctx.settings.client_timeout_s))
        t = ctx.clock() - killed_at
        if ex.status != 200 and went_down is None:
            went_down = t
        elif ex.status == 200 and (went_down is not None or stop.is_set()):
            back_up = t if went_down is not None else None
            break
        await ctx.sleep(READY_EVERY_S)
    return {"ready_not_200_after_s": went_down, "ready_200_again_after_s": back_up}


def _headers(ctx: DrillContext, pool: str) -> dict:
    return {POOL_HEADER: pool, DEADLINE_HEADER: str(int(round(ctx.settings.client_timeout_s * 1000)))}


async def _probe_pool(ctx: DrillContext, killed_at: float, pool: str) -> tuple[float | None, list[Exchange]]:
    probes = []
    while ctx.clock() - killed_at < ctx.settings.pool_serves_within_s:
        sent = ctx.clock()
        ex = await ctx.chat(stream=False, max_tokens=min(4, ctx.settings.max_tokens), headers=_headers(ctx, pool))
        probes.append(ex)
        if normal_ok(ex):
            return ctx.clock() - killed_at, probes
        await ctx.sleep(max(0.0, sent + PROBE_EVERY_S - ctx.clock()))
    return None, probes


async def run_kill(ctx: DrillContext, killer: Killer) -> ScenarioResult:
    s = ctx.settings
    pool = s.kill_pool
    try:
        replicas = await off_loop(killer.find, pool, timeout_s=RAY_CALL_TIMEOUT_S)
    except Exception as exc:  # Ray unreachable, refused (token), or slow: the scenario fails, the drill goes on
        problem = f"cannot list the replicas through Ray: {type(exc).__name__}: {exc}"
        return verdict(ScenarioResult(name="kill"), [problem])
    if not replicas:
        return verdict(ScenarioResult(name="kill"), [f"no live replica of deployment pool-{pool}"])
    ctx.progress.start("kill", s.kill_streams)
    streaming = [False] * s.kill_streams

    def mark(i):
        def on_first_chunk():
            streaming[i] = True
            ctx.progress.add()
        return on_first_chunk

    tasks = [asyncio.create_task(ctx.chat(stream=True, max_tokens=s.long_stream_max_tokens,
                                          headers=_headers(ctx, pool), on_first_chunk=mark(i)))
             for i in range(s.kill_streams)]
    opened = changed = ctx.clock()
    seen = 0
    while not all(streaming) and ctx.clock() - opened < s.client_timeout_s / 2 and not all(t.done() for t in tasks):
        if sum(streaming) != seen:
            seen, changed = sum(streaming), ctx.clock()
        elif seen and ctx.clock() - changed >= KILL_SETTLE_S:
            break  # the pool runs no more of them at once: the rest wait in its queue
        await ctx.sleep(STREAM_POLL_S)
    affected = [streaming[i] and not tasks[i].done() for i in range(s.kill_streams)]
    killed_at = ctx.clock()
    try:
        method = await off_loop(killer.kill, replicas[0], timeout_s=RAY_CALL_TIMEOUT_S)
    except Exception as exc:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        problem = f"cannot kill {replicas[0].class_name}: {type(exc).__name__}: {exc}"
        return verdict(ScenarioResult(name="kill"), [problem])
    stop = asyncio.Event()
    ready_task = asyncio.create_task(_watch_ready(ctx, killed_at, stop))
    serves_after_s, probes = await _probe_pool(ctx, killed_at, pool)
    streams = await asyncio.gather(*tasks)
    stop.set()
    ready = await ready_task
    ctx.progress.finish()
    rows, lost, late = [], 0, 0
    for hit, ex in zip(affected, streams):
        after_s = (ex.end_clock_s - killed_at) if ex.end_clock_s is not None else None
        error_end = ended_with_error_event(ex)
        if (hit and not error_end) or (not hit and ex.kind in ("lost", "hung")):
            lost += 1
        elif hit and (after_s is None or after_s > s.kill_error_within_s):
            late += 1
        rows.append({"affected": hit, "kind": ex.kind, "error_event": ex.error_events > 0,
                     "finish_reasons": ex.finish_reasons, "done": ex.done, "ended_after_kill_s": after_s})
    result = tally("kill", [*streams, *probes], expected=("ok", "stream_error"))
    result.lost = lost
    result.figures = {
        "pool": pool, "killed": replicas[0].class_name, "pid": replicas[0].pid, "method": method,
        "num_affected": sum(affected), "num_late": late, "pool_serves_after_s": serves_after_s,
        **ready, "streams": rows,
    }
    problems = []
    if not any(affected):
        problems.append("no stream was streaming at the kill")
    if lost:
        problems.append(f"{lost} stream(s) lost")
    if late:
        problems.append(f"{late} stream(s) ended later than {s.kill_error_within_s:g} s after the kill")
    if serves_after_s is None:
        problems.append(f"pool-{pool} did not serve within {s.pool_serves_within_s:g} s")
    return verdict(result, problems)
