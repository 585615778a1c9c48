"""The SGLang engine's pure rules: crash policy, stream mapping, load snapshot, flag filtering."""

from __future__ import annotations

import pytest

from ray_dspine.capacity import plan_capacity, resolve_profile
from ray_dspine.engines.sglang import CrashPolicy
from ray_dspine.engines.sglang.args import DRAFTER_FLAGS, without_flags
from ray_dspine.engines.sglang.load import LoadInputs, build_snapshot, parse_gauges, update_ema
from ray_dspine.engines.sglang.mapping import StreamMapper, build_payload, count_payload, usage_from
from ray_dspine.engines.protocol import ChatMessage, GenerateRequest

from sglang_double_helpers import dspine_capacity


def _policy(**overrides) -> CrashPolicy:
    fields = dict(max_restarts=3, crash_window_s=100.0, fallback_after_crashes=2, backoff_s=1.0, backoff_max_s=3.0)
    return CrashPolicy(**{**fields, **overrides})


def test_rule_backoff_doubles_and_caps():
    policy = _policy(max_restarts=10, fallback_after_crashes=10)
    # delay = min(3, 1 * 2**(n-1)): n = 1, 2, 3, 4 -> 1, 2, 3 (capped from 4), 3 (capped from 8)
    assert [policy.record(t, False).delay_s for t in (0.0, 1.0, 2.0, 3.0)] == [1.0, 2.0, 3.0, 3.0]


def test_rule_fallback_after_drafter_crashes():
    policy = _policy()
    first = policy.record(0.0, True)  # d = 1 < 2
    second = policy.record(5.0, True)  # d = 2 >= 2
    assert (first.action, first.drafter) == ("restart", True)
    assert (second.action, second.drafter, second.num_drafter_crashes) == ("fallback", False, 2)
    assert policy.record(6.0, False).action == "restart"  # autoregressive crashes never fall back further


def test_rule_give_up_after_max_restarts():
    policy = _policy(max_restarts=2, fallback_after_crashes=5)
    actions = [policy.record(t, False).action for t in (0.0, 1.0, 2.0)]  # n = 1, 2, 3 > 2
    assert actions == ["restart", "restart", "give_up"]


def test_rule_crashes_outside_window_are_forgotten():
    policy = _policy(max_restarts=1)
    policy.record(0.0, True)
    decision = policy.record(150.0, True)  # the crash at t=0 is older than 150 - 100 = 50
    assert (decision.action, decision.num_crashes, decision.delay_s) == ("restart", 1, 1.0)
    policy.reset()
    assert policy.record(151.0, True).num_crashes == 1


def test_rule_drafter_flags_are_removed_with_their_values():
    args = ["--tp-size", "1", "--speculative-num-draft-tokens", "16", "--enable-linear-replayssm-spec",
            "--speculative-algorithm=DSPINE", "--kv-cache-dtype", "auto"]
    assert without_flags(args, DRAFTER_FLAGS) == ["--tp-size", "1", "--kv-cache-dtype", "auto"]


def test_rule_usage_from_spec_details():
    spec = {"spec_verify_ct": 4, "spec_correct_drafts_histogram": [1, 0, 3] + [0] * 14}
    usage = usage_from(10, 7, 2, spec)
    # 10 tokens in 4 verify steps: 3 steps accepted 2 drafts (3 tokens each) + 1 step accepted 0 (1 token)
    assert (usage.verify_steps, usage.accept_length, usage.path) == (4, 2.5, "speculative")
    assert usage.accept_histogram[:3] == [1, 0, 3] and len(usage.accept_histogram) == 17
    assert (usage.total_tokens, usage.cached_prompt_tokens) == (17, 2)
    plain = usage_from(10, 7, 0, None)
    assert (plain.verify_steps, plain.accept_length, plain.accept_histogram, plain.path) == (10, 1.0, [10], "autoregressive")
    legacy = usage_from(6, 1, 0, {"spec_verify_ct": 2, "spec_accept_histogram": [0, 0, 2]})
    assert (legacy.accept_length, legacy.accept_histogram) == (3.0, [0, 0, 2])


def test_rule_num_tokens_from_cumulative_usage_and_reasoning_apart():
    mapper = StreamMapper()
    first = mapper.feed({"choices": [{"delta": {"reasoning_content": "plan "}, "finish_reason": None}],
                         "usage": {"completion_tokens": 3, "prompt_tokens": 5, "reasoning_tokens": 3}})
    second = mapper.feed({"choices": [{"delta": {"content": "done"}, "finish_reason": "length"}],
                          "usage": {"completion_tokens": 7, "prompt_tokens": 5, "reasoning_tokens": 4}})
    assert [(c.reasoning, c.text, c.num_tokens) for c in first + second] == [
        ("plan ", "", 3), ("", "done", 4)]  # 3, then 7 - 3 = 4
    # rule `prompt`: the first chunk names the prompt (no cache report: 0 cached), later ones do not
    assert [(c.prompt_tokens, c.cached_prompt_tokens) for c in first + second] == [(5, 0), (None, None)]
    assert mapper.feed({"choices": [], "sglext": {"spec_tokens_details": {"spec_verify_ct": 2}}}) == []
    final = mapper.finish()
    assert (final.finish_reason, final.usage.verify_steps, final.usage.accept_length) == ("length", 2, 3.5)
    assert final.usage.reasoning_tokens == 4  # rule `reasoning`: SGLang's count, from the last usage
    assert final.matched_stop is None  # ran out of tokens: SGLang names no stop
    stopped = StreamMapper()
    stopped.feed({"choices": [{"delta": {"content": "a"}, "finish_reason": None, "matched_stop": None}]})
    stopped.feed({"choices": [{"delta": {}, "finish_reason": "stop", "matched_stop": 151645}]})
    assert (stopped.finish().finish_reason, stopped.finish().matched_stop) == ("stop", 151645)
    error = StreamMapper().feed({"object": "error", "message": "boom", "code": 400})
    assert (error[0].finish_reason, error[0].error_status) == ("error", 400)


def test_payload_maps_reasoning_level_and_request_id():
    chat = GenerateRequest(request_id="r1", messages=[ChatMessage(role="user", content="hi")], max_tokens=5,
                           reasoning_level="xhigh", stop=["\n"], seed=3)
    payload = build_payload(chat, "qwen")
    assert (payload["rid"], payload["reasoning_effort"], payload["return_spec_tokens_details"]) == ("r1", "xhigh", True)
    assert payload["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    off = build_payload(chat.model_copy(update={"reasoning_level": "none"}), "qwen")
    assert off["chat_template_kwargs"] == {"enable_thinking": False} and "reasoning_effort" not in off
    prompt = build_payload(GenerateRequest(request_id="r2", prompt="x", max_tokens=1), "qwen")
    assert prompt["prompt"] == "x" and "messages" not in prompt
    assert not {"tools", "tool_choice", "response_format", "frequency_penalty", "logit_bias"} & set(payload)


def test_payload_carries_sampling_controls_tools_and_response_format():
    tools = [{"type": "function", "function": {"name": "f"}}]
    schema = {"type": "json_schema", "json_schema": {"name": "patch", "schema": {"type": "object"}}}
    chat = GenerateRequest(request_id="r1", messages=[ChatMessage(role="user", content="hi")], max_tokens=5,
                           tools=tools, tool_choice="required", parallel_tool_calls=False, response_format=schema,
                           frequency_penalty=0.5, logit_bias={"42": -100.0})
    payload = build_payload(chat, "qwen")
    assert (payload["tools"], payload["tool_choice"], payload["parallel_tool_calls"]) == (tools, "required", False)
    assert payload["response_format"] == schema
    assert (payload["frequency_penalty"], payload["logit_bias"]) == (0.5, {"42": -100.0})
    assert "presence_penalty" not in payload  # zero is the default and stays out
    # tool_choice without tools means nothing to SGLang and is not sent
    assert "tool_choice" not in build_payload(chat.model_copy(update={"tools": None}), "qwen")
    prompt = build_payload(GenerateRequest(request_id="r2", prompt="x", max_tokens=1, presence_penalty=-1.0), "qwen")
    assert prompt["presence_penalty"] == -1.0 and "response_format" not in prompt


def test_rule_tool_call_deltas_are_forwarded_and_finish_tool_calls():
    mapper = StreamMapper()
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    more = {"index": 0, "id": None, "type": "function", "function": {"name": None, "arguments": '{"a": 1}'}}
    out = mapper.feed({"choices": [{"index": 0, "delta": {"tool_calls": [first]}}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    assert [(c.text, c.tool_calls, c.num_tokens) for c in out] == [("", [first], 2)]
    out = mapper.feed({"choices": [{"index": 0, "delta": {"tool_calls": [more]}, "finish_reason": "tool_calls"}]})
    assert [(c.tool_calls, c.num_tokens) for c in out] == [([more], 1)]  # no usage on the event: counts 1
    assert mapper.finish().finish_reason == "tool_calls"


METRICS = """# TYPE sglang:kv_available_tokens gauge
sglang:kv_available_tokens{dp_rank="0",tp_rank="0"} 900
sglang:kv_available_tokens{dp_rank="0",tp_rank="1"} 900
sglang:kv_available_tokens{dp_rank="1",tp_rank="0"} 800
sglang:kv_evictable_tokens{dp_rank="0"} 100
sglang:kv_evictable_tokens{dp_rank="1"} 50
sglang:mamba_available_tokens{dp_rank="0"} 4
sglang:mamba_available_tokens{dp_rank="1"} 3
sglang:mamba_evictable_tokens{dp_rank="0"} 1
sglang:unrelated_total 5
"""


def test_rule_load_snapshot_from_loads_and_gauges():
    cfg = dspine_capacity()
    plan = plan_capacity(cfg, resolve_profile(cfg))
    gauges = parse_gauges(METRICS)
    # kv_available: max over TP ranks of dp 0 (900) + dp 1 (800) = 1700; evictable 100 + 50 = 150
    assert (gauges["sglang:kv_available_tokens"], gauges["sglang:kv_evictable_tokens"]) == (1700, 150)
    loads = {"loads": [
        {"num_running_reqs": 3, "num_waiting_reqs": 1, "max_total_num_tokens": 2000, "max_running_requests": 5},
        {"num_running_reqs": 2, "num_waiting_reqs": 0, "max_total_num_tokens": 2000, "max_running_requests": 5},
    ]}
    snap = build_snapshot(LoadInputs(loads, gauges), plan, healthy=True, drafter_active=True, accept_ema=4.2)
    # L2 total 4000; L3 free 1700 + 150 = 1850; L4 N = 10, left = min(10 - 5, 4 + 3 + 1 = 8) = 5, k = 3
    assert (snap.total_kv_tokens, snap.free_kv_tokens, snap.num_running, snap.num_queued) == (4000, 1850, 5, 1)
    assert snap.evictable_kv_tokens == 150  # L3b
    assert (snap.total_state_slots, snap.free_state_slots, snap.state_slots_per_request) == (30, 15, 3)
    assert (snap.accept_length_ema, snap.drafter_active, snap.draft_vram_gb) == (4.2, True, round(plan.draft_vram_gb, 4))
    bare = build_snapshot(LoadInputs({"loads": [{"num_running_reqs": 1, "num_used_tokens": 300,
                                                  "max_total_num_tokens": 1000}]}), plan,
                          healthy=True, drafter_active=False, accept_ema=4.2)
    # no gauges: free = 1000 - 300; N from the plan (71): left = 70, free slots 70 * 3 = 210; EMA reported as 1.0
    assert (bare.free_kv_tokens, bare.free_state_slots, bare.accept_length_ema, bare.draft_vram_gb) == (700, 210, 1.0, 0.0)
    assert bare.evictable_kv_tokens is None  # L3b: no gauge, not reported
    assert update_ema(1.0, 5.0, 0.25) == pytest.approx(2.0)  # 0.75 * 1 + 0.25 * 5


def test_engine_speaks_the_protocol_and_constructs_without_work(make_config, tmp_path):
    import asyncio

    from pydantic import ValidationError

    from ray_dspine.engines.protocol import Engine
    from ray_dspine.engines.sglang import SGLangEngine

    engine = SGLangEngine(make_config())
    assert isinstance(engine, Engine)
    assert not (tmp_path / "logs").exists() and not (tmp_path / "cache").exists()  # nothing launched or fetched
    assert engine.load().healthy is False and engine.describe()["state"] == "stopped"
    with pytest.raises(RuntimeError, match="not started"):
        asyncio.run(engine.check_health())
    with pytest.raises(ValidationError, match="may not log request contents"):
        make_config(extra_args=["--log-requests", "--log-requests-level", "3"])
    with pytest.raises(ValidationError, match="must be set together"):
        make_config(speculative_algorithm=None)


def test_rule_extra_args_go_last(make_config):
    from ray_dspine.engines.sglang import render_command

    config = make_config(extra_args=["--max-total-tokens", "1000"])
    plan = plan_capacity(config.capacity, resolve_profile(config.capacity))
    command = render_command(config, plan, model_dir="/m", draft_dir="/d", port=2, drafter=True)
    assert command[-2:] == ["--max-total-tokens", "1000"]


def test_rule_trust_remote_code(make_config):
    from ray_dspine.engines.sglang import render_command

    config = make_config(trust_remote_code=True)
    plan = plan_capacity(config.capacity, resolve_profile(config.capacity))
    command = render_command(config, plan, model_dir="/m", draft_dir="/d", port=2, drafter=False)
    assert command.count("--trust-remote-code") == 1  # the fallback loads the same target: it keeps the flag
    with pytest.raises(ValueError, match="set trust_remote_code: true instead"):
        make_config(extra_args=["--trust-remote-code"])


class _FakeProcess:
    """Stands in for a server process: it runs until signalled."""

    def __init__(self):
        import asyncio

        self.pid, self.returncode, self._exited = 1, None, asyncio.Event()

    async def wait(self) -> int:
        await self._exited.wait()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.returncode = -sig
        self._exited.set()


def test_drafter_switch_during_startup_is_not_lost(tmp_path):
    import asyncio

    from ray_dspine.engines.sglang import ServerSupervisor

    launched: list[bool] = []

    async def main():
        gate = asyncio.Event()

        async def launcher(command, env, log_path):
            launched.append("--draft" in command)
            return _FakeProcess()

        async def probe(base_url: str) -> bool:
            await gate.wait()  # the first launch is still loading weights
            return True

        sup = ServerSupervisor(
            build_command=lambda drafter, port: ["--draft"] if drafter else [], env={}, log_dir=tmp_path,
            launcher=launcher, probe=probe, policy=_policy(), drafter_available=True, startup_timeout_s=10,
            health_poll_s=0.01, stop_grace_s=1, drain_s=0,
        )
        starting = asyncio.create_task(sup.start())
        await asyncio.sleep(0.05)
        sup.set_drafter_enabled(False)  # switched off while the drafter launch is starting
        gate.set()
        await starting
        for _ in range(200):
            if sup.state == "ready" and sup.num_launches == 2:
                break
            await asyncio.sleep(0.01)
        state = (sup.state, sup.drafter_active, sup.num_crashes)
        await sup.stop()
        return state

    assert asyncio.run(main()) == ("ready", False, 0)
    assert launched == [True, False]


def test_rule_l8_operator_gauges_and_ratio_means(make_config):
    from ray_dspine.engines.sglang.load import LoadInputs, build_snapshot, parse_gauges

    config = make_config()
    plan = plan_capacity(config.capacity, resolve_profile(config.capacity))
    text = (
        "# TYPE sglang:full_token_usage gauge\n"
        'sglang:full_token_usage{dp_rank="0",tp_rank="0"} 0.2\n'
        'sglang:full_token_usage{dp_rank="1",tp_rank="0"} 0.6\n'
        "# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{dp_rank="0",tp_rank="0"} 3.0\n'
        'sglang:spec_accept_length{dp_rank="0",tp_rank="1"} 3.5\n'
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{dp_rank="0",tp_rank="0"} 2\n'
        'sglang:num_running_reqs{dp_rank="1",tp_rank="0"} 3\n'
    )
    gauges = parse_gauges(text)
    # shares average over DP ranks: (0.2 + 0.6) / 2 = 0.4; within a rank the max over TP: 3.5; counts add: 5
    assert gauges == pytest.approx({"sglang:full_token_usage": 0.4, "sglang:spec_accept_length": 3.5,
                                    "sglang:num_running_reqs": 5.0})  # fmt: skip
    on = build_snapshot(LoadInputs({}, gauges), plan, healthy=True, drafter_active=True, accept_ema=2.0)
    assert (on.kv_token_usage, on.spec_accept_length, on.mamba_usage) == (pytest.approx(0.4), 3.5, None)
    off = build_snapshot(LoadInputs({}, gauges), plan, healthy=True, drafter_active=False, accept_ema=2.0)
    assert off.spec_accept_length is None  # no drafter, no acceptance to report


def test_rule_count_carries_the_served_model_and_the_reasoning_level():
    body = {"model": "claude-x", "messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "enabled",
            "budget_tokens": 2048}, "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {}}}}
    request = GenerateRequest(request_id="r", messages=[ChatMessage(role="user", content="hi")], max_tokens=1,
                              reasoning_level="none")  # fmt: skip
    off = count_payload(body, request, "served")
    assert off == {"model": "served", "messages": body["messages"], "thinking": {"type": "disabled"},
                   "output_config": {"format": {"type": "json_schema", "schema": {}}}}  # fmt: skip
    on = count_payload(body, request.model_copy(update={"reasoning_level": "xhigh"}), "served")
    assert on == {"model": "served", "messages": body["messages"],
                  "output_config": {"effort": "xhigh", "format": {"type": "json_schema", "schema": {}}}}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}  # the caller's body is not changed
