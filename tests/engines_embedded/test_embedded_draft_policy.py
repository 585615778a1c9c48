"""draft_policy.py's rules with hand-worked values and fake step costs."""

import math

import pytest

from ray_dspine.engines.embedded.draft_policy import (
    AcceptanceTracker,
    MatchedAcceptance,
    StepCosts,
    bucket,
    bucket_hi,
    bucket_lo,
    choose_draft_length,
    expected_tokens,
    geometric_values,
    prior_costs,
)


def test_rule_value_is_expected_tokens_per_step():
    assert expected_tokens(0.5, 0) == 1.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)  # 1 + 0.5 + 0.25
    assert expected_tokens(1.0, 3) == 4.0
    assert expected_tokens(0.0, 5) == 1.0
    assert geometric_values(0.5, 3) == pytest.approx([1.0, 1.5, 1.75, 1.875])


def choose(alpha, costs, **kwargs):
    """The choice when every position's rate is alpha."""
    return choose_draft_length(geometric_values(alpha, len(costs) - 1), costs, **kwargs)


def test_rule_choice_maximises_tokens_per_cost():
    # alpha 0.5, r 0.1: k=1 1.5/1.1 = 1.364, k=2 1.75/1.2 = 1.458, k=3 1.875/1.3 = 1.442 -> 2
    assert choose(0.5, prior_costs(0.1, 8)) == 2
    # alpha 0.9, r 0.1: E(k)/(1 + 0.1k) grows to k=8 (5.13/1.8 = 2.85 > k=7 4.70/1.7 = 2.77)
    assert choose(0.9, prior_costs(0.1, 8)) == 8
    assert choose(0.9, prior_costs(0.1, 3)) == 3  # capped by the proposal's length
    # alpha 0.05, r 0.1: k=1 1.05/1.1 = 0.955 < 1 -> no draft, the autoregressive rate
    assert choose(0.05, prior_costs(0.1, 8)) == 0
    # nothing to gain (alpha 0, free verify): ties go to the smaller k
    assert choose(0.0, prior_costs(0.0, 8)) == 0


def test_rule_acceptance_decayed_counts_per_position():
    tracker = AcceptanceTracker(history_decay=0.5, max_draft=4)
    assert tracker.rates() == [0.5, 0.5, 0.5, 0.5] and tracker.alpha == 0.5  # never tried: 1/2 all along
    tracker.observe_verify(4, 2)  # hits at 1, 2, a miss at 3: s (1, 1, 0, 0), n (1, 1, 1, 0)
    # a_1 = 1.5 / 2; a_2 = (1 + 0.75) / 2; a_3 = (0 + 0.875) / 2; a_4 untried = (0 + 0.4375) / 1
    assert tracker.rates() == pytest.approx([0.75, 0.875, 0.4375, 0.4375])
    # E: 1, + 0.75, + 0.75 * 0.875 = 0.65625, + 0.65625 * 0.4375 = 0.287109375, + 0.287109375 * 0.4375
    assert tracker.values(4) == pytest.approx([1.0, 1.75, 2.40625, 2.693359375, 2.8189697265625])
    assert tracker.values(2) == pytest.approx([1.0, 1.75, 2.40625])
    tracker.observe_shadow(7, 8)  # decay to s (0.5, 0.5, 0, 0), n (0.5, 0.5, 0.5, 0); a miss at 1: n_1 1.5
    # a_1 = 1 / 2.5; a_2 = (0.5 + 0.4) / 1.5; a_3 = (0 + 0.6) / 1.5; a_4 = 0.4 / 1
    assert tracker.rates() == pytest.approx([0.4, 0.6, 0.4, 0.4])
    tracker.observe_verify(3, 3)  # decay, then hits at 1..3, no miss: s (1.25, 1.25, 1, 0), n (1.75, 1.25, 1.25, 0)
    a1 = 1.75 / 2.75
    a2 = (1.25 + a1) / 2.25
    a3 = (1 + a2) / 2.25
    assert tracker.rates() == pytest.approx([a1, a2, a3, a3])
    tracker.observe_verify(0, 0)  # nothing drafted: nothing observed, nothing decayed
    assert tracker.rates() == pytest.approx([a1, a2, a3, a3])


def test_rule_acceptance_bursty_drafts_draft_long():
    # Two drafts copied whole, then six steps whose proposal was wrong at once (shadow misses):
    # position 1: 2 hits of 8 trials, a_1 = 2.5 / 9 = 0.2778; positions 2..8: 2 of 2, each backed off to the
    # one before: a_2 = (2 + 0.2778) / 3 = 0.7593, a_3 = (2 + 0.7593) / 3 = 0.9198, ... a_8 = 0.9997.
    tracker = AcceptanceTracker(history_decay=1.0, max_draft=8)
    for _ in range(2):
        tracker.observe_verify(8, 8)
    for _ in range(6):
        tracker.observe_shadow(1, 2)
    assert tracker.rates()[:3] == pytest.approx([2.5 / 9, (2 + 2.5 / 9) / 3, (2 + (2 + 2.5 / 9) / 3) / 3])
    values = tracker.values(8)
    assert values[4] == pytest.approx(1.8715, abs=1e-4) and values[8] == pytest.approx(2.6178, abs=1e-4)
    # prior costs 1 + 0.1 k: E(8) / 1.8 = 1.454 beats every shorter draft (E(4) / 1.4 = 1.337) -> 8
    assert choose_draft_length(values, prior_costs(0.1, 8)) == 8
    # one rate for all positions from the same steps (16 accepted of 16 + 6 trials: (16.5) / 23 = 0.717)
    # undervalues the tail once the first token is right: it drafts 4
    assert choose(16.5 / 23, prior_costs(0.1, 8)) == 4


def test_rule_a_request_whose_drafts_fail_falls_to_autoregressive_and_recovers():
    tracker = AcceptanceTracker(history_decay=0.95, max_draft=8)
    lengths = []
    for _ in range(6):
        k = choose_draft_length(tracker.values(8), prior_costs(0.1, 8))
        lengths.append(k)
        if k:
            tracker.observe_verify(k, 0)
        else:
            tracker.observe_shadow(1, 2)
    # a_1 (only position 1 is ever tried, so every a_i = a_1): 0.5 -> 0.25 -> 0.1695 -> 0.1298 -> 0.1062 -> 0.0905 (n = 20 (1 - 0.95^t), alpha = 0.5 / (n + 1))
    assert lengths == [2, 1, 1, 1, 1, 0]
    for _ in range(50):  # still rejected: stays at k = 0
        assert choose_draft_length(tracker.values(8), prior_costs(0.1, 8)) == 0
        tracker.observe_shadow(1, 2)
    # the request starts repeating its context: n ~ 20 after 56 trials, s = 1 then 1.95 after one, two
    # right shadows: alpha = 1.5 / 20.9 = 0.072 (k = 0), then 2.45 / 20.9 = 0.117 (k = 1: 1.117 / 1.1 > 1)
    tracker.observe_shadow(5, 5)
    assert choose_draft_length(tracker.values(8), prior_costs(0.1, 8)) == 0
    tracker.observe_shadow(5, 5)
    assert choose_draft_length(tracker.values(8), prior_costs(0.1, 8)) == 1


def test_rule_match_keeps_counts_per_match_length():
    acceptance = MatchedAcceptance(history_decay=1.0, max_draft=2)
    for _ in range(3):
        acceptance.of(1).observe_verify(2, 0)  # three drafts after 1-token matches, wrong at once
    acceptance.of(4).observe_verify(2, 2)  # one after a 4-token match, right all along
    # n = 1: a_1 = 0.5 / 4 = 0.125, a_2 untried = 0.125 / 1; n = 4: a_1 = 1.5 / 2 = 0.75, a_2 = (1 + 0.75) / 2
    assert acceptance.of(1).rates() == pytest.approx([0.125, 0.125])
    assert acceptance.of(4).rates() == pytest.approx([0.75, 0.875])
    assert acceptance.of(3).rates() == [0.5, 0.5]  # a length never seen starts neutral
    # prior costs 1 + 0.1 k: after a 1-token match E(1) / 1.1 = 1.125 / 1.1 = 1.023 > 1 > E(2) / 1.2 = 0.95
    # drafts 1; after a 4-token match E(2) = 1 + 0.75 + 0.65625 = 2.40625, / 1.2 = 2.005 -> drafts 2
    assert choose_draft_length(acceptance.of(1).values(2), prior_costs(0.1, 2)) == 1
    assert choose_draft_length(acceptance.of(4).values(2), prior_costs(0.1, 2)) == 2
    # one set for every length (by_match off): the same four steps pooled, s (1, 1), n (4, 1):
    # a_1 = 1.5 / 5 = 0.3, a_2 = (1 + 0.3) / 2 = 0.65, whatever the match
    pooled = MatchedAcceptance(history_decay=1.0, max_draft=2, by_match=False)
    for _ in range(3):
        pooled.of(1).observe_verify(2, 0)
    pooled.of(4).observe_verify(2, 2)
    assert pooled.of(1) is pooled.of(4)
    assert pooled.of(3).rates() == pytest.approx([0.3, 0.65])


def test_rule_prior_starts_a_request_from_the_pooled_counts_of_its_match_length():
    pool = MatchedAcceptance(history_decay=1.0, max_draft=2)
    first = MatchedAcceptance(history_decay=1.0, max_draft=2, pool=pool, prior_weight=2.0)
    first.of(4).observe_verify(2, 2)
    first.of(4).observe_verify(2, 2)  # the pool saw the same: n = 4, s (2, 2), n (2, 2)
    first.of(1).observe_shadow(5, 6)  # n = 1: a miss at 1
    assert pool.of(4).rates() == pytest.approx([2.5 / 3, (2 + 2.5 / 3) / 3])  # 0.8333, 0.9444
    assert pool.of(1).rates() == pytest.approx([0.25, 0.25])
    # a later request starts each length from 2 pseudo-trials of the pool's rates: n = 4 s (1.6667, 1.8889),
    # n (2, 2): a_1 = 2.1667 / 3 = 0.7222, a_2 = (1.8889 + 0.7222) / 3 = 0.8704
    second = MatchedAcceptance(history_decay=1.0, max_draft=2, pool=pool, prior_weight=2.0)
    assert second.of(4).rates() == pytest.approx([(2 * 2.5 / 3 + 0.5) / 3, (2 * (2 + 2.5 / 3) / 3 + 0.7222222) / 3])
    # n = 1: s (0.5, 0.5), n (2, 2): a_1 = 1 / 3, a_2 = (0.5 + 1/3) / 3
    assert second.of(1).rates() == pytest.approx([1 / 3, (0.5 + 1 / 3) / 3])
    # weight 0 (or no pool): the neutral start, though the pool is fed
    neutral = MatchedAcceptance(history_decay=1.0, max_draft=2, pool=pool, prior_weight=0.0)
    assert neutral.of(4).rates() == [0.5, 0.5]
    neutral.of(4).observe_verify(2, 0)  # the pool's n = 4 gains a miss at 1: s (2, 2), n (3, 2)
    assert pool.of(4).rates()[0] == pytest.approx(2.5 / 4)


def test_rule_buckets():
    assert [bucket(k) for k in range(10)] == [0, 1, 2, 3, 3, 4, 4, 4, 4, 5]
    assert [bucket_hi(b) for b in range(8)] == [0, 1, 2, 4, 8, 16, 32, 64]
    assert [bucket_lo(b) for b in range(8)] == [0, 1, 2, 3, 5, 9, 17, 33]
    assert bucket(64) == 7


def test_rule_cost_prior_until_the_autoregressive_step_is_measured():
    costs = StepCosts(weight=0.5, prior_ratio=0.1, max_k=8, explore_interval_s=5.0)
    assert costs.costs(8) == pytest.approx([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8])
    costs.record(4, 0.5, now=1.0)  # a verify step alone: still the prior
    assert costs.costs(2) == pytest.approx([1.0, 1.1, 1.2])


def test_rule_cost_fills_unmeasured_buckets_conservatively():
    costs = StepCosts(weight=0.5, prior_ratio=0.1, max_k=8, explore_interval_s=5.0)
    costs.record(0, 0.2, now=0.0)
    # only c(0): scaled up by the prior to each bucket's longest length, 0.2 * (1 + 0.1 * hi(b))
    assert costs.costs(8) == pytest.approx([0.2, 0.22, 0.24, 0.28, 0.28, 0.36, 0.36, 0.36, 0.36])
    costs.record(3, 0.5, now=1.0)  # bucket {3, 4}
    # {1} and {2}: the nearest larger measured bucket, 0.5; {5..8}: 0.5 * (1 + 0.8) / (1 + 0.4) = 0.642857
    assert costs.costs(8) == pytest.approx([0.2, 0.5, 0.5, 0.5, 0.5] + [0.5 * 1.8 / 1.4] * 4)
    costs.record(0, 0.4, now=2.0)  # EMA 0.5 * 0.2 + 0.5 * 0.4
    costs.record(1, 0.45, now=3.0)
    assert costs.costs(3) == pytest.approx([0.3, 0.45, 0.5, 0.5])


def test_rule_choice_with_measured_costs_that_are_not_linear():
    # steps of 1 / 3 / 9 tokens measured at 235 / 447 / 434 ms (k = 0 / 2 / 8); k = 1 takes k = 2's
    # cost and k = 3, 4 take k = 8's (the nearest larger measured bucket)
    costs = StepCosts(weight=0.5, prior_ratio=0.1, max_k=8, explore_interval_s=5.0)
    for k, seconds in ((0, 0.235), (2, 0.447), (8, 0.434)):
        costs.record(k, seconds, now=0.0)
    table = costs.costs(8)
    assert table == pytest.approx([0.235, 0.447, 0.447] + [0.434] * 6)
    # alpha 0.7: E(0)/c = 1/0.235 = 4.26 tok/s; E(1) 1.7/0.447 = 3.80; E(2) 2.19/0.447 = 4.90;
    # E(3) 2.533/0.434 = 5.84; ... E(8) = (1 - 0.7^9)/0.3 = 3.199, /0.434 = 7.37 (the largest) -> 8
    assert choose(0.7, table) == 8
    assert choose(0.7, table[:3]) == 2  # proposal of 2: 4.90 > 4.26
    assert choose(0.7, table[:2]) == 0  # proposal of 1: 3.80 < 4.26
    # alpha 0.5: E(8) = 1.996, /0.434 = 4.60 > 4.26 -> 8; alpha 0.3: E(8) = 1.4285, /0.434 = 3.29 -> 0
    assert choose(0.5, table) == 8
    assert choose(0.3, table) == 0
    # the linear fit of the same steps (r ~ 0.9) drafts at most 1: E(1)/(1 + 0.9) = 0.895 < 1
    assert choose(0.7, prior_costs(0.9, 8)) == 0


def test_rule_explore_unmeasured_then_stale_buckets():
    costs = StepCosts(weight=0.5, prior_ratio=0.1, max_k=8, explore_interval_s=5.0)
    assert costs.explore(0, now=0.0) is None  # no proposal
    costs.record(0, 0.2, now=0.0)
    assert costs.explore(3, now=1.0) == 1  # reachable {0}..{3, 4}; oldest unmeasured {1}
    costs.record(1, 0.4, now=1.5)
    assert costs.explore(3, now=3.0) is None  # 3 - 1 < T
    assert costs.explore(3, now=6.0) == 2
    costs.record(2, 0.4, now=6.5)
    assert costs.explore(2, now=11.0) == 0  # {3, 4} not reachable (lo 3 > 2); {0} is 11 s old
    costs.record(0, 0.2, now=11.5)
    assert costs.explore(6, now=16.0) == 4  # {3, 4}: hi 4
    costs.record(4, 0.4, now=16.5)
    assert costs.explore(6, now=21.0) == 6  # {5..8}: min(hi 8, proposal 6)
    costs.record(6, 0.4, now=21.5)
    for k in (0, 1, 2, 4, 8):
        costs.record(k, 0.3, now=25.0)
    assert costs.explore(8, now=26.0) is None  # every bucket measured 1 s ago: none is stale
    assert costs.explore(8, now=30.0) == 0  # all 5 s old: ties go to the smaller bucket
    assert costs.explore(8, now=31.0) is None  # explored 1 s ago


class StubDrafter:
    def lookup(self):
        return 4, [1, 2, 3, 4, 5, 6]

    def extend(self, tokens):
        pass


def first_decode_draft(tiny, costs, now, seed=None):
    """Drafted length of a request's first decode step (a 6-token proposal) on the tiny model."""
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.sequence import run_step
    from ray_dspine.engines.embedded.sequence_setup import make_sequence
    from ray_dspine.engines.protocol import GenerateRequest

    config = EmbeddedEngineConfig(dtype="fp32", context_length_tokens=256, kv_budget_tokens=1024)
    temperature = 0.0 if seed is None else 0.9
    request = GenerateRequest(request_id="r", prompt="abcdefgh", max_tokens=16, temperature=temperature, seed=seed)
    seq = make_sequence(config, tiny, request, tiny.tokenizer.encode("abcdefgh"), True)
    seq.drafter = StubDrafter()
    run_step(seq, tiny.model, 512, True, costs, now)  # prefill
    return run_step(seq, tiny.model, 512, True, costs, now).num_drafted


def test_decode_step_drafts_the_measured_choice_the_exploration_or_the_prior(tiny):
    measured = StepCosts(weight=0.5, prior_ratio=0.1, max_k=8, explore_interval_s=5.0)
    for k, seconds in ((0, 0.235), (2, 0.447), (8, 0.434)):
        measured.record(k, seconds, now=0.0)
    measured.explored_at = 0.5
    # no exploration due (1 - 0.5 < 5); alpha 1/2, K = 6: E(6) = 1.984, /0.434 = 4.57 > 1/0.235 = 4.26
    assert first_decode_draft(tiny, measured, now=1.0) == 6
    # exploration due: bucket {1} is unmeasured, so this step drafts 1 token
    assert first_decode_draft(tiny, measured, now=6.0) == 1 and measured.explored_at == 6.0
    # a seeded sampled request: prior costs 1 + 0.1 k (alpha 1/2 -> k = 2, rule `choice`'s first
    # hand-worked case), never an exploration
    fresh = StepCosts(weight=0.5, prior_ratio=0.1, max_k=8, explore_interval_s=5.0)
    fresh.record(0, 0.2, now=0.0)
    assert first_decode_draft(tiny, fresh, now=1.0, seed=7) == 2 and fresh.explored_at is None


def test_rule_prior_leaves_seeded_sampled_requests_neutral_and_out_of_the_pool(tiny):
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.sequence_setup import make_sequence
    from ray_dspine.engines.protocol import GenerateRequest

    config = EmbeddedEngineConfig(dtype="fp32", context_length_tokens=256, kv_budget_tokens=1024)
    pool = MatchedAcceptance(history_decay=1.0, max_draft=8)
    ids = tiny.tokenizer.encode("abcdefgh")

    def sequence(**sampling):
        request = GenerateRequest(request_id="r", prompt="abcdefgh", max_tokens=16, **sampling)
        return make_sequence(config, tiny, request, ids, True, pool)

    assert sequence(temperature=0.0).acceptance.pool is pool
    assert sequence(temperature=0.9).acceptance.pool is pool  # sampled without a seed: not reproducible anyway
    seeded = sequence(temperature=0.9, seed=7)
    assert seeded.acceptance.pool is None and seeded.fixed_cost_ratio == config.draft_cost_ratio_prior
