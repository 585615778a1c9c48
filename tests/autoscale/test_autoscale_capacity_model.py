"""Capacity model: one test per rule, on round coefficients worked out by hand.

Round replica: base 20 ms, 1 ms per running request, no KV cost, prefill 0.1 ms per token;
autoregressive unless stated. Workload: P = P95 = Pu = 1000 tokens, O = 101 tokens.
"""

import pytest

from ray_dspine.autoscale.capacity_model import Workload, max_rate_per_replica, predict_replica
from ray_dspine.autoscale.config import ReplicaCapacityModel, SloTargets

CAP = ReplicaCapacityModel(
    base_ms=20.0, per_running_ms=1.0, per_kv_token_ms=0.0, prefill_per_token_ms=0.1,
    max_running_requests=64, total_kv_tokens=1_000_000, itl_tail_factor=1.0,
)  # fmt: skip
AR = Workload(1000.0, 1000.0, 1000.0, 101.0, 1.0, False)


def test_rule_step_prefill_decode_latency():
    p = predict_replica(CAP, AR, 2.0)
    # t_pf = 20 + 0.1 * 1000 = 120 ms; rho = 2 * 0.120 = 0.24; S = 100 steps
    # x = 2 * 100 / (1000 * 0.76) = 0.263158; c = x * 20 / (1 - x * 1) = 7.142857
    # t_step = 20 + 7.142857 = 27.142857; itl = 27.142857 / 0.76 = 35.714286
    # ttft = 27.142857 + 120 * (1 + 1.5 * 0.24 / 0.76) = 27.142857 + 176.842105 = 203.984962
    assert p.stable
    assert p.prefill_share == pytest.approx(0.24)
    assert p.num_running == pytest.approx(7.142857, rel=1e-6)
    assert p.step_ms == pytest.approx(27.142857, rel=1e-6)
    assert p.itl_mean_ms == pytest.approx(35.714286, rel=1e-6)
    assert p.ttft_p95_ms == pytest.approx(203.984962, rel=1e-6)
    assert p.kv_tokens == pytest.approx(7.142857 * 1101, rel=1e-6)  # c * (Pu + O)


def test_rule_ttft_wait_factor_scales_the_queueing_term():
    cap = CAP.model_copy(update={"ttft_wait_factor": 0.5})
    # ttft = 27.142857 + 120 * (1 + 0.5 * 0.24 / 0.76) = 27.142857 + 138.947368 = 166.090226
    assert predict_replica(cap, AR, 2.0).ttft_p95_ms == pytest.approx(166.090226, rel=1e-6)


def test_rule_unstable_when_prefill_saturates():
    assert not predict_replica(CAP, AR, 1000.0 / 120.0).stable  # rho = 1
    assert predict_replica(CAP, AR, 1.0).stable


def test_rule_capacity_is_the_highest_compliant_rate():
    # itl(2.0) = 35.714286 ms (above): with that as the ITL target and nothing else binding, mu = 2.0.
    slo = SloTargets(ttft_slo_s=100.0, itl_slo_ms=35.714286)
    assert max_rate_per_replica(CAP, slo, AR, headroom=0.0).rate_per_s == pytest.approx(2.0, rel=1e-5)
    # headroom 0.5 halves the target to 17.86 ms, below itl at zero load (20 ms): unreachable, dropped
    cap = max_rate_per_replica(CAP, slo, AR, headroom=0.5)
    assert cap.unreachable == ("itl",)


def test_rule_memory_bounds_capacity():
    slo = SloTargets(ttft_slo_s=100.0, itl_slo_ms=10_000.0)
    small = CAP.model_copy(update={"max_running_requests": 7})
    # running requests c(2.0) = 7.14 > 7, c(1.9) < 7: mu lies between 1.9 and 2.0
    mu = max_rate_per_replica(small, slo, AR, headroom=0.0).rate_per_s
    assert 1.9 < mu < 2.0
    assert predict_replica(small, AR, mu).num_running == pytest.approx(7.0, rel=1e-4)


def test_rule_drafter_capacity_follows_acceptance():
    cap = CAP.model_copy(update={"draft_ms": 4.0, "verify_per_token_ms": 0.5, "draft_tokens": 4})
    slo = SloTargets(ttft_slo_s=100.0, itl_slo_ms=30.0)
    rates = {a: max_rate_per_replica(cap, slo, Workload(1000, 1000, 1000, 101, a, True), 0.0).rate_per_s for a in (1.0, 2.0, 3.5)}
    off = max_rate_per_replica(cap, slo, AR, 0.0).rate_per_s
    assert rates[1.0] < off < rates[2.0] < rates[3.5]  # at acceptance 1 the drafter only adds cost
    # verify step at c running: (20 + 4) + (1 + 0.5 * 3) * c; at a = 2 itl_mean = t_step / (2 * (1 - rho))
    p = predict_replica(cap, Workload(1000, 1000, 1000, 101, 2.0, True), 2.0)
    # x = 2 * (100 / 2) / (1000 * 0.76) = 0.131579; c = 0.131579 * 24 / (1 - 0.131579 * 2.5) = 4.705882
    assert p.num_running == pytest.approx(4.705882, rel=1e-6)
    assert p.itl_mean_ms == pytest.approx((24 + 2.5 * 4.705882) / (2 * 0.76), rel=1e-6)


def test_rule_cached_prefix_shortens_prefill():
    cached = Workload(1000.0, 1000.0, 500.0, 101.0, 1.0, False)
    # t_pf = 20 + 0.1 * 500 = 70 ms -> rho(2.0) = 0.14; t_pf95 = 20 + 0.1 * 1000 * 500 / 1000 = 70 ms
    assert predict_replica(CAP, cached, 2.0).prefill_share == pytest.approx(0.14)
