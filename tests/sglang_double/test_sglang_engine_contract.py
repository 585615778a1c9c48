"""The SGLang engine against SGLangServerDouble (SGLang 0.5.23's own HTTP routes and OpenAI layer over a scheduler
double), launched by the real supervisor like `sglang.launch_server`.

Double output: "t0 t1 ...", one word per token; with the drafter 3 tokens per verify step (SGLANG_DOUBLE_ACCEPT),
so max_tokens 10 takes steps of 3, 3, 3, 1: spec_verify_ct 4, acceptance 10 / 4 = 2.5, and SGLang's
spec_correct_drafts_histogram (grown to the largest count seen) = [1, 0, 3]: one step accepted 0 drafts, three
accepted 2. The prompt of _request() through the double's chat template, reasoning off (the engine's default level
"none" sends enable_thinking=false): <|im_start|> "user" "\nfix" " the" " failing" " test" <|im_end|> "\n"
<|im_start|> "assistant" "\n" <think> "\n\n" </think> "\n\n" = 15 tokens; with reasoning on the prompt ends
<think> "\n" instead: 13 tokens.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ray_dspine.capacity import DraftConfig
from ray_dspine.engines.protocol import ChatMessage, EngineError, GenerateRequest
from ray_dspine.engines.sglang import DRAFTER_FLAGS, SGLangEngine, flags_of, render_command
from ray_dspine.engines.sglang.load import GAUGES
from ray_dspine.capacity import plan_capacity, resolve_profile
from ray_dspine.serve.tool_calls import merge_tool_calls

from double_tokenizer import build_tokenizer
from sglang_double_helpers import DOUBLE, dspine_capacity, double_launcher, read_events, run, wait_until


def _request(rid: str, max_tokens: int = 10, **extra) -> GenerateRequest:
    return GenerateRequest(request_id=rid, messages=[ChatMessage(role="user", content="fix the failing test")],
                           max_tokens=max_tokens, **extra)


async def _collect(engine: SGLangEngine, request: GenerateRequest):
    return [chunk async for chunk in engine.generate(request)]


async def _started(config) -> SGLangEngine:
    engine = SGLangEngine(config, launcher=double_launcher)
    await engine.start()
    return engine


def test_rule_rendered_command_carries_the_plan(make_config):
    config = make_config()
    plans = {d: plan_capacity(c, resolve_profile(c)) for d, c in
             ((True, config.capacity), (False, config.capacity.model_copy(update={"draft": None})))}
    spec = render_command(config, plans[True], model_dir="/m", draft_dir="/d", port=31000, drafter=True)
    plain = render_command(config, plans[False], model_dir="/m", draft_dir="/d", port=31000, drafter=False)
    for command in (spec, plain):
        assert command[1:3] == ["-m", "sglang.launch_server"]
    pairs = dict(zip(spec, spec[1:]))
    assert (pairs["--speculative-algorithm"], pairs["--speculative-num-draft-tokens"]) == ("DSPINE", "16")
    assert (pairs["--speculative-draft-model-path"], pairs["--speculative-draft-window-size"]) == ("/d", "8192")
    assert (pairs["--host"], pairs["--port"], pairs["--dtype"], pairs["--linear-attn-backend"]) == (
        "127.0.0.1", "31000", "bfloat16", "triton")
    assert (pairs["--reasoning-parser"], pairs["--tool-call-parser"]) == ("qwen3", "qwen3_coder")
    assert "--enable-linear-replayssm-spec" in spec and "--enable-metrics" in spec
    assert not set(flags_of(plain)) & DRAFTER_FLAGS
    assert dict(zip(plain, plain[1:]))["--max-running-requests"] == "76"  # the autoregressive plan

    dflash = DraftConfig(name="DFlash2", draft_params_b=1.0, draft_num_layers=5, speculative_num_draft_tokens=8)
    cfg = make_config(speculative_algorithm="DFLASH", capacity=dspine_capacity(draft=dflash))
    command = render_command(cfg, plan_capacity(cfg.capacity, resolve_profile(cfg.capacity)), model_dir="/m",
                             draft_dir="/d", port=1, drafter=True)
    assert dict(zip(command, command[1:]))["--speculative-num-draft-tokens"] == "8"


def test_double_parses_the_rendered_command_with_sglangs_own_parser(make_config, tmp_path):
    # The double parses with sglang.srt.server_args.prepare_server_args: an unknown flag exits 2 with SGLang's
    # message, and argparse names every flag it does not know, so a lone `--no-such-flag` there means SGLang's
    # parser took all the rendered ones (the Mamba strategy, the overlap switch, --trust-remote-code included).
    config = make_config(trust_remote_code=True)
    plan = plan_capacity(config.capacity, resolve_profile(config.capacity))
    for drafter in (True, False):
        command = render_command(config, plan, model_dir=str(tmp_path), draft_dir=str(tmp_path), port=1,
                                 drafter=drafter)  # fmt: skip
        assert {"--mamba-radix-cache-strategy", "--disable-overlap-schedule", "--trust-remote-code"} <= set(command)
        done = subprocess.run([sys.executable, str(DOUBLE), *command[3:], "--no-such-flag", "7"],
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.strip().splitlines()[-1] == "sglang serve: error: unrecognized arguments: --no-such-flag 7"


def test_streaming_generate_maps_spec_stats_into_usage(make_config):
    async def main():
        engine = await _started(make_config())
        try:
            chunks = await _collect(engine, _request("req-1"))
            described = engine.describe()
        finally:
            await engine.stop()
        return chunks, described

    chunks, described = run(main())
    text = "".join(chunk.text for chunk in chunks)
    assert text == "".join(f"t{i} " for i in range(10))
    assert sum(chunk.num_tokens for chunk in chunks) == 10
    usage = chunks[-1].usage
    assert chunks[-1].finish_reason == "length"
    assert (usage.completion_tokens, usage.prompt_tokens, usage.verify_steps, usage.accept_length) == (10, 15, 4, 2.5)
    assert (usage.accept_histogram, usage.cached_prompt_tokens) == ([1, 0, 3], 0)
    assert (chunks[0].prompt_tokens, chunks[0].cached_prompt_tokens) == (15, 0)  # from SGLang's first event
    assert usage.path == "speculative"
    assert described["path"] == "speculative"
    assert set(described["model_files"].values()) and described["speculative_algorithm"] == "DSPINE"
    server_log = open(described["log_path"]).read()
    assert "sglang_double.py" in server_log and "fix the failing test" not in server_log  # no prompt text


def test_load_snapshot_from_v1_loads_and_metrics(make_config):
    env = {"SGLANG_DOUBLE_KV_TOKENS": "50000", "SGLANG_DOUBLE_KV_EVICTABLE": "1000",
           "SGLANG_DOUBLE_MAMBA_EVICTABLE": "6", "SGLANG_DOUBLE_STEP_S": "0.5"}

    async def main():
        engine = await _started(make_config(env=env))
        try:
            idle = await engine.poll_load()
            stream = engine.generate(_request("busy", max_tokens=30))
            await stream.__anext__()  # the double holds 15 prompt + 3 generated tokens for this request
            busy = await engine.poll_load()
            await stream.aclose()
        finally:
            await engine.stop()
        return idle, busy, engine.load()

    idle, busy, stopped = run(main())
    # idle: free KV = available (50000 - 0 - 1000) + evictable 1000 = 50000; Mamba pool 215 slots, all free,
    # N = 71 (plan), left = min(71, 215) = 71, k = 3 -> 213 free of 71 * 3 = 213 state slots
    assert (idle.total_kv_tokens, idle.free_kv_tokens, idle.num_running) == (50000, 50000, 0)
    assert (idle.total_state_slots, idle.free_state_slots, idle.state_slots_per_request) == (213, 213, 3)
    assert (idle.drafter_active, idle.draft_vram_gb, idle.healthy, idle.engine) == (True, 8.2001, True, "sglang")
    # busy: KV used 15 + 3 = 18 -> free 50000 - 18 = 49982; left = min(71 - 1, 215 - 1) = 70 -> 210 free state slots
    assert (busy.num_running, busy.free_kv_tokens, busy.free_state_slots) == (1, 49982, 210)
    assert not stopped.healthy


def test_load_carries_the_prefill_backlog_sglang_does_not_report(make_config):
    # The double takes 1 s before a request's first chunk (its prefill). No rate is assumed, so the
    # waiting request counts whole; its first token gives a rate sample of 12,000 tokens over >= 1 s.
    blocks = [f"h{i}" for i in range(8)]

    async def main():
        engine = await _started(make_config(env={"SGLANG_DOUBLE_PREFILL_S": "1.0"}, prefill_tokens_per_s=None))
        try:
            idle = engine.load()
            first = asyncio.create_task(_collect(engine, _request(
                "turn-1", estimated_prompt_tokens=12_000, prefix_hashes=blocks[:4])))
            await wait_until(lambda: engine.load().pending_prefill_tokens > 0, what="turn-1 to be counted")
            waiting = engine.load()
            await first
            after = engine.load()
            # The next turn repeats turn-1's 4 blocks and adds 4: half of its 24,000 tokens are left.
            second = asyncio.create_task(_collect(engine, _request(
                "turn-2", estimated_prompt_tokens=24_000, prefix_hashes=blocks)))
            await wait_until(lambda: engine.load().pending_prefill_tokens > 0, what="turn-2 to be counted")
            follow = engine.load()
            await second
        finally:
            await engine.stop()
        return idle, waiting, after, follow

    idle, waiting, after, follow = run(main())
    assert (idle.pending_prefill_tokens, idle.prefill_tokens_per_s) == (0, 0.0)
    assert waiting.pending_prefill_tokens == 12_000
    assert after.pending_prefill_tokens == 0
    assert 1_200.0 < after.prefill_tokens_per_s <= 12_000.0
    # 12,000 left, less what the measured rate says has been prefilled since turn-2 was sent.
    assert 6_000 < follow.pending_prefill_tokens <= 12_000


def test_crash_then_restart(make_config):
    async def main():
        engine = await _started(make_config(env={"SGLANG_DOUBLE_CRASH_AFTER": "2"}))  # request 1: the drafter probe
        try:
            first = await _collect(engine, _request("a"))
            crashed = await _collect(engine, _request("b"))  # the double dies when request 3 arrives
            sup = engine._supervisor
            await wait_until(lambda: sup.num_launches == 2 and sup.state == "ready", what="a restart")
            after = await _collect(engine, _request("c"))
            described = engine.describe()
        finally:
            await engine.stop()
        return first, crashed, after, described

    first, crashed, after, described = run(main())
    assert first[-1].usage.completion_tokens == 10
    assert crashed[-1].finish_reason == "error" and crashed[-1].error_status == 503
    assert after[-1].usage.path == "speculative"  # one crash < fallback_after_crashes (2): drafter kept
    assert (described["num_crashes"], described["num_launches"], described["path"]) == (1, 2, "speculative")


def test_a_relaunched_server_has_nothing_cached_in_the_backlog(make_config):
    # Turn a's two blocks count as cached once it has its first token; the double then dies on request b
    # and is relaunched, and the same two blocks count whole again (no rate assumed: the head counts whole);
    # the snapshot's cache_generation, the launch count, tells the router the cache is new.
    env = {"SGLANG_DOUBLE_CRASH_AFTER": "2", "SGLANG_DOUBLE_PREFILL_S": "0.3"}  # request 1: the drafter probe

    async def main():
        engine = await _started(make_config(env=env, prefill_tokens_per_s=None))
        try:
            await _collect(engine, _request("a", estimated_prompt_tokens=2000, prefix_hashes=["p0", "p1"]))
            before = engine.load().cache_generation
            await _collect(engine, _request("b"))
            sup = engine._supervisor
            await wait_until(lambda: sup.num_launches == 2 and sup.state == "ready", what="a restart")
            await engine.poll_load()
            again = asyncio.create_task(_collect(engine, _request(
                "c", estimated_prompt_tokens=2000, prefix_hashes=["p0", "p1"])))
            await wait_until(lambda: engine.load().pending_prefill_tokens > 0, what="turn c to be counted")
            counted, after = engine.load().pending_prefill_tokens, engine.load().cache_generation
            await again
        finally:
            await engine.stop()
        return counted, before, after

    # the router is told too: the generation is the launch count, so it forgets the replica's cache
    assert run(main()) == (2000, 1, 2)


def test_drafter_load_failure_falls_back_to_autoregressive(make_config):
    config = make_config(env={"SGLANG_DOUBLE_REFUSE_DRAFTER": "1"})

    async def main():
        engine = await _started(config)
        try:
            chunks = await _collect(engine, _request("x", max_tokens=5))
            return chunks, engine.load(), engine.describe()
        finally:
            await engine.stop()

    chunks, load, described = run(main())
    usage = chunks[-1].usage
    # two refused launches with the drafter (fallback_after_crashes = 2), then one autoregressive launch
    assert (usage.path, usage.verify_steps, usage.accept_length, usage.accept_histogram) == ("autoregressive", 5, 1.0, [5])
    assert (load.drafter_active, load.draft_vram_gb, load.accept_length_ema) == (False, 0.0, 1.0)
    assert described["path"] == "autoregressive-fallback" and "crashes with the drafter on" in described["fallback_reason"]
    assert not set(flags_of(described["command"])) & DRAFTER_FLAGS
    events = read_events(config_events(config))
    assert [e["event"] for e in events if e["event"] in ("refuse_drafter", "launch")] == [
        "refuse_drafter", "refuse_drafter", "launch"]


def test_runtime_crashes_with_drafter_fall_back(make_config):
    # request 1 of each drafter launch is the drafter probe; the next one kills the server
    env = {"SGLANG_DOUBLE_CRASH_AFTER": "1", "SGLANG_DOUBLE_CRASH_WITH_DRAFTER_ONLY": "1"}

    async def main():
        engine = await _started(make_config(env=env))
        sup = engine._supervisor
        try:
            for attempt in range(2):  # each request kills the drafter-enabled server
                await wait_until(lambda: sup.state == "ready" and sup.num_launches == attempt + 1, what="a launch")
                assert (await _collect(engine, _request(f"c{attempt}")))[-1].finish_reason == "error"
            await wait_until(lambda: sup.state == "ready" and not sup.drafter_active, what="the fallback")
            return await _collect(engine, _request("ok")), engine.describe()
        finally:
            await engine.stop()

    chunks, described = run(main())
    assert chunks[-1].usage.path == "autoregressive" and described["num_crashes"] == 2


def test_live_drafter_switch(make_config):
    async def main():
        engine = await _started(make_config())
        sup = engine._supervisor
        try:
            engine.set_drafter_enabled(False)
            await wait_until(lambda: sup.state == "ready" and not sup.drafter_active and sup.num_launches == 2,
                             what="the autoregressive relaunch")
            off = (await _collect(engine, _request("off")))[-1].usage.path, engine.describe()["command"]
            engine.set_drafter_enabled(True)
            await wait_until(lambda: sup.state == "ready" and sup.drafter_active, what="the drafter relaunch")
            on = (await _collect(engine, _request("on")))[-1].usage.path
            return off, on, sup.num_crashes
        finally:
            await engine.stop()

    (off_path, off_command), on_path, num_crashes = run(main())
    assert off_path == "autoregressive" and not set(flags_of(off_command)) & DRAFTER_FLAGS
    assert on_path == "speculative" and num_crashes == 0  # switches are not crashes


def test_cancellation_closes_stream_and_aborts(make_config):
    config = make_config(env={"SGLANG_DOUBLE_STEP_S": "0.1"})

    async def main():
        engine = await _started(config)
        try:
            stream = engine.generate(_request("cancel-me", max_tokens=200))
            first = await stream.__anext__()
            await stream.aclose()
            events = config_events(config)
            await wait_until(lambda: {"abort", "disconnect"} <= {e["event"] for e in read_events(events)
                                                                 if e.get("rid") == "cancel-me"}, what="abort")
            return first, engine._inflight
        finally:
            await engine.stop()

    first, inflight = run(main())
    assert first.text == "t0 t1 t2 " and inflight == 0


def test_double_speaks_sglang_formats(make_config):
    async def main():
        engine = await _started(make_config())
        base = engine._supervisor.base_url
        try:
            async with httpx.AsyncClient() as http:  # its own connection: SGLang drops it after the error
                bad = await http.get(f"{base}/v1/loads", params={"include": "core,bogus"})
            async with httpx.AsyncClient() as http:
                idle = (await http.get(f"{base}/v1/loads", params={"include": "core,memory,spec"})).json()
                await _collect(engine, _request("spec", max_tokens=10))
                loads = (await http.get(f"{base}/v1/loads", params={"include": "core,memory,spec"})).json()
                metrics = (await http.get(f"{base}/metrics")).text
                models = (await http.get(f"{base}/v1/models")).json()
                health = (await http.get(f"{base}/health")).status_code
                unknown = (await http.post(f"{base}/v1/chat/completions", json={"model": "m"})).status_code
            command = engine.describe()["command"]
        finally:
            await engine.stop()
        return bad, idle, loads, metrics, models, health, unknown, command

    bad, idle, loads, metrics, models, health, unknown, command = run(main())
    # 0.5.23's route checks the sections outside its try: LoadSnapshot.to_dict's ValueError is a 500
    assert (bad.status_code, bad.text, health) == (500, "Internal Server Error", 200)
    assert unknown == 400  # SGLang's ChatCompletionRequest requires messages
    assert (idle["version"], idle["num_accelerators"], len(idle["loads"])) == ("0.5.23", 1, 1)
    entry = loads["loads"][0]
    # KV pool: SGLANG_DOUBLE_KV_TOKENS' default; max running: the --max-running-requests SGLang parsed
    max_running = int(dict(zip(command, command[1:]))["--max-running-requests"])
    assert (entry["max_total_num_tokens"], entry["max_running_requests"], entry["memory"]["token_capacity"]) == (
        100000, max_running, 100000)
    # The speculative section covers every request the server ran, SGLang's own /health generations included
    # (1 token in 1 step each), so only bounds are fixed: the 10-token request took 4 steps (2.5 per step) and
    # no step takes more than 3 tokens (2 of 15 drafts).
    spec = entry["speculative"]
    assert set(spec) == {"accept_length", "accept_rate"}
    assert 1.0 < spec["accept_length"] <= 2.5 and 0.0 < spec["accept_rate"] <= 2 / 15
    names = {family.name for family in text_string_to_metric_families(metrics)}
    assert set(GAUGES) - {"sglang:max_total_num_tokens"} <= names  # SGLang's collector, as the double serves it
    assert "sglang:max_total_num_tokens" in names  # emitted once at start-up (emit_constants)
    assert models["data"][0]["id"] == "qwen3.8-27b"


def test_tool_calls_stream_through_as_deltas(make_config):
    count = {"type": "object", "properties": {"count": {"type": "integer"}}}
    tools = [{"type": "function", "function": {"name": "run_tests", "parameters": count}},
             {"type": "function", "function": {"name": "read_file", "parameters": count}}]
    config = make_config()

    async def main():
        engine = await _started(config)
        try:
            return await _collect(engine, _request("tc", max_tokens=10, tools=tools, parallel_tool_calls=False,
                                                   tool_choice={"type": "function", "function": {"name": "read_file"}}))
        finally:
            await engine.stop()

    chunks = run(main())
    deltas = [delta for chunk in chunks for delta in (chunk.tool_calls or [])]
    # SGLang's qwen3_coder parser: the first delta names the call (a fresh call_ id), the arguments follow as JSON
    # text; the double's call is `count` = max_tokens = 10, an integer by the tool's schema.
    assert deltas[0]["function"]["name"] == "read_file" and deltas[0]["id"].startswith("call_")
    assert all(d["function"]["name"] is None and d["id"] is None for d in deltas[1:])
    merged = merge_tool_calls(deltas)
    assert merged == [{"id": deltas[0]["id"], "type": "function",
                       "function": {"name": "read_file", "arguments": '{"count": 10}'}}]
    assert "".join(chunk.text for chunk in chunks) == ""
    # 7 pieces of the call + eos = 8 tokens; eos is a stop, which SGLang reports as tool_calls, matching the eos id
    assert chunks[-1].finish_reason == "tool_calls" and chunks[-1].usage.completion_tokens == 8
    assert chunks[-1].matched_stop == build_tokenizer().eos_token_id
    assert sum(chunk.num_tokens for chunk in chunks) == 8
    # the engine's request, not the drafter probe sent before the server counted as ready
    request = next(e for e in read_events(config_events(config)) if e["event"] == "request" and e["rid"] == "tc")
    assert {"tools", "tool_choice", "parallel_tool_calls"} <= set(request["keys"])


def test_reasoning_streams_apart_from_content(make_config):
    async def main():
        engine = await _started(make_config())
        try:
            return await _collect(engine, _request("think", max_tokens=7, reasoning_level="high"))
        finally:
            await engine.stop()

    chunks = run(main())
    # The prompt opens thinking; the double thinks 3 words, closes with </think> (1 token), then answers: 7 tokens
    # are t0 t1 t2 </think> t3 t4 t5. SGLang's qwen3 reasoning parser splits them at </think>.
    assert "".join(chunk.reasoning for chunk in chunks) == "t0 t1 t2 "
    assert "".join(chunk.text for chunk in chunks) == "t3 t4 t5 "
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (13, 7)
    assert sum(chunk.num_tokens for chunk in chunks) == 7


def config_events(config):
    from pathlib import Path

    return Path(config.env["SGLANG_DOUBLE_EVENTS"])


_ = asyncio  # imported for readers running pieces interactively


def test_messages_token_counts_are_sglangs_own_and_match_what_generation_prefills(make_config):
    # The Messages body of _request() (what serve/anthropic.py's count_body leaves of it), counted by SGLang's own
    # /v1/messages/count_tokens at each reasoning level: 15 tokens with reasoning off, 13 on (module docstring),
    # the prompt_tokens SGLang reports when it generates for the same request.
    body = {"model": "client-name", "messages": [{"role": "user", "content": "fix the failing test"}]}

    async def main():
        engine = await _started(make_config())
        try:
            counted = {level: await engine.count_prompt_tokens(_request(level, reasoning_level=level), body)
                       for level in ("none", "high")}  # fmt: skip
            generated = {level: (await _collect(engine, _request(level, max_tokens=1, reasoning_level=level)))[-1]
                         for level in ("none", "high")}  # fmt: skip
            try:
                await engine.count_prompt_tokens(_request("plain"))
            except EngineError as exc:
                refused = exc
            return counted, {level: chunk.usage.prompt_tokens for level, chunk in generated.items()}, refused
        finally:
            await engine.stop()

    counted, generated, refused = run(main())
    assert counted == generated == {"none": 15, "high": 13}
    assert refused.status == 400  # a chat request has no Messages body to hand SGLang
