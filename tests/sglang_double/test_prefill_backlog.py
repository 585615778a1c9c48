"""The replica-side prefill backlog (ray_dspine/engines/prefill_backlog.py): one test per rule."""

from __future__ import annotations

import pytest

from ray_dspine.engines.prefill_backlog import PrefillBacklog


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(**kwargs) -> tuple[PrefillBacklog, Clock]:
    clock = Clock()
    return PrefillBacklog(clock, **kwargs), clock


def test_submit_without_prefix_blocks_counts_the_whole_prompt():
    backlog, _ = make()
    assert backlog.submit("q", 3000, []) == 3000
    assert backlog.pending_tokens() == 3000


def test_submit_counts_only_the_blocks_this_replica_has_not_prefilled():
    backlog, _ = make()
    backlog.submit("turn-1", 2000, ["a", "b", "c", "d"])
    backlog.first("turn-1")
    # 4 of the next turn's 8 blocks were prefilled here: half of 4,000 tokens is left.
    assert backlog.submit("turn-2", 4000, ["a", "b", "c", "d", "e", "f", "g", "h"]) == 2000
    # A prompt that shares no leading block gets no credit, even if a later block matches.
    assert backlog.submit("other", 1000, ["x", "b"]) == 1000


def test_first_token_ends_counting_and_caches_the_prompt():
    backlog, _ = make()
    backlog.submit("q", 2000, ["a", "b"])
    backlog.first("q")
    assert backlog.pending_tokens() == 0
    assert backlog.num_pending == 0
    assert backlog.submit("again", 2000, ["a", "b"]) == 0


def test_drop_ends_counting_without_caching_the_prompt():
    backlog, _ = make()
    backlog.submit("q", 2000, ["a", "b"])
    backlog.drop("q")
    assert backlog.pending_tokens() == 0
    assert backlog.submit("again", 2000, ["a", "b"]) == 2000
    backlog.drop("never-submitted")  # no-op
    backlog.first("never-submitted")  # no-op


def test_rate_sample_is_tokens_over_time_since_the_prefill_began():
    backlog, clock = make()
    backlog.submit("q", 10_000, [])
    clock.t = 2.0
    backlog.first("q")
    assert backlog.tokens_per_s() == pytest.approx(5000.0)


def test_prefill_begins_at_the_previous_first_token_when_the_request_waited():
    backlog, clock = make(min_sample_tokens=1)
    backlog.submit("q1", 5000, [])
    backlog.submit("q2", 10_000, [])
    clock.t = 1.0
    backlog.first("q1")  # sample 5000 / 1
    clock.t = 3.0
    backlog.first("q2")  # began at 1.0: sample 10000 / 2
    assert backlog.tokens_per_s() == pytest.approx(5000.0)


def test_short_prompts_give_no_rate_sample():
    backlog, clock = make(min_sample_tokens=4096, default_tokens_per_s=7000.0)
    backlog.submit("short", 4095, [])
    clock.t = 0.01
    backlog.first("short")
    assert backlog.tokens_per_s() == 7000.0


def test_rate_is_the_median_of_the_last_samples():
    backlog, clock = make(min_sample_tokens=1, rate_samples=3)
    for i, tokens in enumerate([1000, 5000, 100_000, 6000]):  # each prefilled in 1 s
        backlog.submit(f"q{i}", tokens, [])
        clock.t += 1.0
        backlog.first(f"q{i}")
    # The window holds 5000, 100000 and 6000 (1000 fell out): median 6000. The outlier (a prompt
    # the engine had cached, counted whole) does not set the rate.
    assert backlog.tokens_per_s() == pytest.approx(6000.0)


def test_without_samples_the_rate_is_the_default_or_unknown():
    assert make()[0].tokens_per_s() == 0.0
    assert make(default_tokens_per_s=9000.0)[0].tokens_per_s() == 9000.0


def test_the_head_drains_at_the_rate_and_the_rest_count_whole():
    backlog, clock = make(default_tokens_per_s=1000.0)
    backlog.submit("head", 5000, [])
    clock.t = 0.5
    backlog.submit("next", 3000, [])
    clock.t = 2.0
    assert backlog.pending_tokens() == (5000 - 2000) + 3000
    clock.t = 10.0
    assert backlog.pending_tokens() == 0 + 3000  # the head cannot go below zero


def test_the_head_began_at_the_last_first_token():
    backlog, clock = make(default_tokens_per_s=1000.0)
    backlog.submit("a", 500, [])
    backlog.submit("b", 4000, [])
    clock.t = 1.0
    backlog.first("a")
    clock.t = 2.0
    assert backlog.pending_tokens() == 4000 - 1000  # b has been prefilling since t = 1


def test_without_a_rate_the_head_counts_whole():
    backlog, clock = make()
    backlog.submit("head", 5000, [])
    clock.t = 100.0
    assert backlog.pending_tokens() == 5000


def test_the_block_lru_holds_total_kv_over_block_tokens():
    backlog, _ = make(block_tokens=100)
    backlog.resize(250)  # 2 blocks
    backlog.submit("q", 300, ["a", "b", "c"])
    backlog.first("q")
    # The tail block went first: the next request finds a and b, not c.
    assert backlog.submit("r", 300, ["a", "b", "c"]) == 100


def test_a_hicache_host_tier_adds_to_the_block_lru():
    backlog, _ = make(block_tokens=100)
    assert backlog.capacity_blocks is None
    backlog.resize(250, host_kv_tokens=100)  # (250 + 100) // 100 = 3 blocks
    assert backlog.capacity_blocks == 3
    backlog.submit("q", 300, ["a", "b", "c"])
    backlog.first("q")
    # all three blocks kept (the host tier holds what the GPU lets go): the next request finds them all
    assert backlog.submit("r", 300, ["a", "b", "c"]) == 0


def test_after_a_restart_nothing_counts_as_cached_and_the_size_is_kept():
    backlog, _ = make(block_tokens=100)
    backlog.resize(250)
    backlog.submit("q", 200, ["a", "b"])
    backlog.first("q")
    backlog.forget_cache()
    assert backlog.submit("r", 200, ["a", "b"]) == 200
    backlog.first("r")
    backlog.submit("s", 300, ["a", "b", "c"])
    backlog.first("s")  # 3 blocks into a 2-block LRU: c goes
    assert backlog.submit("t", 300, ["a", "b", "c"]) == 100


@pytest.mark.parametrize(
    "kwargs",
    [{"block_tokens": 0}, {"min_sample_tokens": 0}, {"rate_samples": 0}, {"default_tokens_per_s": -1.0}],
)
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        make(**kwargs)
