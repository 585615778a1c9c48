"""The HiCache host tier an SGLang replica reports, from its launch arguments (hicache.py rules)."""

from __future__ import annotations

import pytest

from ray_dspine.capacity import plan_capacity, resolve_profile
from ray_dspine.engines.sglang.hicache import host_kv_tokens
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
