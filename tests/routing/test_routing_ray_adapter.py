"""The Ray adapter's pure parts, without a cluster: config parsing, stats -> ReplicaView, YAML schema."""

import math
import time

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


# The default scorers but session affinity and prefix match, each at its default weight.
NO_LOCALITY = [{"type": name} for name in ("kv_headroom", "mamba_headroom", "queue", "predicted_ttft")]


def bare(cls):
    return object.__new__(cls)  # initialize_state needs none of RequestRouter's runtime state


def test_initialize_state_validates_router_kwargs():
    router = bare(HeadroomRequestRouter)
    router.initialize_state(scorers=[{"type": "queue", "weight": 3.0}], reports={"stale_after_s": 2.0})
    assert isinstance(router._policy, RoutingPipeline) and router._config.stage("queue").weight == 3.0
    assert [scorer.name for scorer, _ in router._policy.scorers] == ["queue"]
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
                            "request_router_kwargs": {
                                "scorers": [{"type": "prefix_match", "weight": 2.0}],
                                "reports": {"assumed_stats_age_s": 1.0},
                            },
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
    assert config.request_router_kwargs["scorers"] == [{"type": "prefix_match", "weight": 2.0}]


class FakeReplica:
    def __init__(self, rid, **load):
        self.replica_id = type("Rid", (), {"unique_id": rid})()
        self.routing_stats = {**LoadSnapshot(total_kv_tokens=10_000, free_kv_tokens=10_000, **load).model_dump()}


class FakePending:
    def __init__(self, request, internal_id):
        from types import SimpleNamespace

        self.args = [request]
        self.metadata = SimpleNamespace(session_id="", internal_request_id=internal_id)
        self.routing_context = SimpleNamespace(should_backoff=False)


def generate_request(rid):
    from ray_dspine.engines.protocol import GenerateRequest

    return GenerateRequest(request_id=rid, prompt="x" * 40, max_tokens=8, estimated_prompt_tokens=2000)


def test_rule_a_choice_is_reserved_before_ray_confirms_it():
    import asyncio

    router = bare(HeadroomRequestRouter)
    router.initialize_state(scorers=NO_LOCALITY)
    replicas = [FakeReplica("a"), FakeReplica("b")]
    first, second = FakePending(generate_request("q1"), "i1"), FakePending(generate_request("q2"), "i2")
    chosen_first = asyncio.run(router.choose_replicas(replicas, first))
    # q1 is not confirmed yet, but q2 must already see it on its replica and go to the other one
    chosen_second = asyncio.run(router.choose_replicas(replicas, second))
    ids = [group[0].replica_id.unique_id for group in (chosen_first[0], chosen_second[0])]
    assert sorted(ids) == ["a", "b"] and first.routing_context.should_backoff
    assert router._policy.ledger.num_live() == 2
    # Ray confirms q1 where it was chosen: nothing changes; q2 ends up on q1's replica instead: it moves
    by_id = {r.replica_id.unique_id: r for r in replicas}
    router.on_request_routed(first, by_id[ids[0]].replica_id, None)
    router.on_request_routed(second, by_id[ids[0]].replica_id, None)
    ledger = router._policy.ledger
    assert ledger.num_live() == 2 and ledger.replica_of("q1") == ledger.replica_of("q2") == ids[0]
    router.on_request_completed(by_id[ids[0]].replica_id, "i1")
    router.on_request_completed(by_id[ids[0]].replica_id, "i2")
    assert ledger.num_live() == 0 and router._tentative == {}


def test_rule_a_placement_counts_against_reports_until_ray_confirms_it():
    import asyncio

    router = bare(HeadroomRequestRouter)
    router.initialize_state(scorers=NO_LOCALITY)
    first = FakePending(generate_request("q1"), "i1")
    (group,) = asyncio.run(router.choose_replicas([FakeReplica("a")], first))
    assert group[0].replica_id.unique_id == "a"
    ledger = router._policy.ledger
    # a report taken after the choice but before Ray delivered q1 (age 0: taken now) still gets q1 added
    (seen,) = ledger.apply([replica_view("a", FakeReplica("a").routing_stats, 0.0, 0.0)])
    assert seen.load.pending_prefill_tokens == 2000 and seen.load.num_queued == 1
    router.on_request_routed(first, group[0].replica_id, None)  # the replica accepted q1
    time.sleep(0.01)  # the router's clock is the monotonic clock: let it move past the confirmation
    # reports taken from now on show q1 themselves
    (after,) = ledger.apply([replica_view("a", FakeReplica("a").routing_stats, 0.0, 0.0)])
    assert after.load.pending_prefill_tokens == 0 and after.load.num_queued == 0


def test_decision_log_records_each_choice_without_the_prompt(tmp_path, monkeypatch):
    import asyncio
    import json

    from ray_dspine.engines.protocol import GenerateRequest

    path = tmp_path / "decisions.jsonl"
    monkeypatch.setenv("DSPINE_ROUTING_DECISION_LOG", str(path))
    router = bare(HeadroomRequestRouter)
    router.initialize_state(scorers=NO_LOCALITY)
    replicas = [FakeReplica("a"), FakeReplica("b")]
    for rid in ("q1", "q2"):
        request = GenerateRequest(request_id=rid, prompt="confidential prompt text " * 4, max_tokens=8,
                                  estimated_prompt_tokens=2000)  # fmt: skip
        asyncio.run(router.choose_replicas(replicas, FakePending(request, "i-" + rid)))
    text = path.read_text()
    assert "confidential" not in text
    first, second = [json.loads(line) for line in text.splitlines()]
    assert (first["request_id"], second["request_id"]) == ("q1", "q2")
    # q2's record shows what the ledger believed: q1's 2,000 tokens on q1's replica, which the report lacks
    q1_on = first["ranked"][0]
    assert second["replicas"][q1_on]["reported"]["pending_prefill_tokens"] == 0
    assert second["replicas"][q1_on]["believed"]["pending_prefill_tokens"] == 2000
    assert second["ranked"][0] != q1_on


def test_a_request_told_to_wait_releases_its_earlier_tentative_placement():
    import asyncio
    from types import SimpleNamespace

    from ray_dspine.engines.protocol import GenerateRequest

    def replica(rid, **load):
        stats = LoadSnapshot(**{"total_kv_tokens": 10_000, "free_kv_tokens": 10_000, **load}).model_dump()
        return SimpleNamespace(replica_id=SimpleNamespace(unique_id=rid), routing_stats=stats)

    router = bare(HeadroomRequestRouter)
    router.initialize_state()
    generate = GenerateRequest(request_id="q1", prompt="x", max_tokens=100, estimated_prompt_tokens=4_000)
    pending = SimpleNamespace(
        args=[generate], metadata=SimpleNamespace(session_id=None), routing_context=SimpleNamespace(should_backoff=False)
    )
    chosen = asyncio.run(router.choose_replicas([replica("a")], pending))
    assert [[r.replica_id.unique_id for r in group] for group in chosen] == [["a"]]
    assert router._tentative == {"q1": "a"} and router._policy.ledger.num_live() == 1
    # Ray could not route it (a's queue was full); now a cannot hold 4,100 tokens: the answer is wait,
    # and the tentative placement on a is released rather than left to hold a's headroom; the policy is
    # told the request was not served there (its blocks must not count as a's most recent).
    completed, on_completed = [], router._policy.on_completed
    router._policy.on_completed = lambda rid, served=True: (completed.append((rid, served)), on_completed(rid, served))
    assert asyncio.run(router.choose_replicas([replica("a", free_kv_tokens=1_000)], pending)) == []
    assert router._tentative == {} and router._policy.ledger.num_live() == 0
    assert completed == [("q1", False)]
    assert pending.routing_context.should_backoff is True


def test_rule_the_pacing_permit_is_written_into_the_request_ray_sends():
    import asyncio

    router = bare(HeadroomRequestRouter)
    router.initialize_state(scorers=NO_LOCALITY)
    # a replica pacing from 1,000 uncached tokens: the 2,000-token requests are long there. The first of
    # a fresh pool is permitted ((1 + 1) / (1 + 200) <= 1%); the second right after is not
    replicas = [FakeReplica("a", pacing_min_uncached_tokens=1_000)]
    first, second = FakePending(generate_request("q1"), "i1"), FakePending(generate_request("q2"), "i2")
    asyncio.run(router.choose_replicas(replicas, first))
    asyncio.run(router.choose_replicas(replicas, second))
    assert first.args[0].pace is True and second.args[0].pace is False
