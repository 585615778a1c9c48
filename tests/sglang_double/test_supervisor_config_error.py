"""A server that refuses its arguments at start-up is a config error, not a crash (startup_errors.py C0-C3,
process.py S1/S2): reported with SGLang's line, never restarted, never a silent autoregressive fallback.

The texts below are what SGLang 0.5.23 printed on this machine; three tests run its own parser and rules.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from ray_dspine.engines.protocol import EngineError, GenerateRequest
from ray_dspine.engines.sglang import SGLangEngine
from ray_dspine.engines.sglang.startup_errors import ConfigError, classify_exit, this_launch

from sglang_double_helpers import run
from supervisor_helpers import STARTUP, FakeProcess, http_healthy, policy, script_launcher, supervisor, wait_for

ARGPARSE_TAIL = """usage: sglang serve [-h] --model-path MODEL_PATH
                    [--tokenizer-path TOKENIZER_PATH]
                    [--enable-flashinfer-allreduce-fusion]
sglang serve: error: unrecognized arguments: --bogus-flag 1
"""
SITE = "/srv/venv/lib/python3.11/site-packages"
VALUE_ERROR = f"""[2026-12-04 18:52:00] kill_process_tree called: parent_pid=6881, include_parent=False, pid=6881
Traceback (most recent call last):
  File "<string>", line 7, in <module>
  File "{SITE}/sglang/srt/arg_groups/resolution_hooks.py", line 139, in run_hook
    step(server_args)
  File "{SITE}/sglang/srt/arg_groups/validation_hook.py", line 660, in validate_prefill_decode_interval
    raise ValueError("--prefill-decode-interval must be non-negative.")
ValueError: --prefill-decode-interval must be non-negative.
"""
# `python -m sglang.launch_server` here, without torchvision: the failure passes through arg_groups' imports.
IMPORT_FAILURE = f"""Traceback (most recent call last):
  File "{SITE}/sglang/launch_server.py", line 84, in <module>
    run_server(server_args)
  File "{SITE}/sglang/srt/server_args.py", line 259, in resolve_once
    from sglang.srt.arg_groups.pipeline import run_resolution_pipeline
  File "{SITE}/sglang/srt/arg_groups/pipeline.py", line 9, in <module>
    from sglang.srt.arg_groups.kv_shard_hook import handle_kv_cache_sharding
  File "{SITE}/sglang/srt/multimodal/internvl_utils.py", line 5, in <module>
    import torchvision.transforms as T
ModuleNotFoundError: No module named 'torchvision'
"""
HARDWARE_REFUSAL = f"""Traceback (most recent call last):
  File "{SITE}/sglang/srt/arg_groups/pipeline.py", line 200, in run_resolution_pipeline
    run_hook(handle_kv_cache_dtype, server_args)
  File "{SITE}/sglang/srt/arg_groups/kv_cache_hook.py", line 128, in handle_kv_cache_dtype
    raise RuntimeError(
RuntimeError: --kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120. Use --kv-cache-dtype=fp4_mx_block16 for the block-size-16 FP4 recipe.
"""
CUDA_FAILURE = f"""Traceback (most recent call last):
  File "{SITE}/sglang/srt/arg_groups/memory_hook.py", line 40, in handle_gpu_memory_settings
    free = torch.cuda.mem_get_info()
  File "{SITE}/torch/cuda/memory.py", line 712, in mem_get_info
    return torch.cuda.cudart().cudaMemGetInfo(device)
RuntimeError: CUDA error: no CUDA-capable device is detected
"""


def sglang_source(relative: str) -> str:
    """A file of the installed SGLang (its package is located without importing it)."""
    root = Path(importlib.util.find_spec("sglang").submodule_search_locations[0])
    return (root / relative).read_text()


# -- the rules on text ------------------------------------------------------------------------------
def test_rule_c1_argparse_line_with_exit_2_is_an_argument_error():
    assert classify_exit(2, ARGPARSE_TAIL) == ConfigError(
        kind="argument", line="sglang serve: error: unrecognized arguments: --bogus-flag 1", exit_code=2
    )
    assert classify_exit(1, ARGPARSE_TAIL) is None  # argparse always exits 2: another exit code is a crash
    assert classify_exit(2, "Fatal Python error: Aborted\n") is None  # exit 2 without argparse's line


def test_rule_c2_resolution_exception_under_arg_groups():
    assert classify_exit(1, VALUE_ERROR) == ConfigError(
        kind="resolution", line="ValueError: --prefill-decode-interval must be non-negative.",
        where="sglang/srt/arg_groups/validation_hook.py:660 in validate_prefill_decode_interval", exit_code=1,
    )  # fmt: skip
    # a RuntimeError raised by a rule itself (innermost frame in arg_groups): a setting this GPU cannot run
    hardware = classify_exit(1, HARDWARE_REFUSAL)
    assert hardware.kind == "resolution"
    assert hardware.where == "sglang/srt/arg_groups/kv_cache_hook.py:128 in handle_kv_cache_dtype"
    assert hardware.line.startswith("RuntimeError: --kv-cache-dtype=nvfp4 requires Blackwell")


def test_rule_c3_other_failures_are_crashes():
    assert classify_exit(1, IMPORT_FAILURE) is None  # ModuleNotFoundError, raised outside arg_groups
    assert classify_exit(1, CUDA_FAILURE) is None  # RuntimeError raised in torch, not by the rule
    assert classify_exit(0, VALUE_ERROR) is None and classify_exit(-9, "") is None and classify_exit(None, "") is None
    assert classify_exit(1, VALUE_ERROR.replace("/sglang/srt/arg_groups/", "/sglang/srt/managers/")) is None


def test_rule_only_this_launch_counts():
    log = f"=== launch: python -m sglang.launch_server --bogus-flag 1\n{ARGPARSE_TAIL}=== launch: python -m x\nboom\n"
    assert this_launch(log) == "boom\n" and classify_exit(2, this_launch(log)) is None
    assert this_launch("no marker here\n") == "no marker here\n"


# -- the supervisor ---------------------------------------------------------------------------------
def test_config_error_is_reported_once_and_not_restarted_or_fallen_back(tmp_path):
    launched: list[bool] = []

    async def launcher(command, env, log_path):
        drafter = "--draft" in command
        launched.append(drafter)
        if drafter:  # the drafter launch's arguments are refused
            log_path.write_text(f"=== launch: {command}\n{ARGPARSE_TAIL}")
            return FakeProcess(exit_code=2)
        return FakeProcess()

    async def main():
        sup = supervisor(tmp_path, launcher)
        await sup.start()  # returns: the replica stays up to say why
        await asyncio.sleep(0.3)  # 30 start-up polls' worth: nothing relaunches
        refused = (sup.state, sup.status().model_dump(), list(launched))
        sup.set_drafter_enabled(False)  # the operator changes the command: one relaunch, without drafter flags
        await wait_for(lambda: sup.state == "ready", what="the autoregressive launch")
        after = (sup.state, sup.path, sup.config_error, sup.num_crashes)
        await sup.stop()
        return refused, after

    (state, status, launches), after = run(main())
    assert state == "config_error" and launches == [True]
    line = "sglang serve: error: unrecognized arguments: --bogus-flag 1"
    assert status["config_error"] == {"kind": "argument", "line": line, "where": None, "exit_code": 2}
    assert (status["num_crashes"], status["drafter_fallback"], status["fallback_reason"]) == (0, False, None)
    assert status["path"] == "autoregressive"  # no silent fallback path: nothing serves
    assert after == ("ready", "autoregressive", None, 0) and launched == [True, False]


def test_rule_c0_an_exit_after_health_answered_is_a_crash(tmp_path):
    processes: list[FakeProcess] = []

    async def launcher(command, env, log_path):
        log_path.write_text(f"=== launch: {command}\n")
        processes.append(FakeProcess())
        return processes[-1]

    async def main():
        sup = supervisor(tmp_path, launcher, policy=policy(fallback_after_crashes=5))
        await sup.start()
        with open(sup.log_path, "a") as log:  # the running server prints argparse's line, then exits 2
            log.write(ARGPARSE_TAIL)
        processes[0].exit(2)
        await wait_for(lambda: sup.num_launches == 2 and sup.state == "ready", what="the restart")
        result = (sup.num_crashes, sup.config_error, sup.last_failure)
        await sup.stop()
        return result

    assert run(main()) == (1, None, "exit code 2")


@pytest.mark.parametrize(
    ("args", "line", "hook", "function"),
    [
        (["--prefill-decode-interval", "-1"], "ValueError: --prefill-decode-interval must be non-negative.",
         "validation_hook.py", "validate_prefill_decode_interval"),
        (["--mamba-radix-cache-strategy", "no_buffer"],
         "AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.",
         "mamba_hook.py", "validate_mamba_no_buffer"),
    ],
)  # fmt: skip
def test_sglang_resolution_rules_refusing_a_launch_are_config_errors(tmp_path, args, line, hook, function):
    # SGLang's own parser and rules (sglang_startup.py), launched as the server: a real traceback, exit 1.
    message = line.split(": ", 1)[1]
    assert message in sglang_source(f"srt/arg_groups/{hook}")  # the expected line is SGLang 0.5.23's own text

    async def main():
        launcher = script_launcher(STARTUP, argv=lambda command: ["--model-path", str(tmp_path), *args])
        sup = supervisor(tmp_path, launcher, probe=http_healthy)
        await sup.start()
        result = (sup.state, sup.config_error, sup.num_launches, sup.num_crashes)
        await sup.stop()
        return result

    state, error, num_launches, num_crashes = run(main(), timeout_s=120)
    assert (state, num_launches, num_crashes) == ("config_error", 1, 0)
    assert (error.kind, error.line, error.exit_code) == ("resolution", line, 1)
    assert error.where.startswith(f"sglang/srt/arg_groups/{hook}:") and error.where.endswith(f" in {function}")


def test_engine_reports_sglangs_parser_error_and_refuses_requests(make_config):
    # SGLang's own argparse on an unknown flag: exit 2 after the usage text (about 38 KB).
    launcher = script_launcher(STARTUP, argv=lambda command: ["--model-path", command[4], "--bogus-flag", "1"])

    async def main():
        engine = SGLangEngine(make_config(), launcher=launcher)
        await engine.start()
        try:
            described, load = engine.describe(), engine.load()
            await engine.check_health()  # does not raise: Ray would replace it by one refusing the same
            with pytest.raises(EngineError) as refused:
                async for _ in engine.generate(GenerateRequest(request_id="r", prompt="x", max_tokens=1)):
                    pass
            status = engine.supervision_status()
        finally:
            await engine.stop()
        return described, load, refused.value, status

    described, load, refused, status = run(main(), timeout_s=120)
    line = "sglang serve: error: unrecognized arguments: --bogus-flag 1"
    assert described["state"] == "config_error" and described["config_error"]["line"] == line
    assert (described["num_launches"], described["num_crashes"], described["drafter_fallback"]) == (1, 0, False)
    assert load.healthy is False
    assert (refused.status, refused.code, str(refused)) == (503, "engine_config_error",
                                                           f"the SGLang server refused its arguments: {line}")
    assert status.state == "config_error" and status.config_error.kind == "argument"


def test_a_launch_that_cannot_start_is_a_crash_not_a_config_error(tmp_path):
    async def launcher(command, env, log_path):
        raise FileNotFoundError(2, "No such file or directory", "/opt/missing/python")

    async def main():
        sup = supervisor(tmp_path, launcher, policy=policy(max_restarts=1))
        with pytest.raises(RuntimeError) as failed:
            await sup.start()
        return sup.state, sup.num_launches, sup.config_error, str(failed.value)

    state, num_launches, config_error, message = run(main())
    # crashes 1 (restart), then 2 > max_restarts (1): give up
    assert (state, num_launches, config_error) == ("failed", 2, None)
    missing = "[Errno 2] No such file or directory: '/opt/missing/python'"
    assert f"after 2 crashes (last: launch failed: {missing})" in message
