"""Calibration of the shipped profiles against the vendor figures, and the step-time rules."""

import pytest

from ray_dspine.engines.attention_cost import attended_pairs
from ray_dspine.engines.simulated.profile import (
    CalibrationPoint,
    DecodeModel,
    DrafterProfile,
    PrefillModel,
    SimProfile,
    available_profiles,
    load_profile,
)
from ray_dspine.engines.simulated.step_model import (
    decode_step_ms,
    prefill_alone_ms,
    prefill_step_ms,
    reference_output_tok_s,
    verify_step_ms,
)


def round_profile() -> SimProfile:
    return SimProfile(
        name="round", gpu="none", model="none", sources=[], assumptions=[],
        calibration=CalibrationPoint(
            concurrency=4, context_tokens_per_request=1000, workload="w", autoregressive_output_tok_s=1.0
        ),
        decode=DecodeModel(base_ms=20.0, per_running_ms=1.0, per_kv_token_ms=0.001),
        verify_per_token_ms=0.5,
        prefill=PrefillModel(per_token_ms=0.1),
        drafters={
            "dspine": DrafterProfile(
                draft_tokens=4, draft_ms=4.0, draft_vram_gb=4.0, accept_length={"w": 2.0},
                per_request_cv=0.0, reference_output_tok_s=1.0,
            )
        },
    )  # fmt: skip


def test_rule_decode_step_time_is_linear_in_running_and_context():
    # 20 + 1 * 4 + 0.001 * 4000 = 28 ms
    assert decode_step_ms(round_profile(), 4, 4000) == pytest.approx(28.0)


def test_rule_verify_step_adds_draft_and_extra_query_tokens():
    p = round_profile()
    # 28 + draft 4 + 0.5 * 4 requests * (4 - 1) = 28 + 4 + 6 = 38 ms
    assert verify_step_ms(p, p.drafters["dspine"], 4, 4000) == pytest.approx(38.0)


def test_rule_prefill_costs_one_base_step_plus_uncached_tokens():
    # 20 + 0.1 * 500 = 70 ms
    assert prefill_step_ms(round_profile(), 500) == pytest.approx(70.0)


def test_rule_a_chunked_prompt_alone_pays_one_base_step_per_chunk():
    # 250 tokens in passes of 100: 3 passes, 0.1 * 250 + 3 * 20 = 85 ms; unchunked: 20 + 25 = 45 ms
    assert prefill_alone_ms(round_profile(), 250, 100) == pytest.approx(85.0)
    assert prefill_alone_ms(round_profile(), 200, 100) == pytest.approx(60.0)  # exactly 2 passes
    assert prefill_alone_ms(round_profile(), 250) == pytest.approx(45.0)


def test_rule_attended_pairs_count_what_each_new_token_attends():
    # 3 new tokens after 10 in KV attend 10, 11 and 12 earlier tokens: 33 = 3 * 10 + 3 * 2 / 2
    assert attended_pairs(10, 3) == 33
    # a cold prompt of 4 tokens: 0 + 1 + 2 + 3 = 6; nothing new: 0
    assert attended_pairs(0, 4) == 6
    assert attended_pairs(50, 0) == 0
    # passes over one prompt add up: 0..4 then 4..10 is 0..10 (45 = 6 + 39)
    assert attended_pairs(0, 4) + attended_pairs(4, 6) == attended_pairs(0, 10) == 45


def test_rule_prefill_adds_the_attended_pairs_at_their_rate():
    p = round_profile().model_copy(update={"prefill": PrefillModel(per_token_ms=0.1, per_token_context_ms=0.01)})
    # 20 + 0.1 * 500 + 0.01 * 1000 pairs = 80 ms; no pairs given: 70 ms as before
    assert prefill_step_ms(p, 500, 1000) == pytest.approx(80.0)
    assert prefill_step_ms(p, 500) == pytest.approx(70.0)


def test_rule_a_prompt_alone_attends_its_cached_prefix_and_its_chunks_add_up_to_one_pass():
    p = round_profile().model_copy(update={"prefill": PrefillModel(per_token_ms=0.1, per_token_context_ms=0.01)})
    # 200 new tokens after 100 cached: pairs = 200 * 100 + 200 * 199 / 2 = 39,900 -> 399 ms;
    # 3 passes of at most 100: 3 * 20 + 0.1 * 200 ... 2 passes: 2 * 20 + 20 + 399 = 459 ms
    assert prefill_alone_ms(p, 200, 100, cached_tokens=100) == pytest.approx(459.0)
    # the same two chunks priced one by one: (20 + 10 + 0.01 * (100*100 + 4950)) + (20 + 10 + 0.01 * (100*200 + 4950))
    assert prefill_step_ms(p, 100, attended_pairs(100, 100)) + prefill_step_ms(
        p, 100, attended_pairs(200, 100)
    ) == pytest.approx(459.0)
    # the shipped profiles' default: no context cost, as before the field existed
    assert load_profile("h200-qwen3.8-27b").prefill.per_token_context_ms == 0.0


def test_rule_reference_throughput_is_batch_times_acceptance_over_step_time():
    p = round_profile()
    # AR: 4 * 1 / 0.028 s = 142.857 tok/s; verify: 4 * 2.0 / 0.038 s = 210.526 tok/s
    assert reference_output_tok_s(p, None) == pytest.approx(4 / 0.028)
    assert reference_output_tok_s(p, p.drafters["dspine"], 2.0) == pytest.approx(8 / 0.038)


def test_shipped_profiles_load():
    assert {"h200-qwen3.8-27b", "h100-qwen3.8-27b"} <= set(available_profiles())
    for name in available_profiles():
        assert load_profile(name).name == name
    with pytest.raises(FileNotFoundError):
        load_profile("no-such-gpu")


def test_h200_step_times_match_vendor_calibration():
    p = load_profile("h200-qwen3.8-27b")
    n, context = 8, 8 * 16384
    # AR: 8 / 248 tok/s = 32.26 ms ("~32 ms per autoregressive step at 8 concurrent")
    assert decode_step_ms(p, n, context) == pytest.approx(8 / 248 * 1000, abs=0.05)
    # DSpine 16-token verify: 8 * 4.77 / 791 = 48.24 ms ("~48 ms")
    assert verify_step_ms(p, p.drafters["dspine"], n, context) == pytest.approx(48.24, abs=0.05)
    assert verify_step_ms(p, p.drafters["dspine"], n, context) == pytest.approx(48.0, rel=0.01)
    # DFlash2 8-token verify: 8 * 4.00 / 712 = 44.94 ms, between AR and DSpine
    assert verify_step_ms(p, p.drafters["dflash2"], n, context) == pytest.approx(44.94, abs=0.05)
    # the brief's check: 8 * 4.77 / 0.048 s = 795 tok/s vs 791 reported (0.5 %)
    assert 8 * 4.77 / 0.048 == pytest.approx(791, rel=0.01)


def test_h200_reference_throughputs_match_vendor_figures():
    p = load_profile("h200-qwen3.8-27b")
    assert reference_output_tok_s(p, None) == pytest.approx(248.0, rel=0.01)
    for drafter in ("dspine", "dflash2"):
        spec = p.drafters[drafter]
        got = reference_output_tok_s(p, spec, spec.accept_length["swe-bench-pro-xhigh"])
        assert got == pytest.approx(spec.reference_output_tok_s, rel=0.01)  # 791 and 712
    assert p.drafters["dspine"].accept_length == {"swe-bench-pro-xhigh": 4.77, "gsm8k-greedy": 7.20}
    assert p.drafters["dflash2"].accept_length == {"swe-bench-pro-xhigh": 4.00, "gsm8k-greedy": 5.69}


def test_rule_h100_scales_bandwidth_bound_costs_by_4_8_over_3_35():
    h200, h100 = load_profile("h200-qwen3.8-27b"), load_profile("h100-qwen3.8-27b")
    r = 4.8 / 3.35  # 1.433
    assert h100.decode.base_ms == pytest.approx(h200.decode.base_ms * r, rel=1e-3)
    assert h100.decode.per_running_ms == pytest.approx(h200.decode.per_running_ms * r, rel=1e-3)
    assert h100.decode.per_kv_token_ms == pytest.approx(h200.decode.per_kv_token_ms * r, rel=1e-3)
    assert h100.drafters["dspine"].draft_ms == pytest.approx(h200.drafters["dspine"].draft_ms * r, rel=1e-3)
    assert h100.verify_per_token_ms == h200.verify_per_token_ms
    assert h100.prefill.per_token_ms == h200.prefill.per_token_ms
    # its stated reference throughputs are its own predictions (173 / 574 / 507 tok/s)
    assert reference_output_tok_s(h100, None) == pytest.approx(h100.calibration.autoregressive_output_tok_s, rel=0.01)
    for spec in h100.drafters.values():
        got = reference_output_tok_s(h100, spec, spec.accept_length["swe-bench-pro-xhigh"])
        assert got == pytest.approx(spec.reference_output_tok_s, rel=0.01)
