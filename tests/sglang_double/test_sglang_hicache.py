"""The HiCache host tier an SGLang replica reports, from its launch arguments (hicache.py rules)."""

from __future__ import annotations

import pytest

from ray_dspine.capacity import plan_capacity, resolve_profile
from ray_dspine.engines.sglang.hicache import HostTier, host_kv_tokens, host_tier
from ray_dspine.engines.sglang.load import LoadInputs, build_snapshot

from sglang_double_helpers import dspine_capacity


def test_rule_h1_no_hierarchical_cache_no_host_tier():
    assert host_kv_tokens([], 473_010, 65_536) == 0
    assert host_kv_tokens(["--hicache-size", "100"], 473_010, 65_536) == 0  # sizes alone enable nothing


def test_rule_h3_the_ratio_of_the_device_pool_by_default():
    # ratio 2.0 when absent: 2 * 473,010 = 946,020 tokens
    assert host_kv_tokens(["--enable-hierarchical-cache"], 473_010, 65_536) == 946_020
    assert host_kv_tokens(["--enable-hierarchical-cache", "--hicache-ratio", "1.5"], 1_000, 65_536) == 1_500


def test_rule_h3_a_size_in_gb_overrides_the_ratio():
    # 100 GB: int(100e9 // 65,536) = 1,525,878 tokens, whatever the ratio says
    args = ["--enable-hierarchical-cache", "--hicache-ratio", "4", "--hicache-size", "100"]
    assert host_kv_tokens(args, 473_010, 65_536) == 1_525_878
    # size 0 (SGLang's default) falls back to the ratio: 4 * 1,000
    args = ["--enable-hierarchical-cache", "--hicache-size=0", "--hicache-ratio=4"]
    assert host_kv_tokens(args, 1_000, 65_536) == 4_000


def test_rule_h3_a_hybrid_models_size_is_split_with_its_mamba_pool_by_device_bytes():
    # device KV 1,000 tokens x 1,000 B = 1e6 B, Mamba pool 3e6 B: the KV pool gets 1e6 / 4e6 of 1 GB,
    # 0.25e9 B // 1,000 B = 250,000 tokens; the ratio ignores the Mamba pool: 2 x 1,000
    args = ["--enable-hierarchical-cache", "--hicache-size", "1"]
    assert host_kv_tokens(args, 1_000, 1_000, mamba_pool_bytes=3_000_000) == 250_000
    assert host_kv_tokens(["--enable-hierarchical-cache"], 1_000, 1_000, mamba_pool_bytes=3_000_000) == 2_000


def test_rule_h5_host_memory_per_gpu():
    # size 1 GB: 0.25e9 B of KV and the other 0.75e9 B for Mamba; ratio 2: 2 x 1e6 B KV, 2 x 3e6 B Mamba
    sized = host_tier(["--enable-hierarchical-cache", "--hicache-size", "1"], 1_000, 1_000, 3_000_000)
    assert sized == HostTier(kv_tokens=250_000, kv_bytes=250_000_000, mamba_bytes=750_000_000)
    ratio = host_tier(["--enable-hierarchical-cache"], 1_000, 1_000, 3_000_000)
    assert ratio == HostTier(kv_tokens=2_000, kv_bytes=2_000_000, mamba_bytes=6_000_000)
    assert host_tier([], 1_000, 1_000, 3_000_000) is None


def test_rule_h2_equals_form_and_the_last_flag_wins():
    args = ["--enable-hierarchical-cache", "--hicache-ratio=3", "--hicache-ratio", "1"]
    assert host_kv_tokens(args, 1_000, 65_536) == 1_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hicache-size", "lots"], "extra_args: --hicache-size takes a number, got 'lots'"),
        (["--hicache-ratio=-1"], "extra_args: --hicache-ratio must be >= 0, got '-1'"),
    ],
)
def test_rule_h4_unreadable_values_are_refused_by_the_config(make_config, args, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        make_config(extra_args=["--enable-hierarchical-cache", *args])


def test_rule_l7_the_snapshot_reports_the_host_tier_over_the_device_pool():
    cfg = dspine_capacity()
    plan = plan_capacity(cfg, resolve_profile(cfg))
    loads = {"loads": [{"num_running_reqs": 0, "num_used_tokens": 0, "max_total_num_tokens": 1000}]}
    snap = build_snapshot(
        LoadInputs(loads), plan, healthy=True, drafter_active=False, accept_ema=1.0,
        extra_args=["--enable-hierarchical-cache", "--hicache-ratio", "3"],
    )  # fmt: skip
    assert (snap.total_kv_tokens, snap.host_kv_tokens) == (1000, 3000)
    plain = build_snapshot(LoadInputs(loads), plan, healthy=True, drafter_active=False, accept_ema=1.0)
    assert plain.host_kv_tokens == 0
