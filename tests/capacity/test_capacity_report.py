"""format_plan text and the JSON form."""

from __future__ import annotations

import json

from ray_dspine.capacity import format_plan, plan_capacity


def test_format_plan_table(make_toy_config, toy_profile):
    text = format_plan("toy-pool", plan_capacity(make_toy_config(), toy_profile))
    lines = text.splitlines()
    assert lines[0] == "pool toy-pool"
    assert "  free KV tokens        13,205 = 3 x context 4,096" in lines
    assert "  Mamba pool            300 slots, ratio 3, 4 snapshots/request (snapshot_per_draft)" in lines
    assert "  state slots           700 total, 7 per request" in lines
    assert lines[-1].startswith("  sglang args           --tp-size 1 --mem-fraction-static 0.5")
    assert "ASSUMED" not in text


def test_format_plan_flags_assumed_profile(qwen_profile, dspine):
    from ray_dspine.capacity import CapacityConfig

    plan = plan_capacity(CapacityConfig(gpu="H200", mem_fraction_static=0.88, draft=dspine), qwen_profile)
    assert "qwen3.8-27b (ASSUMED shape, see profile)" in format_plan("dspine-agent", plan)


def test_plan_json_round_trip(make_toy_config, toy_profile):
    plan = plan_capacity(make_toy_config(), toy_profile)
    data = json.loads(json.dumps(plan.model_dump()))
    assert data["free_kv_tokens"] == 13_205
    assert data["sglang_args"][:2] == ["--tp-size", "1"]
    assert type(plan).model_validate(data) == plan
