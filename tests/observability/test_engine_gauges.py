"""serve/metrics.py rules G1-G3: what each replica re-exports of its engine's own gauges."""

import pytest

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.serve.metrics import engine_gauges


def snapshot(**fields) -> LoadSnapshot:
    base = {"total_kv_tokens": 400_000, "free_kv_tokens": 300_000, "total_state_slots": 72, "free_state_slots": 54,
            "accept_length_ema": 4.25, "drafter_active": True, "engine": "sglang"}  # fmt: skip
    return LoadSnapshot(**{**base, **fields})


def test_rules_reported_gauges_are_exported_as_the_engine_reports_them():
    gauges = engine_gauges(snapshot(spec_accept_length=4.77, kv_token_usage=0.31, mamba_usage=0.625))
    assert gauges == {"spec_accept_length": 4.77, "kv_token_usage": 0.31, "mamba_usage": 0.625}


def test_rule_g1_before_the_first_verify_step_and_without_speculation():
    # SGLang writes 0 until it has measured a verify step: the replica's own EMA stands in
    assert engine_gauges(snapshot(spec_accept_length=0.0))["spec_accept_length"] == 4.25
    assert engine_gauges(snapshot())["spec_accept_length"] == 4.25  # not reported (CPU engines)
    # drafter off: one token per forward, whatever EMA the replica kept from before
    assert engine_gauges(snapshot(drafter_active=False, spec_accept_length=0.0))["spec_accept_length"] == 1.0


def test_rules_g2_g3_derived_from_the_pools_when_not_reported():
    gauges = engine_gauges(snapshot())
    # KV: 1 - 300,000 / 400,000 = 0.25; Mamba: 1 - 54 / 72 = 0.25
    assert gauges["kv_token_usage"] == pytest.approx(0.25) and gauges["mamba_usage"] == pytest.approx(0.25)
    empty = engine_gauges(snapshot(total_kv_tokens=0, free_kv_tokens=0, total_state_slots=0, free_state_slots=0))
    assert empty["kv_token_usage"] == 0.0 and empty["mamba_usage"] == 0.0


def test_rules_g2_g3_clip_reported_shares_to_one():
    gauges = engine_gauges(snapshot(kv_token_usage=1.02, mamba_usage=-0.01))
    assert gauges["kv_token_usage"] == 1.0 and gauges["mamba_usage"] == 0.0
