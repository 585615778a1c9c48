"""Acceptance draws: capped geometric per step, per-request spread, deterministic per seed and id."""

import random
import statistics

import pytest

from ray_dspine.engines.simulated.acceptance import (
    AcceptanceModel,
    draw_step_tokens,
    mean_tokens_per_step,
    solve_alpha,
)
from ray_dspine.engines.simulated.profile import load_profile


def test_rule_capped_geometric_mean_formula():
    # alpha = 0.5, D = 4: P(1..4) = 1/2, 1/4, 1/8, 1/8 -> mean = 0.5 + 0.5 + 0.375 + 0.5 = 1.875
    # formula: (1 - 0.5^4) / (1 - 0.5) = 0.9375 / 0.5 = 1.875
    assert mean_tokens_per_step(0.5, 4) == pytest.approx(1.875)
    assert mean_tokens_per_step(1.0, 16) == 16.0
    assert mean_tokens_per_step(0.0, 16) == 1.0


def test_rule_alpha_solves_the_mean_by_bisection():
    assert solve_alpha(1.875, 4) == pytest.approx(0.5, abs=1e-9)
    assert solve_alpha(1.0, 16) == 0.0
    assert solve_alpha(16.0, 16) == 1.0
    assert mean_tokens_per_step(solve_alpha(4.77, 16), 16) == pytest.approx(4.77, abs=1e-9)


def test_rule_step_draws_follow_the_capped_geometric():
    rng = random.Random(7)
    draws = [draw_step_tokens(0.5, 4, rng) for _ in range(40_000)]
    assert min(draws) == 1 and max(draws) == 4
    # P(4) = 0.5^3 = 0.125 (capped tail); P(1) = 0.5
    assert draws.count(4) / len(draws) == pytest.approx(0.125, abs=0.01)
    assert draws.count(1) / len(draws) == pytest.approx(0.5, abs=0.01)
    assert statistics.fmean(draws) == pytest.approx(1.875, abs=0.02)


def aggregate_accept_length(model: AcceptanceModel, seed: int, num_requests: int, tokens: int) -> float:
    total_tokens = total_steps = 0
    for i in range(num_requests):
        stream = model.for_request(seed, f"req-{i}")
        produced = steps = 0
        while produced < tokens:
            produced += stream.draw()
            steps += 1
        total_tokens += produced
        total_steps += steps
    return total_tokens / total_steps


@pytest.mark.parametrize("drafter,expected", [("dspine", 4.77), ("dflash2", 4.00)])
def test_rule_aggregate_acceptance_matches_the_profile(drafter, expected):
    spec = load_profile("h200-qwen3.8-27b").drafters[drafter]
    model = AcceptanceModel(spec.accept_length["swe-bench-pro-xhigh"], spec.per_request_cv, spec.draft_tokens)
    # steps-per-token has mean 1/mu across requests, so tokens / steps over equal-length requests -> mu;
    # 600 requests x ~500 tokens: sampling error ~ 0.25 / sqrt(600) = 1 %, tolerance 3 %
    assert aggregate_accept_length(model, seed=3, num_requests=600, tokens=500) == pytest.approx(expected, rel=0.03)


def test_rule_per_request_means_spread_with_the_profile_cv():
    model = AcceptanceModel(4.77, 0.25, 16)
    rng = random.Random(11)
    steps_per_token = [1.0 / model.request_mean(rng) for _ in range(5000)]
    # s_r ~ Normal(1/4.77 = 0.2096, 0.25/4.77 = 0.0524), clipped to [1/16, 1]
    assert statistics.fmean(steps_per_token) == pytest.approx(0.2096, rel=0.01)
    assert statistics.stdev(steps_per_token) == pytest.approx(0.0524, rel=0.05)
    assert min(steps_per_token) >= 1 / 16 and max(steps_per_token) <= 1.0


def iter_draws(model: AcceptanceModel, seed: int, request_id: str, n: int) -> list[int]:
    stream = model.for_request(seed, request_id)
    return [stream.draw() for _ in range(n)]


def test_rule_draws_are_deterministic_per_seed_and_request_id():
    model = AcceptanceModel(4.77, 0.25, 16)
    assert iter_draws(model, 5, "x", 50) == iter_draws(model, 5, "x", 50)
    assert iter_draws(model, 5, "x", 50) != iter_draws(model, 6, "x", 50)
    assert iter_draws(model, 5, "x", 50) != iter_draws(model, 5, "y", 50)
    # interleaving other requests' draws does not change a request's stream
    x, y = model.for_request(5, "x"), model.for_request(5, "y")
    interleaved = []
    for _ in range(50):
        interleaved.append(x.draw())
        y.draw()
    assert interleaved == iter_draws(model, 5, "x", 50)


def test_acceptance_outside_one_to_d_is_refused():
    with pytest.raises(ValueError):
        AcceptanceModel(17.0, 0.1, 16)
