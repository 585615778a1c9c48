"""The prefill floor's arithmetic (prefill_floor.py), by hand on a tiny shape, and its timing CLI on the CPU."""

import json

import pytest

from dspine_lab.bench.prefill_floor import (
    attention_flops,
    attention_ms,
    fit_linear_quadratic,
    floor_ms,
    forward_products_ms,
    full_layer_gemms,
    gemm_flops,
    gemm_ms_per_token,
    linear_layer_gemms,
    load_shape,
    scan_flops_per_token,
    shape_from_config,
    summarize,
    verify_extra,
)
from dspine_lab.bench.prefill_floor_gpu import DEFAULT_CONFIG, main

TINY = {
    "text_config": {
        "num_hidden_layers": 4, "full_attention_interval": 2, "hidden_size": 8, "intermediate_size": 16,
        "vocab_size": 50, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
        "attn_output_gate": True, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
        "linear_key_head_dim": 4, "linear_value_head_dim": 4,
    }
}  # fmt: skip


def tiny():
    return shape_from_config(TINY)


def test_shape_counts_every_interval_th_layer_as_full_unless_layer_types_say():
    s = tiny()
    assert (s.full_layers, s.linear_layers) == (2, 2)  # layers 2 and 4 of 4
    typed = {**TINY["text_config"], "layer_types": ["full_attention"] * 3 + ["linear_attention"]}
    assert (shape_from_config(typed).full_layers, shape_from_config(typed).linear_layers) == (3, 1)


def test_shipped_shape_is_the_published_qwen35_27b_text_model():
    s = load_shape(DEFAULT_CONFIG)
    assert (s.full_layers, s.linear_layers, s.hidden, s.mlp) == (16, 48, 5120, 17408)
    # 24 heads x 256 with the output gate, 4 KV heads: qkv 12,288 + 2,048 = 14,336 wide
    assert full_layer_gemms(s)[0] == (5120, 14336)


def test_rule_gemms_of_each_layer_kind():
    s = tiny()
    # full: qkv 2*4*2 (gate) + 2*1*4 = 24; o 8 -> 8; gate_up 8 -> 32; down 16 -> 8
    assert full_layer_gemms(s) == [(8, 24), (8, 8), (8, 32), (16, 8)]
    # linear: qkvz 2*1*4 + 2*(2*4) = 24; ba 8 -> 4; out 8 -> 8; then the MLP
    assert linear_layer_gemms(s) == [(8, 24), (8, 4), (8, 8), (8, 32), (16, 8)]


def test_rule_flops():
    s = tiny()
    # 2 * (8*24 + 8*8 + 8*32 + 16*8) = 2 * 640 per token
    assert gemm_flops(full_layer_gemms(s), 3) == 3 * 1280
    # 2 * 10^2 * 2 heads * 4 dims
    assert attention_flops(s, 10) == 1600
    # rule `scan`: 4 * 2 value heads * 4 * 4
    assert scan_flops_per_token(s) == 128


def test_rule_gemm_is_the_layers_chunk_time_per_token():
    # (2 full * 3 ms + 2 linear * 1 ms) / 4 tokens = 2 ms a token
    assert gemm_ms_per_token(tiny(), 3.0, 1.0, 4) == pytest.approx(2.0)


def test_rule_attn_scales_the_nearest_timed_length_below_by_the_square():
    timed = {100: 1.0, 200: 5.0}
    assert attention_ms(timed, 150) == pytest.approx(2.25)  # 1.0 * 1.5^2
    assert attention_ms(timed, 400) == pytest.approx(20.0)  # 5.0 * 2^2
    assert attention_ms(timed, 50) == pytest.approx(0.25)  # below every length: the smallest, 1.0 * 0.5^2
    with pytest.raises(ValueError, match="no timed attention length"):
        attention_ms({}, 10)


def test_rule_floor_is_products_plus_every_full_layers_attention():
    # 200 tokens * 2 ms + 2 full layers * 5 ms
    assert floor_ms(tiny(), 2.0, {100: 1.0, 200: 5.0}, 200) == pytest.approx(410.0)


def test_rule_fit_recovers_a_linear_and_a_square_term():
    points = [(n, 2.0 * n + 0.01 * n * n) for n in (10, 20, 30)]
    a, b = fit_linear_quadratic(points)
    assert (a, b) == (pytest.approx(2.0), pytest.approx(0.01))
    with pytest.raises(ValueError, match="two distinct lengths"):
        fit_linear_quadratic([(10, 1.0), (10, 1.0)])


def test_rule_ratio_against_the_profile():
    out = summarize(tiny(), 4, 3.0, 1.0, {100: 1.0, 200: 5.0}, profile_per_token_ms=1.0)
    rows = {r["prompt_tokens"]: r for r in out["by_length"]}
    # 100 tokens: 200 + 2 * 1 = 202 ms against 100 ms; 200 tokens: 410 against 200
    assert rows[100]["floor_over_profile"] == pytest.approx(2.02)
    assert rows[200]["floor_over_profile"] == pytest.approx(2.05)
    # two points, two unknowns: 202 = 100a + 10^4 b, 410 = 200a + 4*10^4 b -> b = 0.0003, a = 1.99
    assert (out["fit_per_token_ms"], out["fit_per_token_squared_ms"]) == (pytest.approx(1.99), pytest.approx(3e-4))


def test_rule_verify_is_the_extra_query_tokens_products_against_the_profile():
    # a forward: 2 full layers * 1.5 ms + 2 linear * 0.5 ms + 0.25 ms of logits = 4.25 ms
    assert forward_products_ms(tiny(), 1.5, 0.5, 0.25) == pytest.approx(4.25)
    # 8 requests, 16 draft tokens: measured 14.0 - 10.0 = 4 ms; the profile charges 0.05 * 8 * 15 = 6 ms
    out = verify_extra(10.0, 14.0, 8, 16, 0.05)
    assert out == {"measured_ms": pytest.approx(4.0), "profile_ms": pytest.approx(6.0)}


def test_cli_runs_on_the_cpu_and_writes_its_figures(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "floor.json"
    assert main(["--config", str(config), "--lengths", "16,32", "--chunk", "8", "--reps", "1", "--warmup", "0",
                 "--cpu", "--out", str(out)]) == 0  # fmt: skip
    figures = json.loads(out.read_text())
    assert figures["device"] == "cpu" and [r["prompt_tokens"] for r in figures["by_length"]] == [16, 32]
    assert figures["gemm_ms_per_token"] > 0 and figures["decode_floor_ms"] > 0
    # the default DSpine block: 16 query tokens a request, charged 0.0515 ms each beyond the first
    assert figures["draft_tokens"] == 16 and figures["profile_verify_extra_ms"] == pytest.approx(0.0515 * 8 * 15)
    assert "every figure MEASURED" in capsys.readouterr().out


def test_cli_names_the_bad_flag(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--lengths", "a,b"])
    assert "--lengths: expected comma-separated token counts" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--draft-tokens", "0"])
    assert "--draft-tokens must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--config", str(tmp_path / "missing.json")])
    assert "--config: no file at" in capsys.readouterr().err
    dense = tmp_path / "dense.json"  # no layer_types, no full_attention_interval: not a hybrid model
    dense.write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2}))
    with pytest.raises(SystemExit):
        main(["--config", str(dense)])
    assert "--config: " in (err := capsys.readouterr().err) and "not a hybrid model" in err


def test_cli_profile_figures_are_the_shipped_h200_profiles():
    # the timing tool runs where only PyTorch is installed, so it carries the profile's figures as constants
    from dspine_lab.bench import prefill_floor_gpu as gpu
    from ray_dspine.engines.simulated.profile import load_profile

    p = load_profile("h200-qwen3.8-27b")
    assert gpu.H200_PREFILL_PER_TOKEN_MS == p.prefill.per_token_ms
    assert (gpu.H200_DECODE_BASE_MS, gpu.H200_DECODE_PER_RUNNING_MS) == (p.decode.base_ms, p.decode.per_running_ms)
    assert gpu.H200_VERIFY_PER_TOKEN_MS == p.verify_per_token_ms
    assert gpu.DSPINE_DRAFT_TOKENS == p.drafters["dspine"].draft_tokens
