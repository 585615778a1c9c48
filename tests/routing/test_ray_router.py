"""The Ray adapters route real Serve traffic: 3 replicas with fixed load reports, called through a handle.

Starts its own local Ray cluster with token auth disabled (RAY_AUTH_MODE=disabled, as new local
clusters turn it on by default) and shuts Serve and Ray down at the end.
"""

import os
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray import serve  # noqa: E402
from ray.serve.config import RequestRouterConfig  # noqa: E402

from ray_dspine.engines.protocol import GenerateRequest, LoadSnapshot  # noqa: E402
from ray_dspine.routing.ray_router import HeadroomRequestRouter, LeastLoadRequestRouter  # noqa: E402

pytestmark = pytest.mark.serve

REPO_ROOT = Path(__file__).resolve().parents[2]
STATS_PERIOD_S = 0.2

# Free KV tokens per replica rank: rank 0 is full, rank 1 has the most headroom, rank 2 some.
FREE_KV_BY_RANK = {0: 0, 1: 50_000, 2: 20_000}
BOARD_NAME = "routing-test-load-board"


@ray.remote(num_cpus=0)
class LoadBoard:
    """What each replica reports; the test changes it to free capacity for a waiting request."""

    def __init__(self):
        self.free_kv = dict(FREE_KV_BY_RANK)

    def set_free_kv(self, rank: int, tokens: int) -> None:
        self.free_kv[rank] = tokens

    def snapshot(self, rank: int) -> dict:
        load = LoadSnapshot(
            total_kv_tokens=100_000, free_kv_tokens=self.free_kv[rank], total_state_slots=8, free_state_slots=8
        )
        return {**load.model_dump(), "reported_at_s": time.time()}

# For least load: rank 2 is idle, the others busy.
RUNNING_BY_RANK = {0: 5, 1: 3, 2: 0}


@serve.deployment(num_replicas=3, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=100)
class FixedHeadroomReplica:
    def __init__(self):
        self.rank = serve.get_replica_context().rank.rank
        self.board = ray.get_actor(BOARD_NAME)

    async def record_routing_stats(self) -> dict:
        return await self.board.snapshot.remote(self.rank)

    async def generate(self, request: GenerateRequest) -> int:
        return self.rank


@serve.deployment(num_replicas=3, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=100)
class FixedQueueReplica:
    def __init__(self):
        self.rank = serve.get_replica_context().rank.rank

    def record_routing_stats(self) -> dict:
        return LoadSnapshot(num_running=RUNNING_BY_RANK[self.rank]).model_dump()

    async def generate(self, request: GenerateRequest) -> int:
        return self.rank


def router_config(cls, **kwargs) -> RequestRouterConfig:
    return RequestRouterConfig(
        request_router_class=cls,
        request_router_kwargs=kwargs,
        request_routing_stats_period_s=STATS_PERIOD_S,
    )




def request(request_id: str, prompt_tokens: int, session: str = "s", prefix=("h0", "h1")) -> GenerateRequest:
    return GenerateRequest(
        request_id=request_id,
        prompt="hello",
        max_tokens=100,
        estimated_prompt_tokens=prompt_tokens,
        session_id=session,
        prefix_hashes=list(prefix),
    )


def wait_for_stats(handle, expected_rank: int, deadline_s: float = 20.0) -> None:
    """Replicas' first load reports reach the router a moment after `serve.run` returns; until then it
    sees them as unreported. Probe (fresh sessions and prefixes, small requests) until placement follows
    the reports; a shared prefix would pin every probe to wherever the first, unreported one landed."""
    give_up = time.monotonic() + deadline_s
    i = 0
    while time.monotonic() < give_up:
        probe = request(f"probe{i}", 10, f"probe{i}", prefix=(f"probe{i}",))
        if handle.generate.remote(probe).result(timeout_s=30) == expected_rank:
            # the router learns of the probe's completion after the caller does: let that, and a
            # fresh report, arrive, or the probe still counts as queued on its replica
            time.sleep(3 * STATS_PERIOD_S)
            return
        i += 1
        time.sleep(STATS_PERIOD_S)
    raise AssertionError("load reports never reached the router")


def test_headroom_router_places_on_the_replica_that_can_hold(serve_instance):
    board = LoadBoard.options(name=BOARD_NAME).remote()
    app = FixedHeadroomReplica.options(
        request_router_config=router_config(HeadroomRequestRouter, reports={"assumed_stats_age_s": STATS_PERIOD_S})
    ).bind()
    handle = serve.run(app, name="headroom", route_prefix=None)
    wait_for_stats(handle, expected_rank=1)
    # needs 900 + 100 = 1000 tokens: ranks 1 and 2 can hold, rank 1 has more headroom -> rank 1
    placed = []
    for i in range(6):
        placed.append(
            handle.options(session_id=f"s{i}").generate.remote(request(f"q{i}", 900, f"s{i}")).result(timeout_s=30)
        )
        # the router hears of the completion after the caller: until then the request counts as queued
        # on rank 1 (with its prefill), and the queue score may rightly prefer rank 2
        time.sleep(3 * STATS_PERIOD_S)
    assert placed == [1] * 6
    # needs 29,900 + 100 = 30,000: only rank 1 (50,000 free) can hold
    assert handle.generate.remote(request("big", 29_900)).result(timeout_s=30) == 1
    # needs 60,000: nobody can hold it -> the request waits instead of being placed
    waiting = handle.generate.remote(request("huge", 59_900))
    with pytest.raises(TimeoutError):
        waiting.result(timeout_s=2)
    # rank 2 frees up (its next report says 80,000 free): the waiting request is placed there
    ray.get(board.set_free_kv.remote(2, 80_000))
    assert waiting.result(timeout_s=30) == 2
    # a cancelled waiting request leaves the router idle (Ray backs off instead of spinning)
    cancelled = handle.generate.remote(request("too-big", 99_900))
    with pytest.raises(TimeoutError):
        cancelled.result(timeout_s=1)
    cancelled.cancel()
    assert handle.generate.remote(request("after", 10)).result(timeout_s=30) in (1, 2)


def test_least_load_router_picks_the_idle_replica(serve_instance):
    app = FixedQueueReplica.options(request_router_config=router_config(LeastLoadRequestRouter)).bind()
    handle = serve.run(app, name="least-load", route_prefix=None)
    wait_for_stats(handle, expected_rank=2)
    placed = [handle.generate.remote(request(f"l{i}", 10)).result(timeout_s=30) for i in range(4)]
    assert placed == [2] * 4
