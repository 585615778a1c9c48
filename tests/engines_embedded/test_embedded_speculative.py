import math

import torch

from ray_dspine.engines.embedded.speculative import accept_greedy, accept_sampled, penalised, target_probs


def logits_for(rows):
    """rows: list of preferred token per position over a vocabulary of 5."""
    out = torch.full((len(rows), 5), -10.0)
    for i, token in enumerate(rows):
        out[i, token] = 10.0
    return out


def test_rule_greedy_accepts_longest_matching_prefix_plus_correction():
    # target prefers 1, 2, 3, 4 at the four positions; draft 1, 2, 0 -> accept 1, 2, then correct with 3
    assert accept_greedy(logits_for([1, 2, 3, 4]), [1, 2, 0]) == [1, 2, 3]


def test_rule_greedy_all_accepted_gets_bonus_token():
    assert accept_greedy(logits_for([1, 2, 3, 4]), [1, 2, 3]) == [1, 2, 3, 4]


def test_rule_greedy_empty_draft_is_one_autoregressive_token():
    assert accept_greedy(logits_for([4]), []) == [4]


def test_rule_top_p_keeps_smallest_set_reaching_p():
    # probs 0.5, 0.3, 0.2 -> top_p 0.7 keeps 0.5 and 0.3 (0.5 < 0.7, 0.8 >= 0.7), renormalised to 0.625, 0.375
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    probs = target_probs(logits, temperature=1.0, top_p=0.7)[0]
    assert torch.allclose(probs, torch.tensor([0.625, 0.375, 0.0]), atol=1e-6)


def test_rule_sampling_preserves_target_distribution():
    """Statistical check: first emitted token ~ p0 whatever the draft proposes.

    p0 = (0.5, 0.3, 0.2). Draft proposes token 1: accepted with prob 0.3; on rejection the residual
    is (0.5, 0, 0.2)/0.7. So P(0) = 0.7 * 5/7 = 0.5, P(1) = 0.3, P(2) = 0.7 * 2/7 = 0.2 = p0.
    Second token, given the first was the accepted 1: ~ p1 = (0.1, 0.1, 0.8).
    """
    p0 = torch.tensor([0.5, 0.3, 0.2])
    p1 = torch.tensor([0.1, 0.1, 0.8])
    logits = torch.log(torch.stack([p0, p1]))
    generator = torch.Generator().manual_seed(1234)
    n = 8000
    first = [0, 0, 0]
    second_after_accept = [0, 0, 0]
    for _ in range(n):
        out = accept_sampled(logits, [1], 1.0, 1.0, generator)
        first[out[0]] += 1
        if out[0] == 1:
            assert len(out) == 2
            second_after_accept[out[1]] += 1
    chi2 = sum((first[i] - n * p0[i].item()) ** 2 / (n * p0[i].item()) for i in range(3))
    # chi-square with 2 degrees of freedom: P(X > 13.8) = 0.001
    assert chi2 < 13.8, (first, chi2)
    m = sum(second_after_accept)
    chi2b = sum((second_after_accept[i] - m * p1[i].item()) ** 2 / (m * p1[i].item()) for i in range(3))
    assert chi2b < 13.8, (second_after_accept, chi2b)
    assert math.isclose(m / n, 0.3, abs_tol=0.02)


def test_sampling_rejection_ends_the_step():
    # p0 puts all mass on token 0; draft proposes 3 -> always rejected, one token emitted.
    logits = logits_for([0, 1])
    generator = torch.Generator().manual_seed(0)
    assert accept_sampled(logits, [3], 1.0, 1.0, generator) == [0]


def test_rule_filters_top_k_keeps_the_k_likeliest():
    # probs 0.5, 0.3, 0.15, 0.05; top_k 2 keeps 0.5 and 0.3, renormalised to 0.625 and 0.375
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    probs = target_probs(logits, temperature=1.0, top_p=1.0, top_k=2)[0]
    assert torch.allclose(probs, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=1e-6)


def test_rule_filters_min_p_drops_below_a_share_of_the_top_token():
    # min_p 0.25 of the top 0.5 is 0.125: 0.05 goes, 0.5, 0.3, 0.15 stay and sum to 0.95
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    probs = target_probs(logits, temperature=1.0, top_p=1.0, min_p=0.25)[0]
    assert torch.allclose(probs, torch.tensor([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]), atol=1e-6)


def test_rule_filters_apply_together_on_the_unfiltered_probabilities():
    # top_k 3 keeps 0.5, 0.3, 0.15; top_p 0.7 keeps 0.5, 0.3 (the mass above 0.15 is 0.8 >= 0.7): both hold
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    probs = target_probs(logits, temperature=1.0, top_p=0.7, top_k=3)[0]
    assert torch.allclose(probs, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=1e-6)
    # the likeliest token always stays: top_k 1 and min_p 1 leave it alone
    assert target_probs(logits, 1.0, 1.0, top_k=1, min_p=1.0)[0].tolist() == [1.0, 0.0, 0.0, 0.0]


def test_rule_filters_sampling_never_draws_a_filtered_token():
    # with top_k 2, a draft of the third token is always rejected and the draw is 0 or 1
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]]))
    generator = torch.Generator().manual_seed(5)
    for _ in range(200):
        out = accept_sampled(logits, [2], 1.0, 1.0, generator, top_k=2)
        assert len(out) == 1 and out[0] in (0, 1)


def test_rule_penalties_count_the_output_and_the_drafts_before_each_row():
    # output 1, 1, 2; draft [3]: row 0 scores after the output (counts token1: 2, token2: 1), row 1 after the
    # output and 3 (token3: 1 more)
    logits = torch.tensor([[1.0, 2.0, -1.0, 0.5, 0.0]] * 2)
    out = penalised(logits, [1, 1, 2], [3], frequency=0.5, presence=0.25)
    # token1: 2.0 - 0.5 * 2 - 0.25 = 0.75; token2: -1.0 - 0.5 - 0.25 = -1.75; token3 in row 1: 0.5 - 0.75 = -0.25
    assert torch.allclose(out, torch.tensor([[1.0, 0.75, -1.75, 0.5, 0.0], [1.0, 0.75, -1.75, -0.25, 0.0]]))
    # repetition 2: a seen positive logit halves, a seen negative one doubles
    out = penalised(logits, [1, 1, 2], [3], repetition=2.0)
    assert torch.allclose(out, torch.tensor([[1.0, 1.0, -2.0, 0.5, 0.0], [1.0, 1.0, -2.0, 0.25, 0.0]]))
    # logit_bias comes last, on every row
    out = penalised(logits, [], [], bias=torch.tensor([0.0, 0.0, 0.0, 0.0, 3.0]))
    assert out[:, 4].tolist() == [3.0, 3.0] and torch.equal(out[:, :4], logits[:, :4])
