import pytest
from pydantic import ValidationError

from ray_dspine.routing.config import (
    ArmSplit,
    CacheAwareConfig,
    RouterConfig,
    ScorerWeights,
    TrafficConfig,
    TrafficRule,
)
from ray_dspine.routing.registry import scorer_names


def test_cache_aware_defaults_match_sglang_gateway_docs():
    cfg = CacheAwareConfig()
    assert (cfg.cache_threshold, cfg.balance_abs_threshold, cfg.balance_rel_threshold) == (0.3, 64, 1.5)
    assert (cfg.eviction_interval_s, cfg.max_tree_size) == (120.0, 67_108_864)


def test_scorer_weights_name_every_registered_scorer():
    assert tuple(ScorerWeights.model_fields) == scorer_names()


def test_router_config_forbids_unknown_keys_and_round_trips_json():
    with pytest.raises(ValidationError):
        RouterConfig.model_validate({"polcy": "headroom"})
    cfg = RouterConfig(policy="cache_aware", weights={"queue": 2.0})
    assert RouterConfig.model_validate_json(cfg.model_dump_json()) == cfg


def test_rule_drop_after_not_below_stale_after():
    with pytest.raises(ValidationError, match="drop_after_s"):
        RouterConfig(stale_after_s=10.0, drop_after_s=5.0)


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
