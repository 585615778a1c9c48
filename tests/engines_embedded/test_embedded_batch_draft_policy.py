"""draft_policy.py rule `batch` and the engine's batched draft choice, with hand-worked fake costs."""

from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
from ray_dspine.engines.embedded.draft_policy import MatchedAcceptance, choose_draft_length, geometric_values
from ray_dspine.engines.embedded.engine import EmbeddedEngine
from ray_dspine.engines.embedded.sequence import Sequence


def choose(alpha, costs, **kwargs):
    return choose_draft_length(geometric_values(alpha, len(costs) - 1), costs, **kwargs)


def test_batch_choice_weighs_the_whole_step():
    costs = [1.0, 1.4]  # c(0) = 1, c(1) = 1.4 (total draft tokens of the step)
    # alone, alpha 0.5: k=0 1/1 = 1, k=1 1.5/1.4 = 1.071 -> draft 1
    assert choose(0.5, costs) == 1
    # beside one request worth 1 expected token: k=0 (1 + 1)/1 = 2, k=1 (1 + 1.5)/1.4 = 1.786 -> no draft,
    # a draft that slows the whole step by 40% does not pay for itself any more
    assert choose(0.5, costs, rest_tokens=1.0) == 0
    # the earlier requests already drafted 2 tokens: the choice reads c(2 + k)
    # costs c = 1, 1.1, 1.2, 1.3; alpha 0.9, rest 2 tokens: k=0 3/1.2 = 2.5, k=1 3.9/1.3 = 3.0 -> 1
    assert choose(0.9, [1.0, 1.1, 1.2, 1.3], rest_tokens=2.0, rest_draft=2) == 1
    # the defaults are the alone rule: E(k)/c(k), same ties
    assert choose(0.0, [1.0, 1.0, 1.0]) == 0


def _seq(alpha_hits: int, trials: int, proposal_tokens: int) -> Sequence:
    seq = Sequence(
        request_id="x", prompt_ids=[1], max_tokens=50, temperature=0.0, top_p=1.0, eos_token_ids=frozenset(),
        detokenizer=None, drafter=None, generator=None, histogram_size=9,
        acceptance=MatchedAcceptance(history_decay=1.0, max_draft=2),
    )
    # position 1 only (position 2 untried takes position 1's rate): one rate alpha = (hits + 1/2) / (trials + 1)
    seq.tracker().accepted, seq.tracker().trials = [alpha_hits, 0.0], [trials, 0.0]
    return seq


def test_engine_batched_choice_in_running_order_and_exploration():
    config = EmbeddedEngineConfig(dtype="fp32", num_draft_tokens=2, draft_explore_interval_s=100.0)
    engine = EmbeddedEngine(config)
    costs = engine._costs_for(2)
    assert len(costs.seconds) == 4  # K = 2 requests * 2 drafts = 4: buckets {0}, {1}, {2}, {3, 4}
    for k, seconds in [(0, 1.0), (1, 1.0), (2, 1.0), (4, 2.0)]:
        costs.record(k, seconds, now=0.0)
    # request 1: alpha = (8.5)/(10) = 0.85 (hits 8 of 9 trials); request 2: alpha = 0.5/10 = 0.05
    a, b = _seq(8, 9, 2), _seq(0, 9, 2)
    drafts = engine._choose_drafts([a, b], [[5, 6], [7, 8]], costs, now=50.0)
    # a first, b (later, not drafting) worth 1: k=0 (1 + 1)/1 = 2; k=1 (1 + 1.85)/1 = 2.85;
    #   k=2 (1 + 1 + 0.85 + 0.7225 = 3.5725)/1 = 3.57 -> 2.
    # b after a's 2 drafts (worth 2.5725 tokens): k=0 (2.5725 + 1)/c(2) = 3.57; k=1 (3.5725 + 0.05)/c(3) = 3.62/2
    #   -> 0.
    assert drafts == [[5, 6], []]
    # every bucket is measured at t=0: at t=150 (>= T = 100 after it) exploration refreshes the oldest, bucket 0,
    # and the choosing requests take drafts in order up to t = hi(0) = 0 tokens
    assert engine._choose_drafts([a, b], [[5, 6], [7, 8]], costs, now=150.0) == [[], []]
    # the next exploration only after T more seconds: the choice again
    assert engine._choose_drafts([a, b], [[5, 6], [7, 8]], costs, now=160.0) == [[5, 6], []]


def test_batched_table_is_per_batch_size():
    engine = EmbeddedEngine(EmbeddedEngineConfig(dtype="fp32", num_draft_tokens=8))
    assert engine._costs_for(3) is engine._costs_for(3)
    assert engine._costs_for(3) is not engine._costs_for(2)
    assert len(engine._costs_for(4).seconds) == 7  # K = 4 * 8 = 32: buckets {0} .. {17..32}


def _measured(seconds_by_bucket):
    from ray_dspine.engines.embedded.draft_policy import StepCosts

    costs = StepCosts(weight=1.0, prior_ratio=0.1, max_k=8, explore_interval_s=1e9)
    for k, seconds in seconds_by_bucket:
        costs.record(k, seconds, now=0.0)
    costs.explored_at = 0.0  # no exploration in these steps
    return costs


def test_rule_grow_doubles_after_a_draft_accepted_whole():
    from ray_dspine.engines.embedded.sequence import choose_draft, finish_verify

    # buckets 0, 1, 2 cost 1, {3, 4} cost 2, {5..8} cost 4; a request with alpha = 0.85 at every position
    # (position 1 counts, later ones back off to it): E(2) = 2.5725, / c(2) = 1 -> 2.57; E(4) = 3.7086 / 2 ->
    # 1.86: k* = 2
    costs = _measured([(0, 1.0), (1, 1.0), (2, 1.0), (4, 2.0), (8, 4.0)])
    seq = _seq(8, 9, 8)
    seq.acceptance = MatchedAcceptance(history_decay=1.0, max_draft=8)
    seq.tracker().accepted, seq.tracker().trials = [8.0] + [0.0] * 7, [9.0] + [0.0] * 7
    proposal = [10, 11, 12, 13, 14, 15, 16, 17]
    assert choose_draft(seq, proposal, costs, now=1.0) == [10, 11]  # k* = 2, growing is off
    seq.grow = True
    assert choose_draft(seq, proposal, costs, now=1.0) == [10, 11]  # nothing accepted whole yet
    # a step drafting [10, 11] whose logits accept both (rows argmax 10, 11, then the bonus 12)
    import torch

    logits = torch.zeros(3, 20)
    logits[0, 10] = logits[1, 11] = logits[2, 12] = 1.0
    seq.acceptance = None  # keep the counts as set: this step only records what was accepted whole
    assert finish_verify(seq, logits, proposal, [10, 11]) == [10, 11, 12]
    assert seq.accepted_whole == (0, 2)  # (match length, k)
    seq.acceptance = MatchedAcceptance(history_decay=1.0, max_draft=8)
    seq.tracker().accepted, seq.tracker().trials = [8.0] + [0.0] * 7, [9.0] + [0.0] * 7
    # same match length: at least min(2 * 2, 8) = 4
    assert choose_draft(seq, proposal, costs, now=1.0) == [10, 11, 12, 13]
    assert choose_draft(seq, proposal[:3], costs, now=1.0) == [10, 11, 12]  # capped by the proposal
    seq.match_length = 3  # a proposal after another match length: k* again
    assert choose_draft(seq, proposal, costs, now=1.0) == [10, 11]
    # a step that rejects part of its draft clears it
    seq.match_length = 0
    logits = torch.zeros(3, 20)
    logits[0, 10] = logits[1, 19] = 1.0
    seq.acceptance = None
    assert finish_verify(seq, logits, proposal, [10, 11]) == [10, 19]
    assert seq.accepted_whole is None
