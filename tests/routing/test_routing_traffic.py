import pytest

from ray_dspine.routing.config import ArmSplit, TrafficConfig, TrafficRule
from ray_dspine.routing.fingerprint import session_fingerprint
from ray_dspine.routing.traffic import assign, reasoning_level_of, session_key, unit_hash


def test_rule_effort_mapping():
    expected = {"none": "none", "minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}
    for effort, level in expected.items():
        assert reasoning_level_of({"reasoning_effort": effort}) == level
    assert reasoning_level_of({"reasoning_effort": " HIGH "}) == "high"


def test_rule_fields_read():
    assert reasoning_level_of({"reasoning": {"effort": "low"}}) == "low"
    assert reasoning_level_of({"chat_template_kwargs": {"reasoning_effort": "xhigh"}}) == "xhigh"
    assert reasoning_level_of({"chat_template_kwargs": {"enable_thinking": False}}) == "none"
    assert reasoning_level_of({"chat_template_kwargs": {"enable_thinking": True}}, default="high") == "high"
    assert reasoning_level_of({"chat_template_kwargs": {"enable_thinking": True}}, default="none") == "medium"
    assert reasoning_level_of({}, default="low") == "low"
    # agreeing fields are fine
    assert reasoning_level_of({"reasoning_effort": "high", "reasoning": {"effort": "high"}}) == "high"


def test_rule_invalid_values_name_the_field():
    with pytest.raises(ValueError, match="`reasoning.effort`"):
        reasoning_level_of({"reasoning": {"effort": "max"}})
    with pytest.raises(ValueError, match="`reasoning_effort`"):
        reasoning_level_of({"reasoning_effort": 3})
    with pytest.raises(ValueError, match="`reasoning` must be an object"):
        reasoning_level_of({"reasoning": "high"})
    with pytest.raises(ValueError, match="enable_thinking"):
        reasoning_level_of({"chat_template_kwargs": {"enable_thinking": "no"}})


def test_rule_conflicting_fields_rejected():
    with pytest.raises(ValueError, match="`reasoning_effort`.*`chat_template_kwargs.enable_thinking`"):
        reasoning_level_of({"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}})


def test_rule_session_key_precedence():
    messages = [{"role": "user", "content": "hi"}]
    body = {"user": "alice", "messages": messages}
    assert session_key({"X-Session-Id": "abc"}, body) == "sid:abc"
    assert session_key({}, body) == "user:alice"
    assert session_key({}, {"messages": messages}) == f"fp:{session_fingerprint(messages)}"
    assert session_key({}, {"prompt": "p" * 3000}) == session_key({}, {"prompt": "p" * 2048 + "q"})
    with pytest.raises(ValueError):
        session_key({}, {})


def test_rule_unit_hash_is_first_8_bytes_of_sha256():
    # sha256(b"abc") begins ba7816bf8f01cfea -> 0xba7816bf8f01cfea / 2**64
    assert unit_hash("a", "bc") == 0xBA7816BF8F01CFEA / 2**64


def traffic(share=0.1):
    return TrafficConfig(
        rules=[
            TrafficRule(reasoning_levels=["none", "low"], pool="fast"),
            TrafficRule(
                reasoning_levels=["medium", "high", "xhigh"],
                pool="dspine",
                arms=[ArmSplit(name="dflash2", pool="dflash2-pool", share=share)],
            ),
        ]
    )


def test_rule_assign_level_to_pool_and_control_arm():
    assert assign(traffic(), "low", "s1") == ("fast", "control")
    with pytest.raises(ValueError, match="no traffic rule"):
        only_low = TrafficConfig(rules=[TrafficRule(reasoning_levels=["low"], pool="x")], default_reasoning_level="low")
        assign(only_low, "high", "s")


def test_rule_assign_arm_intervals():
    cfg = TrafficConfig(
        rules=[
            TrafficRule(
                reasoning_levels=["high"],
                pool="main",
                arms=[ArmSplit(name="a", pool="pa", share=0.25), ArmSplit(name="b", pool="pb", share=0.25)],
            )
        ],
        default_reasoning_level="high",
    )
    for i in range(200):
        u = unit_hash(cfg.salt, f"s{i}")
        expected = ("pa", "a") if u < 0.25 else ("pb", "b") if u < 0.5 else ("main", "control")
        assert assign(cfg, "high", f"s{i}") == expected


def test_rule_sticky_same_session_same_arm():
    cfg = traffic()
    first = [assign(cfg, "high", f"sid:{i}") for i in range(100)]
    assert first == [assign(cfg, "high", f"sid:{i}") for i in range(100)]
    # raising the share only moves control sessions into the arm
    wider = traffic(share=0.3)
    for i, (pool, arm) in enumerate(first):
        if arm == "dflash2":
            assert assign(wider, "high", f"sid:{i}") == (pool, arm)


def test_rule_ten_percent_split_within_two_points():
    cfg = traffic(share=0.1)
    n = 10_000
    diverted = sum(assign(cfg, "high", f"sid:{i}")[1] == "dflash2" for i in range(n))
    assert abs(diverted / n - 0.10) <= 0.02
