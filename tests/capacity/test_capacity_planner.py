"""Planner rules R1-R11 with hand-worked numbers (toy model in conftest.py, plus the shipped profile)."""

from __future__ import annotations

import pytest

from ray_dspine.capacity import CapacityConfig, CapacityError, DraftConfig, plan_capacity
from ray_dspine.capacity.planner import (
    draft_kv_bytes_per_token,
    draft_weight_bytes,
    mamba_ratio,
    mamba_state_bytes,
    replay_ring_bytes_per_request,
    target_kv_bytes_per_token,
    target_weight_bytes,
)


def test_rule_weight_bytes_bf16_and_fp8(qwen_profile, dspine):
    # params 26,895,319,040 (see test_capacity_profile); embeddings 2 * 248,320 * 5,120 = 2,542,796,800
    bf16 = CapacityConfig(gpu="H200", mem_fraction_static=0.88, draft=dspine)
    assert target_weight_bytes(bf16, qwen_profile) == 26_895_319_040 * 2  # 53,790,638,080
    fp8 = bf16.model_copy(update={"weight_dtype": "fp8"})
    # 2,542,796,800 * 2 + (26,895,319,040 - 2,542,796,800) * 1 = 5,085,593,600 + 24,352,522,240
    assert target_weight_bytes(fp8, qwen_profile) == 29_438_115_840
    assert draft_weight_bytes(bf16) == 2_030_000_000 * 2  # 2.03B params in bf16
    assert draft_weight_bytes(bf16.model_copy(update={"draft": None})) == 0


def test_rule_post_weight_budget(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(), toy_profile)
    # static 1 GiB * 0.5 = 536,870,912; weights 494,013,312 + 2,000,000; rest 40,857,600
    assert plan.static_gb_per_gpu == 0.5
    assert plan.rest_gb_per_gpu * (1 << 30) == 40_857_600


def test_rule_target_kv_bytes_per_token(qwen_profile, make_toy_config, toy_profile):
    cfg = CapacityConfig(gpu="H200", mem_fraction_static=0.88)
    # 2 (K,V) * 16 full layers * 4 KV heads * 256 dim * 2 B = 65,536
    assert target_kv_bytes_per_token(cfg, qwen_profile) == 65_536
    # fp8 KV halves it: 32,768
    assert target_kv_bytes_per_token(cfg.model_copy(update={"kv_dtype": "fp8_e4m3"}), qwen_profile) == 32_768
    assert target_kv_bytes_per_token(make_toy_config(), toy_profile) == 1_024


def test_rule_draft_kv_bytes_per_token_matches_sglang_10240():
    # SGLang's figure for a 5-layer draft in bf16: 2 * 5 * 4 heads * 128 dim * 2 B = 10,240
    four_by_128 = DraftConfig(draft_params_b=2.03, draft_num_layers=5, speculative_num_draft_tokens=16)
    cfg = CapacityConfig(gpu="H200", mem_fraction_static=0.88, draft=four_by_128)
    assert draft_kv_bytes_per_token(cfg) == 10_240
    # 2 heads x 256 dim is the same 512 per layer: 2 * 5 * 2 * 256 * 2 = 10,240
    two_by_256 = four_by_128.model_copy(update={"draft_kv_heads": 2, "draft_head_dim": 256})
    assert draft_kv_bytes_per_token(cfg.model_copy(update={"draft": two_by_256})) == 10_240
    assert draft_kv_bytes_per_token(cfg.model_copy(update={"draft": None})) == 0


def test_rule_mamba_state_bytes_per_request(qwen_profile, make_toy_config, toy_profile):
    cfg = CapacityConfig(gpu="H200", mem_fraction_static=0.88)
    # conv: (2*16*128 + 48*128) = 10,240 channels * 3 * 2 B = 61,440 per layer, x 48 = 2,949,120
    # SSM:  48 heads * 128 * 128 * 4 B = 3,145,728 per layer, x 48 = 150,994,944
    assert mamba_state_bytes(cfg, qwen_profile) == (2_949_120, 150_994_944)  # sum 153,944,064
    # bfloat16 SSM state halves the SSM part: 75,497,472
    assert mamba_state_bytes(cfg.model_copy(update={"mamba_ssm_dtype": "bfloat16"}), qwen_profile)[1] == 75_497_472
    assert mamba_state_bytes(make_toy_config(), toy_profile) == (4_608, 24_576)  # 6 * 768, 6 * 4,096


def test_rule_sglang_split(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(mamba_full_memory_ratio=1.0), toy_profile)
    # r = 1: Mamba = 40,857,600 * 1 / 2 = 20,428,800
    assert plan.mamba_budget_gb_per_gpu * (1 << 30) == 20_428_800
    plan = plan_capacity(make_toy_config(mamba_full_memory_ratio=0.9), toy_profile)
    # r = 0.9: floor(40,857,600 * 0.9 / 1.9) = floor(19,353,600.0) = 19,353,600
    assert plan.mamba_budget_gb_per_gpu * (1 << 30) == 19_353_600


def test_rule_mamba_ratio(make_toy_config):
    assert mamba_ratio(make_toy_config()) == 3  # no_buffer
    assert mamba_ratio(make_toy_config(mamba_radix_cache_strategy="extra_buffer")) == 5  # 3 + 2 ping-pong
    assert mamba_ratio(make_toy_config(mamba_radix_cache_strategy="extra_buffer", overlap_schedule_enabled=False)) == 4
    assert mamba_ratio(make_toy_config(radix_cache_enabled=False)) == 1


def test_rule_speculation_slots_with_per_draft_snapshots(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(), toy_profile)
    # S = floor(M / (p * (1 + D/q))) = floor(20,428,800 / (29,184 * (1 + 4/3))) = 20,428,800 * 3 / 204,288 = 300
    assert plan.max_mamba_cache_size == 300
    assert plan.max_running_requests == 100  # 300 // 3
    assert plan.num_snapshots_per_request == 4
    # snapshots (100 + 1 padding slot) * 4 * 29,184 = 11,790,336 B
    assert plan.snapshot_gb_per_gpu * (1 << 30) == 11_790_336


def test_rule_replay_ssm_keeps_no_snapshots(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(mamba_strategy="replay_ssm"), toy_profile)
    # S = floor(20,428,800 / 29,184) = 700; running 700 // 3 = 233 (vs 100 with snapshots)
    assert plan.max_mamba_cache_size == 700
    assert plan.max_running_requests == 233
    assert plan.num_snapshots_per_request == 0
    assert plan.snapshot_gb_per_gpu == 0.0
    # ReplaySSM ring per slot: 6 layers * (2*4*16*16*2 + 2*2*16*16*2 + 4*16*4) = 6 * 6,400 = 38,400 B
    assert replay_ring_bytes_per_request(make_toy_config(mamba_strategy="replay_ssm"), toy_profile) == 38_400
    # KV: 40,857,600 - 701 * 29,184 - 234 * 38,400 = 11,414,016; / (1,024 + 512) = 7,431
    assert plan.free_kv_tokens == 7_431


def test_rule_autoregressive_uses_whole_mamba_share(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(draft=None), toy_profile)
    # rest = 536,870,912 - 494,013,312 = 42,857,600; M = 21,428,800; S = floor(21,428,800 / 29,184) = 734
    assert plan.max_mamba_cache_size == 734
    assert plan.max_running_requests == 244  # 734 // 3
    # KV: 42,857,600 - 735 * 29,184 (= 21,450,240; one padding slot) = 21,407,360; / 1,024 = 20,905
    assert plan.free_kv_tokens == 20_905
    assert plan.draft_vram_gb == 0.0
    assert plan.state_slots_per_request == 3


def test_rule_max_running_requests_cap(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(max_running_requests=50), toy_profile)
    assert plan.max_mamba_cache_size == 300  # the pool is solved before the cap
    assert plan.max_running_requests == 50
    # snapshots only for 50 (+1): 51 * 4 * 29,184 = 5,953,536; KV 40,857,600 - 301 * 29,184 - 5,953,536
    # = 26,119,680; / 1,536 = 17,005 tokens
    assert plan.free_kv_tokens == 17_005


def test_rule_free_kv_tokens(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(), toy_profile)
    # KV budget = 40,857,600 - 301 * 29,184 - 101 * 4 * 29,184 = 20,282,880; / (1,024 + 512) = 13,205
    assert plan.kv_budget_gb_per_gpu * (1 << 30) == 20_282_880
    assert plan.free_kv_tokens == 13_205
    assert plan.kv_tokens_per_request_max == 4096
    assert plan.num_full_context_requests == 3  # 13,300 // 4,096


def test_rule_draft_window_keeps_a_ring(make_toy_config, toy_draft, toy_profile):
    windowed = toy_draft.model_copy(update={"draft_window_tokens": 100})
    plan = plan_capacity(make_toy_config(draft=windowed), toy_profile)
    # ring = 100 running * min(100, 4,096) * 512 = 5,120,000; (20,282,880 - 5,120,000) / 1,024 = 14,807
    assert plan.draft_ring_gb_per_gpu * (1 << 30) == 5_120_000
    assert plan.free_kv_tokens == 14_807
    assert plan.draft_vram_gb * (1 << 30) == 2_000_000 + 5_120_000
    # window 200: ring 100 * 200 * 512 = 10,240,000 -> (20,282,880 - 10,240,000) / 1,024 = 9,807 < 13,205 per
    # token, so the draft keeps one entry per pooled token instead: 13,205 tokens, 13,205 * 512 = 6,760,960 B
    wide = plan_capacity(make_toy_config(draft=toy_draft.model_copy(update={"draft_window_tokens": 200})), toy_profile)
    assert wide.free_kv_tokens == 13_205
    assert wide.draft_ring_gb_per_gpu == 0.0
    assert wide.draft_vram_gb * (1 << 30) == 2_000_000 + 6_760_960


def test_rule_overlap_schedule_follows_the_strategy(make_toy_config):
    assert make_toy_config().overlap_schedule() is False  # no_buffer with the radix cache: SGLang needs it off
    assert make_toy_config(mamba_radix_cache_strategy="extra_buffer").overlap_schedule() is True
    assert make_toy_config(radix_cache_enabled=False).overlap_schedule() is True  # no Mamba radix cache at all
    with pytest.raises(ValueError, match="no_buffer do not support overlap schedule"):
        make_toy_config(overlap_schedule_enabled=True)


def test_rule_state_slots_headroom(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(), toy_profile)
    # q + D = 3 + 4 = 7 per request; S + N*D = 300 + 400 = 700 units; 700 // 7 = 100 = max running
    assert plan.state_slots_per_request == 7
    assert plan.num_state_slots == 700
    assert plan.num_state_slots // plan.state_slots_per_request == plan.max_running_requests
    capped = plan_capacity(make_toy_config(max_running_requests=50), toy_profile)
    # 300 + 50 * 4 = 500 units; 500 // 7 = 71 >= 50
    assert capped.num_state_slots == 500
    assert capped.num_state_slots // capped.state_slots_per_request >= capped.max_running_requests


def test_rule_draft_vram(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(), toy_profile)
    # weights 2,000,000 + KV at full pool 13,205 * 512 = 6,760,960 -> 8,760,960 B
    assert plan.draft_vram_gb * (1 << 30) == 8_760_960


def test_tp_scaling(qwen_profile, dspine):
    cfgs = {tp: CapacityConfig(gpu="H100", mem_fraction_static=0.88, tensor_parallel_size=tp, draft=dspine)
            for tp in (1, 2, 4, 8)}  # fmt: skip
    # KV heads shard until t = 4 KV heads, then replicate: 65,536 / 32,768 / 16,384 / 16,384
    assert [target_kv_bytes_per_token(cfgs[t], qwen_profile) for t in (1, 2, 4, 8)] == [65_536, 32_768, 16_384, 16_384]
    # state shards with the 48 value heads: 153,944,064 / t
    assert [sum(mamba_state_bytes(cfgs[t], qwen_profile)) for t in (1, 2, 4, 8)] == [
        153_944_064, 76_972_032, 38_486_016, 19_243_008,
    ]  # fmt: skip
    plan = plan_capacity(cfgs[2], qwen_profile)
    # per GPU weights ceil((53,790,638,080 + 4,060,000,000) / 2) = 28,925,319,040 B = 26.94 GiB
    assert round(plan.weights_gb_per_gpu, 2) == 26.94
    assert plan.sglang_args[:2] == ["--tp-size", "2"]


def test_rule_refuses_when_kv_is_below_context(make_toy_config, toy_profile):
    with pytest.raises(CapacityError) as err:
        plan_capacity(make_toy_config(context_length_tokens=16_384), toy_profile, pool_name="dspine-agent")
    message = str(err.value)
    assert message.startswith("dspine-agent does not fit on toy x1: 1.0 GiB x 0.5 = 0.5 GiB static per GPU")
    assert "-> 300 slots of 29,184 B x (1 + 4/3) -> 100 running" in message
    assert "= 13,205 tokens < context 16,384 tokens" in message
    assert "lower context_length_tokens or speculative_num_draft_tokens" in message


def test_rule_refuses_when_weights_exceed_budget(make_toy_config, toy_profile):
    heavy = toy_profile.model_copy(update={"num_params_b": 1.0})  # 2,000,000,000 B > 536,870,912 B static
    with pytest.raises(CapacityError, match=r"weights 1\.9 \+ draft 0\.0 = 1\.9 GiB per replica.*<= 0 left"):
        plan_capacity(make_toy_config(), heavy)


def test_rule_refuses_without_mamba_slots(make_toy_config, toy_profile):
    # target 534,770,912 B + draft 2,000,000 leaves rest 100,000; M 50,000 < 29,184 * 7/3 = 68,096 -> 0 slots
    tight = toy_profile.model_copy(update={"num_params_b": 0.267385456})
    with pytest.raises(CapacityError, match="-> 0 slots .* leaves no Mamba slot"):
        plan_capacity(make_toy_config(), tight)
    assert issubclass(CapacityError, ValueError)


def test_rule_sglang_args(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(), toy_profile)
    assert plan.sglang_args == [
        "--tp-size", "1",
        "--mem-fraction-static", "0.5",
        "--context-length", "4096",
        "--max-running-requests", "100",
        "--max-mamba-cache-size", "300",
        "--mamba-full-memory-ratio", "1",
        "--mamba-radix-cache-strategy", "no_buffer",
        "--mamba-ssm-dtype", "float32",
        "--kv-cache-dtype", "auto",
        "--disable-overlap-schedule",  # SGLang asserts it for no_buffer with the radix cache on
        "--speculative-num-draft-tokens", "4",
    ]  # fmt: skip
    extra = plan_capacity(make_toy_config(mamba_radix_cache_strategy="extra_buffer"), toy_profile)
    assert "--disable-overlap-schedule" not in extra.sglang_args  # extra_buffer keeps the overlap scheduler
    replay = plan_capacity(make_toy_config(mamba_strategy="replay_ssm", radix_cache_enabled=False,
                                           max_running_requests=100), toy_profile)  # fmt: skip
    assert replay.sglang_args[-4:] == [
        "--disable-radix-cache", "--speculative-num-draft-tokens", "4", "--enable-linear-replayssm-spec",
    ]  # fmt: skip


def test_h200_dspine_pool_fits(qwen_profile, dspine):
    plan = plan_capacity(CapacityConfig(gpu="H200", mem_fraction_static=0.88, draft=dspine), qwen_profile)
    # static floor(143,771 MiB * 2**20 * 0.88) = floor(150,754,820,096 * 0.88) = 132,664,241,684
    # weights 53,790,638,080 + 4,060,000,000 = 57,850,638,080; a multimodal checkpoint (Qwen3.5's vision tower)
    # reserves 100 MiB = 104,857,600 -> rest 74,708,746,004
    # M = floor(rest * 0.9 / 1.9) = 35,388,353,370; S = floor(M * 3 / (153,944,064 * 19)) = 36; N = 36 // 3 = 12
    # KV budget = rest - 37 p - 13 * 16 p = rest - 245 * 153,944,064 = 36,992,450,324
    # T = floor(36,992,450,324 / (65,536 + 10,240)) = 488,181
    assert plan.max_mamba_cache_size == 36
    assert plan.max_running_requests == 12
    assert plan.free_kv_tokens == 488_181
    assert plan.profile_assumption is not None and "ASSUMED" in plan.profile_assumption


def test_rule_replay_ring_and_multimodal_reserve_match_sglang(qwen_profile, dspine):
    cfg = CapacityConfig(gpu="H200", mem_fraction_static=0.85, draft=dspine, mamba_strategy="replay_ssm",
                         context_length_tokens=131_072)  # fmt: skip
    # 48 layers * (2*48*16*128*2 + 2*16*16*128*2 + 48*16*4) = 48 * 527,360 = 25,313,280 B: SGLang 0.5.23's
    # replayssm_ring_bytes_per_req(16) for this shape
    assert replay_ring_bytes_per_request(cfg, qwen_profile) == 25_313_280
    assert replay_ring_bytes_per_request(cfg.model_copy(update={"draft": None}), qwen_profile) == 0
    assert qwen_profile.multimodal  # Qwen3_5ForConditionalGeneration: SGLang reserves 100 MiB for it
    plan = plan_capacity(cfg, qwen_profile)
    # rest = floor(143,771 MiB * 0.85) = 128,141,597,081 - 53,790,638,080 - 4,060,000,000 - 104,857,600
    #      = 70,186,101,401; M = floor(rest * 0.9 / 1.9) = 33,246,048,032 -> S = floor(M / 153,944,064) = 215, N = 71
    # KV = rest - 216 * 153,944,064 - 72 * 25,313,280 = 35,111,627,417; / (65,536 + 10,240) = 463,360
    assert (plan.max_mamba_cache_size, plan.max_running_requests) == (215, 71)
    assert plan.free_kv_tokens == 463_360
