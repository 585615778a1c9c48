import pytest
from pydantic import ValidationError

import yaml

from ray_dspine.routing.config import (
    FILTER_TYPES,
    HOLD_TYPES,
    SCORER_TYPES,
    ArmSplit,
    CacheAwareConfig,
    MemoryWaitHold,
    PredictedDecodeScorer,
    QueueScorer,
    RouterConfig,
    TrafficConfig,
    TrafficRule,
    TtftGuardFilter,
)
from ray_dspine.routing.registry import FILTERS, HOLDS, SCORERS, stage_types


def test_cache_aware_defaults_match_sglang_gateway_docs():
    cfg = CacheAwareConfig()
    assert (cfg.cache_threshold, cfg.balance_abs_threshold, cfg.balance_rel_threshold) == (0.3, 64, 1.5)
    assert (cfg.eviction_interval_s, cfg.max_tree_size) == (120.0, 67_108_864)


def test_registry_builds_every_config_type_and_no_other():
    assert tuple(FILTERS) == FILTER_TYPES == ("fits_memory", "ttft_guard")
    assert tuple(SCORERS) == SCORER_TYPES
    assert tuple(HOLDS) == HOLD_TYPES == ("memory_wait",)
    assert stage_types()["picker"] == ("max_score",)


def test_defaults_are_the_measured_stages():
    # The settings the flat config had before it was split into stages (config.py's notes).
    cfg = RouterConfig()
    assert [s.type for s in cfg.filters] == ["fits_memory", "ttft_guard"]
    guard = cfg.stage("ttft_guard")
    assert (guard.tolerance_s, guard.per_cached_s, guard.cached_max_s) == (6.0, 4.0, 12.0)
    assert {s.type: s.weight for s in cfg.scorers} == {
        "session_affinity": 4.0, "prefix_match": 4.0, "kv_headroom": 0.25, "mamba_headroom": 0.1,
        "queue": 0.5, "predicted_ttft": 4.0,
    }  # fmt: skip
    assert [s.type for s in cfg.scorers][-1] == "predicted_ttft" and cfg.stage("predicted_decode") is None
    assert (cfg.stage("prefix_match").half_tokens, cfg.stage("predicted_ttft").indifference_s) == (32_768.0, 1.0)
    wait = cfg.stage("memory_wait")
    assert (wait.tolerance_s, wait.per_cached_s, wait.cached_max_s) == (2.0, 4.0, 12.0)
    assert (cfg.pacing.max_long_share, cfg.pacing.window_requests, cfg.pacing.prior_requests) == (0.01, 2000, 200)
    assert (cfg.reports.stale_after_s, cfg.reports.drop_after_s, cfg.estimator.prefix_block_tokens) == (5.0, 60.0, 512)


def test_router_config_forbids_unknown_keys_and_round_trips_json():
    with pytest.raises(ValidationError):
        RouterConfig.model_validate({"polcy": "headroom"})
    cfg = RouterConfig(policy="cache_aware", scorers=[{"type": "queue", "weight": 2.0}])
    assert RouterConfig.model_validate_json(cfg.model_dump_json()) == cfg


def test_old_flat_keys_are_refused_by_name():
    for key, value in (("ttft_tolerance_s", 3.0), ("weights", {"queue": 1.0}), ("stale_after_s", 2.0)):
        with pytest.raises(ValidationError, match=rf"{key}\n  Extra inputs are not permitted"):
            RouterConfig.model_validate({key: value})


def test_unknown_stage_type_names_the_field_and_lists_the_valid_types():
    with pytest.raises(ValidationError) as err:
        RouterConfig.model_validate({"filters": [{"type": "fits_memory"}, {"type": "ttft_gard"}]})
    text = str(err.value)
    assert "filters.1" in text and "'ttft_gard'" in text and "'fits_memory', 'ttft_guard'" in text
    with pytest.raises(ValidationError, match="'memory_wait'"):
        RouterConfig.model_validate({"holds": [{"type": "wait_for_memory"}]})


def test_unknown_field_inside_a_stage_is_named():
    with pytest.raises(ValidationError, match=r"scorers\.0\.prefix_match\.half_token\n  Extra inputs"):
        RouterConfig.model_validate({"scorers": [{"type": "prefix_match", "weight": 1.0, "half_token": 10}]})


def test_rule_stage_lists():
    with pytest.raises(ValidationError, match="type 'queue' 2 times"):
        RouterConfig(scorers=[{"type": "queue"}, {"type": "queue", "weight": 1.0}])
    with pytest.raises(ValidationError, match="must list {type: fits_memory}"):
        RouterConfig(filters=[{"type": "ttft_guard"}])
    with pytest.raises(ValidationError, match=r"weight\n  Input should be greater than 0"):
        RouterConfig(scorers=[{"type": "queue", "weight": 0.0}])  # leave a scorer out to turn it off


def test_yaml_router_block_round_trips():
    text = """
policy: headroom
reports: {stale_after_s: 2.0, assumed_stats_age_s: 0.5}
filters:
  - {type: fits_memory}
  - {type: ttft_guard, tolerance_s: 0.6, cached_max_s: 1.2}
scorers:
  - {type: queue, weight: 0.5}
  - {type: predicted_decode, weight: 8.0, slack_s: 0.05}
holds: []
"""
    cfg = RouterConfig.model_validate(yaml.safe_load(text))
    assert cfg.stage("ttft_guard") == TtftGuardFilter(tolerance_s=0.6, cached_max_s=1.2)
    assert cfg.scorers == [QueueScorer(weight=0.5), PredictedDecodeScorer(weight=8.0, slack_s=0.05)]
    assert cfg.holds == [] and cfg.reports.stale_after_s == 2.0 and cfg.reports.drop_after_s == 60.0
    assert RouterConfig.model_validate(yaml.safe_load(yaml.safe_dump(cfg.model_dump()))) == cfg


def test_with_stage_replaces_or_appends_and_without_stage_turns_off():
    cfg = RouterConfig()
    tighter = cfg.with_stage(MemoryWaitHold(tolerance_s=0.5))
    assert tighter.holds == [MemoryWaitHold(tolerance_s=0.5)] and cfg.holds == [MemoryWaitHold()]
    added = cfg.with_stage(PredictedDecodeScorer(weight=8.0))
    assert [s.type for s in added.scorers][-1] == "predicted_decode" and len(added.scorers) == 7
    assert [s.type for s in cfg.without_stage("ttft_guard").filters] == ["fits_memory"]


def test_rule_drop_after_not_below_stale_after():
    with pytest.raises(ValidationError, match="reports\n.*drop_after_s"):
        RouterConfig(reports={"stale_after_s": 10.0, "drop_after_s": 5.0})


def test_rule_arm_shares_sum_at_most_one():
    # 0.6 + 0.5 = 1.1 > 1
    with pytest.raises(ValidationError, match="sum to 1.1"):
        TrafficRule(
            reasoning_levels=["high"],
            pool="p",
            arms=[ArmSplit(name="a", pool="x", share=0.6), ArmSplit(name="b", pool="y", share=0.5)],
        )
    # 0.7 + 0.3 = 1.0 exactly is allowed (float sum 0.99999... or 1.0)
    TrafficRule(
        reasoning_levels=["high"],
        pool="p",
        arms=[ArmSplit(name="a", pool="x", share=0.7), ArmSplit(name="b", pool="y", share=0.3)],
    )


def test_arm_names_distinct_from_control():
    with pytest.raises(ValidationError, match="distinct"):
        TrafficRule(reasoning_levels=["low"], pool="p", arms=[ArmSplit(name="control", pool="x", share=0.1)])


def test_traffic_levels_in_one_rule_only_and_default_covered():
    with pytest.raises(ValidationError, match="both"):
        TrafficConfig(
            rules=[TrafficRule(reasoning_levels=["low"], pool="a"), TrafficRule(reasoning_levels=["low"], pool="b")]
        )
    with pytest.raises(ValidationError, match="default_reasoning_level"):
        TrafficConfig(rules=[TrafficRule(reasoning_levels=["low"], pool="a")], default_reasoning_level="high")
