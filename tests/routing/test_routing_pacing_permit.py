"""Pacing permits (routing/pacing_permit.py): a test per rule of its docstring, and the pipeline's use."""

import pytest

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.config import RouterConfig
from ray_dspine.routing.pacing_permit import PacingPermits
from ray_dspine.routing.pipeline import RoutingPipeline
from ray_dspine.routing.types import ReplicaView, RequestView


def permits(**kw) -> PacingPermits:
    settings = dict(max_long_share=0.01, window_requests=2_000, prior_requests=200, prior_share=0.005)
    return PacingPermits(**{**settings, **kw})


def test_rule_share_counts_the_prior_as_requests():
    p = permits()
    assert p.share() == pytest.approx(1 / 200)  # the prior alone: 1 long in 200
    for i in range(100):
        p.judge(f"q{i}", long=False)
    assert p.share() == pytest.approx(1 / 300)
    p.judge("long", long=True)
    assert p.share() == pytest.approx(2 / 301)


def test_rule_permit_for_long_prompts_while_the_share_stays_under_the_limit():
    p = permits()
    # (1 + 1) / (1 + 200) = 0.995% <= 1%: the first long prompt of a fresh pool may be paced
    assert p.judge("a", long=True)
    # (2 + 1) / (2 + 200) = 1.49% > 1%: a second one right after may not
    assert not p.judge("b", long=True)
    # a request that is not long always gets a permit, however many long ones came before
    assert p.judge("c", long=False)
    # after 97 more short requests, a third long one: (3 + 1) / (101 + 200) = 1.33% > 1% still
    for i in range(97):
        p.judge(f"s{i}", long=False)
    assert not p.judge("d", long=True)
    q = permits()
    for i in range(200):
        q.judge(f"s{i}", long=False)
    # after 200 short requests, two long ones in a row: (1 + 1) / (201 + 200), then (2 + 1) / (202 + 200) = 0.746%
    assert q.judge("x", long=True)
    assert q.judge("y", long=True)


def test_rule_share_is_taken_over_the_last_window_requests():
    p = permits(window_requests=4, prior_requests=0)
    for rid, long in (("a", True), ("b", True), ("c", False), ("d", False)):
        p.judge(rid, long)
    assert p.share() == pytest.approx(2 / 4)
    p.judge("e", long=False)  # "a" leaves the window
    p.judge("f", long=False)  # "b" too
    assert p.share() == 0.0


def test_rule_judged_once_a_retry_gets_the_same_answer_and_counts_nothing():
    p = permits()
    assert p.judge("a", long=True)
    assert p.judge("b", long=True) is False
    before = p.share()
    assert p.judge("a", long=True) is True and p.judge("b", long=True) is False
    assert p.share() == before
    assert (p.answer("a"), p.answer("b"), p.answer("never judged")) == (True, False, None)


def test_permits_refuse_out_of_range_parameters():
    with pytest.raises(ValueError, match="within \\[0, 1\\]"):
        permits(max_long_share=1.5)
    with pytest.raises(ValueError, match="window_requests must be >= 1"):
        permits(window_requests=0)


def test_rule_long_is_judged_on_the_chosen_replicas_threshold_and_its_uncached_tokens():
    pipeline = RoutingPipeline(RouterConfig(policy="headroom"), clock=lambda: 0.0)
    load = dict(total_kv_tokens=1_000_000, free_kv_tokens=1_000_000, pacing_min_uncached_tokens=80_000)
    pacing = [ReplicaView("a", LoadSnapshot(**load), 0.0)]
    plain = [ReplicaView("b", LoadSnapshot(total_kv_tokens=1_000_000, free_kv_tokens=1_000_000), 0.0)]
    hashes = tuple(f"h{i}" for i in range(200))
    long = RequestView("q1", prefix_hashes=hashes, prompt_tokens=100_000, needed_kv_tokens=100_001)
    # first long prompt of a fresh pool: permitted (1.99 / 201 <= 1%), and counted
    assert pipeline.choose(long, pacing).pace is True
    assert pipeline.permits.share() == pytest.approx(2 / 201)
    # a second long prompt at once: 3 / 202 > 1%, no permit
    second = RequestView("q2", prefix_hashes=tuple(f"g{i}" for i in range(200)), prompt_tokens=100_000)
    assert pipeline.choose(second, pacing).pace is False
    # the same prompt once the replica caches most of it is not long there: 100,000 x 40 / 200 uncached
    pipeline.on_placed(long, "a")
    follow_up = RequestView("q3", prefix_hashes=hashes[:160] + tuple(f"n{i}" for i in range(40)),
                            prompt_tokens=100_000)  # fmt: skip
    assert pipeline.choose(follow_up, pacing).pace is True
    # a replica that does not pace (threshold 0) makes nothing long
    third = RequestView("q4", prefix_hashes=tuple(f"k{i}" for i in range(200)), prompt_tokens=100_000)
    assert pipeline.choose(third, plain).pace is True
    assert pipeline.permits.share() == pytest.approx(3 / 204)
